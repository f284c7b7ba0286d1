"""The golden integer executor's fast exact path (issue #13 item 7): convolutions as im2col and one
float BLAS GEMM (float32 below 2**24, float64 below 2**53, int64 above), batched in chunks of
samples.

Truth: an int64 NumPy formula written here from the definition (a multiply-add per kernel tap
with ``np.einsum`` on int64 arrays, which never goes through floating point), and on corpus models
onnxruntime with every optimization off on the QDQ file (tests/_oracle.py).
"""
from __future__ import annotations

import numpy as np
import pytest

from _oracle import spec_session
from _paths import ROOT
from onnx2hw.flow import integer_graph_of
from onnx2hw.golden.host import model_outputs
from onnx2hw.golden.integer import default_chunk, execute_integer
from onnx2hw.ir import load
from onnx2hw.layers import Conv, Dense, IntType, TensorSpec, quantize_inputs
from onnx2hw.layers.types import Requant, acc_bits_for, int_type_for, window_out

CORPUS = ROOT / "corpus"


def conv_int64(x, w, bias, stride, pads, pad_value, group):
    """The convolution's accumulators from the definition, in int64 only: NHWC ``x`` padded with
    ``pad_value``; ``acc[n, i, j, o] = bias[o] + sum over taps (a, b) and the group's channels c of
    w[o, a, b, c] * x[n, i*sh + a, j*sw + b, g(o)*cg + c]``."""
    x = np.asarray(x, np.int64)
    w = np.asarray(w, np.int64)
    t, l, b, r = pads
    xp = np.pad(x, ((0, 0), (t, b), (l, r), (0, 0)), constant_values=pad_value)
    co, kh, kw, cg = w.shape
    n, h, wd, _ = xp.shape
    oh, ow = (h - kh) // stride[0] + 1, (wd - kw) // stride[1] + 1
    cog = co // group
    acc = np.zeros((n, oh, ow, co), np.int64)
    for a in range(kh):
        for bb in range(kw):
            tap = xp[:, a:a + stride[0] * (oh - 1) + 1:stride[0], bb:bb + stride[1] * (ow - 1) + 1:stride[1], :]
            for g in range(group):
                acc[..., g * cog:(g + 1) * cog] += np.einsum(
                    "nhwc,oc->nhwo", tap[..., g * cg:(g + 1) * cg], w[g * cog:(g + 1) * cog, a, bb, :])
    return acc + np.asarray(bias, np.int64)


def make_conv(w, bias, in_type, hw, stride, pads, pad_value, group, act=None, out_type=None):
    co, kh, kw, _ = w.shape
    oh = window_out(hw[0], kh, stride[0], pads[0], pads[2])
    ow = window_out(hw[1], kw, stride[1], pads[1], pads[3])
    acc_bits = acc_bits_for(w, bias, in_type)
    if out_type is None:
        out_type = IntType(min(acc_bits, 32), True) if act is None else IntType(8, False)  # nominal: not validated
    w_type = int_type_for(int(w.min()), int(w.max()))
    return Conv("c", ("x",), TensorSpec("y", (oh, ow, co), out_type), w, bias, stride, pads, pad_value, group,
                (1, 1), in_type, w_type, acc_bits, act)


# name: (in bits, in signed, w bits, cin, cout, group, kernel, stride, pads)
CASES = {
    "u8xs8_3x3": (8, False, 8, 5, 7, 1, (3, 3), (1, 1), (1, 1, 1, 1)),
    "s8_stride2_asym_pads": (8, True, 8, 4, 6, 1, (3, 2), (2, 2), (0, 1, 2, 0)),
    "depthwise": (8, False, 8, 6, 6, 6, (3, 3), (1, 1), (1, 1, 1, 1)),
    "depthwise_mult2": (8, True, 4, 3, 6, 3, (3, 3), (2, 1), (1, 0, 1, 1)),
    "grouped": (4, False, 4, 8, 6, 2, (3, 3), (1, 1), (1, 1, 1, 1)),
    "pointwise_s16": (16, True, 8, 9, 4, 1, (1, 1), (1, 1), (0, 0, 0, 0)),
    "wide_float64": (24, True, 16, 4, 3, 1, (3, 3), (1, 1), (1, 1, 1, 1)),
    "wide_int64": (31, True, 24, 4, 3, 1, (3, 3), (1, 1), (1, 1, 1, 1)),
    "wide_int64_depthwise": (31, True, 24, 4, 4, 4, (3, 3), (1, 1), (1, 1, 1, 1)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_conv_reference_equals_int64_formula(case):
    """Random layers over their whole input range (extremes included), padding with a value
    other than 0, every path (float32, float64, int64; dense, depthwise, grouped)."""
    ib, signed, wb, cin, cout, group, k, stride, pads = CASES[case]
    rng = np.random.default_rng(sorted(CASES).index(case))
    in_type = IntType(ib, signed)
    wlo, whi = -(1 << (wb - 1)), (1 << (wb - 1)) - 1
    w = rng.integers(wlo, whi, size=(cout, *k, cin // group), endpoint=True)
    w.flat[:2] = (wlo, whi)
    bias = rng.integers(-1000, 1000, size=cout)
    x = rng.integers(in_type.lo, in_type.hi, size=(5, 7, 6, cin), endpoint=True)
    x[0] = in_type.hi
    x[1] = in_type.lo
    pad_value = int(rng.integers(in_type.lo, in_type.hi, endpoint=True))
    layer = make_conv(w, bias, in_type, (7, 6), stride, pads, pad_value, group)
    got = layer.reference(x)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, conv_int64(x, w, bias, stride, pads, pad_value, group))


@pytest.mark.parametrize("k", [518, 519, 1 << 15])
def test_conv_sums_at_the_float_limits_are_exact(k):
    """A 1x1 convolution over ``k`` channels of 255 * 127 (and sums just under that, with odd
    values): 518 terms stay below 2**24 (float32 exact), 519 do not (32385 * 519 is odd and above
    2**24, so float32 could not hold it; float64 must run)."""
    x = np.full((3, 1, 2, k), 255, np.int64)
    x[1, 0, 1, ::3] = 254
    x[2] = np.random.default_rng(k).integers(0, 255, size=(1, 2, k), endpoint=True)
    w = np.full((2, 1, 1, k), 127, np.int64)
    w[1, 0, 0, ::7] = 125
    bias = np.array([1, -3])
    layer = make_conv(w, bias, IntType(8, False), (1, 2), (1, 1), (0, 0, 0, 0), 0, 1)
    want = conv_int64(x, w, bias, (1, 1), (0, 0, 0, 0), 0, 1)
    np.testing.assert_array_equal(layer.reference(x), want)
    assert want[0, 0, 0, 0] == 255 * 127 * k + 1


def test_conv_that_would_overflow_int64_raises():
    w = np.full((1, 3, 3, 4), (1 << 29) - 1, np.int64)
    layer = make_conv(w, np.zeros(1, np.int64), IntType(32, True), (4, 4), (1, 1), (1, 1, 1, 1), 0, 1,
                      out_type=IntType(32, True))
    with pytest.raises(OverflowError):
        layer.reference(np.full((1, 4, 4, 4), (1 << 31) - 1, np.int64))


def test_conv_with_requant_equals_int64_formula():
    """The activation after the fast accumulator: round-half-up multiply-and-shift, written here."""
    rng = np.random.default_rng(7)
    w = rng.integers(-128, 127, size=(8, 3, 3, 4), endpoint=True)
    bias = rng.integers(-500, 500, size=8)
    mult, shift, zp = rng.integers(1 << 20, 1 << 24, size=8), 30, 3
    act = Requant(mult, np.array([shift]), zp, 0, 255)
    layer = make_conv(w, bias, IntType(8, False), (9, 9), (2, 2), (1, 1, 1, 1), 17, 1, act=act)
    x = rng.integers(0, 255, size=(6, 9, 9, 4), endpoint=True)
    acc = conv_int64(x, w, bias, (2, 2), (1, 1, 1, 1), 17, 1)
    want = np.clip(((acc * mult + (1 << (shift - 1))) >> shift) + zp, 0, 255)
    np.testing.assert_array_equal(layer.reference(x), want)


# (in bits, in signed, w bits, k): float32, float64 and int64 bounds
DENSE = [(8, False, 8, 64), (8, True, 2, 600), (16, True, 16, 100), (28, True, 28, 50), (1, False, 1, 7)]


@pytest.mark.parametrize("ib,signed,wb,k", DENSE)
def test_dense_reference_equals_int64_formula(ib, signed, wb, k):
    rng = np.random.default_rng(ib * 1000 + k)
    in_type = IntType(ib, signed)
    wlo, whi = (-(1 << (wb - 1)), (1 << (wb - 1)) - 1) if wb > 1 else (0, 1)
    w = rng.integers(wlo, whi, size=(9, k), endpoint=True)
    w[0] = whi
    bias = rng.integers(-99, 99, size=9)
    shape = (2, k // 2) if k % 2 == 0 else (k,)     # an image-like input is flattened in order
    x = rng.integers(in_type.lo, in_type.hi, size=(6, *shape), endpoint=True)
    x[0] = in_type.hi
    acc_bits = acc_bits_for(w, bias, in_type)
    layer = Dense("d", ("x",), TensorSpec("y", (9,), IntType(min(acc_bits, 32), True)), w, bias, in_type,
                  int_type_for(int(w.min()), int(w.max())), acc_bits, None)
    want = np.einsum("nk,mk->nm", x.reshape(6, k).astype(np.int64), w.astype(np.int64)) + bias
    got = layer.reference(x)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, want)
    assert layer.reference(x[:0]).shape == (0, 9)


# ------------------------------------------------------------------ whole models, chunked

QDQ_MODELS = {"ort_resnet_qdq.onnx": "torch_resnet.npz", "ort_dscnn_qdq_perchannel.onnx": "torch_dscnn.npz",
              "ort_cnn_softmax_qdq.onnx": "torch_cnn_softmax.npz"}


@pytest.mark.parametrize("name", sorted(QDQ_MODELS))
@pytest.mark.parametrize("chunk", [None, 1, 5])
def test_corpus_model_chunked_matches_onnxruntime(name, chunk):
    """The integer graph of a QDQ corpus file run in chunks of samples (5 does not divide the 32
    samples) and through the host tail == onnxruntime's spec session on the file (float outputs
    within 1e-6 of the largest magnitude, as tests/test_corpus.py compares); the kept
    intermediates hold every sample, and every Conv layer's output is its activation of the
    int64 formula's accumulators on the model's real input to it."""
    with np.load(CORPUS / QDQ_MODELS[name]) as d:
        x = d["input"].astype(np.float32)
    ig = integer_graph_of(load(str(CORPUS / name)))
    feeds = quantize_inputs(ig, {"input": x})
    env = execute_integer(ig, feeds, chunk=chunk, keep_intermediates=True)
    got = model_outputs(ig, {s.name: env[s.name] for s in ig.output_specs})
    want = spec_session(str(CORPUS / name)).run(None, {"input": x})
    assert list(got) == ["output"]
    tol = 1e-6 * float(np.abs(want[0]).max())
    np.testing.assert_allclose(got["output"], want[0], rtol=0, atol=tol)
    assert all(len(v) == len(x) for v in env.values())
    convs = [layer for layer in ig.layers if isinstance(layer, Conv)]
    assert convs
    for layer in convs:
        acc = conv_int64(env[layer.inputs[0]], layer.weights, layer.bias, layer.stride, layer.pads,
                         layer.pad_value, layer.group)
        np.testing.assert_array_equal(env[layer.output.name], layer.act(acc), err_msg=layer.name)


def test_empty_batch_and_chunk_larger_than_batch():
    ig = integer_graph_of(load(str(CORPUS / "ort_cnn_softmax_qdq.onnx")))
    spec, out = ig.input_specs[0], ig.output_specs[0]
    assert execute_integer(ig, {spec.name: np.zeros((0, *spec.shape), np.int64)}, chunk=4)[out.name].shape == \
        (0, *out.shape)
    x = np.zeros((3, *spec.shape), np.int64)
    assert execute_integer(ig, {spec.name: x}, chunk=1000)[out.name].shape == (3, *out.shape)


@pytest.mark.parametrize("chunk", [0, -1, 2.5, True])
def test_bad_chunk_is_refused(chunk):
    ig = integer_graph_of(load(str(CORPUS / "ort_cnn_softmax_qdq.onnx")))
    with pytest.raises(ValueError, match="chunk"):
        execute_integer(ig, {ig.input_specs[0].name: np.zeros((2, *ig.input_specs[0].shape), np.int64)},
                        chunk=chunk)


def test_default_chunk_bounds_working_memory():
    """ResNet-8 (largest tensor 32x32x16 per sample) runs in chunks of a few dozen samples; a tiny
    model in large ones."""
    big = integer_graph_of(load(str(ROOT / "benchmarks/mlperf_tiny/ic_resnet8.onnx")),
                           {"input": np.load(ROOT / "benchmarks/mlperf_tiny/ic_resnet8.npz")["input"][:8]})
    small = integer_graph_of(load(str(CORPUS / "ort_cnn_softmax_qdq.onnx")))
    assert 8 <= default_chunk(big) <= 128
    assert default_chunk(small) > default_chunk(big)
