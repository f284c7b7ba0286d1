"""SegmentSplit / SegmentJoin: consecutive segments of one stream <-> one stream per segment,
under random valid/ready stalls; expected streams cut and glued with NumPy in the test."""
import numpy as np
import pytest
from amaranth.hdl import signed, unsigned

from onnx2hw.rtl.segments import SegmentJoin, SegmentSplit, bench_config
from onnx2hw.sim.cocotb_run import run_cocotb
from onnx2hw.sim.pysim import run_stream
from _sim_fixtures import PAUSE_PAIRS, random_transfers, require_simulator

pytestmark = pytest.mark.filterwarnings("ignore:.*created but never used")

#: (segment element shapes, common element shape, transfers per segment)
CASES = [
    ((signed(8), signed(8)), signed(8), (3, 5)),
    ((unsigned(8), signed(8)), signed(9), (4, 1)),
    ((unsigned(1), signed(4), unsigned(6)), signed(7), (1, 2, 6)),
    ((signed(20), unsigned(3)), signed(20), (2, 2)),
]


def _rounds(shapes, counts, lanes, rounds, seed):
    """Per segment, ``(rounds * count, lanes)`` values covering its shape's range."""
    return [random_transfers(s, lanes, rounds * c, seed=seed + k) for k, (s, c) in enumerate(zip(shapes, counts))]


def _glued(parts, counts, rounds):
    """The one stream: for each round, segment 0's transfers, then segment 1's, ..."""
    per_round = [p.reshape(rounds, c, -1) for p, c in zip(parts, counts)]
    return np.concatenate(per_round, axis=1).reshape(-1, parts[0].shape[1])


@pytest.mark.parametrize("shapes, common, counts", CASES)
@pytest.mark.parametrize("lanes", [1, 3])
@pytest.mark.parametrize("src, sink", PAUSE_PAIRS)
def test_split_deals_each_segment_to_its_output(shapes, common, counts, lanes, src, sink):
    rounds = 7
    parts = _rounds(shapes, counts, lanes, rounds, seed=lanes)
    dut = SegmentSplit(common, lanes, shapes, counts)
    out, cycles = run_stream(dut, {"i": _glued(parts, counts, rounds)},
                             {f"o{k}": len(p) for k, p in enumerate(parts)}, src_pause=src, sink_pause=sink,
                             seed=sum(counts))
    for k, p in enumerate(parts):
        np.testing.assert_array_equal(out[f"o{k}"], p)
    if src == sink == "none":
        assert cycles <= rounds * sum(counts) + 2      # latency 0, one transfer per cycle


@pytest.mark.parametrize("shapes, common, counts", CASES)
@pytest.mark.parametrize("lanes", [1, 3])
@pytest.mark.parametrize("src, sink", PAUSE_PAIRS)
def test_join_sends_the_segments_one_after_the_other(shapes, common, counts, lanes, src, sink):
    rounds = 7
    parts = _rounds(shapes, counts, lanes, rounds, seed=10 * lanes)
    dut = SegmentJoin(shapes, lanes, common, counts)
    out, cycles = run_stream(dut, {f"i{k}": p for k, p in enumerate(parts)}, {"o": rounds * sum(counts)},
                             src_pause=src, sink_pause=sink, seed=len(counts))
    np.testing.assert_array_equal(out["o"], _glued(parts, counts, rounds))
    if src == sink == "none":
        assert cycles <= rounds * sum(counts) + 2


def test_join_waits_for_the_current_segment_only():
    """Input 1 ready long before input 0: nothing of it passes until segment 0 is done."""
    from amaranth.sim import Simulator
    dut = SegmentJoin((unsigned(4), unsigned(4)), 1, unsigned(4), (2, 1))
    seen = []

    async def tb(ctx):
        ctx.set(dut.i1.valid, 1)
        ctx.set(dut.i1.payload[0], 9)
        ctx.set(dut.o.ready, 1)
        for _ in range(3):
            seen.append((ctx.get(dut.o.valid), ctx.get(dut.i1.ready)))
            await ctx.tick()
        ctx.set(dut.i0.valid, 1)
        for v in (3, 4):
            ctx.set(dut.i0.payload[0], v)
            seen.append((ctx.get(dut.o.valid), ctx.get(dut.o.payload[0])))
            await ctx.tick()
        ctx.set(dut.i0.valid, 0)
        seen.append((ctx.get(dut.o.valid), ctx.get(dut.o.payload[0]), ctx.get(dut.i1.ready)))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()
    assert seen == [(0, 0), (0, 0), (0, 0), (1, 3), (1, 4), (1, 9, 1)]


@pytest.mark.parametrize("make, err, match", [
    (lambda: SegmentSplit(signed(8), 2, (signed(8),), (3,)), ValueError, "at least two shapes"),
    (lambda: SegmentSplit(signed(8), 2, (signed(8), signed(8)), (3,)), ValueError, "counts must be a sequence of 2"),
    (lambda: SegmentSplit(signed(8), 0, (signed(8), signed(8)), (3, 3)), ValueError, "lanes must be >= 1, not 0"),
    (lambda: SegmentSplit(signed(8), 1, (signed(8), signed(8)), (3, 0)), ValueError, r"counts\[1\] must be >= 1"),
    (lambda: SegmentSplit("x", 1, (signed(8), signed(8)), (3, 1)), TypeError, "in_shape must be a shape.*'x'"),
    (lambda: SegmentJoin((signed(8), None), 1, signed(8), (1, 1)), TypeError, r"in_shapes\[1\] must be a shape"),
    (lambda: SegmentJoin((signed(8), signed(8)), 1, signed(8), (1, True)), TypeError, "must be an integer, not True"),
])
def test_bad_parameters_are_named(make, err, match):
    with pytest.raises(err, match=match):
        make()


def test_bench_configs_run():
    for _name, factory, feeds, expect in bench_config():
        out, _ = run_stream(factory(), feeds, expect)
        assert {k: len(v) for k, v in out.items()} == expect


@pytest.mark.sim
def test_segments_cocotb():
    require_simulator()
    shapes, common, counts = CASES[2]
    parts = _rounds(shapes, counts, 2, 200, seed=3)
    glued = _glued(parts, counts, 200)
    out, _ = run_cocotb(SegmentSplit(common, 2, shapes, counts), {"i": glued},
                        {f"o{k}": len(p) for k, p in enumerate(parts)}, src_pause="random", sink_pause="random", seed=4)
    for k, p in enumerate(parts):
        np.testing.assert_array_equal(out[f"o{k}"], p)
    out, _ = run_cocotb(SegmentJoin(shapes, 2, common, counts), {f"i{k}": p for k, p in enumerate(parts)},
                        {"o": len(glued)}, src_pause="random", sink_pause="random", seed=5)
    np.testing.assert_array_equal(out["o"], glued)


@pytest.mark.synth
@pytest.mark.parametrize("block, args", [
    (SegmentSplit, (signed(9), 4, (unsigned(8), signed(8), signed(4)), (16, 40, 3))),
    (SegmentJoin, ((unsigned(8), signed(8), signed(4)), 4, signed(9), (16, 40, 3))),
])
def test_estimate_matches_yosys(block, args):
    from onnx2hw.rtl.synth_check import yosys_stat
    for family in ("ecp5", "ice40"):
        st = yosys_stat(block(*args), family)
        est = block.estimate(*args, family=family)
        assert (est.dsp, est.ebr) == (st["dsp"], st["ebr"]) == (0, 0)
        assert abs(est.lut - st["lut"]) <= max(4, 0.3 * st["lut"]), (family, est, st)
        assert abs(est.ff - st["ff"]) <= max(2, 0.3 * st["ff"]), (family, est, st)
