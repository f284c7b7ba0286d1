"""Model-local functions are inlined: overloads, attribute defaults, ref_attr_name, opsets, nesting."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import AttributeProto, helper
from onnx.reference import ReferenceEvaluator

from onnx2hw.ir import ModelError, load

from _ir_models import model, vi

DOM = "local"


def fn(name, inputs, outputs, nodes, *, attributes=(), defaults=(), opset=18, overload="", domain=DOM):
    f = helper.make_function(domain, name, list(inputs), list(outputs), list(nodes),
                             [helper.make_opsetid("", opset), helper.make_opsetid(DOM, 1)],
                             attributes=list(attributes), attribute_protos=list(defaults))
    f.overload = overload
    return f


def ref(name, attr, attr_type=AttributeProto.FLOAT):
    return AttributeProto(name=name, ref_attr_name=attr, type=attr_type)


def double_relu():
    return fn("DoubleRelu", ["a"], ["b"], [helper.make_node("Add", ["a", "a"], ["t"], name="add"),
                                          helper.make_node("Relu", ["t"], ["b"], name="relu")])


def run_inlined(g, feeds):
    """Evaluate the inlined Graph with onnx.reference, node by node (independent of onnx2hw.golden)."""
    env = dict(feeds)
    for n in g.nodes:
        attrs = {k: v for k, v in n.attrs.items()}
        node = helper.make_node(n.op_type, list(n.inputs), list(n.outputs), **attrs)
        sub = helper.make_graph([node], "one", [helper.make_tensor_value_info(x, 1, None) for x in n.inputs if x],
                                [helper.make_tensor_value_info(y, 1, None) for y in n.outputs if y])
        m = helper.make_model(sub, opset_imports=[helper.make_opsetid("", 18)])
        out = ReferenceEvaluator(m).run(None, {x: env[x] for x in n.inputs if x})
        env.update(dict(zip([y for y in n.outputs if y], out)))
    return env


def test_inline_two_calls_unique_names():
    m = model([helper.make_node("DoubleRelu", ["x"], ["m"], domain=DOM, name="c1"),
               helper.make_node("DoubleRelu", ["m"], ["y"], domain=DOM, name="c2")],
              [vi("x")], [vi("y")], opsets={DOM: 1}, functions=[double_relu()])
    g = load(m)
    assert [(n.name, n.op_type) for n in g.nodes] == [("c1__add", "Add"), ("c1__relu", "Relu"),
                                                      ("c2__add", "Add"), ("c2__relu", "Relu")]
    assert g.nodes[0].inputs == ("x", "x") and g.nodes[1].outputs == ("m",)
    assert g.nodes[0].outputs == ("c1__t",) and g.nodes[2].outputs == ("c2__t",)
    x = np.array([[-1, 2, -3], [4, -5, 6]], np.float32)
    expected = ReferenceEvaluator(m).run(None, {"x": x})[0]
    np.testing.assert_array_equal(run_inlined(g, {"x": x})["y"], expected)


def test_inlined_names_avoid_existing_values():
    m = model([helper.make_node("Relu", ["x"], ["c1__t"], name="pre"),
               helper.make_node("DoubleRelu", ["c1__t"], ["y"], domain=DOM, name="c1")],
              [vi("x")], [vi("y")], opsets={DOM: 1}, functions=[double_relu()])
    g = load(m)
    outs = [o for n in g.nodes for o in n.outputs]
    assert len(outs) == len(set(outs)) == 3 and "c1__t_1" in outs


def test_attribute_default_and_ref_attr_name():
    leaky = fn("Leaky", ["a"], ["b"], [helper.make_node("LeakyRelu", ["a"], ["b"], name="lr")] ,
               defaults=[helper.make_attribute("slope", 0.5)])
    leaky.node[0].attribute.append(ref("alpha", "slope"))
    m = model([helper.make_node("Leaky", ["x"], ["m"], domain=DOM, name="d"),
               helper.make_node("Leaky", ["m"], ["y"], domain=DOM, name="e", slope=0.25)],
              [vi("x")], [vi("y")], opsets={DOM: 1}, functions=[leaky])
    g = load(m)
    assert g.nodes[0].attrs["alpha"] == 0.5 and g.nodes[1].attrs["alpha"] == 0.25
    x = np.array([[-4, 2, -8], [4, -16, 6]], np.float32)
    expected = np.array([[-0.5, 2, -1], [4, -2, 6]], np.float32)  # 0.5 * 0.25 on negatives, by hand
    np.testing.assert_array_equal(run_inlined(g, {"x": x})["y"], expected)


def test_attribute_without_default_is_omitted():
    leaky = fn("Leaky", ["a"], ["b"], [helper.make_node("LeakyRelu", ["a"], ["b"])], attributes=["slope"])
    leaky.node[0].attribute.append(ref("alpha", "slope"))
    m = model([helper.make_node("Leaky", ["x"], ["y"], domain=DOM, name="d")], [vi("x")], [vi("y")],
              opsets={DOM: 1}, functions=[leaky])
    assert "alpha" not in load(m).nodes[0].attrs


def test_ref_to_undeclared_attribute():
    leaky = fn("Leaky", ["a"], ["b"], [helper.make_node("LeakyRelu", ["a"], ["b"])])
    leaky.node[0].attribute.append(ref("alpha", "nope"))
    m = model([helper.make_node("Leaky", ["x"], ["y"], domain=DOM)], [vi("x")], [vi("y")], opsets={DOM: 1},
              functions=[leaky])
    with pytest.raises(ModelError, match="refers to 'nope', which the function does not declare"):
        load(m)


def test_call_with_undeclared_attribute():
    m = model([helper.make_node("DoubleRelu", ["x"], ["y"], domain=DOM, name="c", gain=2.0)], [vi("x")], [vi("y")],
              opsets={DOM: 1}, functions=[double_relu()])
    with pytest.raises(ModelError, match="node 'c' passes attribute 'gain'"):
        load(m)


def test_overload_selects_body():
    neg = fn("F", ["a"], ["b"], [helper.make_node("Neg", ["a"], ["b"])], overload="neg")
    abs_ = fn("F", ["a"], ["b"], [helper.make_node("Abs", ["a"], ["b"])], overload="abs")
    c1 = helper.make_node("F", ["x"], ["m"], domain=DOM, name="c1")
    c1.overload = "abs"
    c2 = helper.make_node("F", ["m"], ["y"], domain=DOM, name="c2")
    c2.overload = "neg"
    g = load(model([c1, c2], [vi("x")], [vi("y")], opsets={DOM: 1}, functions=[neg, abs_]))
    assert [n.op_type for n in g.nodes] == ["Abs", "Neg"]


def test_function_opset_imports_resolve_body():
    # the body uses ai.onnx.ml, which only the function imports
    f = fn("B", ["a"], ["b"], [helper.make_node("Binarizer", ["a"], ["b"], domain="ai.onnx.ml", threshold=0.5)])
    f.opset_import.append(helper.make_opsetid("ai.onnx.ml", 3))
    m = model([helper.make_node("B", ["x"], ["y"], domain=DOM, name="c")], [vi("x")], [vi("y")],
              opsets={DOM: 1}, functions=[f])
    g = load(m)
    assert (g.nodes[0].domain, g.nodes[0].since_version) == ("ai.onnx.ml", 1) and "ai.onnx.ml" not in g.opsets
    del f.opset_import[-1]
    m = model([helper.make_node("B", ["x"], ["y"], domain=DOM, name="c")], [vi("x")], [vi("y")],
              opsets={DOM: 1}, functions=[f])
    with pytest.raises(ModelError, match="function 'local::B'.*domain 'ai.onnx.ml', which is not imported"):
        load(m)


def test_nested_calls():
    inner = double_relu()
    outer = fn("Quad", ["p"], ["q"], [helper.make_node("DoubleRelu", ["p"], ["r"], domain=DOM, name="i1"),
                                     helper.make_node("DoubleRelu", ["r"], ["q"], domain=DOM, name="i2")])
    m = model([helper.make_node("Quad", ["x"], ["y"], domain=DOM, name="top")], [vi("x")], [vi("y")],
              opsets={DOM: 1}, functions=[inner, outer])
    g = load(m)
    assert [n.op_type for n in g.nodes] == ["Add", "Relu", "Add", "Relu"]
    assert g.nodes[0].name == "top__i1__add" and g.nodes[-1].outputs == ("y",)
    x = np.array([[-1, 2, -3], [4, -5, 6]], np.float32)
    np.testing.assert_array_equal(run_inlined(g, {"x": x})["y"], ReferenceEvaluator(m).run(None, {"x": x})[0])


def test_recursion_is_an_error():
    rec = fn("Rec", ["a"], ["b"], [helper.make_node("Rec", ["a"], ["b"], domain=DOM)])
    m = model([helper.make_node("Rec", ["x"], ["y"], domain=DOM)], [vi("x")], [vi("y")], opsets={DOM: 1},
              functions=[rec])
    with pytest.raises(ModelError, match="recursive"):
        load(m)
    a = fn("A", ["a"], ["b"], [helper.make_node("B", ["a"], ["b"], domain=DOM)])
    b = fn("B", ["a"], ["b"], [helper.make_node("A", ["a"], ["b"], domain=DOM)])
    m = model([helper.make_node("A", ["x"], ["y"], domain=DOM)], [vi("x")], [vi("y")], opsets={DOM: 1},
              functions=[a, b])
    with pytest.raises(ModelError, match=r"recursive \(local::A -> local::B -> local::A\)"):
        load(m)


def test_duplicate_function():
    m = model([helper.make_node("DoubleRelu", ["x"], ["y"], domain=DOM)], [vi("x")], [vi("y")], opsets={DOM: 1},
              functions=[double_relu(), double_relu()])
    with pytest.raises(ModelError, match="'local::DoubleRelu' is defined twice"):
        load(m)


def test_function_body_checked():
    bad = fn("Bad", ["a"], ["b"], [helper.make_node("Relu", ["ghost"], ["b"], name="r")])
    m = model([helper.make_node("Bad", ["x"], ["y"], domain=DOM)], [vi("x")], [vi("y")], opsets={DOM: 1},
              functions=[bad])
    with pytest.raises(ModelError, match="function 'local::Bad': node 'r' reads 'ghost'"):
        load(m)


def test_omitted_optional_output_of_call():
    two = fn("Two", ["a"], ["b", "c"], [helper.make_node("Relu", ["a"], ["b"]), helper.make_node("Neg", ["a"], ["c"])])
    m = model([helper.make_node("Two", ["x"], ["y"], domain=DOM, name="t")], [vi("x")], [vi("y")], opsets={DOM: 1},
              functions=[two])
    g = load(m)
    assert g.nodes[0].outputs == ("y",) and g.nodes[1].outputs == ("t__c",)


def test_inlined_attribute_type_checked_against_schema():
    leaky = fn("Leaky", ["a"], ["b"], [helper.make_node("LeakyRelu", ["a"], ["b"], name="lr")], attributes=["slope"])
    leaky.node[0].attribute.append(ref("alpha", "slope"))
    m = model([helper.make_node("Leaky", ["x"], ["y"], domain=DOM, name="d", slope=2)], [vi("x")], [vi("y")],
              opsets={DOM: 1}, functions=[leaky])
    with pytest.raises(ModelError, match="node 'd__lr' \\(LeakyRelu\\) attribute 'alpha' is INT, the operator expects FLOAT"):
        load(m)
    cast = fn("C", ["a"], ["b"], [helper.make_node("Cast", ["a"], ["b"], name="cast")], attributes=["to"])
    cast.node[0].attribute.append(ref("to", "to", AttributeProto.INT))
    m = model([helper.make_node("C", ["x"], ["y"], domain=DOM, name="c")], [vi("x")], [vi("y")],
              opsets={DOM: 1}, functions=[cast])
    with pytest.raises(ModelError, match="node 'c__cast' \\(Cast\\) lacks required attribute 'to'"):
        load(m)
