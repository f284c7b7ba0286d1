"""``onnx2hw.ir.simplify``: exporters' shape chains, Transpose pairs and view ops folded for the
hardware path; the result computes what the ORIGINAL model computes (onnx.reference on both)
for any batch."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from _oracle import run_spec
from _paths import ROOT
import onnx2hw
from onnx2hw.ir import load
from onnx2hw.ir.simplify import follow_names, simplify, to_model

CORPUS = ROOT / "corpus"
_SHAPE_OPS = {"Shape", "Gather", "Concat", "Cast", "Unsqueeze", "Squeeze", "Slice", "Constant"}


def _run(model, feeds):
    """onnx.reference; onnxruntime with every optimization off for the opset-13 QDQ graphs
    (onnx.reference has no DequantizeLinear-13)."""
    if any(n.op_type == "DequantizeLinear" for n in model.graph.node):
        return run_spec(model, feeds)
    return ReferenceEvaluator(model).run(None, feeds)


def _feed(graph, batch, rng):
    vi = graph.inputs[0]
    shape = (batch,) + tuple(vi.shape[1:])
    if vi.elem_type == TensorProto.INT8:
        return {vi.name: rng.integers(-128, 128, size=shape).astype(np.int8)}
    return {vi.name: rng.standard_normal(shape).astype(np.float32)}


@pytest.mark.parametrize("name", [
    "torch_view_squeeze_ts_dyn.onnx", "torch_view_squeeze_dynamo_dyn.onnx", "torch_view_squeeze_ts_b1.onnx",
    "torch_view_squeeze_ts_b3.onnx", "keras_cnn_softmax_tf2onnx.onnx", "tflite_cnn_softmax_float.onnx",
    "tflite_cnn_softmax_int8.onnx", "keras_mlp_softmax_tf2onnx.onnx",
])
def test_corpus_models_compute_the_same_for_any_batch(name):
    original = load(str(CORPUS / name))
    simple = simplify(original)
    assert simple is not original
    ops = [n.op_type for n in simple.nodes]
    assert not _SHAPE_OPS & set(ops), ops
    assert [v.name for v in simple.inputs] == [v.name for v in original.inputs]
    assert [v.name for v in simple.outputs] == [v.name for v in original.outputs]
    assert simple.inputs[0].shape == original.inputs[0].shape  # the batch stays symbolic / fixed
    fixed = original.inputs[0].shape[0]
    rng = np.random.default_rng(0)
    for batch in ([fixed] if isinstance(fixed, int) else [1, 3, 5]):
        feeds = _feed(original, batch, rng)
        want = _run(onnx.load(str(CORPUS / name)), feeds)
        got = _run(to_model(simple), feeds)
        for w, g in zip(want, got):
            assert w.shape == g.shape and w.dtype == g.dtype
            if w.dtype.kind == "f":  # MatMul + Add fused into Gemm: float sums in another order
                np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
            else:
                np.testing.assert_array_equal(g, w)


def test_simplify_is_cached_and_leaves_plain_graphs_alone():
    g = load(str(CORPUS / "torch_cnn_softmax_ts_dyn.onnx"))  # Conv, Relu, MaxPool, Flatten, Gemm, Softmax
    assert simplify(g) is g
    v = load(str(CORPUS / "torch_view_squeeze_ts_dyn.onnx"))
    assert simplify(v) is simplify(v)


def _dyn_model(nodes, inits, out_shape):
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_reshape_target_from_the_dynamic_batch_becomes_keep_batch():
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
             helper.make_node("Unsqueeze", ["n", "zero1"], ["n1"]),
             helper.make_node("Concat", ["n1", "six"], ["target"], axis=0),
             helper.make_node("Reshape", ["x", "target"], ["y"])]
    model = _dyn_model(nodes, {"zero": np.int64(0), "zero1": np.array([0], np.int64),
                               "six": np.array([6], np.int64)}, ["N", 6])
    g = simplify(load(model))
    assert [n.op_type for n in g.nodes] == ["Reshape"]
    assert g.initializers[g.nodes[0].inputs[1]].tolist() == [-1, 6]
    for batch in (1, 4):
        x = np.arange(batch * 6, dtype=np.float32).reshape(batch, 2, 3)
        np.testing.assert_array_equal(_run(to_model(g), {"x": x})[0], _run(model, {"x": x})[0])


def test_a_batch_dependent_constant_other_than_a_reshape_target_leaves_the_graph_as_it_is():
    # y = x + (batch as a float): folding with a fixed batch would bake one batch size in
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
             helper.make_node("Cast", ["n"], ["nf"], to=TensorProto.FLOAT),
             helper.make_node("Add", ["x", "nf"], ["y"])]
    model = _dyn_model(nodes, {"zero": np.int64(0)}, ["N", 2, 3])
    g = load(model)
    assert simplify(g) is g


def test_transpose_pair_cancels():
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=[0, 2, 1]),
             helper.make_node("Transpose", ["t"], ["u"], perm=[0, 2, 1]),
             helper.make_node("Relu", ["u"], ["y"])]
    model = _dyn_model(nodes, {}, ["N", 2, 3])
    g = simplify(load(model))
    assert [n.op_type for n in g.nodes] == ["Relu"]
    x = np.random.default_rng(1).standard_normal((3, 2, 3)).astype(np.float32)
    np.testing.assert_array_equal(_run(to_model(g), {"x": x})[0], _run(model, {"x": x})[0])


def test_host_names_of_fused_nodes_follow_them_into_the_simplified_graph():
    """tf2onnx writes Dense as MatMul + Add; the pass fuses them into one Gemm (its own name):
    a user's --host naming the MatMul or the Add (or an untouched node) still finds its node."""
    g = load(str(ROOT / "corpus" / "keras_mlp_softmax_tf2onnx.onnx"))
    s = simplify(g)
    names = [n.name for n in g.nodes]
    gemms = [n.name for n in s.nodes if n.op_type == "Gemm"]
    assert "sequential_1_1/dense_2_1/MatMul" in names and "sequential_1_1/dense_2_1/MatMul" not in {n.name for n in s.nodes}
    assert follow_names(g, s, ["sequential_1_1/dense_2_1/MatMul", "sequential_1_1/dense_2_1/BiasAdd",
                               "sequential_1_1/dense_1_1/Relu", "no such node"]) == (
        gemms[1], gemms[1], "sequential_1_1/dense_1_1/Relu", "no such node")


def test_host_naming_a_fused_float_node_splits_there():
    path = ROOT / "corpus" / "keras_mlp_softmax_tf2onnx.onnx"
    with np.load(ROOT / "corpus" / "keras_mlp_softmax.npz") as d:
        x = d["input"] if "input" in d.files else d[d.files[0]]
    design = onnx2hw.compile(str(path), calib={load(str(path)).inputs[0].name: x.astype(np.float32)},
                             host=["sequential_1_1/dense_2_1/MatMul"])
    assert [s.op for s in design.pipeline.stages] == ["dense"]
