"""PixelShuffleUnit: DepthToSpace (DCR, CRD) and SpaceToDepth bit-exact against int64 NumPy
formulas of the ONNX operator definitions under random backpressure (several images back to
back); cost model and parameter checks."""
import numpy as np
import pytest
from amaranth.hdl import signed, unsigned

from onnx2hw.rtl.pixel_shuffle import PixelShuffleUnit
from onnx2hw.rtl.synth_check import yosys_stat
from onnx2hw.sim.pysim import run_stream


def depth_to_space_nchw(x, r, mode):
    """The ONNX DepthToSpace definition (operator docs): reshape, transpose, reshape."""
    n, c, h, w = x.shape
    if mode == "DCR":
        t = x.reshape(n, r, r, c // (r * r), h, w).transpose(0, 3, 4, 1, 5, 2)
    else:
        t = x.reshape(n, c // (r * r), r, r, h, w).transpose(0, 1, 4, 2, 5, 3)
    return t.reshape(n, c // (r * r), h * r, w * r)


def space_to_depth_nchw(x, r, mode):
    """The ONNX SpaceToDepth definition (operator docs; ``mode`` from opset 28)."""
    n, c, h, w = x.shape
    t = x.reshape(n, c, h // r, r, w // r, r).transpose((0, 3, 5, 1, 2, 4) if mode == "DCR" else (0, 1, 3, 5, 2, 4))
    return t.reshape(n, c * r * r, h // r, w // r)


def _codes(rng, shape, size):
    lo, hi = (-(1 << (shape.width - 1)), (1 << (shape.width - 1)) - 1) if shape.signed else (0, (1 << shape.width) - 1)
    return rng.integers(lo, hi, size=size, endpoint=True, dtype=np.int64)


def _nhwc(x):
    return x.transpose(0, 2, 3, 1)


CASES = [  # (shape, h, w, c, r, mode, lanes): (h, w) the deep side, c the shallow side's channels
    (unsigned(8), 2, 3, 2, 2, "DCR", 1), (signed(8), 3, 2, 2, 2, "CRD", 1), (signed(6), 2, 2, 3, 3, "DCR", 3),
    (unsigned(4), 2, 3, 2, 3, "CRD", 1), (signed(8), 3, 4, 4, 2, "DCR", 2), (unsigned(8), 1, 1, 1, 2, "DCR", 1),
    (signed(8), 2, 2, 4, 2, "DCR", 4), (unsigned(3), 2, 1, 1, 3, "CRD", 1), (signed(8), 2, 2, 3, 1, "DCR", 3)]


@pytest.mark.parametrize("shape, h, w, c, r, mode, lanes", CASES)
@pytest.mark.parametrize("pause", ["random", "3of4"])
def test_depth_to_space(shape, h, w, c, r, mode, lanes, pause):
    rng = np.random.default_rng(h * 1000 + w * 100 + c * 10 + r)
    x = _codes(rng, shape, (3, c * r * r, h, w))
    want = _nhwc(depth_to_space_nchw(x, r, mode))
    out, _ = run_stream(PixelShuffleUnit(shape, "depth_to_space", h, w, c, r, mode, lanes),
                        {"i": _nhwc(x).reshape(-1, lanes)}, {"o": want.size // lanes}, src_pause=pause,
                        sink_pause=pause, seed=r + lanes)
    np.testing.assert_array_equal(out["o"].reshape(want.shape), want)


@pytest.mark.parametrize("shape, h, w, c, r, mode, lanes", [
    (unsigned(8), 2, 3, 2, 2, "DCR", 1), (signed(8), 2, 2, 4, 2, "DCR", 2), (signed(6), 1, 2, 3, 3, "DCR", 3),
    (unsigned(4), 2, 1, 2, 3, "CRD", 1), (signed(8), 2, 3, 3, 2, "CRD", 1)])
@pytest.mark.parametrize("pause", ["random", "3of4"])
def test_space_to_depth(shape, h, w, c, r, mode, lanes, pause):
    rng = np.random.default_rng(h * 1000 + w * 100 + c * 10 + r)
    x = _codes(rng, shape, (3, c, h * r, w * r))
    want = _nhwc(space_to_depth_nchw(x, r, mode))
    out, _ = run_stream(PixelShuffleUnit(shape, "space_to_depth", h, w, c, r, mode, lanes),
                        {"i": _nhwc(x).reshape(-1, lanes)}, {"o": want.size // lanes}, src_pause=pause,
                        sink_pause=pause, seed=r + lanes)
    np.testing.assert_array_equal(out["o"].reshape(want.shape), want)


def test_full_rate_once_a_bank_is_in():
    """Double-buffered: with no stalls, three images of 4 rows take about their transfers plus
    one bank (the first row) and the 2-cycle read latency, not twice their transfers."""
    h, w, c, r = 4, 4, 2, 2
    x = _codes(np.random.default_rng(0), unsigned(8), (3, c * r * r, h, w))
    words = x.size
    _, cycles = run_stream(PixelShuffleUnit(unsigned(8), "depth_to_space", h, w, c, r), {"i": _nhwc(x).reshape(-1, 1)},
                           {"o": words}, check_comb=False)
    assert cycles <= words + w * c * r * r + 8, cycles


def test_estimate():
    e = PixelShuffleUnit.estimate(unsigned(8), "depth_to_space", 8, 8, 4, 2, "DCR", 2)
    assert e.cycles == 8 * 8 * 4 * 4 // 2 and e.dsp == 0
    big = PixelShuffleUnit.estimate(unsigned(8), "depth_to_space", 16, 32, 16, 2, "DCR", 1)
    assert big.ebr >= 2   # two rows of 32 kbit go to block RAM


@pytest.mark.parametrize("kw, err, msg", [
    (dict(channels=3, lanes=2), ValueError, "divide"), (dict(block=0), ValueError, "block"),
    (dict(op="shuffle"), ValueError, "op"), (dict(mode="XYZ"), ValueError, "mode"),
    (dict(mode="CRD"), ValueError, "lanes 1"), (dict(op="space_to_depth", mode="CRD"), ValueError, "lanes 1"),
    (dict(width=True), TypeError, "width"), (dict(elem_shape="x"), TypeError, "elem_shape")])
def test_rejects_bad_parameters(kw, err, msg):
    args = dict(elem_shape=unsigned(8), op="depth_to_space", height=2, width=2, channels=4, block=2, mode="DCR",
                lanes=2)
    args.update(kw)
    with pytest.raises(err, match=msg):
        PixelShuffleUnit(**args)


@pytest.mark.synth
@pytest.mark.parametrize("kw", [dict(height=4, width=4, channels=2, lanes=1), dict(height=16, width=16, channels=16,
                                                                                   lanes=4),
                                dict(height=8, width=32, channels=8, lanes=1)], ids=["lutram", "ebr4", "ebr1"])
def test_estimate_matches_yosys(kw):
    kw = dict(elem_shape=unsigned(8), op="depth_to_space", block=2, mode="DCR", **kw)
    st = yosys_stat(PixelShuffleUnit(**kw), "ecp5")
    est = PixelShuffleUnit.estimate(**kw, family="ecp5")
    assert est.dsp == st["dsp"] == 0 and est.ebr == st["ebr"], (est, st)
    assert abs(est.lut - st["lut"]) <= max(12, 0.4 * st["lut"]), (est, st)
