"""Shapes and layouts as exporters write them (issue #12, item 2), end to end on corpus models:
Keras/TFLite channels-last CNNs (NHWC input Transpose, Transpose before the flatten, shape
chains), PyTorch view/squeeze models, TFLite int8 models whose input and output are int8.

The trailing Softmax is cut off (onnx.utils.extract_model to its input) until the host tail
takes it. Truth: onnxruntime with every optimization off on the QDQ model ``onnx2hw quantize``
writes (float models), or on the ORIGINAL int8 model (TFLite int8)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnx2hw
from _oracle import run_spec
from _paths import ROOT
from onnx2hw import build_info
from onnx2hw.cli import main
from onnx2hw.flow import integer_graph_of
from onnx2hw.golden.integer import execute_integer
from onnx2hw.ir import UnsupportedError, load
from onnx2hw.layers import InputQuant, IntType, dequantize_outputs, quantize_inputs

CORPUS = ROOT / "corpus"
pytestmark = pytest.mark.filterwarnings("ignore::amaranth.hdl._ir.UnusedElaboratable")


def cut(name: str, out_name: str | None, path) -> str:
    """The corpus model ``name`` up to ``out_name`` (default: the Softmax input), saved at ``path``."""
    src = str(CORPUS / name)
    m = onnx.load(src)
    out_name = out_name or next((n.input[0] for n in m.graph.node if n.op_type == "Softmax"), m.graph.output[0].name)
    onnx.utils.extract_model(src, str(path), [i.name for i in m.graph.input], [out_name], check_model=False)
    c = onnx.load(str(path))
    inferred = onnx.shape_inference.infer_shapes(c)
    known = {v.name: v for v in list(inferred.graph.value_info) + list(inferred.graph.output)}
    c.graph.output[0].CopyFrom(known[out_name])
    if not c.graph.output[0].type.tensor_type.HasField("shape"):  # a computed reshape: Softmax keeps its shape
        c.graph.output[0].type.tensor_type.shape.CopyFrom(m.graph.output[0].type.tensor_type.shape)
    onnx.save(c, str(path))
    return str(path)


def samples(name: str) -> np.ndarray:
    data = "keras_mlp_softmax.npz" if "mlp" in name else \
        "keras_cnn_softmax.npz" if name.startswith(("keras", "tflite")) else "torch_view_squeeze.npz"
    with np.load(CORPUS / data) as d:
        return d["input"].astype(np.float32)


def quantized(name: str, tmp_path) -> tuple[str, np.ndarray]:
    """(QDQ model written by ``onnx2hw quantize`` from the cut float model, its float inputs)."""
    model = cut(name, None, tmp_path / "cut.onnx")
    x = samples(name)
    calib = tmp_path / "calib.npz"
    np.savez(calib, **{onnx.load(model).graph.input[0].name: x})
    out = tmp_path / "qdq.onnx"
    assert main(["quantize", model, "--calib", str(calib), "-o", str(out)]) == 0
    return str(out), x


def golden(model: str, feeds: dict) -> np.ndarray:
    ig = integer_graph_of(load(model))
    return next(iter(dequantize_outputs(ig, execute_integer(ig, quantize_inputs(ig, feeds))).values()))


FLOAT_MODELS = ["keras_cnn_softmax_tf2onnx.onnx", "tflite_cnn_softmax_float.onnx", "keras_mlp_softmax_tf2onnx.onnx",
                "tflite_mlp_softmax_float.onnx", "torch_view_squeeze_ts_dyn.onnx", "torch_view_squeeze_dynamo_dyn.onnx"]


@pytest.mark.parametrize("name", FLOAT_MODELS)
def test_float_exports_quantize_and_match_onnxruntime(name, tmp_path):
    qdq, x = quantized(name, tmp_path)
    ops = {n.op_type for n in onnx.load(qdq).graph.node}
    assert not ops & {"Shape", "Gather", "Concat", "Cast", "Unsqueeze", "Squeeze"}, ops
    inp = onnx.load(qdq).graph.input[0].name
    for batch in (1, 3, 16):
        want = run_spec(qdq, {inp: x[:batch]})[0]
        np.testing.assert_array_equal(golden(qdq, {inp: x[:batch]}), want)


def test_nhwc_input_is_quantized_without_moving_axes(tmp_path):
    qdq, x = quantized("keras_cnn_softmax_tf2onnx.onnx", tmp_path)
    ig = integer_graph_of(load(qdq))
    q = ig.inputs[0]
    assert not q.nchw_to_nhwc and q.model_shape is None and ig.input_specs[0].shape == (16, 16, 3)
    # the integer tensor is the input as it comes (16 x 16 x 3, channels last), quantized elementwise
    codes = q.quantize(x[:2], ig.input_specs[0].shape)
    want = np.clip(np.rint(x[:2] / np.float32(q.scale)).astype(np.int64) + q.zero_point, 0, 255)
    np.testing.assert_array_equal(codes, want)


INT8_MODELS = [("tflite_cnn_softmax_int8.onnx", "sequential_1/dense_1/MatMul;sequential_1/dense_1/BiasAdd"),
               ("tflite_mlp_softmax_int8.onnx", "sequential_1_1/dense_3_1/MatMul;sequential_1_1/dense_3_1/BiasAdd")]


def int8_inputs(model: str, batch: int, seed: int = 0) -> dict:
    vi = onnx.load(model).graph.input[0]
    shape = [batch] + [d.dim_value for d in vi.type.tensor_type.shape.dim[1:]]
    return {vi.name: np.random.default_rng(seed).integers(-128, 128, size=shape).astype(np.int8)}


@pytest.mark.parametrize("name, out", INT8_MODELS)
def test_tflite_int8_model_takes_and_returns_int8(name, out, tmp_path):
    model = cut(name, out, tmp_path / "cut.onnx")   # ends in the int8 tensor the Softmax reads
    ig = integer_graph_of(load(model))
    q = ig.inputs[0]
    assert q.integer_input and not q.nchw_to_nhwc and q.dtype == IntType(8, True)
    assert ig.outputs[0].integer_output
    for batch in (1, 3, 16):
        feeds = int8_inputs(model, batch)
        want = run_spec(model, feeds)[0]
        assert want.dtype == np.int8
        np.testing.assert_array_equal(golden(model, feeds), want)


def test_integer_input_quantizer_passes_codes_and_refuses_floats():
    q = InputQuant("x", 0.5, -3, IntType(8, True), False, integer_input=True)
    x = np.arange(-128, 127, dtype=np.int8)[:120].reshape(2, 60)
    np.testing.assert_array_equal(q.quantize(x, (60,)), x.astype(np.int64))
    with pytest.raises(ValueError, match="integer codes"):
        q.quantize(x.astype(np.float32), (60,))
    narrow = InputQuant("x", 0.5, 0, IntType(4, True), False, integer_input=True)
    with pytest.raises(ValueError, match="outside"):
        narrow.quantize(np.array([[9]], np.int8), (1,))


def test_integer_input_survives_the_build_description(tmp_path):
    model = cut(*INT8_MODELS[1], tmp_path / "cut.onnx")
    ig = integer_graph_of(load(model))
    rec = {"input": {"name": "x", "tensor": "x", "scale": ig.inputs[0].scale, "zero_point": ig.inputs[0].zero_point,
                     "bits": 8, "signed": True, "bipolar": False, "nchw_to_nhwc": False, "shape": [64],
                     "pre": [], "model_shape": None, "narrow": False, "integer_input": True},
           "output": {"name": "y", "scale": 1.0, "zero_point": 0, "nhwc_to_nchw": False, "onnx_dtype": 3,
                      "integer_output": True, "shape": None}}
    iq, _ = build_info.host_converters(rec)
    assert iq.integer_input


def _model_with(nodes, x_shape, y_shape, inits=()):
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)], list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_unsupported_transpose_names_the_node():
    s, z = numpy_helper.from_array(np.float32(0.1), "s"), numpy_helper.from_array(np.uint8(0), "z")
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["d"]),
             helper.make_node("Transpose", ["d"], ["t"], name="swap", perm=[0, 1, 3, 2]),
             helper.make_node("QuantizeLinear", ["t", "s", "z"], ["y8"]),
             helper.make_node("DequantizeLinear", ["y8", "s", "z"], ["y"])]
    model = _model_with(nodes, ["N", 2, 3, 4], ["N", 2, 4, 3], [s, z])
    with pytest.raises(UnsupportedError, match=r"node 'swap' \(Transpose\): Transpose perm \[0, 1, 3, 2\]"):
        integer_graph_of(load(model))


SIM_MODELS = [("keras_cnn_softmax_tf2onnx.onnx", None), ("torch_view_squeeze_ts_dyn.onnx", None),
              ("tflite_cnn_softmax_int8.onnx", INT8_MODELS[0][1])]


@pytest.mark.sim
@pytest.mark.slow
@pytest.mark.parametrize("name, out", SIM_MODELS)
def test_corpus_layouts_simulate_bit_exact(name, out, tmp_path):
    if out is None:
        model, x = quantized(name, tmp_path)
        feeds = {onnx.load(model).graph.input[0].name: x[:16]}
    else:
        model = cut(name, out, tmp_path / "cut.onnx")
        feeds = int8_inputs(model, 16)
    design = onnx2hw.compile(model)
    y = design.simulate(feeds)   # raises MismatchError unless bit-exact against the golden
    np.testing.assert_array_equal(next(iter(y.values())), run_spec(model, feeds)[0])
