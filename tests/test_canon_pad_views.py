"""onnx2hw.canon.pad_views: a zero Pad moves down through views, Transposes and Q/DQ pairs to the
Conv or AveragePool it pads (which then takes it as its own padding); onnxruntime with every
optimization off computes the same function from both graphs. End to end: Keras
``Conv1D(padding="causal")`` as tf2onnx writes it (the Pad on the ``(N, L, C)`` tensor, then
``ExpandDims`` and the Transpose to NCHW; the next layer's Pad on ``(N, C, L)`` before its
``ExpandDims``), quantized by onnx2hw's post-training quantizer (onnxruntime's quantizer: in
tests/test_output_layout.py): the golden
against onnxruntime's spec session on the QDQ model (the same integers dequantized in float32:
within 1e-6 of the output's magnitude), the hardware simulated bit-exact."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper as h

import onnx2hw
from _canon_models import assert_same_function, model, ops, w
from _oracle import spec_session
from onnx2hw.canon import canonicalize
from onnx2hw.canon.pad_views import pads_through_views
from onnx2hw.canon.pads import pads_into_windows
from onnx2hw.ir import load
from onnx2hw.quant import ptq


def _i64(*v):
    return np.array(v, np.int64)


def _causal(relu=True, dense=False, bias=True):
    """tf2onnx's Keras model: Conv1D(6, 3, padding="causal", dilation_rate=2)[-ReLU], Conv1D(4, 2,
    padding="causal"), then the output (N, 16, 4) or Flatten + Dense(5[, use_bias=False]), on an
    (N, 16, 3) input."""
    nodes = [h.make_node("Pad", ["x", "p1"], ["xp"]),
             h.make_node("Unsqueeze", ["xp", "ax1"], ["u"]),
             h.make_node("Transpose", ["u"], ["t"], perm=[0, 3, 1, 2]),
             h.make_node("Conv", ["t", "W1"], ["c1"], dilations=[1, 2], kernel_shape=[1, 3], pads=[0, 0, 0, 0]),
             h.make_node("Squeeze", ["c1", "ax2"], ["s1"])]
    nodes += [h.make_node("Relu", ["s1"], ["r1"])] if relu else [h.make_node("Identity", ["s1"], ["r1"])]
    nodes += [h.make_node("Pad", ["r1", "p2"], ["rp"]),
              h.make_node("Unsqueeze", ["rp", "ax2"], ["u2"]),
              h.make_node("Conv", ["u2", "W2", "b2"], ["c2"], kernel_shape=[1, 2]),
              h.make_node("Squeeze", ["c2", "ax2"], ["s2"]),
              h.make_node("Transpose", ["s2"], ["y" if not dense else "o"], perm=[0, 2, 1])]
    inits = {"p1": _i64(0, 4, 0, 0, 0, 0), "p2": _i64(0, 0, 1, 0, 0, 0), "ax1": _i64(1), "ax2": _i64(2),
             "W1": w(6, 3, 1, 3), "W2": w(4, 6, 1, 2), "b2": w(4)}
    if dense:
        nodes += [h.make_node("Reshape", ["o", "flat"], ["f"]),
                  h.make_node("MatMul", ["f", "Wd"], ["m" if bias else "y"])]
        nodes += [h.make_node("Add", ["m", "bd"], ["y"])] if bias else []
        inits.update(flat=_i64(-1, 64), Wd=w(64, 5), bd=w(5))
    return model(nodes, ("x", ["N", 16, 3]), ("y", ["N", 5] if dense else ["N", 16, 4]), inits)


def _zero_padding_2d():
    """Keras ZeroPadding2D((1, 2)) on the NHWC tensor, the Transpose to NCHW, Conv 3x3."""
    nodes = [h.make_node("Pad", ["x", "p"], ["xp"]), h.make_node("Transpose", ["xp"], ["t"], perm=[0, 3, 1, 2]),
             h.make_node("Conv", ["t", "W", "b"], ["c"]), h.make_node("Transpose", ["c"], ["y"], perm=[0, 2, 3, 1])]
    return model(nodes, ("x", ["N", 5, 6, 3]), ("y", ["N", 5, 8, 4]),
                 {"p": _i64(0, 1, 2, 0, 0, 1, 2, 0), "W": w(4, 3, 3, 3), "b": w(4)})


def _pad_view_pool(pads, shape=None):
    """A Pad of (N, 6, 10), a Reshape to ``shape`` (default: (N, 2, 3, 1, L)), then to (N, 6, 1, L),
    AveragePool (1, 3) counting padding."""
    nodes = [h.make_node("Relu", ["x"], ["r"]), h.make_node("Pad", ["r", "p"], ["rp"]),
             h.make_node("Reshape", ["rp", "s1"], ["v1"]), h.make_node("Reshape", ["v1", "s2"], ["v2"]),
             h.make_node("AveragePool", ["v2"], ["y"], kernel_shape=[1, 3], count_include_pad=1)]
    n = 10 + pads[2] + pads[5]
    return model(nodes, ("x", ["N", 6, 10]), ("y", ["N", 6, 1, n - 2]),
                 {"p": _i64(*pads), "s1": _i64(*(shape or (-1, 2, 3, 1, n))), "s2": _i64(-1, 6, 1, n)})


def _qdq_chain():
    """onnxruntime's QDQ form: DQ -> Pad -> Q -> DQ -> Unsqueeze -> Q -> DQ -> Transpose -> Q -> DQ -> Conv."""
    s, z = np.array(0.02, np.float32), np.array(3, np.uint8)
    qdq = ["s", "z"]
    nodes = [h.make_node("QuantizeLinear", ["x"] + qdq, ["q0"]), h.make_node("DequantizeLinear", ["q0"] + qdq, ["d0"]),
             h.make_node("Pad", ["d0", "p"], ["xp"]),
             h.make_node("QuantizeLinear", ["xp"] + qdq, ["q1"]), h.make_node("DequantizeLinear", ["q1"] + qdq, ["d1"]),
             h.make_node("Unsqueeze", ["d1", "ax"], ["u"]),
             h.make_node("QuantizeLinear", ["u"] + qdq, ["q2"]), h.make_node("DequantizeLinear", ["q2"] + qdq, ["d2"]),
             h.make_node("Transpose", ["d2"], ["t"], perm=[0, 3, 1, 2]),
             h.make_node("QuantizeLinear", ["t"] + qdq, ["q3"]), h.make_node("DequantizeLinear", ["q3"] + qdq, ["d3"]),
             h.make_node("Conv", ["d3", "W"], ["y"], kernel_shape=[1, 3])]
    return model(nodes, ("x", ["N", 12, 3]), ("y", ["N", 4, 1, 12]),
                 {"s": s, "z": z, "p": _i64(0, 2, 0, 0, 0, 0), "ax": _i64(1), "W": w(4, 3, 1, 3)})


@pytest.mark.parametrize("make", [_causal, lambda: _causal(dense=True), _zero_padding_2d, _qdq_chain],
                         ids=["causal", "causal_dense", "zero_padding_2d", "qdq"])
def test_pad_reaches_its_conv(make):
    m = make()
    g = canonicalize(load(m))
    assert "Pad" not in ops(g)
    assert_same_function(m, g)
    moved = pads_through_views(load(m))
    assert_same_function(m, moved)
    assert ops(pads_into_windows(moved)).count("Pad") == 0


def test_qdq_pair_of_the_pad_goes():
    g = pads_through_views(load(_qdq_chain()))
    assert ops(g).count("QuantizeLinear") == 3 and ops(g).count("DequantizeLinear") == 3


@pytest.mark.parametrize("pads", [(0, 0, 2, 0, 0, 1), (0, 0, 0, 0, 0, 2)])
def test_pad_through_views_that_keep_its_axis(pads):
    m = _pad_view_pool(pads)
    g = canonicalize(load(m))
    assert "Pad" not in ops(g)
    assert_same_function(m, g)


@pytest.mark.parametrize("case", ["splits_padded_axis", "nonzero", "max_pool", "shared"])
def test_pad_stays(case):
    """A view splitting the padded axis, a Pad whose value is not zero, a MaxPool (it pads with
    the lowest value, not zeros) or a view with a second reader: the Pad does not move."""
    if case == "splits_padded_axis":
        m = _pad_view_pool((0, 0, 1, 0, 0, 1), shape=(-1, 6, 2, 6))
    else:
        nodes = [h.make_node("Pad", ["x", "p"] + (["v"] if case == "nonzero" else []), ["xp"]),
                 h.make_node("Unsqueeze", ["xp", "ax"], ["u"]),
                 h.make_node("Transpose", ["u"], ["t"], perm=[0, 3, 1, 2])]
        if case == "max_pool":
            nodes.append(h.make_node("MaxPool", ["t"], ["y"], kernel_shape=[1, 3]))
        elif case == "shared":
            nodes += [h.make_node("Conv", ["t", "W"], ["c"], kernel_shape=[1, 3]),
                      h.make_node("Transpose", ["u"], ["t2"], perm=[0, 3, 1, 2]),
                      h.make_node("Conv", ["t2", "W"], ["c2"], kernel_shape=[1, 3]),
                      h.make_node("Add", ["c", "c2"], ["y"])]
        else:
            nodes.append(h.make_node("Conv", ["t", "W"], ["y"], kernel_shape=[1, 3]))
        m = model(nodes, ("x", ["N", 12, 3]), ("y", ["N", 3 if case == "max_pool" else 4, 1, 12]),
                  {"p": _i64(0, 2, 0, 0, 0, 0), "ax": _i64(1), "v": np.array(0.5, np.float32), "W": w(4, 3, 1, 3)})
    assert ops(pads_through_views(load(m))) == ops(load(m))
    assert_same_function(m, canonicalize(load(m)))


# ---- end to end ----------------------------------------------------------------------------------

def _data(shape, n, seed):
    return np.random.default_rng(seed).standard_normal((n, *shape)).astype(np.float32)


def _golden_is_the_qdq_model(design, qdq, x):
    want = spec_session(qdq).run(None, {"x": x})[0]
    got = design.golden({"x": x})["y"]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6 * np.abs(want).max())


def test_keras_causal_conv1d_from_float():
    m = _causal(dense=True)
    x = _data((16, 3), 32, 0)
    design = onnx2hw.compile(m, board="ulx3s", calib={"x": x})
    assert [s.op for s in design.pipeline.stages].count("conv") >= 2
    _golden_is_the_qdq_model(design, ptq.quantize(m, {"x": x}), x[:8])


@pytest.mark.sim
def test_keras_causal_conv1d_simulates_bit_exact():
    x = _data((16, 3), 16, 2)
    design = onnx2hw.compile(_causal(dense=True), board="ulx3s", calib={"x": x})
    design.simulate({"x": x[:3]})   # MismatchError unless bit-exact against the golden
