"""AvgPool layer kind: its exact reference is the window sum plus the bias, requantized once
(the int64 formula written here, with ``onnx2hw.arith.requantize``)."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from _one_layer import S8, graph_of
import onnx2hw
from onnx2hw import arith, golden
from onnx2hw import layers as ig


def test_avg_pool_requantizes_the_window_sum():
    rng = np.random.default_rng(2)
    x = rng.integers(-128, 128, (4, 3, 3, 3)).astype(np.int8)
    act = ig.Requant(np.array([7282]), np.array([16]), -3, -128, 127)  # about 1/9
    ap = ig.AvgPool("ap", ("x",), ig.TensorSpec("a", (1, 1, 3), S8), (3, 3), (1, 1), (0, 0, 0, 0), act, bias=-9 * 4)
    got = golden.execute(graph_of(ig.TensorSpec("x", (3, 3, 3), S8), [ap]), {"x": x})["a"]
    sums = x.astype(np.int64).sum(axis=(1, 2), keepdims=True) - 36
    assert np.array_equal(got, arith.requantize(sums, 7282, 16, -3, -128, 127))


def _sum_pool_into_dense_model():
    """QONNX, as Brevitas writes a model without an output quantizer on its average pool: a 4-bit
    unsigned image quantizer, GlobalAveragePool, Flatten, MatMul by 4-bit quantized weights."""
    q = "qonnx.custom_op.general"
    rng = np.random.default_rng(4)
    w = rng.integers(-7, 8, (6, 3)).astype(np.float32) * 0.25
    inits = {"s_in": np.float32(0.5), "z": np.float32(0), "b_in": np.float32(4), "w": w, "s_w": np.float32(0.25),
             "b_w": np.float32(4)}
    nodes = [helper.make_node("Quant", ["x", "s_in", "z", "b_in"], ["xq"], domain=q, signed=0, narrow=0,
                              rounding_mode="ROUND"),
             helper.make_node("GlobalAveragePool", ["xq"], ["p"]), helper.make_node("Flatten", ["p"], ["f"]),
             helper.make_node("Quant", ["w", "s_w", "z", "b_w"], ["wq"], domain=q, signed=1, narrow=1,
                              rounding_mode="ROUND"),
             helper.make_node("MatMul", ["f", "wq"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 6, 4, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])],
                          [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid(q, 1)])
    return m, w


def test_average_pool_read_by_a_dense_layer_is_its_exact_sum():
    """Without a quantizer between them, the pool hands its window sum of ``x - zp`` to the dense
    layer as a wider integer (the mean's 1/area is in that layer's scale): exact, as the NumPy
    formula of the QONNX Quant and ONNX ops says (all scales powers of two: exact in float64)."""
    m, w = _sum_pool_into_dense_model()
    x = np.random.default_rng(5).uniform(-1, 9, (8, 6, 4, 4)).astype(np.float32)
    design = onnx2hw.compile(m, board="ulx3s")
    xq = np.clip(np.rint(x / 0.5), 0, 15) * 0.5
    want = xq.astype(np.float64).mean(axis=(2, 3)) @ w.astype(np.float64)
    got = design.golden({"x": x})["y"]
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6 * np.abs(want).max())
    assert [s.op for s in design.pipeline.stages][-2:] == ["avgpool", "dense"]


@pytest.mark.sim
def test_average_pool_read_by_a_dense_layer_simulates_bit_exact():
    m, _ = _sum_pool_into_dense_model()
    x = np.random.default_rng(6).uniform(-1, 9, (4, 6, 4, 4)).astype(np.float32)
    onnx2hw.compile(m, board="ulx3s").simulate({"x": x})   # raises MismatchError unless bit-exact
