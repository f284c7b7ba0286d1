"""Model outputs in the layout the model writes them: a channels-last (Keras through tf2onnx)
graph ends ``Conv -> Relu -> Transpose(NCHW -> NHWC)`` (or, 1-D, ``Squeeze -> Transpose(0, 2,
1)``), and ``Design.golden`` / ``Design.simulate`` return the model's NHWC (NLC) output, in shape
and value: the golden against onnxruntime's spec-exact session on the QDQ models onnx2hw's
post-training quantizer and onnxruntime's quantizer write (the same integers dequantized in
float32 by onnxruntime: within 1e-6 of the output's magnitude), the simulated hardware bit-exact
(``simulate`` raises unless it equals the golden)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

import onnx2hw
from _canon_models import model, w
from _oracle import spec_session
from _quant_models import quantize as ort_quantize
from onnx2hw.quant import ptq


def _keras_conv2d(act=True):
    """tf2onnx's Conv2D(4, 3, padding="same"[, activation="relu"]) on an (N, 6, 5, 3) input."""
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=[0, 3, 1, 2]),
             helper.make_node("Conv", ["t", "W", "b"], ["c"], pads=[1, 1, 1, 1])]
    nodes += [helper.make_node("Relu", ["c"], ["r"])] if act else []
    nodes.append(helper.make_node("Transpose", ["r" if act else "c"], ["y"], perm=[0, 2, 3, 1]))
    return model(nodes, ("x", ["N", 6, 5, 3]), ("y", ["N", 6, 5, 4]), {"W": w(4, 3, 3, 3), "b": w(4)})


def _keras_two_convs():
    """Two Conv2D (3x3 stride 2 same-ReLU, then 1x1) between tf2onnx's layout Transposes."""
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=[0, 3, 1, 2]),
             helper.make_node("Conv", ["t", "W", "b"], ["c"], pads=[0, 0, 1, 1], strides=[2, 2]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Conv", ["r", "W2", "b2"], ["c2"]),
             helper.make_node("Transpose", ["c2"], ["y"], perm=[0, 2, 3, 1])]
    return model(nodes, ("x", ["N", 8, 7, 3]), ("y", ["N", 4, 4, 5]),
                 {"W": w(6, 3, 3, 3), "b": w(6), "W2": w(5, 6, 1, 1), "b2": w(5)})


def _keras_conv1d():
    """tf2onnx's Conv1D(4, 3, padding="same", activation="relu") on an (N, 12, 3) signal:
    Unsqueeze, Transpose to (N, C, 1, L), Conv, Squeeze, Relu, Transpose(0, 2, 1)."""
    nodes = [helper.make_node("Unsqueeze", ["x", "ax1"], ["u"]),
             helper.make_node("Transpose", ["u"], ["t"], perm=[0, 3, 1, 2]),
             helper.make_node("Conv", ["t", "W", "b"], ["c"], pads=[0, 1, 0, 1]),
             helper.make_node("Squeeze", ["c", "ax2"], ["s"]),
             helper.make_node("Relu", ["s"], ["r"]),
             helper.make_node("Transpose", ["r"], ["y"], perm=[0, 2, 1])]
    return model(nodes, ("x", ["N", 12, 3]), ("y", ["N", 12, 4]),
                 {"W": w(4, 3, 1, 3), "b": w(4), "ax1": np.array([1], np.int64), "ax2": np.array([2], np.int64)})


def _keras_causal():
    """tf2onnx's Keras Conv1D(6, 3, padding="causal", dilation_rate=2)-ReLU, Conv1D(4, 2,
    padding="causal") (tests/test_canon_pad_views.py), the model's output (N, 16, 4)."""
    from test_canon_pad_views import _causal
    return _causal()


MODELS = {"conv2d_relu": _keras_conv2d, "conv2d": lambda: _keras_conv2d(act=False), "two_convs": _keras_two_convs,
          "conv1d": _keras_conv1d, "causal_conv1d": _keras_causal}


def _data(m: onnx.ModelProto, n: int, seed: int) -> np.ndarray:
    shape = [d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim[1:]]
    return np.random.default_rng(seed).standard_normal((n, *shape)).astype(np.float32)


def _check(design, qdq, x):
    want = spec_session(qdq).run(None, {"x": x})[0]
    got = design.golden({"x": x})["y"]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6 * np.abs(want).max())


@pytest.mark.parametrize("name", list(MODELS))
def test_golden_output_is_the_models_layout(name):
    m = MODELS[name]()
    x = _data(m, 24, 0)
    design = onnx2hw.compile(m, board="ulx3s", calib={"x": x})
    _check(design, ptq.quantize(m, {"x": x}), x[:8])


@pytest.mark.parametrize("name", ["conv2d_relu", "two_convs"])
def test_golden_of_onnxruntime_qdq(name, tmp_path):
    m = MODELS[name]()
    x = _data(m, 32, 1)
    path = ort_quantize(m, tmp_path, calib=x)
    _check(onnx2hw.compile(path, board="ulx3s"), path, x[:8])


@pytest.mark.sim
@pytest.mark.parametrize("name", ["conv2d_relu", "conv1d", "causal_conv1d"])
def test_simulated_output_is_the_models_layout(name):
    m = MODELS[name]()
    x = _data(m, 16, 2)
    design = onnx2hw.compile(m, board="ulx3s", calib={"x": x})
    got = design.simulate({"x": x[:3]})["y"]   # MismatchError unless bit-exact against the golden
    want = spec_session(ptq.quantize(m, {"x": x})).run(None, {"x": x[:3]})[0]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6 * np.abs(want).max())


def test_keras_causal_conv1d_onnxruntime_qdq(tmp_path):
    """onnxruntime's quantizer writes a ReLU after the Squeeze as a requantization between the
    views and a Dense layer's bias Add apart from its MatMul (both refused by the importers), so
    this model's layers are linear and its Dense has no bias; its Transpose (0, 2, 1) before the
    flatten stays (Q/DQ between them): the signal viewed channels last."""
    from test_canon_pad_views import _causal
    m = _causal(relu=False, dense=True, bias=False)
    x = _data(m, 32, 3)
    path = ort_quantize(m, tmp_path, calib=x)
    design = onnx2hw.compile(path, board="ulx3s")
    _check(design, path, x[:8])
    design.simulate({"x": x[:3]})   # MismatchError unless bit-exact


@pytest.mark.parametrize("dense", [True, False], ids=["dense_head", "signal_output"])
def test_keras_conv1d_transpose_onnxruntime_qdq(dense, tmp_path):
    """Keras Conv1DTranspose(padding="same") as tf2onnx writes it (tests/test_canon_crops.py),
    linear (onnxruntime's quantizer writes a ReLU after the crop as a requantization, refused by
    the importers), quantized by onnxruntime: golden = spec session, simulated bit-exact."""
    from test_canon_crops import _keras_convt1d
    m = _keras_convt1d(relu=False, dense=dense)
    x = _data(m, 32, 4)
    path = ort_quantize(m, tmp_path, calib=x)
    design = onnx2hw.compile(path, board="ulx3s")
    _check(design, path, x[:8])
    design.simulate({"x": x[:3]})   # MismatchError unless bit-exact
