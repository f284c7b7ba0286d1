"""Golden compute and quantization ops on hand-worked examples: QONNX Quant,
BipolarQuant and Trunc against their documented formulas, window geometry, the
exactness guard of the integer products, and one-line errors for bad nodes.
Cross-checks with onnxruntime are in test_golden_ort_compute.py."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from onnx2hw.golden.ops import (batch_normalization, conv, conv_integer, matmul_integer, qonnx_bipolar_quant,
                                qonnx_quant, qonnx_trunc, quantize_linear)
from onnx2hw.golden.ops._conv_util import geometry
from onnx2hw.golden.ops._quant_util import exact_dtype, offset_bound, qonnx_round
from onnx2hw.golden.registry import QONNX
from onnx2hw.ir import ModelError, Node


def node(op, n_in, domain="", since=21, n_out=1, **attrs):
    return Node("n0", op, domain, tuple(f"i{i}" for i in range(n_in)), tuple(f"o{i}" for i in range(n_out)),
                attrs, since)


f32 = lambda *v: np.array(v, dtype=np.float32)  # noqa: E731


# ------------------------------------------------------------------------ QONNX

def test_quant_signed_round_half_even_and_clamp():
    x = f32(-3.3, -1.25, -0.5, 0.25, 0.75, 1.5, 2.5, 100.0)
    # x / 0.5 = -6.6 -2.5 -1 0.5 1.5 3 5 200 -> clamp [-8, 7] -> half-even round
    y = qonnx_quant.run(node("Quant", 4, QONNX, 1), x, np.float32(0.5), np.float32(0), np.float32(4))
    np.testing.assert_array_equal(y, f32(-3.5, -1.0, -0.5, 0.0, 1.0, 1.5, 2.5, 3.5))
    assert y.dtype == np.float32


@pytest.mark.parametrize("signed, narrow, lo, hi", [(1, 0, -8, 7), (1, 1, -7, 7), (0, 0, 0, 15), (0, 1, 0, 14)])
def test_quant_ranges(signed, narrow, lo, hi):
    x = f32(-100, -7.6, 7.4, 14.6, 100)
    y = qonnx_quant.run(node("Quant", 4, QONNX, 1, signed=signed, narrow=narrow), x, np.float32(1), np.float32(0),
                        np.float32(4))
    want = np.clip(f32(-100, -8, 7, 15, 100), lo, hi)  # clamp first, then round
    np.testing.assert_array_equal(y, want)


# the rounding table of QONNX's quant_op.md
TABLE = {"ROUND": [6, 2, 2, 1, 1, -1, -1, -2, -2, -6], "CEIL": [6, 3, 2, 2, 1, -1, -1, -1, -2, -5],
         "FLOOR": [5, 2, 1, 1, 1, -1, -2, -2, -3, -6], "UP": [6, 3, 2, 2, 1, -1, -2, -2, -3, -6],
         "DOWN": [5, 2, 1, 1, 1, -1, -1, -1, -2, -5], "HALF_UP": [6, 3, 2, 1, 1, -1, -1, -2, -3, -6],
         "HALF_DOWN": [5, 2, 2, 1, 1, -1, -1, -2, -2, -5]}
TABLE_X = f32(5.5, 2.5, 1.6, 1.1, 1.0, -1.0, -1.1, -1.6, -2.5, -5.5)


@pytest.mark.parametrize("mode", sorted(TABLE) + ["round_to_zero", "floor"])
def test_quant_rounding_modes(mode):
    want = TABLE.get(mode.upper(), TABLE["DOWN"])
    y = qonnx_quant.run(node("Quant", 4, QONNX, 1, rounding_mode=mode), TABLE_X, np.float32(1), np.float32(0),
                        np.float32(8))
    np.testing.assert_array_equal(y, f32(*want))


def test_half_up_has_no_float_slip():
    x = np.nextafter(np.float32(0.5), np.float32(0))  # 0.49999997: floor(x + 0.5) would give 1
    assert qonnx_round(np.array([x, -x]), "HALF_UP").tolist() == [0.0, -0.0]


def test_quant_zero_point_and_channel_scale():
    x = f32(0.0, 1.0, 3.0, -2.0).reshape(1, 4)
    # unsigned 3 bits, zeropt 3: x/0.5 + 3 = 3 5 9 -1 -> clamp [0, 7] -> (q - 3) * 0.5
    y = qonnx_quant.run(node("Quant", 4, QONNX, 1, signed=0), x, np.float32(0.5), np.float32(3), np.float32(3))
    np.testing.assert_array_equal(y, f32(0.0, 1.0, 2.0, -1.5).reshape(1, 4))
    scale = f32(1.0, 0.25).reshape(1, 2, 1)
    x = f32(1.3, 1.3, 1.3, 1.3).reshape(1, 2, 2)
    y = qonnx_quant.run(node("Quant", 4, QONNX, 1), x, scale, np.float32(0), np.float32(8))
    np.testing.assert_array_equal(y, f32(1.0, 1.0, 1.25, 1.25).reshape(1, 2, 2))


def test_quant_one_bit_signed_is_bipolar():
    y = qonnx_quant.run(node("Quant", 4, QONNX, 1), f32(-0.1, 0.0, 2.0), np.float32(2), np.float32(0), np.float32(1))
    np.testing.assert_array_equal(y, f32(-2, 2, 2))


@pytest.mark.parametrize("qtype", [np.int8, np.uint8])
def test_quant_matches_onnx_quantize_dequantize(qtype):
    """Where the semantics coincide (ROUND, integer zero point, 8 bits) Quant equals
    onnx's reference QuantizeLinear -> DequantizeLinear."""
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((4, 50)) * 3).astype(np.float32)
    scale, zp = np.float32(0.037), (np.int8(-3) if qtype == np.int8 else np.uint8(120))
    g = helper.make_graph(
        [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
         helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, x.shape)],
        [numpy_helper.from_array(np.array(scale), "s"), numpy_helper.from_array(np.array(zp), "z")])
    want = ReferenceEvaluator(helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])).run(None, {"x": x})[0]
    got = qonnx_quant.run(node("Quant", 4, QONNX, 1, signed=int(qtype == np.int8)), x, scale, np.float32(zp),
                          np.float32(8))
    np.testing.assert_array_equal(got, want)


def test_quant_bad_inputs():
    with pytest.raises(ModelError, match="bit width"):
        qonnx_quant.run(node("Quant", 4, QONNX, 1), f32(1), np.float32(1), np.float32(0), np.float32(2.5))
    with pytest.raises(ModelError, match="rounding_mode 'SIDEWAYS'"):
        qonnx_quant.run(node("Quant", 4, QONNX, 1, rounding_mode="SIDEWAYS"), f32(1), np.float32(1),
                        np.float32(0), np.float32(4))


def test_bipolar_quant():
    y = qonnx_bipolar_quant.run(node("BipolarQuant", 2, QONNX, 1), f32(-1, 0, 0.5), np.float32(0.25))
    np.testing.assert_array_equal(y, f32(-0.25, 0.25, 0.25))


def test_trunc_v1():
    x = f32(13, -13, 6, 10)
    args = (np.float32(1), np.float32(0), np.float32(8), np.float32(6))  # drop 2 bits: / 4
    y = qonnx_trunc.run(node("Trunc", 5, QONNX, 1), x, *args)  # default FLOOR: 3.25 -3.25 1.5 2.5
    np.testing.assert_array_equal(y, f32(3, -4, 1, 2))
    y = qonnx_trunc.run(node("Trunc", 5, QONNX, 1, rounding_mode="ROUND"), x, *args)
    np.testing.assert_array_equal(y, f32(3, -3, 2, 2))
    # scale and zero point: x / 0.5 + 2 = 28 -> round -> / 4 = 7 -> (7 - 2) * 0.5
    y = qonnx_trunc.run(node("Trunc", 5, QONNX, 1), f32(13), np.float32(0.5), np.float32(2), np.float32(8),
                        np.float32(6))
    np.testing.assert_array_equal(y, f32(2.5))


@pytest.mark.parametrize("n_inputs", [6, 7])
def test_trunc_v2(n_inputs):
    x = f32(13, -13, 100, 6)
    # t = 2^round(log2(4 / 1)) = 4; round(x) / 4 = 3.25 -3.25 25 1.5; clamp [-4, 3]; FLOOR; * out_scale 4
    extra = (np.float32(4),) + ((np.float32(0),) if n_inputs == 7 else ()) + (np.float32(3),)
    y = qonnx_trunc.run(node("Trunc", n_inputs, QONNX, 2), x, np.float32(1), np.float32(0), np.float32(8), *extra)
    np.testing.assert_array_equal(y, f32(12, -16, 12, 4))
    y = qonnx_trunc.run(node("Trunc", n_inputs, QONNX, 2, signed=0, narrow=1), x, np.float32(1), np.float32(0),
                        np.float32(8), *extra)  # unsigned narrow 3 bits: [0, 6]
    np.testing.assert_array_equal(y, f32(12, 0, 24, 4))


# --------------------------------------------------------------------- geometry

def test_geometry_ceil_and_same():
    n = node("MaxPool", 1, kernel_shape=(2,), strides=(2,))
    assert geometry(n, (5,), (2,)).out == (2,)
    g = geometry(n, (5,), (2,), ceil_mode=True)
    assert g.out == (3,) and g.pads_end == (1,) and g.pads_end_declared == (0,)
    up = geometry(node("Conv", 2, auto_pad="SAME_UPPER"), (5,), (4,))
    low = geometry(node("Conv", 2, auto_pad="SAME_LOWER"), (5,), (4,))
    assert (up.out, up.pads_begin, up.pads_end) == ((5,), (1,), (2,))
    assert (low.out, low.pads_begin, low.pads_end) == ((5,), (2,), (1,))
    # ceil mode never starts a window in the end padding: in 4, pad 1+1, k 2, s 3 -> 2 windows
    g = geometry(node("MaxPool", 1, kernel_shape=(2,), strides=(3,), pads=(1, 1)), (4,), (2,), ceil_mode=True)
    assert g.out == (2,)


def test_conv_float16_and_float64_match_onnx_reference():
    rng = np.random.default_rng(0)
    for dtype, rtol in ((np.float16, 1e-2), (np.float64, 1e-12)):
        x = rng.standard_normal((2, 4, 7, 6)).astype(dtype)
        w = rng.standard_normal((6, 2, 3, 3)).astype(dtype)
        attrs = dict(group=2, pads=(1, 0, 2, 1), strides=(2, 1), dilations=(1, 2))
        g = helper.make_graph(
            [helper.make_node("Conv", ["x", "w"], ["y"], **attrs)], "g",
            [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), a.shape)
             for n, a in (("x", x), ("w", w))],
            [helper.make_tensor_value_info("y", helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), None)])
        want = ReferenceEvaluator(helper.make_model(g)).run(None, {"x": x, "w": w})[0]
        got = conv.run(node("Conv", 2, **attrs), x, w)
        assert got.dtype == dtype and got.shape == want.shape
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=rtol)


def test_conv_bad_group():
    x, w = np.zeros((1, 3, 4, 4), np.float32), np.zeros((4, 1, 3, 3), np.float32)
    with pytest.raises(ModelError, match="group 2"):
        conv.run(node("Conv", 2, group=2), x, w)
    with pytest.raises(ModelError, match="kernel_shape"):
        conv.run(node("Conv", 2, group=3, kernel_shape=(2, 2)), np.zeros((1, 3, 4, 4), np.float32), w[:3])


# ------------------------------------------------------------------ integer ops

def test_exact_dtype_guard():
    assert exact_dtype(255 * 128 * 500) == np.float32  # 8-bit dot products of length 500
    assert exact_dtype(255 * 255 * (1 << 30)) == np.float64
    assert exact_dtype((1 << 31) * (1 << 31) * 2) == np.int64
    assert offset_bound(np.uint8, 3) == 252 and offset_bound(np.int8, np.array([-2, 5])) == 133


def test_integer_matmul_beyond_float64_is_exact():
    rng = np.random.default_rng(2)
    # products up to 2^56: beyond float64's 53-bit mantissa, inside int64
    a = rng.integers(-2**28, 2**28, size=(3, 5)).astype(np.int64)
    b = rng.integers(-2**28, 2**28, size=(5, 2)).astype(np.int64)
    a[0, 0], b[0, 0] = 2**28 - 1, 2**28 - 3
    got = matmul_integer.integer_matmul(a, b)
    want = [[sum(int(a[i, k]) * int(b[k, j]) for k in range(5)) for j in range(2)] for i in range(3)]
    assert got.tolist() == want


def test_conv_integer_per_channel_zero_point():
    x = np.arange(16, dtype=np.uint8).reshape(1, 1, 4, 4)
    w = np.array([[[[1, 2], [3, 4]]], [[[5, 5], [5, 5]]]], dtype=np.uint8)
    y = conv_integer.run(node("ConvInteger", 4), x, w, np.uint8(1), np.array([1, 5], np.uint8))
    # channel 0: w - 1 = [[0,1],[2,3]]; channel 1: w - 5 = 0
    xi = x.astype(np.int64)[0, 0] - 1
    want0 = np.array([[xi[i, j + 1] + 2 * xi[i + 1, j] + 3 * xi[i + 1, j + 1] for j in range(3)] for i in range(3)])
    np.testing.assert_array_equal(y[0, 0], want0)
    np.testing.assert_array_equal(y[0, 1], 0)
    assert y.dtype == np.int32


def test_quantize_linear_ties_and_errors():
    y = quantize_linear.run(node("QuantizeLinear", 3), f32(0.5, 1.5, 2.5, -0.5, -1.5, 300, -300), np.float32(1),
                            np.int8(0))
    np.testing.assert_array_equal(y, np.array([0, 2, 2, 0, -2, 127, -128], np.int8))
    with pytest.raises(ModelError, match="output_dtype"):
        quantize_linear.run(node("QuantizeLinear", 3, output_dtype=TensorProto.INT16), f32(1), np.float32(1),
                            np.int8(0))
    with pytest.raises(ModelError, match="per-axis"):
        quantize_linear.run(node("QuantizeLinear", 2), np.zeros((2, 3), np.float32), f32(1, 2))


def test_batch_normalization_training_mode_running_stats():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((4, 3, 5)).astype(np.float32)
    s, b, mean, var = f32(1, 2, 3), f32(0, 1, 0), f32(0.5, 0, 0), f32(1, 1, 2)
    y, rm, rv = batch_normalization.run(node("BatchNormalization", 5, since=15, n_out=3, training_mode=1,
                                             momentum=0.8), x, s, b, mean, var)
    bm, bv = x.mean(axis=(0, 2)), x.var(axis=(0, 2))
    np.testing.assert_allclose(rm, mean * 0.8 + bm * 0.2, rtol=1e-6)
    np.testing.assert_allclose(rv, var * 0.8 + bv * 0.2, rtol=1e-6)
    want = s[None, :, None] * (x - bm[None, :, None]) / np.sqrt(bv[None, :, None] + 1e-5) + b[None, :, None]
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)


def test_qonnx_graph_through_loader_and_executor():
    """Quant -> Trunc -> BipolarQuant as a QONNX model: domain dispatch and input order."""
    from onnx2hw.golden import execute
    from onnx2hw.ir import load

    consts = {"s": np.float32(0.5), "z": np.float32(0), "b8": np.float32(8), "os": np.float32(2),
              "b6": np.float32(6), "one": np.float32(1)}
    nodes = [helper.make_node("Quant", ["x", "s", "z", "b8"], ["q"], domain=QONNX, signed=1, narrow=0,
                              rounding_mode="ROUND"),
             helper.make_node("Trunc", ["q", "s", "z", "b8", "os", "b6"], ["t"], domain=QONNX,
                              rounding_mode="FLOOR"),
             helper.make_node("BipolarQuant", ["t", "one"], ["y"], domain=QONNX)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info("t", TensorProto.FLOAT, [1, 4]),
                           helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
                          [numpy_helper.from_array(np.array(v), k) for k, v in consts.items()])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(QONNX, 2)])
    x = f32(3.3, -0.7, 100.0, -1.2).reshape(1, 4)
    out = execute(load(model), {"x": x})
    # Quant: x/0.5 = 6.6 -1.4 200 -2.4 -> clamp [-128, 127] -> round 7 -1 127 -2 -> * 0.5
    # Trunc: /0.5 -> 7 -1 127 -2; t = 2^round(log2(2 / 0.5)) = 4 -> 1.75 -0.25 31.75 -0.5
    #        clamp [-32, 31] -> 1.75 -0.25 31 -0.5 -> FLOOR 1 -1 31 -1 -> * 2
    np.testing.assert_array_equal(out["t"], f32(2, -2, 62, -2).reshape(1, 4))
    np.testing.assert_array_equal(out["y"], f32(1, -1, 1, -1).reshape(1, 4))
