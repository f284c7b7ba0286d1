"""Squeeze-and-excitation gates made of Gemm/Linear (Dense) layers: the gate is a vector ``(N, C)``
viewed as ``(N, C, 1, 1)`` (PyTorch ``nn.Linear`` + ``view``) or ``(N, 1, 1, C)`` (Keras ``Dense`` +
``Reshape`` through tf2onnx, channels-last between Transposes) before the Mul with the feature map.
Truth: onnxruntime's spec session on the QDQ model the post-training quantizer writes; simulated
hardware bit-exact against the golden."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnx2hw
from _oracle import spec_session
from _quant_models import compare_with_ort
from onnx2hw.ir import ModelError, load
from onnx2hw.layers.mul import Mul
from onnx2hw.quant import ptq, to_integer_graph

pytestmark = pytest.mark.filterwarnings("ignore::amaranth.hdl._ir.UnusedElaboratable")

C, R, H = 8, 4, 6
RNG = np.random.default_rng(36)
W0 = RNG.normal(0, 0.4, (C, 3, 3, 3)).astype(np.float32)
B0 = RNG.normal(0, 0.1, C).astype(np.float32)
F1, B1 = RNG.normal(0, 0.5, (R, C)).astype(np.float32), RNG.normal(0, 0.1, R).astype(np.float32)
F2, B2 = RNG.normal(0, 0.5, (C, R)).astype(np.float32), RNG.normal(0, 0.1, C).astype(np.float32)
W3 = RNG.normal(0, 0.3, (4, C, 1, 1)).astype(np.float32)


def _model(nodes, inits, x_shape, y_shape):
    g = helper.make_graph(nodes, "se", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", *x_shape])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", *y_shape])],
                          [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def _torch_se():
    """Conv/Relu -> f; GlobalAveragePool -> Flatten -> Gemm -> Relu -> Gemm -> HardSigmoid ->
    Reshape (N, C, 1, 1) -> Mul(f, gate) -> 1x1 Conv (torch's nn.Linear gate and ``view``)."""
    nodes = [helper.make_node("Conv", ["x", "w0", "b0"], ["c"], name="conv", kernel_shape=[3, 3], pads=[1] * 4),
             helper.make_node("Relu", ["c"], ["f"], name="relu0"),
             helper.make_node("GlobalAveragePool", ["f"], ["p"], name="gap"),
             helper.make_node("Flatten", ["p"], ["pf"], name="flatten"),
             helper.make_node("Gemm", ["pf", "f1", "b1"], ["h"], name="fc1", transB=1),
             helper.make_node("Relu", ["h"], ["hr"], name="relu1"),
             helper.make_node("Gemm", ["hr", "f2", "b2"], ["e"], name="fc2", transB=1),
             helper.make_node("HardSigmoid", ["e"], ["g"], name="hsig", alpha=1 / 6, beta=0.5),
             helper.make_node("Reshape", ["g", "shape"], ["g4"], name="view"),
             helper.make_node("Mul", ["f", "g4"], ["m"], name="gate"),
             helper.make_node("Conv", ["m", "w3"], ["y"], name="proj", kernel_shape=[1, 1])]
    inits = {"w0": W0, "b0": B0, "f1": F1, "b1": B1, "f2": F2, "b2": B2, "w3": W3,
             "shape": np.array([-1, C, 1, 1], np.int64)}
    return _model(nodes, inits, (3, H, H), (4, H, H))


def _keras_se():
    """tf2onnx 1.17's form (opset 13) of the Keras block ``Conv2D(relu) -> GlobalAveragePooling2D ->
    Dense(relu) -> Dense(hard_sigmoid) -> Reshape((1, 1, C)) -> Multiply -> Conv2D(1x1)``: its
    transpose optimizer leaves the map NCHW up to the gate, which it multiplies channels-last:
    Transpose -> Conv -> Relu -> GlobalAveragePool -> Squeeze -> MatMul -> Relu -> MatMul -> Add
    (bias + 3) -> Clip(0, 6) -> Mul(1/6) -> Reshape (N, 1, 1, C); Transpose(map) to NHWC -> Mul ->
    Transpose -> 1x1 Conv (the model output is taken NCHW, before tf2onnx's last Transpose)."""
    nodes = [helper.make_node("Transpose", ["x"], ["xt"], name="to_nchw", perm=[0, 3, 1, 2]),
             helper.make_node("Conv", ["xt", "w0", "b0"], ["c"], name="conv", kernel_shape=[3, 3], pads=[1] * 4),
             helper.make_node("Relu", ["c"], ["f"], name="relu0"),
             helper.make_node("GlobalAveragePool", ["f"], ["p"], name="gap"),
             helper.make_node("Squeeze", ["p", "axes"], ["ps"], name="squeeze"),
             helper.make_node("MatMul", ["ps", "f1t"], ["h"], name="fc1"),
             helper.make_node("Relu", ["h"], ["hr"], name="relu1"),
             helper.make_node("MatMul", ["hr", "f2t"], ["e0"], name="fc2"),
             helper.make_node("Add", ["e0", "b2"], ["e"], name="fc2_bias"),
             helper.make_node("Clip", ["e", "zero", "six"], ["e6"], name="relu6"),
             helper.make_node("Mul", ["e6", "sixth"], ["g"], name="truediv"),
             helper.make_node("Transpose", ["f"], ["fh"], name="map_nhwc", perm=[0, 2, 3, 1]),
             helper.make_node("Reshape", ["g", "shape"], ["g4"], name="view"),
             helper.make_node("Mul", ["fh", "g4"], ["m"], name="gate"),
             helper.make_node("Transpose", ["m"], ["mt"], name="to_nchw2", perm=[0, 3, 1, 2]),
             helper.make_node("Conv", ["mt", "w3"], ["y"], name="proj", kernel_shape=[1, 1])]
    inits = {"w0": W0, "b0": B0, "axes": np.array([2, 3], np.int64), "f1t": F1.T.copy(), "f2t": F2.T.copy(),
             "b2": B2 + np.float32(3), "zero": np.float32(0), "six": np.float32(6), "sixth": np.float32(1 / 6),
             "w3": W3, "shape": np.array([-1, 1, 1, C], np.int64)}
    return _model(nodes, inits, (H, H, 3), (4, H, H))


def _vector_into_conv():
    """A gate vector viewed as a 1x1 image read by a 1x1 Conv (not a Mul)."""
    nodes = [helper.make_node("Conv", ["x", "w0", "b0"], ["c"], name="conv", kernel_shape=[3, 3], pads=[1] * 4),
             helper.make_node("Relu", ["c"], ["f"], name="relu0"),
             helper.make_node("GlobalAveragePool", ["f"], ["p"], name="gap"),
             helper.make_node("Flatten", ["p"], ["pf"], name="flatten"),
             helper.make_node("Gemm", ["pf", "f1", "b1"], ["h"], name="fc1", transB=1),
             helper.make_node("Relu", ["h"], ["hr"], name="relu1"),
             helper.make_node("Reshape", ["hr", "shape"], ["h4"], name="view"),
             helper.make_node("Conv", ["h4", "w"], ["y"], name="proj", kernel_shape=[1, 1])]
    inits = {"w0": W0, "b0": B0, "f1": F1, "b1": B1, "w": W3[:, :R], "shape": np.array([-1, R, 1, 1], np.int64)}
    return _model(nodes, inits, (3, H, H), (4, 1, 1))


def _squared_gate():
    """The torch form with the viewed gate squared before the product."""
    m = _torch_se()
    gate = next(n for n in m.graph.node if n.name == "gate")
    gate.input[1] = "g4s"
    m.graph.node.insert(list(m.graph.node).index(gate), helper.make_node("Mul", ["g4", "g4"], ["g4s"], name="square"))
    return m


MODELS = {"torch": (_torch_se, (3, H, H)), "keras": (_keras_se, (H, H, 3))}


def _data(shape, n, seed):
    return np.random.default_rng(seed).standard_normal((n, *shape)).astype(np.float32)


@pytest.mark.parametrize("form", sorted(MODELS))
def test_linear_se_gate_golden_is_the_qdq_model(form):
    make, shape = MODELS[form]
    calib = _data(shape, 64, 0)
    design = onnx2hw.compile(make(), board="ulx3s", calib={"x": calib})
    gates = [lay for lay in design.integer.layers if isinstance(lay, Mul) and lay.product]
    assert len(gates) == 1
    x = _data(shape, 16, 1)
    want = spec_session(ptq.quantize(make(), {"x": calib})).run(None, {"x": x})[0]
    got = design.golden({"x": x})["y"]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6 * np.abs(want).max())


@pytest.mark.sim
@pytest.mark.parametrize("form", sorted(MODELS))
def test_linear_se_gate_simulates_bit_exact(form):
    make, shape = MODELS[form]
    design = onnx2hw.compile(make(), board="ulx3s", calib={"x": _data(shape, 64, 0)})
    design.simulate({"x": _data(shape, 3, 2)})   # MismatchError unless bit-exact against the golden


def test_dense_vector_viewed_as_a_one_pixel_image_feeds_a_conv():
    """A dense layer's vector viewed as ``(R, 1, 1)`` and read by a Conv is that one-pixel image
    (the dense layer's tensor holds it): the golden equals onnxruntime on the QDQ model."""
    x = _data((3, H, H), 64, 0)
    q = ptq.quantize(_vector_into_conv(), {"x": x})
    g = to_integer_graph(load(q))
    assert next(layer for layer in g.layers if layer.name == "fc1").output.shape == (1, 1, R)
    assert compare_with_ort(q, g, x[:16]) == (1.0, 0.0)


@pytest.mark.parametrize("make,c,reader", [(_squared_gate, C, "'square' \\(Mul\\)")])
def test_vector_viewed_as_an_image_read_otherwise_is_refused_by_name(make, c, reader):
    """The view of a vector no dense layer makes keeps the vector's tensor (no pixel axes): a Mul
    whose result keeps its shape (the square of a table's gate: not a gate over a larger tensor)
    is refused at the view in one line."""
    q = ptq.quantize(make(), {"x": _data((3, H, H), 64, 0)})
    want = (rf"^node 'view' \(Reshape\): a vector \({c},\) viewed as \({c}, 1, 1\) is only supported as the "
            rf"per-channel gate of a Mul, not read by node {reader}$")
    with pytest.raises(ModelError, match=want):
        to_integer_graph(load(q))
