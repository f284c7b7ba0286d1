"""Concat layer kind: channel concatenation of quantized tensors, each input requantized onto the
output grid (one rounding). Truth: onnxruntime's spec-exact session on QDQ graphs (within one output
step where the float rounding of the scale ratio differs; identical for a pure interleave), the
int64 formula written here; hardware bit-exact under random backpressure, including the Fork + FIFO
of a tensor read twice."""
import numpy as np
import pytest
from onnx import helper

from _branch_models import const, qdq, qdq_model
from _oracle import lsb_apart, run_spec
from onnx2hw import golden
from _pysim_check import assert_hardware_is_golden
from onnx2hw.dataflow import compile_pipeline
from onnx2hw.ir import UnsupportedError, load
from onnx2hw.layers import IntType, TensorSpec, dequantize_outputs, quantize_inputs
from onnx2hw.layers.concat import Concat
from onnx2hw.quant import to_integer_graph

pytestmark = pytest.mark.filterwarnings("ignore::amaranth.hdl._ir.UnusedElaboratable")


def _skip_concat(out_scale=0.05, out_zp=3, branch_scale=0.031, axis=1):
    """x -> QDQ -> [1x1 conv -> Relu -> QDQ (branch grid)] ++ [x itself (the skip)] -> Concat -> QDQ."""
    rng = np.random.default_rng(2)
    nodes, inits = [], []
    _, xd = qdq(nodes, inits, "x", "x", 0.02, 128)
    inits += [const("w_q", rng.integers(-100, 100, (3, 2, 1, 1)), np.int8), const("w_s", np.float32(0.01)),
              const("w_z", 0, np.int8)]
    nodes.append(helper.make_node("DequantizeLinear", ["w_q", "w_s", "w_z"], ["w"], name="w_DQ"))
    nodes.append(helper.make_node("Conv", [xd, "w"], ["c"], name="conv"))
    nodes.append(helper.make_node("Relu", ["c"], ["r"], name="relu"))
    _, rd = qdq(nodes, inits, "r", "r", branch_scale, 0)
    nodes.append(helper.make_node("Concat", [rd, xd], ["cat"], name="cat", axis=axis))
    _, yd = qdq(nodes, inits, "cat", "y", out_scale, out_zp)
    nodes.append(helper.make_node("Identity", [yd], ["out"], name="out"))
    return qdq_model(nodes, inits, (2, 5, 6), "out", (5, 5, 6))


def _x(n=64):
    return np.random.default_rng(9).uniform(-2.6, 2.6, (n, 2, 5, 6)).astype(np.float32)


def _golden(model, x):
    ig = to_integer_graph(load(model))
    return ig, dequantize_outputs(ig, golden.execute(ig, quantize_inputs(ig, {"x": x})))["out"]


def test_requantized_concat_matches_onnxruntime():
    m = _skip_concat()
    ig, got = _golden(m, _x())
    cat = next(layer for layer in ig.layers if isinstance(layer, Concat))
    assert cat.multipliers != (1, 1)  # both inputs are requantized onto the output grid
    lsb = lsb_apart(got, run_spec(m, {"x": _x()})[0], 0.05)
    assert lsb.max() <= 1 and np.mean(lsb == 0) >= 0.99, (lsb.max(), np.mean(lsb == 0))


def _pool_concat(out_scale, out_zp):
    """x -> QDQ -> [MaxPool 3x3 (the same grid)] ++ [x] -> Concat -> QDQ on (out_scale, out_zp)."""
    nodes, inits = [], []
    _, xd = qdq(nodes, inits, "x", "x", 0.02, 128)
    nodes.append(helper.make_node("MaxPool", [xd], ["p"], name="pool", kernel_shape=[3, 3], pads=[1, 1, 1, 1]))
    _, pd = qdq(nodes, inits, "p", "p", 0.02, 128)
    nodes.append(helper.make_node("Concat", [pd, xd], ["cat"], name="cat", axis=1))
    _, yd = qdq(nodes, inits, "cat", "y", out_scale, out_zp)
    nodes.append(helper.make_node("Identity", [yd], ["out"], name="out"))
    return qdq_model(nodes, inits, (2, 5, 6), "out", (4, 5, 6))


def test_same_grid_is_a_pure_interleave_and_exact():
    m = _pool_concat(0.02, 128)
    ig, got = _golden(m, _x())
    cat = next(layer for layer in ig.layers if isinstance(layer, Concat))
    assert cat.shifts == (0, 0) and cat.multipliers == (1, 1) and cat.zeros == (128, 128)
    np.testing.assert_array_equal(got, run_spec(m, {"x": _x()})[0])


def test_power_of_two_ratio_is_exact():
    """Output scale twice the inputs': the ratio 1/2 is exact, so the one rounding is the spec's
    except on ties (round half up here, half to even in QuantizeLinear): compared within one step,
    equal off the ties."""
    m = _pool_concat(0.04, 64)
    ig, got = _golden(m, _x())
    want = run_spec(m, {"x": _x()})[0]
    lsb = lsb_apart(got, want, 0.04)
    xq = np.clip(np.rint(_x() / np.float32(0.02)) + 128, 0, 255)
    assert lsb.max() <= 1 and np.all(lsb[:, 2:][(xq % 2) == 0] == 0)


def test_reference_is_the_integer_formula():
    layer = Concat("c", ("a", "b"), TensorSpec("y", (2, 2, 5), IntType(8, True)), (3, -2), (1518500250, 1), (31, 0),
                   -1, -100, 100)
    ins = [TensorSpec("a", (2, 2, 3), IntType(8, False)), TensorSpec("b", (2, 2, 2), IntType(8, True))]
    layer.validate(ins)
    rng = np.random.default_rng(0)
    a, b = rng.integers(0, 256, (4, 2, 2, 3)), rng.integers(-128, 128, (4, 2, 2, 2))
    ya = np.clip(-1 + (((a - 3) * 1518500250 + (1 << 30)) >> 31), -100, 100)
    yb = np.clip(-1 + (b + 2), -100, 100)
    np.testing.assert_array_equal(layer.reference(a, b), np.concatenate([ya, yb], axis=-1))


def test_hardware_is_bit_exact_with_the_forked_skip():
    ig = to_integer_graph(load(_skip_concat()))
    p = compile_pipeline(ig)
    assert [s.op for s in p.stages] == ["fork", "conv", "concat"]
    assert_hardware_is_golden(p, 4, input_seed=3, seed=4)


def test_qlinear_concat_matches_onnxruntime():
    """QOperator: com.microsoft QLinearConcat of the quantized input and its max-pooled copy... of one size:
    the input and a 1x1-stride MaxPool of it (a branch), requantized onto the output grid."""
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"], name="xQ"),
             helper.make_node("MaxPool", ["xq"], ["pq"], name="pool", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("QLinearConcat", ["ys", "yz", "xq", "xs", "xz", "pq", "xs", "xz"], ["yq"], name="qcat",
                              domain="com.microsoft", axis=1),
             helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["out"], name="yDQ")]
    inits = [const("xs", np.float32(0.02)), const("xz", 128, np.uint8), const("ys", np.float32(0.023)),
             const("yz", 120, np.uint8)]
    m = qdq_model(nodes, inits, (2, 5, 6), "out", (4, 5, 6), extra_opsets=[helper.make_opsetid("com.microsoft", 1)])
    ig, got = _golden(m, _x())
    assert any(isinstance(layer, Concat) for layer in ig.layers)
    lsb = lsb_apart(got, run_spec(m, {"x": _x()})[0], 0.023)
    assert lsb.max() <= 1 and np.mean(lsb == 0) >= 0.99, (lsb.max(), np.mean(lsb == 0))


def test_other_axes_are_refused_naming_the_node():
    with pytest.raises(UnsupportedError, match=r"node 'cat' \(Concat\): Concat along axis 2"):
        to_integer_graph(load(_concat_axis2()))


def _concat_axis2():
    nodes, inits = [], []
    _, xd = qdq(nodes, inits, "x", "x", 0.02, 128)
    nodes.append(helper.make_node("Concat", [xd, xd], ["cat"], name="cat", axis=2))
    _, yd = qdq(nodes, inits, "cat", "y", 0.02, 128)
    nodes.append(helper.make_node("Identity", [yd], ["out"], name="out"))
    return qdq_model(nodes, inits, (2, 5, 6), "out", (2, 10, 6))


def test_qonnx_concat_of_one_grid_without_a_quantizer_is_an_interleave():
    """QONNX: Quant -> [MaxPool 3x3 stride 1] ++ [the quantized input] -> Concat -> model output (no
    quantizer after: the inputs share the grid, which the output keeps). Truth: the QONNX Quant
    formula and a max over windows in int64, written here."""
    qd = "qonnx.custom_op.general"
    nodes = [helper.make_node("Quant", ["x", "s", "z", "bw"], ["xq"], name="q_in", domain=qd, signed=1, narrow=0,
                              rounding_mode="ROUND"),
             helper.make_node("MaxPool", ["xq"], ["p"], name="pool", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Concat", ["p", "xq"], ["out"], name="cat", axis=1)]
    inits = [const("s", np.float32(0.02)), const("z", np.float32(0)), const("bw", np.float32(6))]
    m = qdq_model(nodes, inits, (2, 5, 6), "out", (4, 5, 6), opset=11, extra_opsets=[helper.make_opsetid(qd, 1)])
    ig, got = _golden(m, _x())
    cat = next(layer for layer in ig.layers if isinstance(layer, Concat))
    assert cat.multipliers == (1, 1) and cat.shifts == (0, 0)
    q = np.clip(np.rint(_x() / np.float32(0.02)), -32, 31).astype(np.int64)
    pad = np.pad(q, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-(1 << 40))
    pool = np.max([pad[:, :, i:i + 5, j:j + 6] for i in range(3) for j in range(3)], axis=0)
    want = (np.concatenate([pool, q], axis=1) * np.float32(0.02)).astype(np.float32)
    np.testing.assert_array_equal(got, want)
