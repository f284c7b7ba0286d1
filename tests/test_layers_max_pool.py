"""MaxPool layer kind: its exact reference against onnxruntime's MaxPool on integers (spec-exact
session); GlobalMaxPool (a float model's, quantized by onnx2hw) becomes a MaxPool over the whole
image, exact against onnxruntime's spec-exact session and bit-exact in hardware; dilated pools
likewise."""
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from _one_layer import S8, graph_of, ort_op
from _canon_models import model, w
from _oracle import lsb_apart, run_spec, spec_session
import onnx2hw
from onnx2hw import golden
from onnx2hw.dataflow import compile_pipeline
from onnx2hw.golden.integer import execute_integer
from onnx2hw.ir import load
from onnx2hw.ir.errors import UnsupportedError
from onnx2hw.layers import MaxPool, TensorSpec, dequantize_outputs, quantize_inputs
from onnx2hw.quant import ptq, quantize, to_integer_graph
from onnx2hw.rtl.accelerator import AcceleratorCore
from onnx2hw.sim.model_sim import from_transfers, to_transfers
from onnx2hw.sim.pysim import run_stream


def test_max_pool_matches_onnx_maxpool():
    x = np.random.default_rng(2).integers(-128, 128, (4, 6, 6, 3)).astype(np.int8)
    mp = MaxPool("mp", ("x",), TensorSpec("m", (3, 3, 3), S8), (3, 3), (2, 2), (1, 1, 1, 1))
    got = golden.execute(graph_of(TensorSpec("x", (6, 6, 3), S8), [mp]), {"x": x})["m"]
    want = ort_op("MaxPool", {"x": x.transpose(0, 3, 1, 2).copy()}, TensorProto.INT8, kernel_shape=[3, 3],
                  strides=[2, 2], pads=[1, 1, 1, 1]).transpose(0, 2, 3, 1)
    assert np.array_equal(got, want)


def _float_model():
    """Conv(1->4, 3x3, pad 1) + Relu + GlobalMaxPool + Flatten + Gemm(4->3) on (N, 1, 6, 6)."""
    rng = np.random.default_rng(5)
    inits = [numpy_helper.from_array(rng.normal(0, s, shape).astype(np.float32), n)
             for n, shape, s in (("w1", (4, 1, 3, 3), 0.5), ("b1", (4,), 0.1), ("w2", (3, 4), 0.5), ("b2", (3,), 0.1))]
    mk = helper.make_node
    nodes = [mk("Conv", ["x", "w1", "b1"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             mk("Relu", ["c"], ["r"], name="relu"),
             mk("GlobalMaxPool", ["r"], ["g"], name="gmp"),
             mk("Flatten", ["g"], ["f"], name="flat"),
             mk("Gemm", ["f", "w2", "b2"], ["y"], transB=1, name="fc")]
    g = helper.make_graph(nodes, "gmp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1, 6, 6])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.fixture(scope="module")
def quantized():
    x = np.random.default_rng(0).random((64, 1, 6, 6), dtype=np.float32)
    q = quantize(_float_model(), {"x": x})
    return q, to_integer_graph(load(q)), x


def test_global_max_pool_imports_as_whole_image_max_pool(quantized):
    q, igraph, x = quantized
    pools = [layer for layer in igraph.layers if isinstance(layer, MaxPool)]
    assert [(p.kernel, p.stride, p.pads, p.output.shape) for p in pools] == [((6, 6), (1, 1), (0, 0, 0, 0), (1, 1, 4))]
    want = run_spec(q, {"x": x})[0]
    got = dequantize_outputs(igraph, golden.execute(igraph, quantize_inputs(igraph, {"x": x})))["y"]
    lsb = lsb_apart(got, want, igraph.outputs[0].scale)
    assert lsb.max() <= 1 and np.mean(lsb == 0) >= 0.99, (lsb.max(), np.mean(lsb == 0))


@pytest.mark.slow
def test_global_max_pool_in_hardware_is_bit_exact(quantized):
    _, igraph, _ = quantized
    p = compile_pipeline(igraph)
    assert [s.op for s in p.stages] == ["conv", "maxpool", "dense"]
    spec = igraph.input_specs[0]
    xq = np.random.default_rng(1).integers(spec.dtype.lo, spec.dtype.hi + 1, (3,) + spec.shape)
    want = execute_integer(igraph, {spec.name: xq})[igraph.output_specs[0].name]
    li, lo = p.input_link, p.output_link
    out, _ = run_stream(AcceleratorCore(p), {"i": to_transfers(xq, li.dst_lanes)}, {"o": lo.elements // lo.src_lanes * 3},
                        src_pause="random", sink_pause="random", seed=2, check_comb=False, idle_limit=1 << 20)
    np.testing.assert_array_equal(from_transfers(out["o"], 3, igraph.output_specs[0].shape), want)


def _ceil_mode_cnn():
    """PyTorch's MaxPool2d(ceil_mode=True) on odd feature maps (9x9 -> 5x5, 4x4 -> 2x2 with a 3x3
    window): partial last windows, which canonicalization makes end padding."""
    nodes = [helper.make_node("Conv", ["x", "W", "b"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1),
             helper.make_node("Conv", ["p", "W2", "b2"], ["c2"]), helper.make_node("Relu", ["c2"], ["r2"]),
             helper.make_node("MaxPool", ["r2"], ["p2"], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1),
             helper.make_node("Flatten", ["p2"], ["f"]), helper.make_node("Gemm", ["f", "Wd", "bd"], ["y"], transB=1)]
    return model(nodes, ("x", ["N", 3, 9, 9]), ("y", ["N", 4]),
                 {"W": w(6, 3, 3, 3), "b": w(6), "W2": w(8, 6, 2, 2), "b2": w(8), "Wd": w(4, 32), "bd": w(4)})


def test_ceil_mode_max_pool_matches_the_quantized_model():
    """Golden against onnxruntime (optimizations off) on the QDQ model onnx2hw's quantizer writes."""
    m = _ceil_mode_cnn()
    x = np.random.default_rng(0).standard_normal((32, 3, 9, 9)).astype(np.float32)
    design = onnx2hw.compile(m, board="ulx3s", calib={"x": x})
    want = spec_session(ptq.quantize(m, {"x": x})).run(None, {"x": x[:16]})[0]
    np.testing.assert_allclose(design.golden({"x": x[:16]})["y"], want, rtol=0, atol=1e-6 * np.abs(want).max())


@pytest.mark.sim
def test_ceil_mode_max_pool_simulates_bit_exact():
    x = np.random.default_rng(1).standard_normal((32, 3, 9, 9)).astype(np.float32)
    onnx2hw.compile(_ceil_mode_cnn(), board="ulx3s", calib={"x": x}).simulate({"x": x[:8]})


@pytest.mark.parametrize("kernel,stride,pads,dilation", [
    ((3, 3), (1, 1), (2, 2, 2, 2), (2, 2)), ((2, 3), (2, 1), (1, 0, 0, 2), (3, 2)), ((1, 3), (1, 2), (0, 1, 0, 1), (1, 4))])
def test_dilated_max_pool_matches_onnx_maxpool(kernel, stride, pads, dilation):
    x = np.random.default_rng(4).integers(-128, 128, (3, 9, 10, 2)).astype(np.int8)
    ext = [(k - 1) * d + 1 for k, d in zip(kernel, dilation)]
    oh = (9 + pads[0] + pads[2] - ext[0]) // stride[0] + 1
    ow = (10 + pads[1] + pads[3] - ext[1]) // stride[1] + 1
    mp = MaxPool("mp", ("x",), TensorSpec("m", (oh, ow, 2), S8), kernel, stride, pads, dilation)
    got = golden.execute(graph_of(TensorSpec("x", (9, 10, 2), S8), [mp]), {"x": x})["m"]
    want = ort_op("MaxPool", {"x": x.transpose(0, 3, 1, 2).copy()}, TensorProto.INT8, kernel_shape=list(kernel),
                  strides=list(stride), pads=list(pads), dilations=list(dilation)).transpose(0, 2, 3, 1)
    assert np.array_equal(got, want)


def _dilated_pool_cnn(pool_attrs):
    """Conv + Relu + a dilated MaxPool + Conv 1x1 on (N, 2, 9, 9)."""
    nodes = [helper.make_node("Conv", ["x", "W", "b"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("MaxPool", ["r"], ["p"], name="pool", **pool_attrs),
             helper.make_node("Conv", ["p", "W2"], ["y"])]
    return model(nodes, ("x", ["N", 2, 9, 9]), ("y", ["N", 3, 4, 8]), {"W": w(4, 2, 3, 3), "b": w(4), "W2": w(3, 4, 1, 1)})


DILATED_POOL = dict(kernel_shape=[3, 2], strides=[2, 1], dilations=[2, 3], pads=[1, 1, 2, 1])


def test_dilated_max_pool_matches_the_quantized_model():
    """Golden against onnxruntime (optimizations off) on the QDQ model onnx2hw's quantizer writes."""
    m = _dilated_pool_cnn(DILATED_POOL)
    x = np.random.default_rng(0).standard_normal((32, 2, 9, 9)).astype(np.float32)
    q = ptq.quantize(m, {"x": x})
    igraph = to_integer_graph(load(q))
    assert [(p.kernel, p.dilation) for p in igraph.layers if isinstance(p, MaxPool)] == [((3, 2), (2, 3))]
    want = run_spec(q, {"x": x[:16]})[0]
    got = dequantize_outputs(igraph, golden.execute(igraph, quantize_inputs(igraph, {"x": x[:16]})))["y"]
    assert np.array_equal(lsb_apart(got, want, igraph.outputs[0].scale), np.zeros(want.shape))


def test_dilated_max_pool_of_padding_only_is_refused_in_one_line():
    """Rows 0 and 3 of a 1-row-padded 2-row map: the first window's taps are both padding."""
    nodes = [helper.make_node("MaxPool", ["x"], ["y"], name="pool", kernel_shape=[2, 1], dilations=[3, 1],
                              pads=[1, 0, 1, 0])]
    m = model(nodes, ("x", ["N", 1, 2, 3]), ("y", ["N", 1, 1, 3]), {})
    with pytest.raises(UnsupportedError, match=r"^node 'pool' \(MaxPool\): dilations \[3, 1\].*padding only"):
        onnx2hw.compile(m, board="ulx3s", calib={"x": np.random.default_rng(0).random((4, 1, 2, 3), np.float32)})


@pytest.mark.sim
def test_dilated_max_pool_simulates_bit_exact():
    x = np.random.default_rng(1).standard_normal((32, 2, 9, 9)).astype(np.float32)
    onnx2hw.compile(_dilated_pool_cnn(DILATED_POOL), board="ulx3s", calib={"x": x}).simulate({"x": x[:6]})


def _reduce_max_model(keepdims: int, opset: int):
    """Conv -> Relu -> ReduceMax over H, W (dynamo's ``amax``/``adaptive_max_pool2d(1)``; axes an
    attribute before opset 18, an input from it) -> Flatten -> Gemm."""
    axes = {"axes": [2, 3]} if opset < 18 else {}
    ins = ["r"] if opset < 18 else ["r", "ax"]
    nodes = [helper.make_node("Conv", ["x", "W", "b"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("ReduceMax", ins, ["m"], keepdims=keepdims, **axes),
             helper.make_node("Flatten", ["m"], ["f"]), helper.make_node("Gemm", ["f", "Wd", "bd"], ["y"], transB=1)]
    inits = {"W": w(4, 3, 3, 3), "b": w(4), "Wd": w(5, 4), "bd": w(5), "ax": np.array([-2, -1], np.int64)}
    return model(nodes, ("x", ["N", 3, 6, 6]), ("y", ["N", 5]), inits, opset=opset, ir=8)


@pytest.mark.parametrize("keepdims,opset", [(0, 13), (1, 18)])
def test_reduce_max_over_the_image_is_a_global_max_pool(keepdims, opset):
    m = _reduce_max_model(keepdims, opset)
    x = np.random.default_rng(7).standard_normal((16, 3, 6, 6)).astype(np.float32)
    design = onnx2hw.compile(m, board="ulx3s", calib={"x": x})
    assert any(isinstance(layer, MaxPool) for layer in design.integer.layers)
    want = spec_session(ptq.quantize(m, {"x": x})).run(None, {"x": x[:8]})[0]
    np.testing.assert_allclose(design.golden({"x": x[:8]})["y"], want, rtol=0, atol=1e-6 * np.abs(want).max())


def test_reduce_max_over_channels_is_refused_in_one_line():
    nodes = [helper.make_node("Conv", ["x", "W"], ["c"], kernel_shape=[1, 1]),
             helper.make_node("ReduceMax", ["c"], ["y"], keepdims=1, axes=[1])]
    m = model(nodes, ("x", ["N", 3, 6, 6]), ("y", ["N", 1, 6, 6]), {"W": w(4, 3, 1, 1)}, opset=13, ir=8)
    x = np.random.default_rng(7).standard_normal((8, 3, 6, 6)).astype(np.float32)
    with pytest.raises(Exception, match=r"ReduceMax over axes \[1\] of a 4-D tensor: only the reduction over the "
                                        r"spatial axes \[2, 3\] \(a global max pool\) is supported") as e:
        onnx2hw.compile(m, board="ulx3s", calib={"x": x})
    assert "\n" not in str(e.value)
