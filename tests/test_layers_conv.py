"""Conv layer kind: its exact reference against onnxruntime's ConvInteger (spec-exact session)
followed by ``onnx2hw.arith``, over strides, asymmetric pads, groups and dilations; dilated
convolutions imported from onnxruntime's and onnx2hw's QDQ models against onnxruntime's
spec-exact session, and simulated bit-exact."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from _one_layer import S8, U8, graph_of, ort_op
from _oracle import lsb_apart, reference
from _quant_models import compare_with_ort, quantize, random_inputs
import onnx2hw
from onnx2hw import arith, golden
from onnx2hw import layers as ig
from onnx2hw.ir import load
from onnx2hw.layers import dequantize_outputs, quantize_inputs
from onnx2hw.quant import ptq, to_integer_graph


@pytest.mark.parametrize("stride,pads,group", [((1, 1), (1, 1, 1, 1), 1), ((2, 1), (0, 1, 2, 0), 1),
                                                ((1, 1), (1, 1, 1, 1), 2), ((2, 2), (0, 0, 0, 0), 4)])
def test_conv_matches_convinteger(stride, pads, group):
    rng = np.random.default_rng(1)
    cin, cout, zp = 4, 8, 9
    w = rng.integers(-100, 100, (cout, 3, 3, cin // group))     # (Cout, kh, kw, Cin/g)
    bias = rng.integers(-2000, 2000, cout)
    x = rng.integers(0, 256, (3, 7, 6, cin)).astype(np.uint8)  # NHWC
    h = (7 + pads[0] + pads[2] - 3) // stride[0] + 1
    wd = (6 + pads[1] + pads[3] - 3) // stride[1] + 1
    lo, hi = ig.accumulator_bounds(w, bias, 0, 255)
    act = ig.Requant(rng.integers(100, 200, cout), np.full(cout, 10), 3, 0, 255)
    layer = ig.Conv("conv", ("x",), ig.TensorSpec("y", (h, wd, cout), U8), w, bias, stride, pads, zp, group, (1, 1),
                    U8, S8, arith.acc_bits(int(min(lo)), int(max(hi))), act)
    got = golden.execute(graph_of(ig.TensorSpec("x", (7, 6, cin), U8), [layer]), {"x": x})["y"]
    # ONNX ConvInteger pads with the input zero point and subtracts it: add zp * sum(w) back
    acc = ort_op("ConvInteger", {"x": x.transpose(0, 3, 1, 2).copy(), "w": w.transpose(0, 3, 1, 2).astype(np.int8),
                                 "xz": np.array(zp, np.uint8)}, TensorProto.INT32,
                 pads=[pads[0], pads[1], pads[2], pads[3]], strides=list(stride), group=group)
    acc = acc.astype(np.int64).transpose(0, 2, 3, 1) + zp * w.reshape(cout, -1).sum(axis=1) + bias
    assert np.array_equal(got, act(acc))


@pytest.mark.parametrize("stride,pads,group,dilation", [
    ((1, 1), (2, 2, 2, 2), 1, (2, 2)), ((2, 1), (1, 3, 0, 2), 1, (1, 3)),
    ((1, 1), (2, 0, 2, 2), 2, (2, 1)), ((1, 2), (3, 3, 3, 3), 4, (3, 2))])
def test_dilated_conv_matches_convinteger(stride, pads, group, dilation):
    """Dilated taps (grouped and depthwise too) against ConvInteger with ``dilations``."""
    rng = np.random.default_rng(2)
    cin, cout, zp = 4, 8, 131
    w = rng.integers(-100, 100, (cout, 3, 3, cin // group))
    bias = rng.integers(-2000, 2000, cout)
    x = rng.integers(0, 256, (2, 9, 8, cin)).astype(np.uint8)
    h = (9 + pads[0] + pads[2] - (2 * dilation[0] + 1)) // stride[0] + 1
    wd = (8 + pads[1] + pads[3] - (2 * dilation[1] + 1)) // stride[1] + 1
    lo, hi = ig.accumulator_bounds(w, bias, 0, 255)
    act = ig.Requant(rng.integers(100, 200, cout), np.full(cout, 10), 3, 0, 255)
    layer = ig.Conv("conv", ("x",), ig.TensorSpec("y", (h, wd, cout), U8), w, bias, stride, pads, zp, group,
                    dilation, U8, S8, arith.acc_bits(int(min(lo)), int(max(hi))), act)
    got = golden.execute(graph_of(ig.TensorSpec("x", (9, 8, cin), U8), [layer]), {"x": x})["y"]
    acc = ort_op("ConvInteger", {"x": x.transpose(0, 3, 1, 2).copy(), "w": w.transpose(0, 3, 1, 2).astype(np.int8),
                                 "xz": np.array(zp, np.uint8)}, TensorProto.INT32,
                 pads=list(pads), strides=list(stride), group=group, dilations=list(dilation))
    acc = acc.astype(np.int64).transpose(0, 2, 3, 1) + zp * w.reshape(cout, -1).sum(axis=1) + bias
    assert np.array_equal(got, act(acc))


# ---- dilated convolutions imported from ONNX ------------------------------------------------------

def _dilated_model(w_shape, attrs, x_shape, seed=0, opset=17):
    """Conv (dilated) + Relu + Conv 1x1 on ``(N, *x_shape)``; float32."""
    rng = np.random.default_rng(seed)
    co = w_shape[0]
    d = len(x_shape) - 1
    inits = [numpy_helper.from_array(rng.normal(0, 0.4, w_shape).astype(np.float32), "w"),
             numpy_helper.from_array(rng.normal(0, 0.1, co).astype(np.float32), "b"),
             numpy_helper.from_array(rng.normal(0, 0.4, (3, co) + (1,) * d).astype(np.float32), "w2")]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="dil", **attrs),
             helper.make_node("Relu", ["c"], ["r"]), helper.make_node("Conv", ["r", "w2"], ["y"], name="pw")]
    g = helper.make_graph(nodes, "dilated", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", *x_shape])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=9)
    return onnx.shape_inference.infer_shapes(m)


DILATED = {   # name: (weight, attributes, input without batch)
    "2d_d2": ((6, 3, 3, 3), dict(dilations=[2, 2], pads=[2, 2, 2, 2]), (3, 9, 9)),
    "2d_d2x3_s2": ((4, 2, 3, 2), dict(dilations=[2, 3], strides=[2, 1], pads=[1, 0, 2, 1]), (2, 10, 8)),
    "depthwise_d2": ((4, 1, 3, 3), dict(dilations=[2, 2], group=4, pads=[2, 2, 2, 2]), (4, 7, 7)),
    "grouped_d2": ((6, 2, 3, 3), dict(dilations=[2, 1], group=2, pads=[1, 1, 1, 1]), (4, 8, 6)),
    "1d_tcn_d4": ((5, 3, 3), dict(dilations=[4], pads=[8, 0]), (3, 20)),
}
#: SAME padding from the dilated extent (onnxruntime refuses dilations with auto_pad SAME_*)
SAME = {
    "same_upper_d3": ((4, 2, 3, 3), dict(dilations=[3, 3], auto_pad="SAME_UPPER"), (2, 8, 7)),
    "1d_same_lower_d2": ((4, 3, 4), dict(dilations=[2], auto_pad="SAME_LOWER"), (3, 16)),
}


@pytest.mark.parametrize("per_channel", [False, True])
@pytest.mark.parametrize("name", list(DILATED))
def test_dilated_conv_qdq_matches_onnxruntime(name, per_channel, tmp_path):
    """onnxruntime's QDQ quantization of the model: the golden integer graph equals onnxruntime's
    spec-exact session on every element."""
    m = _dilated_model(*DILATED[name])
    path = quantize(m, tmp_path, per_channel=per_channel)
    igraph = to_integer_graph(load(path))
    conv = next(layer for layer in igraph.layers if layer.name == "dil")
    assert conv.dilation == tuple(DILATED[name][1]["dilations"][-2:]) or conv.dilation == (1, DILATED[name][1]["dilations"][0])
    x = random_inputs(m, 16, 3)
    assert compare_with_ort(path, igraph, x) == (1.0, 0.0)


@pytest.mark.parametrize("name", ["2d_d2", "depthwise_d2", "1d_tcn_d4"])
def test_dilated_qlinear_conv_matches_onnxruntime_kernels(name, tmp_path):
    """onnxruntime's QOperator quantization (QLinearConv with dilations, 7-bit weights so its
    integer kernels cannot saturate: see _quant_models): within 1 LSB of its kernels, >= 99 %
    identical."""
    m = _dilated_model(*DILATED[name])
    path = quantize(m, tmp_path, fmt="qop")
    igraph = to_integer_graph(load(path))
    assert igraph.source == "qoperator" and [layer.dilation != (1, 1) for layer in igraph.layers] == [True, False]
    frac, worst = compare_with_ort(path, igraph, random_inputs(m, 16, 3))
    assert worst <= 1 and frac >= 0.99, (frac, worst)


@pytest.mark.parametrize("name", ["2d_d2x3_s2", "depthwise_d2", "1d_tcn_d4"])
def test_dilated_conv_float_through_ptq_matches_onnxruntime(name):
    """onnx2hw's own post-training quantizer: golden = onnxruntime's spec session on its QDQ model."""
    m = _dilated_model(*DILATED[name])
    x = random_inputs(m, 32, 4)
    q = ptq.quantize(m, {"x": x})
    igraph = to_integer_graph(load(q))
    assert compare_with_ort(q, igraph, x[:16]) == (1.0, 0.0)


@pytest.mark.parametrize("name", list(SAME))
def test_dilated_conv_same_padding_matches_onnx_reference(name):
    """auto_pad SAME_* pads the dilated extent ``(k-1)*d + 1`` (total ``(ceil(n/s)-1)*s + extent
    - n``): the imported pads, and the golden against onnx.reference on onnx2hw's QDQ model."""
    w_shape, attrs, x_shape = SAME[name]
    m = _dilated_model(w_shape, attrs, x_shape, opset=19)   # onnx.reference's DequantizeLinear: opset 19 on
    x = random_inputs(m, 32, 6)
    q = ptq.quantize(m, {"x": x})
    igraph = to_integer_graph(load(q))
    conv = next(layer for layer in igraph.layers if layer.name == "dil")
    k, d, n = w_shape[-1], attrs["dilations"][-1], x_shape[-1]
    total = n - 1 + (k - 1) * d + 1 - n
    small, large = total // 2, total - total // 2
    assert (conv.pads[1], conv.pads[3]) == ((small, large) if attrs["auto_pad"] == "SAME_UPPER" else (large, small))
    want = reference(q, {"x": x[:16]})[0]
    got = dequantize_outputs(igraph, golden.execute(igraph, quantize_inputs(igraph, {"x": x[:16]})))["y"]
    assert np.array_equal(lsb_apart(got, want, igraph.outputs[0].scale), np.zeros(want.shape))


@pytest.mark.sim
def test_dilated_conv_simulates_bit_exact():
    """A TCN-style 1-D stack and a 2-D dilated + depthwise dilated model, compiled and simulated:
    every element equals the golden."""
    for name in ("1d_tcn_d4", "depthwise_d2"):
        m = _dilated_model(*DILATED[name])
        x = random_inputs(m, 24, 5)
        design = onnx2hw.compile(m, board="ulx3s", calib={"x": x})
        assert any(s.op == "conv" for s in design.pipeline.stages)
        design.simulate({"x": x[:4]})
