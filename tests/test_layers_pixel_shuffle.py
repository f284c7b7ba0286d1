"""PixelShuffle layer kind: DepthToSpace (DCR, CRD; opset 1-10 without a mode) and SpaceToDepth
between QDQ pairs of one scale (onnxruntime's QDQ form of a data move). Truth: onnxruntime's
spec-exact session on the QDQ graph, or onnx.reference where onnxruntime has no kernel
(the opset-28 SpaceToDepth mode); hardware bit-exact under random backpressure at several foldings;
a float model in the forms PyTorch's exporters write (Conv, Relu, DepthToSpace CRD or, before
opset 11, its view chain, Conv) quantized by onnx2hw: compile's golden equals onnxruntime on the QDQ model, and its simulation
is bit-exact; unsupported forms refused in one line naming the node."""
import numpy as np
import pytest
from onnx import TensorProto, helper

import onnx2hw
from _branch_models import const, qdq, qdq_model
from _oracle import reference, run_spec, spec_session
from _pysim_check import assert_hardware_is_golden
from _quant_models import compare_with_ort, quantize
from onnx2hw import golden
from onnx2hw.dataflow import compile_pipeline
from onnx2hw.ir import UnsupportedError, load
from onnx2hw.layers import IntType, TensorSpec, dequantize_outputs, quantize_inputs
from onnx2hw.layers.pixel_shuffle import PixelShuffle
from onnx2hw.quant import ptq, to_integer_graph

pytestmark = pytest.mark.filterwarnings("ignore::amaranth.hdl._ir.UnusedElaboratable")


def _model(op="DepthToSpace", c=8, h=3, w=2, r=2, opset=13, **attrs):
    """x (N, c, h, w) -> Q/DQ -> op -> Q/DQ (the same scale and zero point) -> out."""
    nodes, inits = [], []
    _, xd = qdq(nodes, inits, "x", "x", 0.02, 128)
    nodes.append(helper.make_node(op, [xd], ["p"], name="ps", blocksize=r, **attrs))
    _, yd = qdq(nodes, inits, "p", "y", 0.02, 128)
    nodes.append(helper.make_node("Identity", [yd], ["out"], name="out"))
    out = (c // (r * r), h * r, w * r) if op == "DepthToSpace" else (c * r * r, h // r, w // r)
    return qdq_model(nodes, inits, (c, h, w), "out", out, opset=opset)


def _x(shape, n=6, seed=4):
    return np.random.default_rng(seed).uniform(-2.6, 2.6, (n, *shape)).astype(np.float32)


FORMS = {   # name: (model arguments, input shape)
    "d2s_dcr": (dict(mode="DCR"), (8, 3, 2)),
    "d2s_crd": (dict(mode="CRD"), (8, 3, 2)),
    "d2s_crd_r3": (dict(mode="CRD", c=18, r=3), (18, 3, 2)),
    "d2s_default": (dict(c=9, r=3), (9, 3, 2)),
    "d2s_opset10": (dict(opset=10), (8, 3, 2)),
    "s2d": (dict(op="SpaceToDepth", c=3, h=4, w=6), (3, 4, 6)),
    "s2d_r3": (dict(op="SpaceToDepth", c=2, h=6, w=3, r=3), (2, 6, 3)),
}


def _golden(m, x):
    ig = to_integer_graph(load(m))
    assert [type(layer) for layer in ig.layers] == [PixelShuffle]
    return dequantize_outputs(ig, golden.execute(ig, quantize_inputs(ig, {"x": x})))["out"]


@pytest.mark.parametrize("form", list(FORMS))
def test_forms_match_onnxruntime_exactly(form):
    kw, shape = FORMS[form]
    m = _model(**kw)
    x = _x(shape)
    np.testing.assert_array_equal(_golden(m, x), run_spec(m, {"x": x})[0])


def test_space_to_depth_crd_matches_onnx_reference():
    """SpaceToDepth's ``mode`` (opset 28): onnx.reference is the oracle."""
    m = _model(op="SpaceToDepth", c=3, h=4, w=6, opset=28, mode="CRD")
    x = _x((3, 4, 6))
    np.testing.assert_array_equal(_golden(m, x), reference(m, {"x": x})[0])


@pytest.mark.parametrize("form, pe", [("d2s_dcr", 1), ("d2s_dcr", 2), ("d2s_crd", 1), ("d2s_crd", 2),
                                      ("d2s_crd_r3", 2), ("d2s_default", 1), ("s2d", 3), ("s2d_r3", 1)])
def test_hardware_is_bit_exact(form, pe):
    kw, _ = FORMS[form]
    p = compile_pipeline(to_integer_graph(load(_model(**kw))), folding={"ps": (pe, pe)})
    kinds = [b.kind for b in p.stages[0].blocks]
    crd_lanes = kw.get("mode") == "CRD" and pe > 1
    assert kinds == (["ChannelSelectUnit", "PixelShuffleUnit"] if crd_lanes else ["PixelShuffleUnit"])
    assert_hardware_is_golden(p, 3, input_seed=3, seed=2)


def test_space_to_depth_crd_on_lanes_is_bit_exact():
    p = compile_pipeline(to_integer_graph(load(_model(op="SpaceToDepth", c=2, h=4, w=2, opset=28, mode="CRD"))),
                         folding={"ps": (2, 2)})
    assert [b.kind for b in p.stages[0].blocks] == ["PixelShuffleUnit", "ChannelSelectUnit"]
    assert_hardware_is_golden(p, 3, input_seed=5, seed=3)


def test_reference_follows_the_spec_index_formula():
    """y[h*r + i, w*r + j, c] = x[h, w, k]: DCR k = (i*r + j)*C + c, CRD k = c*r*r + i*r + j."""
    r, c = 3, 2
    x = np.arange(2 * 2 * c * r * r).reshape(1, 2, 2, c * r * r)
    for mode, k in (("DCR", lambda i, j, ch: (i * r + j) * c + ch), ("CRD", lambda i, j, ch: ch * r * r + i * r + j)):
        layer = PixelShuffle("p", ("x",), TensorSpec("y", (6, 6, c), IntType(8, False)), "depth_to_space", r, mode)
        layer.validate([TensorSpec("x", (2, 2, c * r * r), IntType(8, False))])
        y = layer.reference(x)
        back = PixelShuffle("q", ("y",), TensorSpec("z", (2, 2, c * r * r), IntType(8, False)), "space_to_depth", r,
                            mode)
        np.testing.assert_array_equal(back.reference(y), x)
        for hh in range(6):
            for ww in range(6):
                for ch in range(c):
                    assert y[0, hh, ww, ch] == x[0, hh // r, ww // r, k(hh % r, ww % r, ch)]


def test_blocksize_one_is_no_layer():
    ig = to_integer_graph(load(_model(c=4, r=1)))
    assert not any(isinstance(layer, PixelShuffle) for layer in ig.layers)


def test_channels_last_input_is_refused_naming_the_node():
    """A DepthToSpace of an NHWC view (a Transpose to channels last in front) is not an image
    the hardware holds in that order: one line naming the node."""
    nodes, inits = [], []
    _, xd = qdq(nodes, inits, "x", "x", 0.02, 128)
    nodes.append(helper.make_node("Transpose", [xd], ["t"], name="nhwc", perm=[0, 2, 3, 1]))
    nodes.append(helper.make_node("DepthToSpace", ["t"], ["p"], name="ps", blocksize=2, mode="CRD"))
    _, yd = qdq(nodes, inits, "p", "y", 0.02, 128)
    nodes.append(helper.make_node("Identity", [yd], ["out"], name="out"))
    m = qdq_model(nodes, inits, (2, 4, 8), "out", (4, 2, 2, 4))
    with pytest.raises(UnsupportedError, match=r"node 'ps' \(DepthToSpace\): input of shape .* is channels-last"):
        to_integer_graph(load(m))


# ---- a float model as PyTorch writes nn.PixelShuffle (ESPCN-style), quantized by onnx2hw ----------

def _espcn(r=2, form="op"):
    """Conv(3 -> 2*r*r, 3x3) -> Relu -> PixelShuffle(r) -> Conv(2 -> 2, 3x3) on (N, 3, 5, 4): ``op``
    as both exporters write it from opset 11 (DepthToSpace CRD, opset 13), ``views`` as the
    TorchScript exporter did before (opset 9: Reshape (N, 2, r, r, 5, 4), Transpose (0, 1, 4, 2,
    5, 3), Reshape (N, 2, 5r, 4r))."""
    rng = np.random.default_rng(7)
    w = lambda *s: rng.normal(0, 0.4, s).astype(np.float32)  # noqa: E731
    inits = {"W": w(2 * r * r, 3, 3, 3), "b": w(2 * r * r), "Wo": w(2, 2, 3, 3), "bo": w(2)}
    nodes = [helper.make_node("Conv", ["x", "W", "b"], ["c"], name="/c/Conv", pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
             helper.make_node("Relu", ["c"], ["a"], name="/Relu")]
    if form == "op":
        nodes.append(helper.make_node("DepthToSpace", ["a"], ["s"], name="/ps/DepthToSpace", blocksize=r, mode="CRD"))
    else:
        inits.update(s6=np.asarray([-1, 2, r, r, 5, 4], np.int64), s4=np.asarray([-1, 2, 5 * r, 4 * r], np.int64))
        nodes += [helper.make_node("Reshape", ["a", "s6"], ["v6"], name="/ps/Reshape"),
                  helper.make_node("Transpose", ["v6"], ["t6"], name="/ps/Transpose", perm=[0, 1, 4, 2, 5, 3]),
                  helper.make_node("Reshape", ["t6", "s4"], ["s"], name="/ps/Reshape_1")]
    nodes.append(helper.make_node("Conv", ["s", "Wo", "bo"], ["y"], name="/o/Conv", pads=[1, 1, 1, 1],
                                  kernel_shape=[3, 3]))
    g = helper.make_graph(nodes, "espcn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 5, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 2, 5 * r, 4 * r])],
                          [const(k, v) for k, v in inits.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13 if form == "op" else 9)], ir_version=8)


def _calib(n=48, seed=0):
    return np.random.default_rng(seed).standard_normal((n, 3, 5, 4)).astype(np.float32)


@pytest.mark.parametrize("r, form", [(2, "op"), (3, "op"), (2, "views"), (3, "views")])
def test_float_model_golden_is_onnxruntime_on_its_qdq_model(r, form):
    m = _espcn(r, form)
    q = ptq.quantize(m, {"x": _calib()})
    assert [n.op_type for n in q.graph.node if n.op_type == "DepthToSpace"] == ["DepthToSpace"]
    design = onnx2hw.compile(m, board="ulx3s", calib={"x": _calib()})
    # the CRD order went into the first convolution's output channels (canon.channels)
    layers = design.integer.layers
    assert [type(layer).__name__ for layer in layers] == ["Conv", "PixelShuffle", "Conv"] and layers[1].mode == "DCR"
    x = _calib(12, 1)
    want = spec_session(q).run(None, {"x": x})[0]
    got = design.golden({"x": x})["y"]
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6 * np.abs(want).max())


@pytest.mark.sim
@pytest.mark.parametrize("r, form", [(2, "op"), (3, "op"), (2, "views")])
def test_float_model_simulates_bit_exact(r, form):
    onnx2hw.compile(_espcn(r, form), board="ulx3s", calib={"x": _calib()}).simulate({"x": _calib(6, 2)})


@pytest.mark.parametrize("fmt", ["qdq", "qop"])
def test_onnxruntime_quantized_model(fmt, tmp_path):
    """onnxruntime's quantizer leaves DepthToSpace in float between a DequantizeLinear and a
    QuantizeLinear; its calibration sees the same values on both sides (a permutation), so the
    two grids are one: the layer keeps it. QDQ: exact against the spec session; QOperator:
    its convolutions run onnxruntime's integer kernels (not exact on CPUs without VNNI), so
    within one step."""
    path = quantize(_espcn(2), tmp_path, fmt=fmt, calib=_calib(32))
    ig = to_integer_graph(load(path))
    assert [type(layer).__name__ for layer in ig.layers] == ["Conv", "PixelShuffle", "Conv"]
    same, worst = compare_with_ort(path, ig, _calib(8, 3))
    assert ((same, worst) == (1.0, 0.0)) if fmt == "qdq" else worst <= 1.0


def test_qonnx_depth_to_space_is_the_shuffle_of_the_quantized_input():
    """QONNX: Quant (uint8) -> DepthToSpace(2, CRD) -> Quant (same parameters). Expected: the
    QONNX Quant formula and the ONNX DepthToSpace definition (reshape, transpose, reshape), int64."""
    q = "qonnx.custom_op.general"
    nodes = [helper.make_node("Quant", ["x", "s", "z", "bw"], ["xq"], name="q_in", domain=q, signed=0, narrow=0,
                              rounding_mode="ROUND"),
             helper.make_node("DepthToSpace", ["xq"], ["d"], name="ps", blocksize=2, mode="CRD"),
             helper.make_node("Quant", ["d", "s", "z", "bw"], ["out"], name="q_out", domain=q, signed=0, narrow=0,
                              rounding_mode="ROUND")]
    inits = [const("s", np.float32(0.02)), const("z", np.float32(128)), const("bw", np.float32(8))]
    m = qdq_model(nodes, inits, (8, 3, 2), "out", (2, 6, 4), extra_opsets=[helper.make_opsetid(q, 1)])
    ig = to_integer_graph(load(m))
    assert [type(layer) for layer in ig.layers] == [PixelShuffle]
    x = _x((8, 3, 2))
    got = dequantize_outputs(ig, golden.execute(ig, quantize_inputs(ig, {"x": x})))["out"]
    # Quant: q = clip(round_half_even(x / s) + z, 0, 255); DepthToSpace CRD: (N, C/4, 2, 2, H, W) -> (0, 1, 4, 2, 5, 3)
    qx = np.clip(np.rint(x / np.float32(0.02)).astype(np.int64) + 128, 0, 255)
    n = len(qx)
    d2s = qx.reshape(n, 2, 2, 2, 3, 2).transpose(0, 1, 4, 2, 5, 3).reshape(n, 2, 6, 4)
    np.testing.assert_array_equal(got, ((d2s - 128) * np.float32(0.02)).astype(np.float32))
