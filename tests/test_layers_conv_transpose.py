"""ConvTranspose, imported as the Conv of the zero-inserted input: the golden integer graph of
onnxruntime's and onnx2hw's QDQ models against onnxruntime's spec-exact session (every element),
QONNX models against their float semantics, the forms refused in one line, and the compiled
design simulated bit-exact."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from _quant_models import compare_with_ort, quantize, random_inputs
import onnx2hw
from onnx2hw import golden
from onnx2hw.ir import load
from onnx2hw.ir.errors import UnsupportedError
from onnx2hw.layers import Conv, dequantize_outputs, quantize_inputs
from onnx2hw.quant import ptq, to_integer_graph


def _model(w_shape, attrs, x_shape, seed=0):
    """ConvTranspose ``ct`` (weight ``(Cin, Cout/group, *k)``, bias) + Relu + a 1x1 Conv on
    ``(N, *x_shape)``; float32, opset 17."""
    rng = np.random.default_rng(seed)
    co = w_shape[1] * attrs.get("group", 1)
    d = len(x_shape) - 1
    inits = [numpy_helper.from_array(rng.normal(0, 0.4, w_shape).astype(np.float32), "w"),
             numpy_helper.from_array(rng.normal(0, 0.1, co).astype(np.float32), "b"),
             numpy_helper.from_array(rng.normal(0, 0.4, (3, co) + (1,) * d).astype(np.float32), "w2")]
    nodes = [helper.make_node("ConvTranspose", ["x", "w", "b"], ["c"], name="ct", **attrs),
             helper.make_node("Relu", ["c"], ["r"]), helper.make_node("Conv", ["r", "w2"], ["y"], name="pw")]
    g = helper.make_graph(nodes, "deconv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", *x_shape])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    return onnx.shape_inference.infer_shapes(m)


CASES = {   # name: (weight (Cin, Cout/group, *k), attributes, input without batch)
    "s2_k4_p1": ((3, 4, 4, 4), dict(strides=[2, 2], pads=[1, 1, 1, 1]), (3, 5, 5)),
    "s2_k3_p1_op1": ((3, 4, 3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 1]), (3, 4, 5)),
    "s2_k2": ((4, 2, 2, 2), dict(strides=[2, 2]), (4, 4, 3)),
    "s1_k3_p1": ((3, 3, 3, 3), dict(pads=[1, 1, 1, 1]), (3, 5, 4)),
    "s3_k3_asym_op2": ((2, 3, 3, 2), dict(strides=[3, 2], pads=[0, 1, 2, 0], output_padding=[2, 1]), (2, 3, 4)),
    "s2_grouped": ((4, 3, 3, 3), dict(strides=[2, 2], group=2, pads=[1, 1, 1, 1], output_padding=[1, 1]), (4, 3, 3)),
    "s2_depthwise": ((4, 1, 4, 4), dict(strides=[2, 2], group=4, pads=[1, 1, 1, 1]), (4, 4, 4)),
    "s2_dilated": ((2, 3, 3, 3), dict(strides=[2, 2], dilations=[2, 1], pads=[2, 1, 1, 0]), (2, 4, 4)),
    "1d_s2_k4": ((3, 4, 4), dict(strides=[2], pads=[1, 1]), (3, 9)),
    "1d_s3_k3_op1": ((3, 2, 3), dict(strides=[3], pads=[1, 0], output_padding=[1]), (3, 6)),
    "same_upper_s2": ((2, 3, 4, 4), dict(strides=[2, 2], auto_pad="SAME_UPPER"), (2, 4, 3)),
    "output_shape": ((2, 3, 3, 3), dict(strides=[2, 2], output_shape=[7, 5]), (2, 4, 3)),
}
#: onnxruntime's quantizer takes per-channel ConvTranspose weights on axis 1 (Cout/group
#: scales) but then fails (a NumPy broadcast error) to quantize a bias of Cout entries when
#: group > 1 and Cout/group > 1
ORT_PER_CHANNEL = [n for n, (w, a, x) in CASES.items() if a.get("group", 1) == 1 or w[1] == 1]


@pytest.mark.parametrize("name,per_channel", [(n, False) for n in CASES] + [(n, True) for n in ORT_PER_CHANNEL])
def test_conv_transpose_qdq_matches_onnxruntime(name, per_channel, tmp_path):
    """onnxruntime's QDQ quantization (per-channel weights on axis 1): golden = spec session."""
    m = _model(*CASES[name])
    path = quantize(m, tmp_path, per_channel=per_channel)
    igraph = to_integer_graph(load(path))
    ct = next(layer for layer in igraph.layers if layer.name == "ct")
    strides = CASES[name][1].get("strides", [1, 1])
    assert isinstance(ct, Conv) and ct.stride == (1, 1) and ct.upsample[-len(strides):] == tuple(strides)
    assert compare_with_ort(path, igraph, random_inputs(m, 16, 3)) == (1.0, 0.0)


#: onnx2hw's quantizer writes per-channel weights on axis 1 (Cout/group scales) with a bias of
#: Cout entries, whose scales it does not yet repeat per group: grouped forms per tensor only
PTQ_CASES = [("s2_k3_p1_op1", False), ("s2_k3_p1_op1", True), ("s2_grouped", False), ("s2_depthwise", False),
             ("1d_s3_k3_op1", False), ("1d_s3_k3_op1", True), ("s2_dilated", True)]


@pytest.mark.parametrize("name,per_channel", PTQ_CASES)
def test_conv_transpose_float_through_ptq_matches_onnxruntime(name, per_channel):
    """onnx2hw's post-training quantizer (per-channel weights on axis 1): golden = spec session."""
    m = _model(*CASES[name])
    x = random_inputs(m, 32, 4)
    q = ptq.quantize(m, {"x": x}, per_channel=per_channel)
    dq = next(n for n in q.graph.node if n.op_type == "DequantizeLinear" and n.output[0] in
              next(c for c in q.graph.node if c.op_type == "ConvTranspose").input[1:2])
    assert [a.i for a in dq.attribute if a.name == "axis"] == ([1] if per_channel else [])
    igraph = to_integer_graph(load(q))
    assert compare_with_ort(q, igraph, x[:16]) == (1.0, 0.0)


@pytest.mark.parametrize("w_shape,attrs,x_shape,text", [
    ((2, 3, 3, 3), dict(strides=[2, 2], pads=[3, 0, 0, 0]), (2, 5, 5), "larger than the dilated kernel extent"),
    ((2, 3, 3, 3), dict(strides=[2, 2], output_shape=[8, 7]), (2, 4, 4), "odd total padding"),
])
def test_conv_transpose_refusals_are_one_line(w_shape, attrs, x_shape, text):
    m = _model(w_shape, attrs, x_shape)
    q = ptq.quantize(m, {"x": random_inputs(m, 8, 0)})
    with pytest.raises(UnsupportedError, match=rf"^node 'ct' \(ConvTranspose\): .*{text}"):
        to_integer_graph(load(q))


@pytest.mark.sim
def test_conv_transpose_simulates_bit_exact():
    """A 2-D decoder step (stride 2, kernel 4, pad 1), a depthwise one and a 1-D one with
    output_padding, compiled and simulated: every element equals the golden."""
    for name in ("s2_k4_p1", "s2_depthwise", "1d_s3_k3_op1"):
        m = _model(*CASES[name])
        x = random_inputs(m, 24, 5)
        design = onnx2hw.compile(m, board="ulx3s", calib={"x": x})
        assert any(b.block.__name__ == "ZeroInsert" for s in design.pipeline.stages for b in s.blocks), name
        design.simulate({"x": x[:4]})


QONNX = "qonnx.custom_op.general"


def _qonnx_model(w_shape, attrs, x_shape, bits, per_channel):
    """QONNX: Quant(x) -> ConvTranspose(x, Quant(W) with scales per tensor or per output channel
    (axis 1), bias) -> Relu -> Quant, power-of-two activation scales (every rounding tie exact in
    float32 too)."""
    rng = np.random.default_rng(7)
    inits, nodes = [], []

    def const(name, v):
        inits.append(numpy_helper.from_array(np.asarray(v, np.float32), name))
        return name

    def quant(x, out, scale, b, signed, narrow=False):
        nodes.append(helper.make_node("Quant", [x, const(f"{out}_s", scale), const(f"{out}_z", 0.0),
                                                const(f"{out}_b", b)], [out], domain=QONNX, name=f"{out}_quant",
                                      signed=int(signed), narrow=int(narrow), rounding_mode="ROUND"))
        return out

    w = rng.normal(0, 0.5, w_shape)
    qmax = 2 ** (bits - 1) - 1
    ws = np.abs(w).max(axis=tuple(i for i in range(w.ndim) if i != 1), keepdims=True) / qmax if per_channel \
        else np.abs(w).max() / qmax
    co = w_shape[1] * attrs.get("group", 1)
    xq = quant("x", "xq", 1 / 256, 8, False)
    wq = quant(const("w", w), "wq", ws, bits, True, narrow=True)
    nodes.append(helper.make_node("ConvTranspose", [xq, wq, const("b", rng.normal(0, 0.1, co))], ["c"], name="ct",
                                  **attrs))
    nodes.append(helper.make_node("Relu", ["c"], ["r"], name="relu"))
    quant("r", "y", 1 / 8, bits, False)
    g = helper.make_graph(nodes, "qonnx_deconv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", *x_shape])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None] * (len(x_shape) + 1))], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid(QONNX, 1)], ir_version=8)
    return onnx.shape_inference.infer_shapes(m)


@pytest.mark.parametrize("name,bits,per_channel", [("s2_k4_p1", 4, True), ("s2_depthwise", 3, False),
                                                   ("1d_s3_k3_op1", 4, True), ("s3_k3_asym_op2", 2, False)])
def test_qonnx_conv_transpose_equals_float_semantics(name, bits, per_channel):
    """QONNX's float semantics (the golden float executor on the QONNX graph; its ConvTranspose
    is checked against onnxruntime in test_golden_conv_transpose) equal the integer graph."""
    w_shape, attrs, x_shape = CASES[name]
    m = _qonnx_model(w_shape, attrs, x_shape, bits, per_channel)
    graph = load(m)
    igraph = to_integer_graph(graph)
    assert igraph.source == "qonnx" and any(isinstance(layer, Conv) and layer.name == "ct" for layer in igraph.layers)
    x = np.random.default_rng(2).random((64, *x_shape), dtype=np.float32)
    want = golden.execute(graph, {"x": x})["y"]
    got = dequantize_outputs(igraph, golden.execute(igraph, quantize_inputs(igraph, {"x": x})))["y"]
    assert np.array_equal(got, want)
