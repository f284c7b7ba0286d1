"""Thresholds: bit-exact against ``onnx2hw.arith.multithreshold`` under random backpressure."""
import numpy as np
import pytest

from onnx2hw import arith
from onnx2hw.rtl.cost import Cost
from onnx2hw.rtl.thresholds import Thresholds, bench_config
from onnx2hw.sim.pysim import run_stream
from onnx2hw.rtl._arith_pipe import OutputQueue

QL = OutputQueue.LATENCY   # the output queue after the pipeline

pytestmark = pytest.mark.filterwarnings("ignore:.*created but never used")


def _run(c, pe, ab, ob, osg, *, per_channel=True, transfers=1500, src="none", sink="none",
         seed=0, steps=None, out_of_range=False):
    rng = np.random.default_rng(seed)
    transfers -= transfers % (c // pe)       # whole pixels
    steps = (1 << ob) - 1 if steps is None else steps
    alo, ahi = arith.int_range(ab, True)
    span = (alo - 5, ahi + 5) if out_of_range else (alo // 2, ahi // 2 + 1)
    t = np.sort(rng.integers(span[0], span[1], size=(c if per_channel else 1, steps)), axis=1)
    t[0, 0] = t[0, 1] if steps > 1 else t[0, 0]      # a repeated threshold
    lo = arith.int_range(ob, osg)[0]
    x = rng.integers(alo, ahi + 1, size=(transfers, pe))
    # hit thresholds exactly (acc == T counts) and one below
    flat_t = t.reshape(-1)
    pick = rng.integers(0, flat_t.size, size=transfers // 4)
    x[:len(pick), 0] = np.clip(flat_t[pick] - rng.integers(0, 2, size=len(pick)), alo, ahi)
    dut = Thresholds(t, channels=c, pe=pe, acc_bits=ab, out_bits=ob, out_signed=osg, lo=lo)
    out, cycles = run_stream(dut, {"i": x}, {"o": transfers}, src_pause=src, sink_pause=sink,
                             seed=seed)
    want = arith.multithreshold(x.reshape(-1, c), t, lo).reshape(transfers, pe)
    np.testing.assert_array_equal(out["o"], want)
    return dut, want, cycles


# (channels, pe, acc_bits, out_bits, out_signed, per_channel)
CONFIGS = [
    (6, 2, 8, 2, False, True),
    (6, 6, 8, 4, True, True),        # pe = channels: constant thresholds
    (12, 4, 10, 1, False, True),
    (12, 3, 6, 3, True, False),      # per tensor
    (7, 1, 16, 4, False, True),      # odd channel count, 15 thresholds in ROM
    (5, 5, 20, 2, True, False),
]


def _id(c):
    ch, pe, ab, ob, osg, pc = c
    return f"c{ch}-pe{pe}-acc{ab}-o{ob}{'s' if osg else 'u'}-{'pc' if pc else 'pt'}"


@pytest.mark.parametrize("pauses", [("random", "random"), ("3of4", "random")],
                         ids=lambda p: f"{p[0]}-{p[1]}")
@pytest.mark.parametrize("cfg", CONFIGS, ids=_id)
def test_thresholds_match_arith_under_backpressure(cfg, pauses):
    ch, pe, ab, ob, osg, pc = cfg
    _, want, _ = _run(ch, pe, ab, ob, osg, per_channel=pc, src=pauses[0], sink=pauses[1],
                      seed=sum(cfg[:4]) + len(pauses[0]))
    assert len(np.unique(want)) >= min(1 << ob, 3)     # several output levels are exercised


def test_thresholds_outside_accumulator_range_and_fewer_steps():
    _run(6, 2, 6, 4, False, out_of_range=True, src="random", sink="random", transfers=600)
    _run(6, 3, 8, 4, True, steps=5, src="random", sink="3of4", transfers=600)


def test_thresholds_full_throughput_and_latency():
    dut, _, cycles = _run(8, 2, 12, 4, False, transfers=200)
    est = Thresholds.estimate(np.zeros((8, 15), dtype=np.int64), channels=8, pe=2, acc_bits=12,
                              out_bits=4, out_signed=False)
    assert est.cycles == 1 and est.latency == dut.pipeline_stages() + QL == 5
    assert cycles == 200 + 5


@pytest.mark.parametrize("kwargs,match", [
    (dict(pe=4), "pe must be a positive divisor of 6, not 4"),
    (dict(channels=5), r"thresholds must have shape \(5, steps\) or \(1, steps\)"),
    (dict(out_bits=1), "does not fit the 1-bit unsigned range"),
    (dict(acc_bits=60), "acc_bits must be an int in 1..48, not 60"),
    (dict(lo=-1), "lo=-1 with 3 thresholds does not fit"),
])
def test_thresholds_reject_bad_parameters(kwargs, match):
    base = dict(channels=6, pe=2, acc_bits=8, out_bits=2, out_signed=False)
    base.update(kwargs)
    with pytest.raises(ValueError, match=match):
        Thresholds(np.zeros((6, 3), dtype=np.int64), **base)
    with pytest.raises(TypeError, match="thresholds must be an integer array"):
        Thresholds(np.zeros((6, 3)), channels=6, acc_bits=8, out_bits=2, out_signed=False)


def test_thresholds_estimate():
    t = np.zeros((64, 15), dtype=np.int64)
    c = Thresholds.estimate(t, channels=64, pe=4, acc_bits=16, out_bits=4, out_signed=False)
    assert isinstance(c, Cost) and c.dsp == 0 and c.cycles == 1 and c.lut > 0
    with pytest.raises(ValueError, match="family must be one of"):
        Thresholds.estimate(t, channels=64, acc_bits=16, out_bits=4, out_signed=False, family="x")


def test_thresholds_bench_config_runs():
    name, factory, feeds, expect = bench_config()[0]
    dut = factory()
    out, _ = run_stream(dut, feeds, expect)
    x = feeds["i"].reshape(-1, dut.channels)
    want = arith.multithreshold(x, dut.thresholds, dut.lo).reshape(out["o"].shape)
    np.testing.assert_array_equal(out["o"], want)


@pytest.mark.sim
def test_thresholds_verilator():
    from onnx2hw.sim.cocotb_run import run_cocotb
    rng = np.random.default_rng(12)
    c, pe, ab = 6, 2, 12
    t = np.sort(rng.integers(-1500, 1500, size=(c, 15)), axis=1)
    x = rng.integers(-2048, 2048, size=(900, pe))
    dut = Thresholds(t, channels=c, pe=pe, acc_bits=ab, out_bits=4, out_signed=True, lo=-8)
    out, _ = run_cocotb(dut, {"i": x}, {"o": len(x)}, src_pause="3of4", sink_pause="random")
    want = arith.multithreshold(x.reshape(-1, c), t, -8).reshape(x.shape)
    np.testing.assert_array_equal(out["o"], want)


@pytest.mark.synth
@pytest.mark.parametrize("c,pe,ab,ob,per_channel", [
    (8, 8, 12, 2, True),            # constants (pe = channels)
    (32, 4, 16, 4, False),          # per tensor
    (64, 4, 16, 4, True),           # 16-word threshold ROM as logic
])
def test_thresholds_synth_estimate(c, pe, ab, ob, per_channel, summary):
    from onnx2hw.rtl.synth_check import yosys_stat
    rng = np.random.default_rng(8)
    t = np.sort(rng.integers(-(1 << (ab - 2)), 1 << (ab - 2),
                             size=(c if per_channel else 1, (1 << ob) - 1)), axis=1)
    kw = dict(channels=c, pe=pe, acc_bits=ab, out_bits=ob, out_signed=False)
    stat = yosys_stat(Thresholds(t, **kw))
    est = Thresholds.estimate(t, **kw)
    got = stat["lut"] + 2 * stat["ccu2c"]
    summary(f"th{c}p{pe}a{ab}o{ob}", f"Thresholds c{c} PE{pe} acc{ab} {ob}b: LUT4eq {got} "
            f"(est {est.lut}), FF {stat['ff']} (est {est.ff})")
    assert stat["dsp"] == est.dsp == 0 and stat["ebr"] == est.ebr
    assert abs(est.lut - got) <= 0.3 * got, (est, stat)
