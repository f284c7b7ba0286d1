"""Fork: both outputs get every transfer, in order; one slow consumer does not lose data."""
import numpy as np
import pytest
from amaranth.hdl import signed, unsigned

from onnx2hw.rtl.fork import Fork
from onnx2hw.sim.cocotb_run import run_cocotb
from _sim_fixtures import random_transfers, require_simulator
from onnx2hw.sim.pysim import run_stream

pytestmark = pytest.mark.filterwarnings("ignore:.*created but never used")


_rand = random_transfers


@pytest.mark.parametrize("shape", [unsigned(1), signed(2), unsigned(4), signed(8)])
@pytest.mark.parametrize("lanes", [1, 4])
@pytest.mark.parametrize("src,sink", [("none", "none"), ("random", "random"), ("none", "3of4"),
                                      ("3of4", "random")])
def test_fork_copies(shape, lanes, src, sink):
    x = _rand(shape, lanes, 300, seed=lanes)
    out, cycles = run_stream(Fork(shape, lanes), {"i": x}, {"o0": len(x), "o1": len(x)},
                             src_pause=src, sink_pause=sink, seed=shape.width)
    np.testing.assert_array_equal(out["o0"], x)
    np.testing.assert_array_equal(out["o1"], x)
    if src == sink == "none":
        assert cycles == len(x)          # latency 0, one transfer per cycle


def test_fork_long_random_backpressure():
    x = _rand(signed(8), 2, 4000, seed=3)
    out, _ = run_stream(Fork(signed(8), 2), {"i": x}, {"o0": 4000, "o1": 4000},
                        src_pause="random", sink_pause="random", seed=21)
    np.testing.assert_array_equal(out["o0"], x)
    np.testing.assert_array_equal(out["o1"], x)


def test_fork_slow_consumer_delays_other_by_at_most_one():
    """o1 stalled for good: o0 takes the first transfer, then waits (taken flag)."""
    from amaranth.sim import Simulator
    dut = Fork(unsigned(4), 1)
    seen = []

    async def tb(ctx):
        ctx.set(dut.i.valid, 1)
        ctx.set(dut.i.payload[0], 5)
        ctx.set(dut.o0.ready, 1)
        ctx.set(dut.o1.ready, 0)
        for _ in range(4):
            seen.append((ctx.get(dut.o0.valid), ctx.get(dut.o1.valid), ctx.get(dut.i.ready)))
            await ctx.tick()
        ctx.set(dut.o1.ready, 1)
        seen.append((ctx.get(dut.o0.valid), ctx.get(dut.o1.valid), ctx.get(dut.i.ready)))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()
    assert seen == [(1, 1, 0), (0, 1, 0), (0, 1, 0), (0, 1, 0), (0, 1, 1)]


@pytest.mark.parametrize("bad,err,match", [
    (dict(elem_shape=signed(8), lanes=-2), ValueError, "lanes must be >= 1, not -2"),
    (dict(elem_shape=None), TypeError, "elem_shape must be a shape.*None"),
])
def test_fork_rejects_bad_parameters(bad, err, match):
    with pytest.raises(err, match=match):
        Fork(**bad)


@pytest.mark.sim
def test_fork_cocotb():
    require_simulator()
    x = _rand(signed(8), 3, 3000, seed=5)
    out, _ = run_cocotb(Fork(signed(8), 3), {"i": x}, {"o0": 3000, "o1": 3000},
                        src_pause="random", sink_pause="random", seed=2)
    np.testing.assert_array_equal(out["o0"], x)
    np.testing.assert_array_equal(out["o1"], x)


@pytest.mark.synth
def test_fork_estimate_matches_yosys():
    from onnx2hw.rtl.synth_check import yosys_stat
    for family in ("ecp5", "ice40"):
        st = yosys_stat(Fork(signed(8), 4), family)
        est = Fork.estimate(signed(8), 4, family=family)
        assert (est.dsp, est.ebr) == (st["dsp"], st["ebr"]) == (0, 0)
        assert abs(est.lut - st["lut"]) <= max(3, 0.3 * st["lut"]), (family, est, st)
        assert abs(est.ff - st["ff"]) <= max(2, 0.3 * st["ff"]), (family, est, st)
