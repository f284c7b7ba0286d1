"""Resize layer kind: nearest-neighbour upsampling by integer factors, in the forms exporters write
(torch: Resize-13 asymmetric/floor with scales; Keras/tf2onnx: asymmetric or tf_half_pixel_for_nn
with floor; sizes instead of scales; opset-10 Resize; Upsample-9). Truth: onnxruntime's spec-exact
session on the QDQ graph (a data move: identical); hardware bit-exact under random backpressure;
other modes and mappings refused naming node and mode."""
import numpy as np
import pytest
from onnx import TensorProto, helper

from _branch_models import const, qdq, qdq_model
from _oracle import run_spec
from onnx2hw import golden
from _pysim_check import assert_hardware_is_golden
from onnx2hw.dataflow import compile_pipeline
from onnx2hw.ir import UnsupportedError, load
from onnx2hw.layers import IntType, TensorSpec, dequantize_outputs, quantize_inputs
from onnx2hw.layers.resize import Resize
from onnx2hw.quant import quantize, to_integer_graph

pytestmark = pytest.mark.filterwarnings("ignore::amaranth.hdl._ir.UnusedElaboratable")


def _model(op="Resize", opset=13, scales=(1, 1, 2, 2), sizes=None, **attrs):
    nodes, inits = [], []
    _, xd = qdq(nodes, inits, "x", "x", 0.02, 128)
    if op == "Upsample":
        inits.append(const("sc", np.asarray(scales, np.float32)))
        ins = [xd, "sc"]
    elif opset == 10:
        inits.append(const("sc", np.asarray(scales, np.float32)))
        ins = [xd, "sc"]
    elif sizes is not None:
        inits.append(const("sz", np.asarray(sizes, np.int64)))
        ins = [xd, "", "", "sz"]
        if "axes" in attrs:
            sizes = (1, 2) + tuple(sizes)
    else:
        inits.append(const("sc", np.asarray(scales, np.float32)))
        ins = [xd, "", "sc"]
    nodes.append(helper.make_node(op, ins, ["r"], name="up", **attrs))
    _, yd = qdq(nodes, inits, "r", "y", 0.02, 128)
    nodes.append(helper.make_node("Identity", [yd], ["out"], name="out"))
    h, w = 3, 4
    oh, ow = (sizes[2], sizes[3]) if sizes is not None else (int(h * scales[2]), int(w * scales[3]))
    return qdq_model(nodes, inits, (2, h, w), "out", (2, oh, ow), opset=opset)


FORMS = {
    "torch": dict(mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
    "keras_asymmetric": dict(mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor",
                             scales=(1, 1, 2, 3)),
    "keras_half_pixel": dict(mode="nearest", coordinate_transformation_mode="tf_half_pixel_for_nn",
                             nearest_mode="floor"),
    "half_pixel_x3": dict(mode="nearest", coordinate_transformation_mode="half_pixel", scales=(1, 1, 3, 3)),
    "sizes": dict(mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor",
                  sizes=(1, 2, 6, 8)),
    "sizes_axes": dict(mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor",
                       sizes=(6, 12), axes=[2, 3], opset=18),
    "resize10": dict(mode="nearest", opset=10),
}


def _x(n=8):
    return np.random.default_rng(4).uniform(-2.6, 2.6, (n, 2, 3, 4)).astype(np.float32)


@pytest.mark.parametrize("form", list(FORMS))
def test_exporter_forms_match_onnxruntime_exactly(form):
    m = _model(**FORMS[form])
    ig = to_integer_graph(load(m))
    assert [type(layer) for layer in ig.layers] == [Resize]
    got = dequantize_outputs(ig, golden.execute(ig, quantize_inputs(ig, {"x": _x()})))["out"]
    # sizes name the batch too (1): the model is run one sample at a time
    want = np.concatenate([run_spec(m, {"x": _x()[i:i + 1]})[0] for i in range(len(_x()))])
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("form", ["torch", "keras_asymmetric"])
def test_hardware_is_bit_exact(form):
    ig = to_integer_graph(load(_model(**FORMS[form])))
    p = compile_pipeline(ig, folding={"up": (2, 2)})
    assert p.stages[0].blocks[0].kind == "UpsampleUnit"
    assert_hardware_is_golden(p, 3, input_seed=3, seed=2)


@pytest.mark.parametrize("attrs, msg", [
    (dict(mode="linear"), r"node 'up' \(Resize\): mode 'linear' is not supported"),
    (dict(mode="nearest", coordinate_transformation_mode="align_corners", nearest_mode="floor"),
     r"node 'up' \(Resize\): mode nearest with coordinate_transformation_mode 'align_corners'"),
    (dict(mode="nearest", scales=(1, 1, 0.5, 0.5)), r"node 'up' \(Resize\): mode nearest .*integer upsampling"),
    (dict(mode="nearest", scales=(1, 1, 1.5, 2)), r"node 'up' \(Resize\): mode nearest .*integer upsampling"),
])
def test_other_modes_are_refused_naming_node_and_mode(attrs, msg):
    scales = attrs.pop("scales", (1, 1, 2, 2))
    m = _model(scales=scales, **attrs)
    with pytest.raises(UnsupportedError, match=msg):
        to_integer_graph(load(m))


def test_reference_repeats_rows_and_pixels():
    layer = Resize("r", ("x",), TensorSpec("y", (4, 9, 2), IntType(8, False)), (2, 3))
    layer.validate([TensorSpec("x", (2, 3, 2), IntType(8, False))])
    x = np.arange(12).reshape(1, 2, 3, 2)
    y = layer.reference(x)
    for h in range(4):
        for w in range(9):
            np.testing.assert_array_equal(y[0, h, w], x[0, h // 2, w // 3])


def _qonnx_upsample():
    """QONNX (opset 9): Quant (uint8) -> Upsample-9 x2 -> Quant (same parameters)."""
    q = "qonnx.custom_op.general"
    nodes = [helper.make_node("Quant", ["x", "s", "z", "bw"], ["xq"], name="q_in", domain=q, signed=0, narrow=0,
                              rounding_mode="ROUND"),
             helper.make_node("Upsample", ["xq", "sc"], ["u"], name="up", mode="nearest"),
             helper.make_node("Quant", ["u", "s", "z", "bw"], ["out"], name="q_out", domain=q, signed=0, narrow=0,
                              rounding_mode="ROUND")]
    inits = [const("s", np.float32(0.02)), const("z", np.float32(128)), const("bw", np.float32(8)),
             const("sc", np.asarray([1, 1, 2, 2], np.float32))]
    return qdq_model(nodes, inits, (2, 3, 4), "out", (2, 6, 8), opset=9, extra_opsets=[helper.make_opsetid(q, 1)])


def test_qonnx_upsample9_is_the_repeat_of_the_quantized_input():
    m = _qonnx_upsample()
    ig = to_integer_graph(load(m))
    assert [type(layer) for layer in ig.layers] == [Resize]
    got = dequantize_outputs(ig, golden.execute(ig, quantize_inputs(ig, {"x": _x()})))["out"]
    # QONNX Quant (spec formula, int64): q = clip(round_half_even(x / s) + z, 0, 255); y = (q - z) * s
    q = np.clip(np.rint(_x() / np.float32(0.02)).astype(np.int64) + 128, 0, 255)
    want = ((np.repeat(np.repeat(q, 2, axis=2), 2, axis=3) - 128) * np.float32(0.02)).astype(np.float32)
    np.testing.assert_array_equal(got, want)


def test_ptq_writes_a_float_upsample_as_resize():
    g = helper.make_graph([helper.make_node("Upsample", ["x", "sc"], ["y"], name="up", mode="nearest")], "u",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 2, 3, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 2, 6, 8])],
                          [const("sc", np.asarray([1, 1, 2, 2], np.float32))])
    f = helper.make_model(g, opset_imports=[helper.make_opsetid("", 9)], ir_version=8)
    q = quantize(f, {"x": _x(32)})
    assert [n.op_type for n in q.graph.node if n.op_type in ("Upsample", "Resize")] == ["Resize"]
    ig = to_integer_graph(load(q))
    got = dequantize_outputs(ig, golden.execute(ig, quantize_inputs(ig, {"x": _x()})))["y"]
    np.testing.assert_array_equal(got, run_spec(q, {"x": _x()})[0])
