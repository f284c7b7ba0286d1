"""onnx2hw.canon.repeats: chains of views and tilings that repeat each pixel are a nearest
``Resize``. Graphs in the forms tf2onnx writes Keras' ``UpSampling2D``/``UpSampling1D`` (``repeat``:
``Unsqueeze -> Tile -> Reshape`` per axis, channels last between the converter's Transposes) and a
hand-written ``Expand`` form; onnxruntime with optimizations off computes the same function from
both graphs. End to end: quantized by onnx2hw, the golden against onnxruntime's spec session on
the QDQ model, the hardware simulated bit-exact."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper as h

import onnx2hw
from _canon_models import assert_same_function, model, ops, w
from _oracle import spec_session
from onnx2hw.canon import canonicalize
from onnx2hw.canon.repeats import nearest_repeats
from onnx2hw.ir import load
from onnx2hw.quant import ptq


def _i64(*v):
    return np.array(v, np.int64)


def _keras_upsampling2d(rh=2, rw=3, c=4, hw=(5, 6)):
    """Conv (NCHW) -> Relu -> Transpose to NHWC -> repeat rh along H, rw along W (Unsqueeze, Tile,
    Reshape each) -> Transpose to NCHW -> Conv."""
    H, W = hw
    nodes = [h.make_node("Conv", ["x", "W1"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             h.make_node("Relu", ["c"], ["r"]), h.make_node("Transpose", ["r"], ["nhwc"], perm=[0, 2, 3, 1]),
             h.make_node("Unsqueeze", ["nhwc", "ax2"], ["u1"]), h.make_node("Tile", ["u1", "rep1"], ["t1"]),
             h.make_node("Reshape", ["t1", "s1"], ["v1"]),
             h.make_node("Unsqueeze", ["v1", "ax3"], ["u2"]), h.make_node("Tile", ["u2", "rep2"], ["t2"]),
             h.make_node("Reshape", ["t2", "s2"], ["v2"]),
             h.make_node("Transpose", ["v2"], ["nchw"], perm=[0, 3, 1, 2]),
             h.make_node("Conv", ["nchw", "W2"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])]
    inits = {"W1": w(c, 3, 3, 3), "W2": w(2, c, 3, 3), "ax2": _i64(2), "ax3": _i64(3),
             "rep1": _i64(1, 1, rh, 1, 1), "s1": _i64(-1, H * rh, W, c),
             "rep2": _i64(1, 1, 1, rw, 1), "s2": _i64(-1, H * rh, W * rw, c)}
    return model(nodes, ("x", ["N", 3, H, W]), ("y", ["N", 2, H * rh, W * rw]), inits)


def _keras_upsampling1d(r=2, c=4, length=7):
    """Conv1D (NCL) -> Relu -> Transpose to NLC -> Unsqueeze, Tile, Reshape -> Transpose to NCL -> Conv1D."""
    nodes = [h.make_node("Conv", ["x", "W1"], ["c"], kernel_shape=[3], pads=[1, 1]),
             h.make_node("Relu", ["c"], ["r"]), h.make_node("Transpose", ["r"], ["nlc"], perm=[0, 2, 1]),
             h.make_node("Unsqueeze", ["nlc", "ax"], ["u"]), h.make_node("Tile", ["u", "rep"], ["t"]),
             h.make_node("Reshape", ["t", "s"], ["v"]), h.make_node("Transpose", ["v"], ["ncl"], perm=[0, 2, 1]),
             h.make_node("Conv", ["ncl", "W2"], ["y"], kernel_shape=[3], pads=[1, 1])]
    inits = {"W1": w(c, 3, 3), "W2": w(2, c, 3), "ax": _i64(2), "rep": _i64(1, 1, r, 1), "s": _i64(-1, length * r, c)}
    return model(nodes, ("x", ["N", 3, length]), ("y", ["N", 2, length * r]), inits)


def _expand_form(r=2, c=4, hw=(4, 5)):
    """``x[:, :, :, None, :, None].expand(N, C, H, r, W, r).reshape(N, C, rH, rW)`` (NCHW throughout)."""
    H, W = hw
    nodes = [h.make_node("Conv", ["x", "W1"], ["c"], kernel_shape=[1, 1]), h.make_node("Relu", ["c"], ["r"]),
             h.make_node("Reshape", ["r", "s6"], ["u"]), h.make_node("Expand", ["u", "e"], ["t"]),
             h.make_node("Reshape", ["t", "s4"], ["y0"]), h.make_node("Conv", ["y0", "W2"], ["y"], kernel_shape=[1, 1])]
    inits = {"W1": w(c, 3, 1, 1), "W2": w(2, c, 1, 1), "s6": _i64(-1, c, H, 1, W, 1), "e": _i64(1, 1, 1, r, 1, r),
             "s4": _i64(-1, c, H * r, W * r)}
    return model(nodes, ("x", ["N", 3, H, W]), ("y", ["N", 2, H * r, W * r]), inits)


FORMS = {"keras_2d": _keras_upsampling2d, "keras_2d_square": lambda: _keras_upsampling2d(2, 2),
         "keras_1d": _keras_upsampling1d, "expand": _expand_form}


@pytest.mark.parametrize("name", list(FORMS))
def test_repeat_chain_is_a_nearest_resize(name):
    m = FORMS[name]()
    g = canonicalize(load(m))
    assert "Resize" in ops(g) and "Tile" not in ops(g) and "Expand" not in ops(g)
    resize = next(n for n in g.nodes if n.op_type == "Resize")
    assert resize.attrs["mode"] in ("nearest", b"nearest")
    assert_same_function(m, g)


def test_tile_that_is_no_repeat_stays():
    """Tiling the whole image twice along H (``np.tile``, not ``np.repeat``) is no up-sampling."""
    nodes = [h.make_node("Relu", ["x"], ["r"]), h.make_node("Tile", ["r", "rep"], ["y"])]
    m = model(nodes, ("x", ["N", 3, 4, 4]), ("y", ["N", 3, 8, 4]), {"rep": _i64(1, 1, 2, 1)})
    g = nearest_repeats(load(m))
    assert ops(g) == ["Relu", "Tile"]


@pytest.mark.sim
@pytest.mark.parametrize("name", ["keras_2d", "keras_1d"])
def test_upsampling_from_float_matches_onnxruntime_and_simulates(name):
    m = FORMS[name]()
    shape = (3, 5, 6) if name == "keras_2d" else (3, 7)
    x = np.random.default_rng(3).standard_normal((24, *shape)).astype(np.float32)
    design = onnx2hw.compile(m, board="ulx3s", calib={"x": x})
    want = spec_session(ptq.quantize(m, {"x": x})).run(None, {"x": x[:8]})[0]
    np.testing.assert_allclose(design.golden({"x": x[:8]})["y"], want, rtol=0, atol=1e-6 * np.abs(want).max())
    design.simulate({"x": x[:2]})   # MismatchError unless bit-exact against the golden
