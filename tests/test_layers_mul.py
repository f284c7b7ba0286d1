"""Mul layer kind: a quantized tensor times a constant scalar or per-channel scale (negative and
zero included), requantized onto the output grid with one rounding. Truth: onnxruntime's
spec-exact session on QDQ graphs (within one output step where the rounded ratio differs), the
int64 formula written here; bit-exact hardware under random backpressure. A positive Mul right
after a layer folds into its requantizer."""
import numpy as np
import pytest
from onnx import TensorProto, helper

from _branch_models import const, qdq, qdq_model
from _oracle import lsb_apart, run_spec
from onnx2hw import golden
from _pysim_check import assert_hardware_is_golden
from onnx2hw.dataflow import compile_pipeline
from onnx2hw.ir import UnsupportedError, load
from onnx2hw.layers import Conv, IntType, Requant, TensorSpec, dequantize_outputs, quantize_inputs
from onnx2hw.layers.mul import Mul
from onnx2hw.quant import quantize, to_integer_graph

pytestmark = pytest.mark.filterwarnings("ignore::amaranth.hdl._ir.UnusedElaboratable")

PER_CHANNEL = np.array([0.7, -1.3, 0.0], np.float32).reshape(3, 1, 1)


def _model(k, quantized_const=False, out_scale=0.03, out_zp=0, out_type=np.int8):
    nodes, inits = [], []
    _, xd = qdq(nodes, inits, "x", "x", 0.02, 128)
    if quantized_const:
        kq = np.clip(np.rint(np.asarray(k) / 0.01), -127, 127).astype(np.int8)
        inits += [const("k_q", kq), const("k_s", np.float32(0.01)), const("k_z", 0, np.int8)]
        nodes.append(helper.make_node("DequantizeLinear", ["k_q", "k_s", "k_z"], ["k"], name="k_DQ"))
    else:
        inits.append(const("k", np.asarray(k, np.float32)))
    nodes.append(helper.make_node("Mul", [xd, "k"], ["m"], name="scale"))
    _, yd = qdq(nodes, inits, "m", "y", out_scale, out_zp, out_type)
    nodes.append(helper.make_node("Identity", [yd], ["out"], name="out"))
    return qdq_model(nodes, inits, (3, 4, 5), "out", (3, 4, 5))


def _x(n=64):
    return np.random.default_rng(8).uniform(-2.6, 2.6, (n, 3, 4, 5)).astype(np.float32)


@pytest.mark.parametrize("k, quantized", [(np.float32(1.37), False), (np.float32(-0.61), True),
                                          (PER_CHANNEL, False), (PER_CHANNEL, True)],
                         ids=["scalar", "negative_q", "per_channel", "per_channel_q"])
def test_mul_matches_onnxruntime(k, quantized):
    m = _model(k, quantized)
    ig = to_integer_graph(load(m))
    assert [type(layer) for layer in ig.layers] == [Mul]
    got = dequantize_outputs(ig, golden.execute(ig, quantize_inputs(ig, {"x": _x()})))["out"]
    lsb = lsb_apart(got, run_spec(m, {"x": _x()})[0], 0.03)
    assert lsb.max() <= 1 and np.mean(lsb == 0) >= 0.99, (lsb.max(), np.mean(lsb == 0))


def test_reference_is_the_integer_formula():
    layer = Mul("m", ("x",), TensorSpec("y", (2, 3), IntType(8, True)), 128,
                Requant(np.array([1503238554, -1395864371, 0]), np.array([31, 30, 0]), -3, -128, 127))
    layer.validate([TensorSpec("x", (2, 3), IntType(8, False))])
    x = np.random.default_rng(1).integers(0, 256, (5, 2, 3))
    m, s = np.array([1503238554, -1395864371, 0]), np.array([31, 30, 0])
    half = np.where(s > 0, 1 << np.maximum(s - 1, 0), 0)
    want = np.clip(-3 + (((x - 128) * m + half) >> s), -128, 127)
    np.testing.assert_array_equal(layer.reference(x), want)


def test_hardware_is_bit_exact():
    ig = to_integer_graph(load(_model(PER_CHANNEL)))
    p = compile_pipeline(ig, folding={"scale": (3, 3)})
    assert [b.kind for b in p.stages[0].blocks] == ["Cast", "Requantize"]
    assert_hardware_is_golden(p, 4, input_seed=3, seed=6)


def test_positive_mul_after_a_conv_folds_into_its_requantizer():
    rng = np.random.default_rng(2)
    nodes, inits = [], []
    _, xd = qdq(nodes, inits, "x", "x", 0.02, 128)
    inits += [const("w_q", rng.integers(-100, 100, (3, 3, 1, 1)), np.int8), const("w_s", np.float32(0.01)),
              const("w_z", 0, np.int8), const("k", PER_CHANNEL * 0 + np.float32(0.8))]
    nodes += [helper.make_node("DequantizeLinear", ["w_q", "w_s", "w_z"], ["w"], name="w_DQ"),
              helper.make_node("Conv", [xd, "w"], ["c"], name="conv"),
              helper.make_node("Mul", ["c", "k"], ["m"], name="scale")]
    _, yd = qdq(nodes, inits, "m", "y", 0.03, 0, np.int8)
    nodes.append(helper.make_node("Identity", [yd], ["out"], name="out"))
    m = qdq_model(nodes, inits, (3, 4, 5), "out", (3, 4, 5))
    ig = to_integer_graph(load(m))
    assert [type(layer) for layer in ig.layers] == [Conv]
    got = dequantize_outputs(ig, golden.execute(ig, quantize_inputs(ig, {"x": _x()})))["out"]
    lsb = lsb_apart(got, run_spec(m, {"x": _x()})[0], 0.03)
    assert lsb.max() <= 1 and np.mean(lsb == 0) >= 0.99


def test_mul_varying_within_a_channel_is_refused():
    with pytest.raises(UnsupportedError, match=r"node 'scale' \(Mul\): Mul by a constant that varies within a channel"):
        to_integer_graph(load(_model(np.linspace(0.5, 1, 5, dtype=np.float32))))


def test_ptq_fuses_a_positive_mul_after_a_conv_into_its_layer():
    """Float Conv -> Mul(per-channel constant) -> Relu: the Mul folds into the Conv's weights and
    bias before quantization (whatever its signs), one Conv layer in hardware. Both match
    onnxruntime's spec session on the QDQ written."""
    rng = np.random.default_rng(5)

    def model(k):
        inits = [const("w", rng.normal(0, 0.4, (3, 3, 3, 3)).astype(np.float32)), const("b", np.zeros(3, np.float32)),
                 const("k", np.asarray(k, np.float32).reshape(3, 1, 1))]
        nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
                 helper.make_node("Mul", ["c", "k"], ["m"], name="scale"),
                 helper.make_node("Relu", ["m"], ["y"], name="relu")]
        g = helper.make_graph(nodes, "cm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 4, 5])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3, 4, 5])], inits)
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)

    for k, kinds in (([0.5, 1.5, 2.0], [Conv]), ([0.5, -1.5, 2.0], [Conv])):
        q = quantize(model(k), {"x": _x(64)})
        ig = to_integer_graph(load(q))
        assert [type(layer) for layer in ig.layers] == kinds
        got = dequantize_outputs(ig, golden.execute(ig, quantize_inputs(ig, {"x": _x()})))["y"]
        lsb = lsb_apart(got, run_spec(q, {"x": _x()})[0], ig.outputs[0].scale)
        assert lsb.max() <= 1 and np.mean(lsb == 0) >= 0.99, (k, lsb.max(), np.mean(lsb == 0))
