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
from onnx2hw.ir import ModelError, UnsupportedError, load
from onnx2hw.ir.simplify import simplify, to_model
from onnx2hw.layers import AvgPool, InputQuant, IntType, dequantize_outputs, quantize_inputs
from onnx2hw.layers.types import TensorSpec, Thresholds
from onnx2hw.quant.ptq import quantize

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
    (iq,), _ = build_info.host_converters(rec)
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


# ---- Keras Conv1D and one-channel NHWC inputs as tf2onnx writes them; float32 pair means -----------

def _init(name, a):
    return numpy_helper.from_array(np.asarray(a), name)


def _shape(name, *dims):
    return _init(name, np.asarray(dims, np.int64))


def keras_conv1d_model(bias_varies: bool = False) -> onnx.ModelProto:
    """Keras ``Conv1D(6, 3, padding="same") -> MaxPooling1D(2) -> Flatten -> Dense(4)`` on an
    ``(N, 12, 3)`` signal as tf2onnx writes it: ExpandDims (Reshape) and Transpose to NCHW, the
    conv squeezed back to ``(N, 6, 12)`` for its BiasAdd and ReLU, expanded again for the pool,
    then Transpose to channels-last before the flatten."""
    rng = np.random.default_rng(5)
    bias = rng.normal(0, 0.2, (1, 6, 12 if bias_varies else 1)).astype(np.float32)
    inits = [_shape("s_expand", -1, 1, 12, 3), _init("w", rng.normal(0, 0.4, (6, 3, 1, 3)).astype(np.float32)),
             _shape("s_squeeze", -1, 6, 12), _init("b", bias), _shape("s_pool", -1, 6, 1, 12),
             _shape("s_flat3", -1, 6, 6), _shape("s_flat", -1, 36),
             _init("wd", rng.normal(0, 0.3, (4, 36)).astype(np.float32)),
             _init("bd", rng.normal(0, 0.1, (4,)).astype(np.float32))]
    nodes = [helper.make_node("Reshape", ["x", "s_expand"], ["e"], name="expand"),
             helper.make_node("Transpose", ["e"], ["t"], perm=[0, 3, 1, 2], name="to_nchw"),
             helper.make_node("Conv", ["t", "w"], ["c"], kernel_shape=[1, 3], pads=[0, 1, 0, 1], name="conv"),
             helper.make_node("Reshape", ["c", "s_squeeze"], ["cs"], name="squeeze"),
             helper.make_node("Add", ["cs", "b"], ["cb"], name="bias_add"),
             helper.make_node("Relu", ["cb"], ["r"], name="relu"),
             helper.make_node("Reshape", ["r", "s_pool"], ["re"], name="expand_pool"),
             helper.make_node("MaxPool", ["re"], ["p"], kernel_shape=[1, 2], strides=[1, 2], name="pool"),
             helper.make_node("Reshape", ["p", "s_flat3"], ["ps"], name="squeeze_pool"),
             helper.make_node("Transpose", ["ps"], ["pt"], perm=[0, 2, 1], name="to_nwc"),
             helper.make_node("Reshape", ["pt", "s_flat"], ["f"], name="flatten"),
             helper.make_node("Gemm", ["f", "wd", "bd"], ["y"], transB=1, name="dense")]
    return _model_with(nodes, ["N", 12, 3], ["N", 4], inits)


def one_channel_nhwc_model() -> onnx.ModelProto:
    """A one-channel ``(N, 6, 5, 1)`` image whose NHWC -> NCHW Transpose tf2onnx wrote as a
    Reshape to ``(N, 1, 6, 5)``, a Conv + ReLU, then Transpose to NHWC and flatten -> Dense(3)."""
    rng = np.random.default_rng(6)
    inits = [_shape("s_nchw", -1, 1, 6, 5), _init("w", rng.normal(0, 0.5, (4, 1, 3, 3)).astype(np.float32)),
             _init("b", rng.normal(0, 0.1, (4,)).astype(np.float32)), _shape("s_flat", -1, 120),
             _init("wd", rng.normal(0, 0.2, (3, 120)).astype(np.float32)),
             _init("bd", rng.normal(0, 0.1, (3,)).astype(np.float32))]
    nodes = [helper.make_node("Reshape", ["x", "s_nchw"], ["t"], name="to_nchw"),
             helper.make_node("Conv", ["t", "w", "b"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Transpose", ["r"], ["rt"], perm=[0, 2, 3, 1], name="to_nhwc"),
             helper.make_node("Reshape", ["rt", "s_flat"], ["f"], name="flatten"),
             helper.make_node("Gemm", ["f", "wd", "bd"], ["y"], transB=1, name="dense")]
    return _model_with(nodes, ["N", 6, 5, 1], ["N", 3], inits)


def test_simplify_folds_a_bias_add_behind_a_squeeze_into_the_conv():
    g = simplify(load(keras_conv1d_model()))
    ops = [n.op_type for n in g.nodes]
    assert ops == ["Reshape", "Transpose", "Conv", "Relu", "MaxPool", "Reshape", "Transpose", "Reshape", "Gemm"], ops
    conv = g.nodes[2]
    assert len(conv.inputs) == 3
    x = np.random.default_rng(1).normal(size=(5, 12, 3)).astype(np.float32)
    np.testing.assert_allclose(run_spec(to_model(g), {"x": x})[0], run_spec(keras_conv1d_model(), {"x": x})[0],
                               rtol=0, atol=1e-5)


def test_simplify_keeps_a_bias_add_that_varies_along_the_signal():
    ops = [n.op_type for n in simplify(load(keras_conv1d_model(bias_varies=True))).nodes]
    assert "Add" in ops


@pytest.mark.parametrize("make, spec_shape, layers", [
    (keras_conv1d_model, (1, 12, 3), ["Conv", "MaxPool", "Dense"]),
    (one_channel_nhwc_model, (6, 5, 1), ["Conv", "Dense"])])
def test_channels_last_exports_quantize_and_match_onnxruntime(make, spec_shape, layers):
    """The input is channels-last as it comes (no axes moved on the host), the flatten order of the
    Transposes is kept; truth: the QDQ model onnx2hw's quantizer writes, under onnxruntime."""
    model = make()
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim[1:]]
    x = np.random.default_rng(2).normal(size=(64, *shape)).astype(np.float32)
    qdq = quantize(model, {"x": x})
    ig = integer_graph_of(load(qdq))
    q = ig.inputs[0]
    assert not q.nchw_to_nhwc and ig.input_specs[0].shape == spec_shape
    assert [type(layer).__name__ for layer in ig.layers] == layers
    for batch in (1, 7):
        want = run_spec(qdq, {"x": x[:batch]})[0]
        np.testing.assert_array_equal(golden(qdq, {"x": x[:batch]}), want)


@pytest.mark.parametrize("name", ["tflite_dscnn_int8.onnx", "tflite_conv1d_int8.onnx"])
def test_tflite_channels_last_int8_models_match_onnxruntime_on_random_codes(name):
    """TFLite int8 DS-CNN (a one-channel NHWC input reshaped to NCHW) and Conv1D (an (L, C) input
    expanded and transposed): random int8 codes over the whole range (every AvgPool tie), the
    whole model with its host tail against the ORIGINAL file under onnxruntime."""
    design = onnx2hw.compile(str(CORPUS / name))
    q = design.integer.inputs[0]
    assert q.integer_input and not q.nchw_to_nhwc
    for batch in (1, 5):
        feeds = int8_inputs(str(CORPUS / name), batch, seed=batch)
        want = run_spec(str(CORPUS / name), feeds)[0]
        got = next(iter(design.golden(feeds).values()))
        np.testing.assert_array_equal(got, want)


def pair_pool_model(s_in, zp_in, s_out, zp_out, qtype=TensorProto.INT8) -> tuple[onnx.ModelProto, np.ndarray]:
    """``DequantizeLinear -> AveragePool(1 x 2, stride 2) -> QuantizeLinear`` and an input holding
    every pair of codes of the type once (pairs along W)."""
    np_type = np.int8 if qtype == TensorProto.INT8 else np.uint8
    info = np.iinfo(np_type)
    codes = np.arange(info.min, info.max + 1)
    a, b = np.meshgrid(codes, codes, indexing="ij")
    x = np.stack([a.reshape(-1), b.reshape(-1)], axis=-1).reshape(1, 16, 64, 128).astype(np_type)
    inits = [_init("si", np.float32(s_in)), _init("zi", np_type(zp_in)), _init("so", np.float32(s_out)),
             _init("zo", np_type(zp_out))]
    nodes = [helper.make_node("DequantizeLinear", ["x", "si", "zi"], ["d"]),
             helper.make_node("AveragePool", ["d"], ["p"], kernel_shape=[1, 2], strides=[1, 2], name="pool"),
             helper.make_node("QuantizeLinear", ["p", "so", "zo"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", qtype, [1, 16, 64, 128])],
                          [helper.make_tensor_value_info("y", qtype, [1, 16, 64, 64])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), x


@pytest.mark.parametrize("s_in, zp_in, s_out, zp_out, qtype, exact_sum", [
    (0.005095489323139191, -128, 0.005095489323139191, -128, TensorProto.INT8, False),  # TFLite: same grid
    (0.0123, 3, 0.0123, 3, TensorProto.INT8, False),
    (0.021, 7, 0.021, 7, TensorProto.UINT8, False),
    (0.005, -128, 0.0131, -20, TensorProto.INT8, True)])   # here the integer sum decides alone
def test_average_of_two_codes_is_exact_against_float32(s_in, zp_in, s_out, zp_out, qtype, exact_sum):
    """Every pair of codes through a QDQ pool of kernel area 2 against onnxruntime (the float32
    spec): on a shared grid the ties of odd sums are decided by float32 rounding, which a window
    sum + Requant cannot give, so the pool then sums a table of exact terms into thresholds."""
    model, x = pair_pool_model(s_in, zp_in, s_out, zp_out, qtype)
    ig = integer_graph_of(load(model))
    (pool,) = ig.layers
    assert type(pool).__name__ == "AvgPool" and (pool.terms is None) == exact_sum
    want = run_spec(model, {"x": x})[0]
    np.testing.assert_array_equal(golden(model, {"x": x}), want)


def test_avgpool_terms_reference_is_the_window_sum_of_the_table():
    """AvgPool with a terms table: int64 formula written here (sum of table[x - lo] over each
    1 x 2 window, then lo + count(acc >= T))."""
    rng = np.random.default_rng(3)
    in_t = IntType(4, True)
    table = np.sort(rng.integers(-500, 500, size=16)) + np.arange(16) * 37
    thresholds = np.sort(rng.integers(int(2 * table.min()), int(2 * table.max()), size=15)).reshape(1, -1)
    pool = AvgPool("p", ("x",), TensorSpec("y", (2, 3, 2), IntType(4, True)), (1, 2), (1, 2), (0, 0, 0, 0),
                   Thresholds(thresholds, -8), 0, 0, table, in_t.lo)
    pool.validate([TensorSpec("x", (2, 6, 2), in_t)])
    x = rng.integers(-8, 8, size=(5, 2, 6, 2))
    t = table[x + 8]
    acc = t[:, :, 0::2, :] + t[:, :, 1::2, :]
    want = -8 + (acc[..., None] >= thresholds[0]).sum(-1)
    np.testing.assert_array_equal(pool.reference(x), want)
    with pytest.raises(ModelError, match="does not cover input type int4"):
        AvgPool("p", ("x",), pool.output, (1, 2), (1, 2), (0, 0, 0, 0), pool.act, 0, 0, table[:8], in_t.lo
                ).validate([TensorSpec("x", (2, 6, 2), in_t)])


@pytest.mark.sim
def test_average_of_two_codes_on_a_shared_grid_simulates_bit_exact():
    """The terms table (a LookupUnit before the window) and the thresholds in hardware, under the
    simulator's random stalls, against onnxruntime on the QDQ model."""
    model, _ = pair_pool_model(0.005095489323139191, -128, 0.005095489323139191, -128)
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for vi, dims in ((m.graph.input[0], [None, 3, 1, 16]), (m.graph.output[0], [None, 3, 1, 8])):
        vi.type.tensor_type.shape.CopyFrom(helper.make_tensor_type_proto(TensorProto.INT8, dims).tensor_type.shape)
    x = np.random.default_rng(4).integers(-128, 128, size=(12, 3, 1, 16)).astype(np.int8)
    design = onnx2hw.compile(m)
    assert design.integer.layers[0].terms is not None
    y = design.simulate({"x": x})
    np.testing.assert_array_equal(next(iter(y.values())), run_spec(m, {"x": x})[0])
