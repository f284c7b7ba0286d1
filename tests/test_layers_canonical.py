"""The float rewrite the ops' canonical functions work with (onnx2hw.layers.canonical), and the
canonical forms prepare() gives (onnx2hw.quant._canonical): per-channel constants, the affine fold
into a linear layer, the cases that must not fold, views removed or kept."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnx2hw.ir import load
from onnx2hw.ir.graph import Node
from onnx2hw.layers import PATTERNS
from onnx2hw.layers.canonical import Rewrite, channel_vector
from onnx2hw.quant._canonical import prepare


def _graph(nodes, inits, x_shape, y_shape, outputs=("y",)):
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                          [helper.make_tensor_value_info(o, TensorProto.FLOAT, y_shape) for o in outputs],
                          [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in inits.items()])
    return load(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8))


def _linear_of(node):
    return PATTERNS[(node.domain, node.op_type)].linear


@pytest.mark.parametrize("shape, spatial, want", [
    ((), 2, [2.0] * 3), ((1, 1, 1, 1), 2, [2.0] * 3), ((3, 1, 1), 2, [1.0, 2.0, 3.0]),
    ((1, 3, 1, 1), 2, [1.0, 2.0, 3.0]), ((3,), 0, [1.0, 2.0, 3.0]), ((1, 3), 0, [1.0, 2.0, 3.0]),
    ((3, 1), 1, [1.0, 2.0, 3.0]),
    ((3,), 2, None),          # along the width of an image, not the channels
    ((3, 1), 2, None),        # along its height
    ((1, 1, 3, 1, 1), 2, None),  # adds an axis
    ((2,), 0, None),          # another channel count
])
def test_channel_vector(shape, spatial, want):
    c = np.full(shape, 2.0) if int(np.prod(shape)) == 1 else np.arange(1.0, 4.0)[:np.prod(shape)].reshape(shape)
    got = channel_vector(c, 3, spatial)
    assert (got is None) if want is None else got.tolist() == want


def _conv_rewrite():
    rng = np.random.default_rng(0)
    g = _graph([helper.make_node("Conv", ["x", "w", "b"], ["h"], name="conv"),
                helper.make_node("Relu", ["h"], ["y"], name="relu")],
               {"w": rng.standard_normal((3, 2, 1, 1)), "b": rng.standard_normal(3)}, ["N", 2, 4, 4], ["N", 3, 4, 4])
    rw = Rewrite(g, _linear_of)
    rw.nodes.append(g.nodes[0])
    return rw, g


def test_fold_computes_the_affine_map_of_the_layer_output():
    rw, g = _conv_rewrite()
    layer = rw.linear_before("h")
    assert layer is not None and layer.channels == 3 and layer.spatial == 2
    centre, scale, shift = np.array([0.5, -1.0, 2.0]), np.array([2.0, 0.25, -1.0]), np.array([1.0, 0.0, -3.0])
    rw.fold(layer, "t", "tag", centre=centre, scale=scale, shift=shift)
    conv = rw.nodes[0]
    assert conv.outputs == ("t",) and conv.inputs == ("x", "conv.weight_tag", "conv.bias_tag")
    w, b = g.initializers["w"].astype(np.float64), g.initializers["b"].astype(np.float64)
    np.testing.assert_array_equal(rw.inits["conv.weight_tag"], (w * scale.reshape(3, 1, 1, 1)).astype(np.float32))
    np.testing.assert_array_equal(rw.inits["conv.bias_tag"], ((b - centre) * scale + shift).astype(np.float32))


def test_a_shift_keeps_the_weights():
    rw, g = _conv_rewrite()
    rw.fold(rw.linear_before("h"), "t", "shifted", shift=np.ones(3))
    assert rw.nodes[0].inputs == ("x", "w", "conv.bias_shifted")


def test_nothing_folds_into_an_output_a_read_value_or_a_layer_without_bias():
    rw, _ = _conv_rewrite()
    rw.nodes.append(Node("relu", "Relu", "", ("h",), ("r",)))
    assert rw.linear_before("h") is None  # read by the Relu
    assert rw.linear_before("x") is None  # no node made it
    g = _graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], {"w": np.ones((4, 3))}, ["N", 4], ["N", 3])
    rw = Rewrite(g, _linear_of)
    rw.nodes.append(g.nodes[0])
    assert rw.linear_before("y") is None  # a graph output, and MatMul's form has no bias
    g = _graph([helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"), helper.make_node("Relu", ["h"], ["y"])],
               {"w": np.ones((4, 3))}, ["N", 4], ["N", 3])
    rw = Rewrite(g, _linear_of)
    rw.nodes.append(g.nodes[0])
    assert rw.linear_before("h") is None


def test_const_names_the_node_for_a_computed_operand():
    rw, _ = _conv_rewrite()
    with pytest.raises(ValueError, match=r"node 'clip' \(Clip\): min 'm' must be a constant initializer"):
        rw.const(Node("clip", "Clip", "", ("x", "m"), ("y",)), 1, "min")
    assert rw.const(Node("clip", "Clip", "", ("x",), ("y",)), 1, "min") is None


def test_prepare_folds_mul_and_add_of_a_gemm_and_keeps_them_after_a_matmul():
    rng = np.random.default_rng(2)
    inits = {"w": rng.standard_normal((3, 4)), "b": rng.standard_normal(3), "m": [2.0, 0.5, 4.0], "c": [1.0, 2.0, 3.0]}
    tail = [helper.make_node("Mul", ["h", "m"], ["s"], name="mul"), helper.make_node("Add", ["s", "c"], ["t"]),
            helper.make_node("Relu", ["t"], ["y"], name="relu")]
    g = prepare(_graph([helper.make_node("Gemm", ["x", "w", "b"], ["h"], name="fc", transB=1)] + tail, inits,
                       ["N", 4], ["N", 3]))
    assert [n.op_type for n in g.nodes] == ["Gemm", "Relu"]
    fc = g.nodes[0]
    np.testing.assert_allclose(g.initializers[fc.inputs[2]], inits["b"] * inits["m"] + inits["c"], rtol=1e-6)
    g = prepare(_graph([helper.make_node("MatMul", ["x", "w"], ["h"], name="mm")] + tail[:1] +
                       [helper.make_node("Relu", ["s"], ["y"], name="relu")],
                       {"w": inits["w"].T, "m": inits["m"]}, ["N", 4], ["N", 3]))
    assert [n.op_type for n in g.nodes] == ["MatMul", "Mul", "Relu"]


def test_prepare_removes_views_but_keeps_an_identity_that_makes_an_output():
    g = prepare(_graph([helper.make_node("Dropout", ["x"], ["d"], name="drop"),
                        helper.make_node("Identity", ["d"], ["i"], name="id"),
                        helper.make_node("Relu", ["i"], ["y"], name="relu"),
                        helper.make_node("Identity", ["y"], ["z"], name="out")],
                       {}, ["N", 4], ["N", 4], outputs=("z",)))
    assert [(n.op_type, n.inputs) for n in g.nodes] == [("Relu", ("x",)), ("Identity", ("y",))]


def test_a_constant_map_does_not_fold_into_a_layer_a_later_node_also_reads():
    """Conv -> h, Mul(h, c) -> m, Add(h, m): h is read after the Mul too, so the Mul stays a
    node of its own and the graph keeps computing h (and quantizes: the float graph equals it)."""
    from onnx2hw.golden import execute

    rng = np.random.default_rng(3)
    inits = {"w": rng.standard_normal((3, 2, 1, 1)), "b": rng.standard_normal(3), "c": [[[2.0]], [[0.5]], [[4.0]]]}
    g = _graph([helper.make_node("Conv", ["x", "w", "b"], ["h"], name="conv"),
                helper.make_node("Mul", ["h", "c"], ["m"], name="mul"),
                helper.make_node("Add", ["h", "m"], ["y"], name="add")], inits, ["N", 2, 4, 4], ["N", 3, 4, 4])
    p = prepare(g)
    assert [n.op_type for n in p.nodes] == ["Conv", "Mul", "Add"]
    x = rng.standard_normal((2, 2, 4, 4)).astype(np.float32)
    want = execute(g, {"x": x})["y"]
    np.testing.assert_allclose(execute(p, {"x": x})["y"], want, rtol=1e-6)
