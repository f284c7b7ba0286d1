"""StreamFIFO: order, throughput, depth behaviour, stream rules under stalls, cost model."""
import numpy as np
import pytest
from amaranth.hdl import signed, unsigned

from onnx2hw.rtl.fifo import BANK_BITS, StreamFIFO
from onnx2hw.sim.cocotb_run import run_cocotb
from _sim_fixtures import random_transfers, require_simulator
from onnx2hw.sim.pysim import run_stream

pytestmark = pytest.mark.filterwarnings("ignore:.*created but never used")


_rand = random_transfers


@pytest.mark.parametrize("shape", [unsigned(1), signed(2), unsigned(4), signed(8)])
@pytest.mark.parametrize("lanes", [1, 3])
@pytest.mark.parametrize("depth", [0, 1, 2, 3, 5])
def test_fifo_order_under_random_stalls(shape, lanes, depth):
    x = _rand(shape, lanes, 250, seed=depth)
    out, _ = run_stream(StreamFIFO(shape, lanes, depth), {"i": x}, {"o": len(x)},
                        src_pause="random", sink_pause="random", seed=depth + lanes)
    np.testing.assert_array_equal(out["o"], x)


@pytest.mark.parametrize("depth,latency,ii", [(0, 0, 1), (1, 1, 2), (2, 1, 1), (3, 2, 1), (512, 5, 1),
                                              (16, 2, 1)])
def test_fifo_throughput_and_latency(depth, latency, ii):
    n = 400
    x = _rand(signed(8), 2, n)
    out, cycles = run_stream(StreamFIFO(signed(8), 2, depth), {"i": x}, {"o": n})
    np.testing.assert_array_equal(out["o"], x)
    assert cycles == ii * (n - 1) + latency + 1
    est = StreamFIFO.estimate(signed(8), 2, depth)
    assert (est.cycles, est.latency) == (ii, latency)


@pytest.mark.parametrize("lanes,depth", [(9, 3), (16, 5), (20, 10), (80, 10), (9, 2), (32, 2)])
def test_banked_fifo_order_throughput_and_fill(lanes, depth):
    """Wide distributed-RAM FIFOs are banks of at most BANK_BITS with their own control, in
    lockstep: order under stalls, one transfer per cycle, latency 2 (1 at depth 2, as the
    unbanked SyncFIFO), exactly depth entries."""
    assert StreamFIFO.banks(8 * lanes, depth) == -(-8 * lanes // BANK_BITS) > 1
    x = _rand(signed(8), lanes, 300, seed=lanes)
    out, _ = run_stream(StreamFIFO(signed(8), lanes, depth), {"i": x}, {"o": len(x)},
                        src_pause="random", sink_pause="random", seed=depth)
    np.testing.assert_array_equal(out["o"], x)
    out, cycles = run_stream(StreamFIFO(signed(8), lanes, depth), {"i": x}, {"o": len(x)})
    np.testing.assert_array_equal(out["o"], x)
    latency = 1 if depth == 2 else 2
    assert cycles == len(x) - 1 + latency + 1
    assert StreamFIFO.estimate(signed(8), lanes, depth).latency == latency
    assert _accepted_while_stalled(StreamFIFO(signed(8), lanes, depth), depth + 10) == depth


@pytest.mark.parametrize("src,sink", [("3of4", "random"), ("random", "3of4"), ("none", "3of4")])
def test_fifo_long_stalled_stream(src, sink):
    x = _rand(signed(4), 4, 3000, seed=7)
    out, _ = run_stream(StreamFIFO(signed(4), 4, 9), {"i": x}, {"o": len(x)}, src_pause=src,
                        sink_pause=sink, seed=11)
    np.testing.assert_array_equal(out["o"], x)


def _accepted_while_stalled(dut, cycles):
    """Transfers ``dut.i`` takes in ``cycles`` with the input always valid and the sink stalled."""
    from amaranth.sim import Simulator
    accepted = []

    async def tb(ctx):
        ctx.set(dut.i.valid, 1)
        ctx.set(dut.o.ready, 0)
        count = 0
        for _ in range(cycles):
            count += ctx.get(dut.i.ready)
            await ctx.tick()
        accepted.append(count)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()
    return accepted[0]


def test_fifo_fills_to_depth():
    """With the sink stalled, exactly `depth` transfers enter before i.ready drops."""
    for depth in (2, 7, 40):
        assert _accepted_while_stalled(StreamFIFO(unsigned(3), 1, depth), depth + 10) == depth


@pytest.mark.parametrize("lanes,depth,rows", [(8, 66, 1), (40, 18, 1), (8, 300, 1), (4, 1100, 3)])
def test_block_ram_fifo_order_and_fill(lanes, depth, rows):
    """A block-RAM FIFO (each block row's read data copied every cycle into a landing register,
    the popped word's row selected into the next, a word leaving the RAM only against a free
    slot after them): order under random and long stalls (wrapping around every row), one
    transfer per cycle, latency 5 and exactly `depth` entries."""
    from onnx2hw.rtl.fifo import OUT_DEPTH, _RowFIFO
    assert StreamFIFO.estimate(signed(8), lanes, depth).ebr > 0
    assert len(_RowFIFO(8 * lanes, depth - OUT_DEPTH).r_rows) == rows
    x = _rand(signed(8), lanes, max(700, 2 * depth + 100), seed=depth)
    for src, sink in [("random", "random"), ("none", "3of4"), ("3of4", "none")]:
        out, _ = run_stream(StreamFIFO(signed(8), lanes, depth), {"i": x}, {"o": len(x)},
                            src_pause=src, sink_pause=sink, seed=depth)
        np.testing.assert_array_equal(out["o"], x)
    out, cycles = run_stream(StreamFIFO(signed(8), lanes, depth), {"i": x}, {"o": len(x)})
    np.testing.assert_array_equal(out["o"], x)
    assert cycles == len(x) - 1 + 5 + 1
    assert _accepted_while_stalled(StreamFIFO(signed(8), lanes, depth), depth + 10) == depth


@pytest.mark.parametrize("bad,err,match", [
    (dict(elem_shape="x"), TypeError, "elem_shape must be a shape.*'x'"),
    (dict(elem_shape=signed(8), lanes=0), ValueError, "lanes must be >= 1, not 0"),
    (dict(elem_shape=signed(8), depth=-1), ValueError, "depth must be >= 0, not -1"),
    (dict(elem_shape=signed(8), depth=2.5), TypeError, "depth must be an integer, not 2.5"),
])
def test_fifo_rejects_bad_parameters(bad, err, match):
    with pytest.raises(err, match=match):
        StreamFIFO(**bad)
    with pytest.raises(err, match=match):
        StreamFIFO.estimate(**bad)


def test_fifo_estimate_rejects_family():
    with pytest.raises(ValueError, match="'xilinx'"):
        StreamFIFO.estimate(signed(8), 1, 4, family="xilinx")


@pytest.mark.sim
@pytest.mark.parametrize("depth", [2, 33])
def test_fifo_cocotb(depth):
    require_simulator()
    x = _rand(signed(8), 4, 3000, seed=depth)
    out, _ = run_cocotb(StreamFIFO(signed(8), 4, depth), {"i": x}, {"o": len(x)},
                        src_pause="random", sink_pause="3of4", seed=depth)
    np.testing.assert_array_equal(out["o"], x)


CAL = [(signed(8), 1, 1), (signed(8), 4, 2), (signed(8), 4, 8), (signed(8), 8, 16),
       (signed(8), 4, 64), (signed(8), 16, 512), (signed(2), 8, 200), (signed(8), 20, 10),
       (signed(8), 80, 10), (signed(8), 32, 2), (signed(8), 4, 1100)]


@pytest.mark.synth
@pytest.mark.parametrize("family", ["ecp5", "ice40"])
def test_fifo_estimate_matches_yosys(family):
    from onnx2hw.rtl.synth_check import yosys_stat
    for shape, lanes, depth in CAL:
        st = yosys_stat(StreamFIFO(shape, lanes, depth), family)
        est = StreamFIFO.estimate(shape, lanes, depth, family=family)
        where = f"{family} {shape} x{lanes} depth {depth}: est {est}, yosys {st}"
        assert est.ebr == st["ebr"], where
        assert est.dsp == st["dsp"] == 0, where
        assert abs(est.lut - st["lut"]) <= max(4, 0.3 * st["lut"]), where
        assert abs(est.ff - st["ff"]) <= max(4, 0.3 * st["ff"]), where
