"""UpsampleUnit: nearest-neighbour repetition of pixels and rows, bit-exact against np.repeat under
random backpressure (several images back to back); parameters checked."""
import numpy as np
import pytest
from amaranth.hdl import signed, unsigned

from onnx2hw.rtl.synth_check import yosys_stat
from onnx2hw.rtl.upsample import UpsampleUnit
from onnx2hw.sim.pysim import run_stream


@pytest.mark.parametrize("shape, h, w, c, sh, sw, lanes", [
    (unsigned(8), 3, 4, 2, 2, 2, 1), (signed(6), 2, 3, 4, 2, 3, 2), (unsigned(4), 4, 1, 3, 3, 1, 3),
    (signed(8), 2, 5, 2, 1, 2, 2), (unsigned(8), 3, 2, 1, 1, 1, 1)])
@pytest.mark.parametrize("pause", ["random", "3of4"])
def test_upsample_repeats_pixels_and_rows(shape, h, w, c, sh, sw, lanes, pause):
    rng = np.random.default_rng(h * 100 + w * 10 + c)
    lo, hi = (-(1 << (shape.width - 1)), (1 << (shape.width - 1)) - 1) if shape.signed else (0, (1 << shape.width) - 1)
    n = 3
    x = rng.integers(lo, hi, size=(n, h, w, c), endpoint=True)
    want = np.repeat(np.repeat(x, sh, axis=1), sw, axis=2)
    out, _ = run_stream(UpsampleUnit(shape, h, w, c, sh, sw, lanes), {"i": x.reshape(-1, lanes)},
                        {"o": want.size // lanes}, src_pause=pause, sink_pause=pause, seed=7)
    np.testing.assert_array_equal(out["o"].reshape(want.shape), want)


def test_estimate():
    c = UpsampleUnit.estimate(unsigned(8), 8, 8, 16, 2, 2, 4, family="ecp5")
    assert c.cycles == 8 * 2 * 8 * 2 * 16 // 4 and c.dsp == 0
    big = UpsampleUnit.estimate(unsigned(8), 8, 64, 64, 2, 2, 1, family="ecp5")
    assert big.ebr >= 2   # a 32 kbit row goes to block RAM


@pytest.mark.parametrize("kw, err, msg", [
    (dict(channels=3, lanes=2), ValueError, "divide"), (dict(scale_h=0), ValueError, "scale_h"),
    (dict(width=True), TypeError, "width"), (dict(elem_shape="x"), TypeError, "elem_shape")])
def test_upsample_rejects_bad_parameters(kw, err, msg):
    args = dict(elem_shape=unsigned(8), height=2, width=2, channels=4, scale_h=2, scale_w=2, lanes=2)
    args.update(kw)
    with pytest.raises(err, match=msg):
        UpsampleUnit(**args)


@pytest.mark.synth
@pytest.mark.parametrize("kw", [dict(height=4, width=4, channels=6, lanes=1), dict(height=16, width=16, channels=16,
                                                                                    lanes=4),
                                dict(height=16, width=32, channels=32, lanes=1)], ids=["lutram", "ebr4", "ebr1"])
def test_upsample_estimate_matches_yosys(kw):
    kw = dict(elem_shape=unsigned(8), scale_h=2, scale_w=2, **kw)
    st = yosys_stat(UpsampleUnit(**kw), "ecp5")
    est = UpsampleUnit.estimate(**kw, family="ecp5")
    assert est.dsp == st["dsp"] == 0 and est.ebr == st["ebr"], (est, st)
    assert abs(est.lut - st["lut"]) <= max(8, 0.4 * st["lut"]), (est, st)
