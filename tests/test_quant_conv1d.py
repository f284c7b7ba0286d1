"""1-D convolution and pooling (Conv / MaxPool / AveragePool on (N, C, L), as nn.Conv1d,
MaxPool1d and Keras Conv1D export them) run as the 2-D kinds on H = 1 images: the golden against
onnxruntime's spec-exact session on the QDQ model (the flatten after them keeps ONNX's element
order), the model input and a 1-D model output in their ONNX layout, the hardware bit-exact."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnx2hw
from _oracle import lsb_apart, run_spec
from _quant_models import compare_with_ort, quantize as ort_quantize
from _sim_fixtures import require_simulator
from onnx2hw import golden
from onnx2hw.build_info import build_info
from _pysim_check import assert_hardware_is_golden
from onnx2hw.dataflow import compile_pipeline
from onnx2hw.driver import Accelerator
from onnx2hw.golden.integer import execute_integer
from onnx2hw.ir import UnsupportedError, load
from onnx2hw.layers import AvgPool, Conv, MaxPool, dequantize_outputs, quantize_inputs
from onnx2hw.quant import quantize, to_integer_graph

L = 24


def net1d(seed=0, head="gemm"):
    """Conv1d(2->6, k5, pad 2) + Relu + MaxPool1d(2) + Conv1d(6->8, k3, stride 2) + Relu +
    AvgPool1d(3, stride 1, pad 1) + a head: ``gemm`` (Flatten + Gemm -> 5), ``gap``
    (GlobalAveragePool + Flatten + Gemm), ``conv`` (a depthwise Conv1d, the model's output (N, 8, 6))."""
    rng = np.random.default_rng(seed)

    def init(name, shape, std):
        return numpy_helper.from_array(rng.normal(0, std, shape).astype(np.float32), name)
    inits = [init("w1", (6, 2, 5), 0.4), init("b1", (6,), 0.1), init("w2", (8, 6, 3), 0.3), init("b2", (8,), 0.1)]
    n = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], kernel_shape=[5], pads=[2, 2], name="conv1"),
         helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
         helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2], strides=[2], name="pool1"),
         helper.make_node("Conv", ["p1", "w2", "b2"], ["c2"], kernel_shape=[3], strides=[2], name="conv2"),
         helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
         helper.make_node("AveragePool", ["r2"], ["p2"], kernel_shape=[3], strides=[1], pads=[1, 1],
                          count_include_pad=1, name="pool2")]
    length = 5   # 24 -> 24 -> 12 -> 5 -> 5
    if head == "conv":
        inits += [init("w3", (8, 1, 3), 0.4), init("b3", (8,), 0.1)]
        n.append(helper.make_node("Conv", ["p2", "w3", "b3"], ["y"], kernel_shape=[3], pads=[1, 1], group=8,
                                  name="dw3"))
        y_shape = [8, length]
    else:
        k = 8 * length if head == "gemm" else 8
        inits += [init("w4", (5, k), 1 / np.sqrt(k)), init("b4", (5,), 0.1)]
        src = "p2"
        if head == "gap":
            n.append(helper.make_node("GlobalAveragePool", ["p2"], ["g"], name="gap"))
            src = "g"
        n += [helper.make_node("Flatten", [src], ["f"], name="flat"),
              helper.make_node("Gemm", ["f", "w4", "b4"], ["y"], transB=1, name="fc")]
        y_shape = [5]
    g = helper.make_graph(n, "net1d", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 2, L])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", *y_shape])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m, full_check=True)
    return m


def _x(n, seed):
    return np.random.default_rng(seed).normal(0, 1, (n, 2, L)).astype(np.float32)


def _hardware_equals_golden(igraph, n=3, seed=4):
    p = compile_pipeline(igraph)
    assert_hardware_is_golden(p, n, input_seed=seed, seed=seed)
    return p


@pytest.mark.parametrize("head", ["gemm", "gap", "conv"])
def test_ptq_conv1d_net_matches_onnxruntime(head):
    x = _x(200, 1)
    q = quantize(net1d(0, head), {"x": _x(64, 0)})
    g = to_integer_graph(load(q))
    kinds = [type(lay).__name__ for lay in g.layers]
    assert kinds[:4] == ["Conv", "MaxPool", "Conv", "AvgPool"], kinds
    assert g.input_specs[0].shape == (1, L, 2)                     # (C, L) held as a (1, L, C) image
    assert all(lay.output.shape[0] == 1 for lay in g.layers[:4])
    want = run_spec(q, {"x": x})[0]
    got = dequantize_outputs(g, golden.execute(g, quantize_inputs(g, {"x": x})))["y"]
    assert got.shape == want.shape == ((200, 8, 5) if head == "conv" else (200, 5))
    lsb = lsb_apart(got, want, g.outputs[0].scale)
    assert lsb.max() <= 1 and np.mean(lsb == 0) >= 0.99, (lsb.max(), np.mean(lsb == 0))


@pytest.mark.parametrize("fmt", ["qdq", "qop"])
def test_onnxruntime_quantized_conv1d_net(fmt, tmp_path):
    """The same net quantized by onnxruntime's quantize_static (QDQ and QOperator: QLinearConv,
    MaxPool, QLinearAveragePool on 1-D tensors)."""
    path = ort_quantize(net1d(2), tmp_path, fmt=fmt, per_channel=True, calib=_x(32, 5))
    g = to_integer_graph(load(path))
    assert g.source == ("qoperator" if fmt == "qop" else "qdq")
    frac, lsb = compare_with_ort(path, g, _x(300, 6))
    assert lsb <= 1 and frac >= 0.99, (frac, lsb)


@pytest.mark.parametrize("head", ["gemm", "conv"])
def test_conv1d_net_in_hardware_is_bit_exact(head):
    g = to_integer_graph(load(quantize(net1d(3, head), {"x": _x(64, 0)})))
    p = _hardware_equals_golden(g)
    assert [s.op for s in p.stages][:4] == ["conv", "maxpool", "conv", "avgpool"]


def test_global_pools_of_a_signal():
    """GlobalMaxPool / GlobalAveragePool of (N, C, L) give (N, C, 1)."""
    q = quantize(net1d(4, "gap"), {"x": _x(64, 0)})
    g = to_integer_graph(load(q))
    gap = [lay for lay in g.layers if isinstance(lay, AvgPool)][-1]
    assert gap.kernel == (1, 5) and gap.output.shape == (1, 1, 8)
    _hardware_equals_golden(g, n=2)


def test_maxpool_and_conv_geometry_of_a_signal():
    g = to_integer_graph(load(quantize(net1d(5), {"x": _x(64, 0)})))
    conv1, pool1, conv2, pool2 = g.layers[:4]
    assert isinstance(conv1, Conv) and conv1.weights.shape == (6, 1, 5, 2) and conv1.pads == (0, 2, 0, 2)
    assert isinstance(pool1, MaxPool) and pool1.kernel == (1, 2) and pool1.stride == (1, 2)
    assert conv2.stride == (1, 2) and conv2.output.shape == (1, 5, 8)
    assert pool2.pads == (0, 1, 0, 1)


def test_1d_attributes_of_the_wrong_rank_are_refused():
    """A pool with a 2-D kernel_shape on a 1-D tensor: one line naming the node (the QDQ graph of
    the correct model, edited, since such a model cannot be calibrated)."""
    q = quantize(net1d(0), {"x": _x(16, 0)})
    for node in q.graph.node:
        if node.name == "pool1":
            for a in node.attribute:
                if a.name == "kernel_shape":
                    a.ints[:] = [2, 2]
    with pytest.raises(ValueError, match=r"node 'pool1' \(MaxPool\).*kernel_shape"):
        to_integer_graph(load(q))


@pytest.mark.sim
def test_conv1d_net_simulates_bit_exact():
    require_simulator("verilator")
    d = onnx2hw.compile(net1d(6, "conv"), calib={"x": _x(64, 0)})
    x = _x(3, 9)
    y = d.simulate({"x": x})["y"]     # raises unless bit-exact against the golden
    assert y.shape == (3, 8, 5)
    want = dequantize_outputs(d.integer, golden.execute(d.integer, quantize_inputs(d.integer, {"x": x})))["y"]
    np.testing.assert_array_equal(y, want)


def test_driver_quantizes_a_signal_as_the_golden_flow():
    """The driver (from accelerator.json) takes the model's (N, C, L) input and quantizes it into
    the (1, L, C) codes the golden flow makes; its output back in the model's (N, C, L) layout."""
    g = to_integer_graph(load(quantize(net1d(7, "conv"), {"x": _x(64, 0)})))
    p = compile_pipeline(g)
    x = _x(5, 3)
    want = quantize_inputs(g, {"x": x})["x"]
    assert want.shape == (5, 1, L, 2)
    with Accelerator.open(build_info(p, "ulx3s", 75e6, 3e6), "sim", pipeline=p) as acc:
        assert acc.model_input_shape == (2, L)
        np.testing.assert_array_equal(acc.quantize(x), want)
        y = execute_integer(g, {g.input_specs[0].name: want})[g.output_specs[0].name]
        np.testing.assert_array_equal(acc.dequantize(y)["y"], dequantize_outputs(g, {g.outputs[0].name: y})["y"])
        assert acc.dequantize(y)["y"].shape == (5, 8, 5)
