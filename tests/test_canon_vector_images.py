"""onnx2hw.canon.vector_images: a dense layer's vector viewed as a channels-first image or signal
(PyTorch decoders: ``Linear -> ReLU -> view(N, C, H, W) -> ConvTranspose2d``) becomes the dense
layer with its output rows in channels-last order, ``Reshape (N, H, W, C) -> Transpose (0, 3, 1,
2)``; onnxruntime with every optimization off computes the same function from both graphs, float
and QDQ (per-tensor and per-channel weights). The importer holds that view, and Keras'
``Dense -> Reshape((H, W, C)) -> Transpose``, as the dense layer's output image: the golden
integer graph against onnxruntime's spec session on the QDQ models (every element), the forms the
rule does not cover refused in one line, and float decoders quantized by onnx2hw's post-training
quantizer compiled and simulated bit-exact."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T, helper as h

import onnx2hw
from _canon_models import assert_same_function, model, ops, w
from _quant_models import compare_with_ort, quantize, random_inputs
from onnx2hw.canon import canonicalize
from onnx2hw.canon.vector_images import vector_images
from onnx2hw.ir import load
from onnx2hw.ir.errors import UnsupportedError
from onnx2hw.quant import ptq, to_integer_graph

C, H, W = 4, 3, 3
F = C * H * W


def _i64(*v):
    return np.array(v, np.int64)


def _decoder(form="gemm", act="Relu", view=(C, H, W)):
    """``x (N, 8) -> dense (F) -> act -> view -> ConvTranspose(C -> 2, k 3, stride 2, pad 1)``.
    ``form``: ``gemm`` (torch's Linear: transB=1, bias (F,)), ``gemm_nt`` (transB=0, bias (1, F)),
    ``matmul`` (no bias), ``keras`` (Reshape to the channels-last (H, W, C) then Transpose(0, 3, 1,
    2), as tf2onnx writes Keras' Reshape before Conv2DTranspose). ``view``: ``(C, H, W)`` or the
    signal ``(C, L)``."""
    k = [3] * (len(view) - 1)
    inits = {"Wt": w(C, 2, *k), "bt": w(2)}
    if form == "gemm":
        nodes, inits = [h.make_node("Gemm", ["x", "Wd", "bd"], ["d"], name="fc", transB=1)], \
            dict(inits, Wd=w(F, 8), bd=w(F))
    elif form == "gemm_nt":
        nodes, inits = [h.make_node("Gemm", ["x", "Wd", "bd"], ["d"], name="fc")], dict(inits, Wd=w(8, F), bd=w(1, F))
    else:
        nodes, inits = [h.make_node("MatMul", ["x", "Wd"], ["d"], name="fc")], dict(inits, Wd=w(8, F))
    if act == "Clip":
        nodes.append(h.make_node("Clip", ["d", "lo", "hi"], ["a"]))
        inits.update(lo=np.float32(0), hi=np.float32(6))
    else:
        nodes.append(h.make_node(act, ["d"], ["a"]))
    if form == "keras":
        nodes += [h.make_node("Reshape", ["a", "shape"], ["v_hwc"], name="view"),
                  h.make_node("Transpose", ["v_hwc"], ["v"], perm=[0, len(view)] + list(range(1, len(view))))]
        inits["shape"] = _i64(-1, *view[1:], view[0])
    else:
        nodes.append(h.make_node("Reshape", ["a", "shape"], ["v"], name="view"))
        inits["shape"] = _i64(-1, *view)
    strides = dict(strides=[2] * len(k), pads=[1] * (2 * len(k)), output_padding=[1] * len(k))
    nodes.append(h.make_node("ConvTranspose", ["v", "Wt", "bt"], ["y"], name="up", **strides))
    out = [2] + [2 * d for d in view[1:]]
    return model(nodes, ("x", ["N", 8]), ("y", ["N", *out]), inits, opset=17, ir=8)


FORMS = [("gemm", "Relu", (C, H, W)), ("gemm_nt", "Clip", (C, H, W)), ("matmul", "Relu", (C, H, W)),
         ("gemm", "Relu", (C, 9)), ("gemm", "Sigmoid", (C, H, W))]


@pytest.mark.parametrize("form,act,view", FORMS)
def test_rule_puts_the_vector_in_channels_last_order(form, act, view):
    m = _decoder(form, act, view)
    g = vector_images(load(m))
    rank = len(view) + 1
    assert ops(g)[-3:] == ["Reshape", "Transpose", "ConvTranspose"]
    t = next(n for n in g.nodes if n.op_type == "Transpose")
    assert list(t.attr("perm")) == [0, rank - 1] + list(range(1, rank - 1))
    assert_same_function(m, g)
    assert vector_images(g) is g   # its own form is left alone


def test_keras_channels_last_view_is_left_alone():
    g = load(_decoder("keras"))
    assert vector_images(g) is g


def test_one_pixel_gate_is_left_alone():
    """A vector viewed as ``(C, 1, 1)`` (a squeeze-excite gate) is streamed as the vector itself."""
    m = model([h.make_node("Gemm", ["x", "Wd", "bd"], ["d"], transB=1), h.make_node("Sigmoid", ["d"], ["s"]),
               h.make_node("Reshape", ["s", "shape"], ["v"]), h.make_node("Mul", ["v", "img"], ["y"])],
              ("x", ["N", 8]), ("y", ["N", C, H, W]), {"Wd": w(C, 8), "bd": w(C), "shape": _i64(-1, C, 1, 1),
                                                        "img": w(1, C, H, W)})
    g = load(m)
    assert vector_images(g) is g


def _two_readers():
    """The vector is also a model output: its order is not the dense layer's to change."""
    m = _decoder("gemm")
    m.graph.output.append(h.make_tensor_value_info("a", T.FLOAT, ["N", F]))
    return m


def test_vector_with_another_reader_is_left_alone():
    g = load(_two_readers())
    assert vector_images(g) is g


@pytest.mark.parametrize("per_channel", [False, True])
def test_qdq_rule_and_import_match_onnxruntime(per_channel, tmp_path):
    """onnxruntime's QDQ quantization (per-channel: per-row weight scales, which the rule permutes
    with the rows): the canonical graph computes what the QDQ graph does, and the golden integer
    graph equals onnxruntime's spec session on every element."""
    m = _decoder("gemm")
    path = quantize(m, tmp_path, per_channel=per_channel)
    q = onnx.load(path)
    g = vector_images(load(q))
    assert "Transpose" in ops(g)
    if per_channel:
        dq = next(n for n in g.nodes if n.op_type == "DequantizeLinear" and
                  n.outputs[0] in next(c for c in g.nodes if c.op_type == "Gemm").inputs[1:2])
        assert np.size(g.initializers[dq.inputs[1]]) == F
    assert_same_function(q, g)
    igraph = to_integer_graph(canonicalize(load(path)))
    fc = next(layer for layer in igraph.layers if layer.name == "fc")
    assert fc.output.shape == (H, W, C)
    assert compare_with_ort(path, igraph, random_inputs(m, 16, 3)) == (1.0, 0.0)


@pytest.mark.parametrize("view,held", [((C, H, W), (H, W, C)), ((C, 9), (1, 9, C))])
def test_keras_form_import_matches_onnxruntime(view, held, tmp_path):
    """Keras' channels-last view needs no rule: the dense layer's tensor holds the image (a
    signal as the ``H = 1`` image)."""
    m = _decoder("keras", view=view)
    path = quantize(m, tmp_path)
    g = load(path)
    assert vector_images(g) is g
    igraph = to_integer_graph(g)
    assert next(layer for layer in igraph.layers if layer.name == "fc").output.shape == held
    assert compare_with_ort(path, igraph, random_inputs(m, 16, 3)) == (1.0, 0.0)


def _image_output():
    """The viewed vector is the model's output image (NCHW, as the model returns it)."""
    return model([h.make_node("Gemm", ["x", "Wd", "bd"], ["d"], transB=1, name="fc"), h.make_node("Relu", ["d"], ["a"]),
                  h.make_node("Reshape", ["a", "shape"], ["y"], name="view")], ("x", ["N", 8]), ("y", ["N", C, H, W]),
                 {"Wd": w(F, 8), "bd": w(F), "shape": _i64(-1, C, H, W)}, opset=17, ir=8)


def test_image_output_matches_onnxruntime():
    m = _image_output()
    assert_same_function(m, vector_images(load(m)))
    x = random_inputs(m, 16, 2)
    q = ptq.quantize(m, {"x": x})
    assert compare_with_ort(q, to_integer_graph(load(q)), x) == (1.0, 0.0)


def _one_pixel_decoder():
    """``x (N, 8) -> Linear (C) -> ReLU -> view (C, 1, 1) -> ConvTranspose (k 4)``: a VAE's or a
    DCGAN's first up-sampling from a one-pixel image (the dense layer's output held as it)."""
    return model([h.make_node("Gemm", ["x", "Wd", "bd"], ["d"], transB=1, name="fc"), h.make_node("Relu", ["d"], ["a"]),
                  h.make_node("Reshape", ["a", "shape"], ["v"], name="view"),
                  h.make_node("ConvTranspose", ["v", "Wt", "bt"], ["y"], name="up")],
                 ("x", ["N", 8]), ("y", ["N", 2, 4, 4]),
                 {"Wd": w(C, 8), "bd": w(C), "shape": _i64(-1, C, 1, 1), "Wt": w(C, 2, 4, 4), "bt": w(2)},
                 opset=17, ir=8)


def test_one_pixel_image_from_a_dense_layer_matches_onnxruntime():
    m = _one_pixel_decoder()
    x = random_inputs(m, 16, 4)
    q = ptq.quantize(m, {"x": x})
    igraph = to_integer_graph(canonicalize(load(q)))
    assert next(layer for layer in igraph.layers if layer.name == "fc").output.shape == (1, 1, C)
    assert compare_with_ort(q, igraph, x) == (1.0, 0.0)


def _input_view(keras=False):
    """The model input (N, F) through a ReLU (a table) viewed as an image: no dense layer makes
    the vector (``keras``: viewed channels-last, then a Transpose to channels first)."""
    view = [h.make_node("Reshape", ["a", "shape"], ["v_hwc" if keras else "v"], name="view")]
    view += [h.make_node("Transpose", ["v_hwc"], ["v"], perm=[0, 3, 1, 2])] if keras else []
    return model([h.make_node("Relu", ["x"], ["a"]), *view,
                  h.make_node("ConvTranspose", ["v", "Wt"], ["y"], strides=[2, 2])],
                 ("x", ["N", F]), ("y", ["N", 2, 2 * H + 1, 2 * W + 1]),
                 {"shape": _i64(-1, H, W, C) if keras else _i64(-1, C, H, W), "Wt": w(C, 2, 3, 3)}, opset=17, ir=8)


_NOT_DENSE = r"^node 'view' \(Reshape\): a vector \(36,\) viewed as \(4, 3, 3\) is supported only as the output of a " \
    r"dense layer that nothing else reads \(through elementwise ops\), or viewed channels-last"


@pytest.mark.parametrize("make,text", [
    (_two_readers, _NOT_DENSE),
    (_input_view, _NOT_DENSE),
    (lambda: _input_view(keras=True), r"^node 'view' \(Reshape\): views the output of Lookup layer '[^']+' as the "
                                      r"image \(3, 3, 4\): only a dense layer's output can be$"),
])
def test_uncovered_views_are_refused_in_one_line(make, text):
    m = make()
    q = ptq.quantize(m, {"x": random_inputs(m, 8, 0)})
    with pytest.raises(UnsupportedError, match=text) as e:
        to_integer_graph(canonicalize(load(q)))
    assert "\n" not in str(e.value)


@pytest.mark.sim
@pytest.mark.parametrize("form,view", [("gemm", (C, H, W)), ("keras", (C, H, W)), ("matmul", (C, 9))])
def test_float_decoder_simulates_bit_exact(form, view):
    """onnx2hw's post-training quantizer, golden against onnxruntime's spec session on its QDQ
    model, then the compiled design simulated: every element equals the golden."""
    m = _decoder(form, "Relu", view)
    x = random_inputs(m, 24, 5) * 2 - 1
    q = ptq.quantize(m, {"x": x})
    assert compare_with_ort(q, to_integer_graph(load(q)), x[:16]) == (1.0, 0.0)
    design = onnx2hw.compile(m, board="ulx3s", calib={"x": x})
    design.simulate({"x": x[:4]})


@pytest.mark.sim
def test_one_pixel_decoder_simulates_bit_exact():
    m = _one_pixel_decoder()
    x = random_inputs(m, 8, 6) * 2 - 1
    onnx2hw.compile(m, board="ulx3s", calib={"x": x}).simulate({"x": x[:4]})
