"""WidthConverter: element order kept across every lane ratio, throughput, cost model."""
import math

import numpy as np
import pytest
from amaranth.hdl import signed, unsigned

from onnx2hw.rtl.width import WidthConverter
from onnx2hw.sim.cocotb_run import run_cocotb
from _sim_fixtures import require_simulator
from onnx2hw.sim.pysim import run_stream

pytestmark = pytest.mark.filterwarnings("ignore:.*created but never used")


def _elems(shape, n, seed=0):
    lo, hi = (-(1 << (shape.width - 1)), 1 << (shape.width - 1)) if shape.signed else \
        (0, 1 << shape.width)
    return np.random.default_rng(seed).integers(lo, hi, size=n)


RATIOS = [(1, 1), (1, 4), (4, 1), (2, 6), (6, 2), (3, 2), (2, 3), (4, 6), (5, 3), (1, 7)]


@pytest.mark.parametrize("n_in,n_out", RATIOS)
@pytest.mark.parametrize("shape", [unsigned(1), signed(4), signed(8)])
@pytest.mark.parametrize("src,sink", [("none", "none"), ("random", "random")])
def test_width_keeps_order(n_in, n_out, shape, src, sink):
    lcm = math.lcm(n_in, n_out)
    e = _elems(shape, lcm * max(8, 240 // lcm), seed=n_in * 10 + n_out)
    out, cycles = run_stream(WidthConverter(shape, n_in, n_out), {"i": e.reshape(-1, n_in)},
                             {"o": len(e) // n_out}, src_pause=src, sink_pause=sink, seed=4)
    np.testing.assert_array_equal(out["o"].reshape(-1), e)
    if src == sink == "none":
        # min(n_in, n_out) elements per cycle, plus the pipeline latency
        est = WidthConverter.estimate(shape, n_in, n_out)
        ideal = len(e) // min(n_in, n_out)
        assert ideal <= cycles <= ideal + est.latency + 1 + lcm // min(n_in, n_out)


@pytest.mark.parametrize("n_in,n_out", [(2, 8), (8, 2), (3, 4)])
def test_width_long_stalled_stream(n_in, n_out):
    lcm = math.lcm(n_in, n_out)
    e = _elems(signed(8), lcm * (3000 // lcm), seed=9)
    out, _ = run_stream(WidthConverter(signed(8), n_in, n_out), {"i": e.reshape(-1, n_in)},
                        {"o": len(e) // n_out}, src_pause="3of4", sink_pause="random", seed=6)
    np.testing.assert_array_equal(out["o"].reshape(-1), e)


@pytest.mark.parametrize("bad,err,match", [
    (dict(elem_shape=signed(8), in_lanes=0, out_lanes=2), ValueError, "in_lanes must be >= 1"),
    (dict(elem_shape=signed(8), in_lanes=2, out_lanes="4"), TypeError,
     "out_lanes must be an integer, not '4'"),
])
def test_width_rejects_bad_parameters(bad, err, match):
    with pytest.raises(err, match=match):
        WidthConverter(**bad)
    with pytest.raises(err, match=match):
        WidthConverter.estimate(**bad)


@pytest.mark.sim
@pytest.mark.parametrize("n_in,n_out", [(4, 6)])
def test_width_cocotb(n_in, n_out):
    require_simulator()
    lcm = math.lcm(n_in, n_out)
    e = _elems(signed(8), lcm * 500, seed=1)
    out, _ = run_cocotb(WidthConverter(signed(8), n_in, n_out), {"i": e.reshape(-1, n_in)},
                        {"o": len(e) // n_out}, src_pause="random", sink_pause="3of4")
    np.testing.assert_array_equal(out["o"].reshape(-1), e)


@pytest.mark.synth
@pytest.mark.parametrize("family", ["ecp5", "ice40"])
def test_width_estimate_matches_yosys(family):
    from onnx2hw.rtl.synth_check import yosys_stat
    for shape, n_in, n_out in [(signed(8), 2, 8), (signed(8), 8, 2), (signed(4), 4, 6),
                               (unsigned(2), 16, 4)]:
        st = yosys_stat(WidthConverter(shape, n_in, n_out), family)
        est = WidthConverter.estimate(shape, n_in, n_out, family=family)
        where = (shape, n_in, n_out, est, st)
        assert (est.dsp, est.ebr) == (st["dsp"], st["ebr"]) == (0, 0), where
        assert abs(est.lut - st["lut"]) <= max(4, 0.3 * st["lut"]), where
        assert abs(est.ff - st["ff"]) <= max(4, 0.3 * st["ff"]), where
