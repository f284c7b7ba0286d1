"""Rules of the ONNX IR spec checked by onnx2hw.ir.load, each on hand-built models."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import AttributeProto, TensorProto, helper, numpy_helper

from onnx2hw.ir import Graph, ModelError, hardware_issues, load

from _ir_models import F, model, relu_chain, vi

I64 = TensorProto.INT64


def raises(m, match, **kw):
    with pytest.raises(ModelError, match=match) as info:
        load(m, **kw)
    assert "\n" not in str(info.value)
    return str(info.value)


# -- a good model ---------------------------------------------------------------------------

def test_good_model_converts_everything():
    m = relu_chain(2)
    m.metadata_props.add(key="author", value="me")
    m.producer_name = "hand"
    g = load(m)
    assert isinstance(g, Graph)
    assert [n.name for n in g.nodes] == ["add", "relu0", "relu1"]
    assert [n.op_type for n in g.nodes] == ["Add", "Relu", "Relu"]
    assert g.nodes[0].inputs == ("x", "w") and g.nodes[2].outputs == ("y",)
    np.testing.assert_array_equal(g.initializers["w"], np.arange(6, dtype=np.float32).reshape(2, 3))
    assert g.input_names == ("x",) and g.output_names == ("y",)
    assert g.inputs[0].elem_type == TensorProto.FLOAT and g.inputs[0].shape == (2, 3)
    assert g.opsets == {"": 18}
    assert g.metadata == {"author": "me"} and g.producer_name == "hand"
    # Relu's definition in force at opset 18 is the opset-14 one; Add's the opset-14 one
    assert [n.since_version for n in g.nodes] == [14, 14, 14]
    # shape inference filled the intermediate types
    assert g.value_info["t0"].shape == (2, 3) and g.value_info["w"].elem_type == TensorProto.FLOAT
    assert g.warnings == ()
    assert hardware_issues(g) == []


def test_graph_is_frozen():
    g = load(relu_chain())
    with pytest.raises(AttributeError):
        g.name = "x"
    with pytest.raises(TypeError):
        g.initializers["w"] = 1


def test_load_does_not_modify_the_proto():
    m = model([helper.make_node("Relu", ["t"], ["y"], name="b"), helper.make_node("Relu", ["x"], ["t"], name="a")],
              [vi("x")], [vi("y")])
    before = m.SerializeToString()
    load(m, sort=True)
    assert m.SerializeToString() == before


# -- ir_version and opset_import ---------------------------------------------------------------

def test_ir_version_missing():
    m = relu_chain()
    m.ClearField("ir_version")
    raises(m, "no ir_version")


@pytest.mark.parametrize("ir", [1, 2, onnx.IR_VERSION + 1])
def test_ir_version_out_of_range(ir):
    raises(model([helper.make_node("Relu", ["x"], ["y"])], [vi("x")], [vi("y")], ir=ir), f"ir_version {ir} is outside")


@pytest.mark.parametrize("ir", [3, 7, onnx.IR_VERSION])
def test_ir_version_in_range(ir):
    g = load(model([helper.make_node("Relu", ["x"], ["y"])], [vi("x")], [vi("y")], ir=ir, opset=8))
    assert g.ir_version == ir


def test_opset_import_empty():
    raises(model([helper.make_node("Relu", ["x"], ["y"])], [vi("x")], [vi("y")], opset=None), "opset_import is empty")


def test_default_domain_must_be_imported_when_used():
    m = model([helper.make_node("Relu", ["x"], ["y"], name="r")], [vi("x")], [vi("y")], opset=None,
              opsets={"ai.onnx.ml": 3})
    raises(m, "node 'r'.*domain 'ai.onnx'.*not imported")


def test_model_without_default_domain_loads_when_unused():
    m = model([helper.make_node("Binarizer", ["x"], ["y"], domain="ai.onnx.ml", threshold=1.0)],
              [vi("x")], [vi("y")], opset=None, opsets={"ai.onnx.ml": 3})
    assert load(m).nodes[0].domain == "ai.onnx.ml"


def test_node_domain_must_be_imported():
    m = model([helper.make_node("MyOp", ["x"], ["y"], name="c", domain="com.acme")], [vi("x")], [vi("y")])
    raises(m, "node 'c'.*'com.acme'.*not imported")


def test_custom_domain_op_uses_imported_version():
    m = model([helper.make_node("MyOp", ["x"], ["y"], name="c", domain="com.acme")], [vi("x")], [vi("y")],
              opsets={"com.acme": 3})
    n = load(m).nodes[0]
    assert (n.domain, n.since_version) == ("com.acme", 3)


def test_ai_onnx_domain_is_the_default_domain():
    m = model([helper.make_node("Relu", ["x"], ["y"], domain="ai.onnx")], [vi("x")], [vi("y")])
    assert load(m).nodes[0].domain == ""


def test_duplicate_domain_import():
    m = model([helper.make_node("Relu", ["x"], ["y"])], [vi("x")], [vi("y")], opsets={"ai.onnx": 17})
    raises(m, "imported twice")


def test_opset_newer_than_onnx_knows():
    raises(model([helper.make_node("Relu", ["x"], ["y"])], [vi("x")], [vi("y")], opset=999), "opset 999.*newer")


def test_op_newer_than_imported_opset():
    # Gelu was added in opset 20
    m = model([helper.make_node("Gelu", ["x"], ["y"], name="g1")], [vi("x")], [vi("y")], opset=18)
    raises(m, "node 'g1'.*'Gelu' first appears in opset 20.*imports opset 18")
    assert load(model([helper.make_node("Gelu", ["x"], ["y"])], [vi("x")], [vi("y")], opset=20)).nodes[0].since_version == 20


def test_unknown_default_domain_op():
    raises(model([helper.make_node("Frobnicate", ["x"], ["y"], name="f")], [vi("x")], [vi("y")]),
           "node 'f'.*'Frobnicate' does not exist")


def test_since_version_resolution():
    m = model([helper.make_node("Relu", ["x"], ["y"])], [vi("x")], [vi("y")], opset=13)
    assert load(m).nodes[0].since_version == 13  # Relu-13 (Relu-14 came later)


# -- SSA, order, scoping -----------------------------------------------------------------------

def test_value_defined_twice():
    m = model([helper.make_node("Relu", ["x"], ["t"], name="a"), helper.make_node("Relu", ["x"], ["t"], name="b")],
              [vi("x")], [vi("t")])
    raises(m, "value 't' is defined twice.*'a'.*'b'")


def test_node_output_redefines_input():
    raises(model([helper.make_node("Relu", ["x"], ["x"], name="a")], [vi("x")], [vi("x")]),
           "node 'a' output 'x' redefines")


def test_duplicate_graph_input_and_initializer():
    raises(model([helper.make_node("Relu", ["x"], ["y"])], [vi("x"), vi("x")], [vi("y")]), "input 'x' is declared twice")
    w = numpy_helper.from_array(np.ones((2, 3), np.float32), "w")
    raises(model([helper.make_node("Add", ["x", "w"], ["y"])], [vi("x")], [vi("y")], [w, w]),
           "initializer 'w' is defined twice")


def test_initializer_shared_with_input_is_overridable_constant():
    w = numpy_helper.from_array(np.full((2, 3), 2, np.float32), "w")
    c = numpy_helper.from_array(np.full((2, 3), 3, np.float32), "c")
    m = model([helper.make_node("Add", ["x", "w"], ["t"]), helper.make_node("Mul", ["t", "c"], ["y"])],
              [vi("x"), vi("w")], [vi("y")], [w, c])
    g = load(m)
    assert g.input_names == ("x",)  # w has a default, c is a weight
    assert g.overridable == {"w"} and set(g.initializers) == {"w", "c"}


def test_use_of_undefined_value():
    raises(model([helper.make_node("Add", ["x", "nope"], ["y"], name="a")], [vi("x")], [vi("y")]),
           "node 'a' reads 'nope', which is not defined")


def test_graph_output_never_defined():
    raises(model([helper.make_node("Relu", ["x"], ["t"])], [vi("x")], [vi("y")]), "output 'y' is never defined")


def _unsorted():
    return model([helper.make_node("Relu", ["t"], ["y"], name="second"),
                  helper.make_node("Relu", ["x"], ["t"], name="first")], [vi("x")], [vi("y")])


def test_out_of_order_names_the_node():
    raises(_unsorted(), "node 'second' reads 't' before node 'first' defines it.*sort=True")


def test_sort_repairs_order():
    g = load(_unsorted(), sort=True)
    assert [n.name for n in g.nodes] == ["first", "second"]


def test_cycle_is_an_error_even_with_sort():
    m = model([helper.make_node("Add", ["x", "b"], ["a"], name="A"), helper.make_node("Relu", ["a"], ["b"], name="B"),
               helper.make_node("Relu", ["a"], ["y"], name="C")], [vi("x")], [vi("y")])
    for sort in (False, True):
        raises(m, "cycle.*'A'.*'B'", sort=sort)


def test_self_loop():
    raises(model([helper.make_node("Add", ["x", "y"], ["y"], name="A")], [vi("x")], [vi("y")]), "'A' reads its own output")


def _if_model(then_out="tx", then_reads="x", else_node=None, sub_init=None, cond_after=False):
    then_g = helper.make_graph([helper.make_node("Relu", [then_reads], [then_out], name="then_relu")], "then_g", [],
                               [helper.make_tensor_value_info(then_out, F, None)],
                               [sub_init] if sub_init is not None else [])
    else_g = helper.make_graph([else_node or helper.make_node("Neg", ["x"], ["ex"], name="else_neg")], "else_g", [],
                               [helper.make_tensor_value_info("ex", F, None)])
    cond = helper.make_node("ReduceMax", ["x"], ["m"], name="rmax", keepdims=0)
    gt = helper.make_node("Greater", ["m", "zero"], ["c"], name="gt")
    iff = helper.make_node("If", ["c"], ["y"], name="if", then_branch=then_g, else_branch=else_g)
    zero = numpy_helper.from_array(np.array(0, np.float32), "zero")
    nodes = [iff, cond, gt] if cond_after else [cond, gt, iff]
    return model(nodes, [vi("x")], [vi("y")], [zero])


def test_subgraph_reads_outer_scope():
    g = load(_if_model())
    node = g.nodes[2]
    then_g = node.attrs["then_branch"]
    assert isinstance(then_g, Graph) and then_g.outer_scope == {"x"}
    assert then_g.nodes[0].op_type == "Relu"
    issues = hardware_issues(g)
    assert any("node 'if' (If) is control flow" in i for i in issues)


def test_subgraph_output_must_not_shadow_outer_value():
    raises(_if_model(then_out="m"), "'then_relu' output 'm' shadows")


def test_subgraph_reading_undefined_value():
    raises(_if_model(then_reads="ghost"), "'then_relu' reads 'ghost', which is not defined")


def test_subgraph_initializer_may_not_be_subgraph_input():
    then_g = helper.make_graph([helper.make_node("Identity", ["k"], ["o"])], "body",
                               [helper.make_tensor_value_info("k", F, [1])], [helper.make_tensor_value_info("o", F, [1])],
                               [numpy_helper.from_array(np.ones(1, np.float32), "k")])
    m = model([helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(np.array(True))),
               helper.make_node("If", ["c"], ["y"], name="if", then_branch=then_g, else_branch=then_g)],
              [vi("x")], [vi("y", shape=[1])])
    raises(m, "initializer 'k' of a sub-graph is also a sub-graph input")


def test_subgraph_dependency_counts_for_order():
    # the If (first) reads x via its branches and c from a later node
    raises(_if_model(cond_after=True), "node 'if' reads 'c' before node 'gt' defines it")
    g = load(_if_model(cond_after=True), sort=True)
    assert [n.name for n in g.nodes] == ["rmax", "gt", "if"]


# -- main-graph input/output types ----------------------------------------------------------------

def test_main_input_needs_elem_type_and_rank():
    x = onnx.ValueInfoProto(name="x")
    x.type.tensor_type.SetInParent()
    raises(model([helper.make_node("Relu", ["x"], ["y"])], [x], [vi("y")]), "input 'x' has no element type")
    raises(model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", shape=None)], [vi("y")]), "input 'x' has no shape")
    raises(model([helper.make_node("Relu", ["x"], ["y"])], [vi("x")], [vi("y", shape=None)]), "output 'y' has no shape")
    raises(model([helper.make_node("Relu", ["x"], ["y"])], [onnx.ValueInfoProto(name="x")], [vi("y")]), "input 'x' has no type")


def test_unknown_and_symbolic_dims_allowed():
    x = helper.make_tensor_value_info("x", F, ["N", None, 3])
    g = load(model([helper.make_node("Relu", ["x"], ["y"])], [x], [vi("y", shape=["N", None, 3])]))
    assert g.inputs[0].shape == ("N", None, 3) and g.inputs[0].rank == 3


def test_negative_dim_rejected():
    raises(model([helper.make_node("Relu", ["x"], ["y"])], [vi("x", shape=[2, -1])], [vi("y")]), "negative dimension")


# -- attributes -------------------------------------------------------------------------------------

def _with_attr(a: AttributeProto, op="LeakyRelu"):
    n = helper.make_node(op, ["x"], ["y"], name="n")
    n.attribute.append(a)
    return model([n], [vi("x")], [vi("y")])


def test_attribute_with_two_values():
    a = helper.make_attribute("alpha", 0.1)
    a.i = 3
    raises(_with_attr(a), "attribute 'alpha' holds more than one value")


def test_attribute_type_mismatch():
    a = helper.make_attribute("alpha", 0.1)
    a.type = AttributeProto.INT
    raises(_with_attr(a), "'alpha' is declared INT but holds field 'f'")


def test_attribute_without_value_or_type():
    a = AttributeProto(name="alpha", type=AttributeProto.FLOAT)
    raises(_with_attr(a), r"'alpha' \(FLOAT\) holds no value")
    a = AttributeProto(name="alpha", f=0.5)
    raises(_with_attr(a), "'alpha' has no type")


def test_empty_list_attribute_is_fine():
    n = helper.make_node("Transpose", ["x"], ["y"], perm=[1, 0])
    g = load(model([n], [vi("x")], [vi("y", shape=[3, 2])]))
    assert g.nodes[0].attrs["perm"] == (1, 0)
    n = helper.make_node("ReduceSum", ["x"], ["y"], keepdims=1)
    n.attribute.append(helper.make_attribute("axes", [], attr_type=AttributeProto.INTS))
    g = load(model([n], [vi("x")], [vi("y", shape=[1, 1])], opset=11))
    assert g.nodes[0].attrs["axes"] == ()


def test_duplicate_attribute():
    n = helper.make_node("LeakyRelu", ["x"], ["y"], name="n", alpha=0.1)
    n.attribute.append(helper.make_attribute("alpha", 0.2))
    raises(model([n], [vi("x")], [vi("y")]), "attribute 'alpha' twice")


def test_ref_attr_name_only_in_functions():
    a = AttributeProto(name="alpha", type=AttributeProto.FLOAT, ref_attr_name="a")
    raises(_with_attr(a), "'alpha' uses ref_attr_name 'a' outside a function")


def test_attribute_values_converted():
    t = numpy_helper.from_array(np.array([1, 2], np.int64))
    n = helper.make_node("Constant", [], ["y"], value=t)
    g = load(model([n], [], [vi("y", I64, [2])]))
    np.testing.assert_array_equal(g.nodes[0].attrs["value"], [1, 2])


# -- optional and variadic ------------------------------------------------------------------------------

def test_optional_input_given_as_empty_name():
    lo = numpy_helper.from_array(np.array(1.0, np.float32), "hi")
    g = load(model([helper.make_node("Clip", ["x", "", "hi"], ["y"])], [vi("x")], [vi("y")], [lo]))
    assert g.nodes[0].inputs == ("x", "", "hi")


def test_required_input_empty_is_an_error():
    raises(model([helper.make_node("Gemm", ["", "x"], ["y"], name="gm")], [vi("x")], [vi("y")]),
           r"'gm' \(Gemm\) leaves required input 0 \('A'\) empty")


def test_optional_output_omitted():
    g = load(model([helper.make_node("Dropout", ["x"], ["y", ""])], [vi("x")], [vi("y")]))
    assert g.nodes[0].outputs == ("y", "")


def test_variadic_inputs():
    g = load(model([helper.make_node("Max", ["x", "x", "x"], ["y"])], [vi("x")], [vi("y")]))
    assert len(g.nodes[0].inputs) == 3
    raises(model([helper.make_node("Max", [], ["y"], name="mx")], [vi("x")], [vi("y")]),
           r"'mx' \(Max\) has 0 inputs, at least 1 required")
    raises(model([helper.make_node("Relu", ["x", "x"], ["y"], name="r")], [vi("x")], [vi("y")]),
           r"'r' \(Relu\) has 2 inputs, at most 1")


# -- names ------------------------------------------------------------------------------------------------

def test_non_c90_names_warn():
    m = model([helper.make_node("Relu", ["input.1"], ["/conv1/Conv_output_0"], name="/conv1/Relu")],
              [vi("input.1")], [vi("/conv1/Conv_output_0")])
    g = load(m)
    assert g.input_names == ("input.1",)
    (w,) = g.warnings
    assert "'input.1'" in w and "'/conv1/Conv_output_0'" in w and "not C90" in w


def test_unnamed_nodes_get_unique_names():
    m = model([helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Relu", ["a"], ["b"], name="Relu_0"),
               helper.make_node("Relu", ["b"], ["y"])], [vi("x")], [vi("y")])
    names = [n.name for n in load(m).nodes]
    assert names[1] == "Relu_0" and len(set(names)) == 3 and all(names)


def test_duplicate_node_names_made_unique():
    m = model([helper.make_node("Relu", ["x"], ["a"], name="r"), helper.make_node("Relu", ["a"], ["y"], name="r")],
              [vi("x")], [vi("y")])
    g = load(m)
    assert len({n.name for n in g.nodes}) == 2 and any("used twice" in w for w in g.warnings)


# -- metadata, training_info --------------------------------------------------------------------------------

def test_metadata_kept_training_info_ignored():
    m = relu_chain()
    helper.set_model_props(m, {"k": "v"})
    m.graph.node[0].metadata_props.add(key="origin", value="layer1")
    m.graph.metadata_props.add(key="gk", value="gv")
    ti = m.training_info.add()
    ti.algorithm.name = "train"
    g = load(m)
    assert g.metadata == {"k": "v"} and g.graph_metadata == {"gk": "gv"}
    assert g.nodes[0].metadata == {"origin": "layer1"}
    assert any("training_info" in w and "ignored" in w for w in g.warnings)


# -- element types ---------------------------------------------------------------------------------------------

def _raw(elem, dims, raw, name="w"):
    t = TensorProto(name=name, data_type=elem, dims=dims, raw_data=bytes(raw))
    return t


def _init_model(t, elem):
    return model([helper.make_node("Identity", [t.name], ["y"])], [], [vi("y", elem, list(t.dims))], [t], opset=21)


def test_int4_nibble_order_low_first():
    # bytes 0x21, 0xF7, 0x03 hold 1, 2 | 7, -1 | 3 (padding nibble 0)
    t = _raw(TensorProto.INT4, [5], [0x21, 0xF7, 0x03])
    a = load(_init_model(t, TensorProto.INT4)).initializers["w"]
    assert a.dtype == ml_dtypes.int4
    assert a.astype(np.int8).tolist() == [1, 2, 7, -1, 3]
    t = _raw(TensorProto.UINT4, [5], [0x21, 0xF7, 0x03])
    a = load(_init_model(t, TensorProto.UINT4)).initializers["w"]
    assert a.dtype == ml_dtypes.uint4 and a.astype(np.uint8).tolist() == [1, 2, 7, 15, 3]


def test_float8_and_bfloat16_raw_bytes():
    # e4m3fn: 0x38 = 1.0, 0x40 = 2.0, 0xB8 = -1.0; e5m2: 0x3C = 1.0; bfloat16 0x3F80 = 1.0, 0xC000 = -2.0
    cases = [(TensorProto.FLOAT8E4M3FN, [0x38, 0x40, 0xB8], [1.0, 2.0, -1.0], ml_dtypes.float8_e4m3fn),
             (TensorProto.FLOAT8E5M2, [0x3C, 0x40, 0xBC], [1.0, 2.0, -1.0], ml_dtypes.float8_e5m2),
             (TensorProto.BFLOAT16, [0x80, 0x3F, 0x00, 0xC0], [1.0, -2.0], ml_dtypes.bfloat16)]
    for elem, raw, want, dtype in cases:
        t = _raw(elem, [len(want)], raw)
        a = load(_init_model(t, elem)).initializers["w"]
        assert a.dtype == dtype and a.astype(np.float32).tolist() == want


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64, np.int8, np.int16, np.int32, np.int64,
                                   np.uint8, np.uint16, np.uint32, np.uint64, np.bool_])
def test_numeric_types_roundtrip(dtype):
    value = (np.arange(6).reshape(2, 3) % 2).astype(dtype)
    t = numpy_helper.from_array(value, "w")
    a = load(_init_model(t, t.data_type)).initializers["w"]
    assert a.dtype == value.dtype
    np.testing.assert_array_equal(a, value)


def test_raw_data_size_mismatch():
    raises(_init_model(_raw(TensorProto.FLOAT, [2], [0, 0, 0]), F), "initializer 'w': raw_data holds 3 bytes.*needs 8")


def test_unknown_element_type():
    t = _raw(F, [1], [0, 0, 128, 63])
    t.data_type = 99
    raises(model([helper.make_node("Identity", ["w"], ["y"])], [], [vi("y", F, [1])], [t]), "unknown tensor element type 99")


def test_sparse_initializer_densified_and_reported():
    values = numpy_helper.from_array(np.array([5.0, 7.0], np.float32), "s")
    indices = numpy_helper.from_array(np.array([1, 4], np.int64), "s_idx")
    sp = helper.make_sparse_tensor(values, indices, [2, 3])
    m = model([helper.make_node("Identity", ["s"], ["y"])], [], [vi("y")], sparse=[sp])
    g = load(m)
    np.testing.assert_array_equal(g.initializers["s"], [[0, 5, 0], [0, 7, 0]])
    assert g.sparse_initializers == {"s"}
    assert any("initializer 's' is a sparse tensor" in i for i in hardware_issues(g))


def test_sequences_strings_and_maps_load_and_are_reported():
    seq = helper.make_node("SequenceConstruct", ["x", "x"], ["s"], name="mkseq")
    at = helper.make_node("SequenceAt", ["s", "i"], ["y"], name="at")
    i = numpy_helper.from_array(np.array(0, np.int64), "i")
    g = load(model([seq, at], [vi("x")], [vi("y")], [i]))
    issues = hardware_issues(g)
    assert any("value 's' is a sequence" in m for m in issues)
    assert any("node 'mkseq' (SequenceConstruct)" in m for m in issues)
    strs = model([helper.make_node("Identity", ["x"], ["y"])], [vi("x", TensorProto.STRING, [2])],
                 [vi("y", TensorProto.STRING, [2])])
    assert any("value 'x' is a string tensor" in m for m in hardware_issues(load(strs)))
    opt_in = helper.make_value_info("o", helper.make_optional_type_proto(helper.make_tensor_type_proto(F, [2])))
    opt = model([helper.make_node("OptionalHasElement", ["o"], ["y"], name="has")], [opt_in],
                [vi("y", TensorProto.BOOL, [])])
    issues = hardware_issues(load(opt))
    assert any("value 'o' is an optional" in m for m in issues) and any("'has'" in m for m in issues)


# -- reading files ----------------------------------------------------------------------------------------------

def test_file_errors(tmp_path):
    good = relu_chain().SerializeToString()
    (tmp_path / "ok.onnx").write_bytes(good)
    assert load(tmp_path / "ok.onnx").nodes[0].name == "add"
    cases = {
        "missing.onnx": None,
        "empty.onnx": b"",
        "trunc.onnx": good[: len(good) // 2],
        "text.onnx": b"this is not an onnx model, just some text\n",
        "png.onnx": b"\x89PNG\r\n\x1a\n" + bytes(range(256)),
    }
    for name, data in cases.items():
        if data is not None:
            (tmp_path / name).write_bytes(data)
        with pytest.raises(ModelError) as info:
            load(tmp_path / name)
        assert str(info.value).startswith(str(tmp_path / name)) and "\n" not in str(info.value)
    with pytest.raises(ModelError, match="is a directory"):
        load(tmp_path)


def test_bytes_input():
    assert load(relu_chain().SerializeToString()).nodes[0].name == "add"
    with pytest.raises(ModelError, match="empty"):
        load(b"")
    with pytest.raises(TypeError):
        load(42)


def test_map_input_loads_and_is_reported():
    mp = helper.make_value_info("d", helper.make_map_type_proto(TensorProto.STRING, helper.make_tensor_type_proto(F, [])))
    n = helper.make_node("DictVectorizer", ["d"], ["y"], domain="ai.onnx.ml", string_vocabulary=["a", "b"], name="dv")
    g = load(model([n], [mp], [vi("y", F, [1, 2])], opsets={"ai.onnx.ml": 3}))
    assert g.inputs[0].kind == "map"
    assert any("value 'd' is a map" in i for i in hardware_issues(g))
    bad = helper.make_value_info("d", helper.make_map_type_proto(TensorProto.FLOAT, helper.make_tensor_type_proto(F, [])))
    raises(model([n], [bad], [vi("y", F, [1, 2])], opsets={"ai.onnx.ml": 3}), "input 'd' is a map with invalid key type FLOAT")


def test_loop_is_reported_as_control_flow():
    body = helper.make_graph([helper.make_node("Identity", ["cond_in"], ["cond_out"]),
                              helper.make_node("Add", ["v_in", "x"], ["v_out"])], "body",
                             [helper.make_tensor_value_info("i", I64, []), helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
                              helper.make_tensor_value_info("v_in", F, None)],
                             [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
                              helper.make_tensor_value_info("v_out", F, None)])
    trip = numpy_helper.from_array(np.array(3, np.int64), "trip")
    n = helper.make_node("Loop", ["trip", "", "x"], ["y"], body=body, name="loop")
    g = load(model([n], [vi("x")], [vi("y")], [trip]))
    assert g.nodes[0].attrs["body"].outer_scope == {"x"}
    assert any("node 'loop' (Loop) is control flow" in i for i in hardware_issues(g))
