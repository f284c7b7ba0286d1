"""Guard for CPU-dependent integer kernels: conv and gemm cases whose u8 x s8 pairwise sums leave
the int16 range (activations 255 beside weights -128: 2 * 255 * -128 = -65280).

onnxruntime's integer kernels saturate exactly these sums on x86 CPUs without VNNI, so nothing
here asks onnxruntime. Each case asserts golden executor = ``onnx.reference`` = an int64 NumPy
formula written below from the ONNX spec, at every weight/activation width ONNX can express
(8, 4 and 2 bits, signed and unsigned), in the QOperator, integer and QDQ forms; and the
``IntegerGraph`` the QDQ form imports to computes the same accumulators.

Scales are powers of two, so every float in the QDQ path is exact (sums stay below 2**24) and
the spec's formulas leave no rounding choice to the implementation.
"""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from _oracle import reference
from onnx2hw.golden import execute
from onnx2hw.ir import load
from onnx2hw.quant.convert import to_integer_graph
from onnx2hw.layers import quantize_inputs

K = 64                    # gemm reduction length: 64 * 255 * 128 = 2,088,960 (int16: 32,767)
C, H, W = 8, 5, 5          # conv input channels and image (3x3 kernel, reduction 72)
M = 4                      # outputs / output channels

#: ONNX element type -> (numpy dtype for building tensors, bits, signed)
TYPES = {
    "uint8": (TensorProto.UINT8, 8, False), "int8": (TensorProto.INT8, 8, True),
    "uint4": (TensorProto.UINT4, 4, False), "int4": (TensorProto.INT4, 4, True),
    "uint2": (TensorProto.UINT2, 2, False), "int2": (TensorProto.INT2, 2, True),
}


def _lo_hi(name):
    _, bits, signed = TYPES[name]
    return (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)


def _extreme(rng, shape, name, toward):
    """Mostly the extreme value ``toward`` ('lo' or 'hi') of the type, a few random values.
    For weights (``toward='lo'``) the second half of the output channels (axis 0) leans the
    other way, so outputs cover both signs instead of one saturated value."""
    lo, hi = _lo_hi(name)
    a = np.full(shape, lo if toward == "lo" else hi, np.int64)
    if toward == "lo":
        a[shape[0] // 2:] = hi
    mask = rng.random(shape) < 0.2
    a[mask] = rng.integers(lo, hi + 1, int(mask.sum()))
    return a


def _tensor(name, a, type_name):
    """An initializer of a (possibly sub-byte) integer type."""
    return helper.make_tensor(name, TYPES[type_name][0], a.shape, a.astype(np.int64).ravel().tolist())


def _model(nodes, inputs, outputs, inits, opset):
    g = helper.make_graph(nodes, "wide_sums", inputs, outputs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=11 if opset >= 25 else 10)
    onnx.checker.check_model(m, full_check=True)
    return m


# --- spec formulas (int64) ------------------------------------------------------------------
def gemm_acc(x, w):
    """sum_k x[n, k] * w[k, m], exact."""
    return np.asarray(x, np.int64) @ np.asarray(w, np.int64)


def conv_acc(x, w, pad):
    """NCHW cross-correlation, stride 1, zero-extended by ``pad`` (already in integer space)."""
    x = np.pad(np.asarray(x, np.int64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    w = np.asarray(w, np.int64)
    n, _, hp, wp = x.shape
    kh, kw = w.shape[2:]
    out = np.zeros((n, w.shape[0], hp - kh + 1, wp - kw + 1), np.int64)
    for i in range(kh):
        for j in range(kw):
            out += np.einsum("nchw,oc->nohw", x[:, :, i:i + out.shape[2], j:j + out.shape[3]], w[:, :, i, j])
    return out


def requant_spec(acc, ratio_log2, zp, type_name):
    """QuantizeLinear of ``acc * 2**ratio_log2`` (an exact binary fraction): round half to even,
    add the zero point, saturate to the type."""
    lo, hi = _lo_hi(type_name)
    scaled = np.asarray(acc, np.float64) * 2.0 ** ratio_log2
    return np.clip(np.rint(scaled) + zp, lo, hi).astype(np.int64)


# --- integer ops: MatMulInteger / ConvInteger (int32 accumulators, any CPU identical) ----------
def test_matmul_and_conv_integer_exact():
    rng = np.random.default_rng(0)
    x = _extreme(rng, (3, K), "uint8", "hi")
    w = _extreme(rng, (M, K), "int8", "lo").T
    m = _model([helper.make_node("MatMulInteger", ["x", "w"], ["y"])],
               [helper.make_tensor_value_info("x", TensorProto.UINT8, [3, K])],
               [helper.make_tensor_value_info("y", TensorProto.INT32, [3, M])],
               [numpy_helper.from_array(w.astype(np.int8), "w")], 13)
    feeds = {"x": x.astype(np.uint8)}
    want = gemm_acc(x, w)
    assert want.min() < -(1 << 20)  # far outside what saturating 16-bit pair sums can give
    np.testing.assert_array_equal(reference(m, feeds)[0], want)
    np.testing.assert_array_equal(execute(load(m), feeds)["y"], want)

    xi = _extreme(rng, (2, C, H, W), "uint8", "hi")
    wi = _extreme(rng, (M, C, 3, 3), "int8", "lo")
    m = _model([helper.make_node("ConvInteger", ["x", "w"], ["y"], pads=[1, 1, 1, 1])],
               [helper.make_tensor_value_info("x", TensorProto.UINT8, [2, C, H, W])],
               [helper.make_tensor_value_info("y", TensorProto.INT32, [2, M, H, W])],
               [numpy_helper.from_array(wi.astype(np.int8), "w")], 13)
    feeds = {"x": xi.astype(np.uint8)}
    want = conv_acc(xi, wi, 1)
    np.testing.assert_array_equal(reference(m, feeds)[0], want)
    np.testing.assert_array_equal(execute(load(m), feeds)["y"], want)


# --- QOperator: QLinearMatMul / QLinearConv (u8 x s8 -> u8) -----------------------------------
@pytest.mark.parametrize("op", ["QLinearMatMul", "QLinearConv"])
def test_qlinear_ops_exact(op):
    rng = np.random.default_rng(1)
    xs, ws, ys = 2.0 ** -4, 2.0 ** -7, 2.0 ** 4          # ratio 2**-15
    xz, yz = 3, 128
    f32 = lambda v: np.array(v, np.float32)  # noqa: E731
    if op == "QLinearMatMul":
        x, w = _extreme(rng, (3, K), "uint8", "hi"), _extreme(rng, (M, K), "int8", "lo").T
        acc = gemm_acc(x - xz, w)
        node = helper.make_node(op, ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"], ["y"])
        xshape, yshape = [3, K], [3, M]
    else:
        x, w = _extreme(rng, (2, C, H, W), "uint8", "hi"), _extreme(rng, (M, C, 3, 3), "int8", "lo")
        acc = conv_acc(x - xz, w, 1)   # the spec pads with the input zero point: zero after "- xz"
        node = helper.make_node(op, ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"], ["y"], pads=[1, 1, 1, 1])
        xshape, yshape = [2, C, H, W], [2, M, H, W]
    inits = [numpy_helper.from_array(f32(xs), "xs"), numpy_helper.from_array(np.uint8(xz), "xz"),
             numpy_helper.from_array(w.astype(np.int8), "w"), numpy_helper.from_array(f32(ws), "ws"),
             numpy_helper.from_array(np.int8(0), "wz"), numpy_helper.from_array(f32(ys), "ys"),
             numpy_helper.from_array(np.uint8(yz), "yz")]
    m = _model([node], [helper.make_tensor_value_info("x", TensorProto.UINT8, xshape)],
               [helper.make_tensor_value_info("y", TensorProto.UINT8, yshape)], inits, 13)
    feeds = {"x": x.astype(np.uint8)}
    want = requant_spec(acc, -15, yz, "uint8")
    assert np.mean((want > 0) & (want < 255)) > 0.2  # mostly not saturated
    np.testing.assert_array_equal(reference(m, feeds)[0], want)
    np.testing.assert_array_equal(execute(load(m), feeds)["y"], want)


# --- QDQ at every width: Q(x) -> DQ -> Gemm/Conv(DQ(w)) -> [Q] ----------------------------------
WIDTHS = [("uint8", "int8"), ("int8", "int8"), ("uint8", "uint8"), ("uint4", "int4"), ("int4", "int4"),
          ("uint8", "int4"), ("uint2", "int2"), ("int2", "int2"), ("uint8", "int2")]


def _qdq_model(kind, act, wt, w, y_log2=None):
    """x (float) -> QuantizeLinear(act) -> DequantizeLinear -> Gemm/Conv with DequantizeLinear(w)
    [-> QuantizeLinear(act) with scale 2**y_log2]; scales 2**-4 (x), 2**-6 (w)."""
    quantize_output = y_log2 is not None
    opset = 25 if "2" in act + wt else 21
    f = lambda name, v: numpy_helper.from_array(np.array(v, np.float32), name)  # noqa: E731
    inits = [f("xs", 2.0 ** -4), _tensor("xz", np.array(0), act), f("ws", 2.0 ** -6), _tensor("wq", w, wt),
             _tensor("wz", np.array(0), wt)]
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
             helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wd"])]
    if kind == "gemm":
        nodes.append(helper.make_node("Gemm", ["xd", "wd"], ["acc"], transB=1))
        xshape, yshape = ["N", K], ["N", M]
    else:
        nodes.append(helper.make_node("Conv", ["xd", "wd"], ["acc"], pads=[1, 1, 1, 1]))
        xshape, yshape = ["N", C, H, W], ["N", M, H, W]
    out = "acc"
    if quantize_output:
        inits += [f("ys", 2.0 ** y_log2), _tensor("yz", np.array(0), act)]
        nodes.append(helper.make_node("QuantizeLinear", ["acc", "ys", "yz"], ["y"]))
        out = "y"
    ytype = TYPES[act][0] if quantize_output else TensorProto.FLOAT
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, xshape)],
                  [helper.make_tensor_value_info(out, ytype, yshape)], inits, opset)


def _qdq_case(seed, kind, act, wt):
    """(x on the input grid, weights, spec accumulators NCHW, output scale exponent that keeps
    most outputs inside the output type)."""
    rng = np.random.default_rng(seed)
    if kind == "gemm":
        xq, w = _extreme(rng, (3, K), act, "hi"), _extreme(rng, (M, K), wt, "lo")
        acc = gemm_acc(xq, w.T)
    else:
        xq, w = _extreme(rng, (2, C, H, W), act, "hi"), _extreme(rng, (M, C, 3, 3), wt, "lo")
        acc = conv_acc(xq, w, 1)
    y_log2 = int(np.ceil(np.log2(np.abs(acc).max() * 2.0 ** -10 / _lo_hi(act)[1])))
    return (xq * 2.0 ** -4).astype(np.float32), w, acc, y_log2


@pytest.mark.parametrize("kind", ["gemm", "conv"])
@pytest.mark.parametrize("act,wt", WIDTHS, ids=[f"a-{a}-w-{w}" for a, w in WIDTHS])
def test_qdq_exact_at_every_width(kind, act, wt):
    x, w, acc, y_log2 = _qdq_case(2, kind, act, wt)
    if act.endswith("8") and wt.endswith("8"):
        assert np.abs(acc).max() > (1 << 16)  # far past what 16-bit pair sums hold
    feeds = {"x": x}
    # float accumulator output: acc * xs * ws, exact in float32 (|acc| < 2**24)
    m = _qdq_model(kind, act, wt, w)
    want = (acc * 2.0 ** -10).astype(np.float32)
    np.testing.assert_array_equal(reference(m, feeds)[0], want)
    np.testing.assert_array_equal(execute(load(m), feeds)["acc"], want)
    # quantized output: QuantizeLinear(acc * 2**-10 / 2**y_log2), round half to even, saturate
    m = _qdq_model(kind, act, wt, w, y_log2)
    want_q = requant_spec(acc, -10 - y_log2, 0, act)
    lo, hi = _lo_hi(act)
    assert np.mean((want_q > lo) & (want_q < hi)) >= 0.25, "mostly saturated: the case tests little"
    np.testing.assert_array_equal(np.asarray(reference(m, feeds)[0]).astype(np.int64), want_q)
    np.testing.assert_array_equal(np.asarray(execute(load(m), feeds)["y"]).astype(np.int64), want_q)


@pytest.mark.parametrize("kind", ["gemm", "conv"])
@pytest.mark.parametrize("act,wt", [w for w in WIDTHS if "2" not in w[0] + w[1]],
                         ids=[f"a-{a}-w-{w}" for a, w in WIDTHS if "2" not in a + w])
def test_integer_graph_exact(kind, act, wt):
    """The hardware's contract: the imported IntegerGraph computes the same outputs, from the same
    exact accumulators (a power-of-two ratio, so requantization is a pure shift)."""
    x, w, acc, y_log2 = _qdq_case(3, kind, act, wt)
    if kind == "conv":
        acc = acc.transpose(0, 2, 3, 1)   # the IntegerGraph is channels-last
    ig = to_integer_graph(load(_qdq_model(kind, act, wt, w, y_log2)))
    got = execute(ig, quantize_inputs(ig, {"x": x}))[ig.output_specs[0].name]
    np.testing.assert_array_equal(np.asarray(got, np.int64), requant_spec(acc, -10 - y_log2, 0, act))
