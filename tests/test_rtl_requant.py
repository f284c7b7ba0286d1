"""Requantize: bit-exact against ``onnx2hw.arith.requantize`` under random backpressure."""
import numpy as np
import pytest

from onnx2hw import arith
from onnx2hw.rtl.cost import Cost
from onnx2hw.rtl.requant import Requantize, bench_config
from onnx2hw.sim.pysim import run_stream
from onnx2hw.rtl._arith_pipe import OutputQueue

QL = OutputQueue.LATENCY   # the output queue after the pipeline

pytestmark = pytest.mark.filterwarnings("ignore:.*created but never used")


def _params(c, ab, mbits, ob, per_channel, rng, negative=False):
    """Multipliers/shifts that map the accumulator range roughly onto the output range."""
    n = c if per_channel else 1
    base = max(ab - ob, 0)
    s = np.minimum(rng.integers(base, base + mbits, size=n), 62)
    # scale M / 2**s in [2**(ob - ab - 1), 2**(ob - ab + 1)], M kept within mbits
    m = np.array([int(rng.integers(1 << max(k + ob - ab - 1, 0), (1 << max(k + ob - ab + 1, 1)) + 1))
                  for k in s], dtype=np.int64)
    m = np.clip(m, 0, (1 << mbits) - 1)
    if negative:
        m = m * rng.choice([-1, 1], size=n)
    z = rng.integers(-3, 4, size=n)
    if not per_channel:
        return int(m[0]), int(s[0]), int(z[0])
    return m, s, z


def _run(c, pe, ab, mbits, ob, osg, *, per_channel=True, transfers=1500, src="none",
         sink="none", seed=0, negative=False, shift0=False, clamp=None):
    rng = np.random.default_rng(seed)
    m, s, z = _params(c, ab, mbits, ob, per_channel, rng, negative)
    if shift0:
        s = np.zeros_like(s) if per_channel else 0
        m = (np.ones_like(m) if per_channel else 1)
    lo, hi = clamp if clamp else arith.int_range(ob, osg)
    alo, ahi = arith.int_range(ab, True)
    x = rng.integers(alo, ahi + 1, size=(transfers, pe))
    x[:4] = [[alo] * pe, [ahi] * pe, [0] * pe, [-1] * pe]
    dut = Requantize(channels=c, pe=pe, acc_bits=ab, multiplier=m, shift=s, zero_point=z,
                     out_bits=ob, out_signed=osg, lo=None if clamp is None else lo,
                     hi=None if clamp is None else hi)
    out, cycles = run_stream(dut, {"i": x}, {"o": transfers}, src_pause=src, sink_pause=sink,
                             seed=seed)
    ch = np.arange(transfers * pe).reshape(transfers, pe) % c
    per = [np.broadcast_to(np.asarray(v), (c,))[ch] for v in (m, s, z)]
    want = arith.requantize(x, per[0], per[1], per[2], lo, hi)
    np.testing.assert_array_equal(out["o"], want)
    return dut, want, cycles


# (channels, pe, acc_bits, multiplier bits, out_bits, out_signed, per_channel)
CONFIGS = [
    (6, 2, 16, 15, 8, True, True),
    (6, 3, 24, 31, 4, False, True),
    (6, 6, 20, 16, 8, True, True),     # pe = channels: constants, no ROM
    (12, 4, 32, 32, 8, True, False),   # per tensor, 32x32-bit product split into DSP pieces
    (7, 1, 12, 8, 2, True, True),      # odd channel count
    (5, 5, 10, 4, 1, False, True),
    (16, 2, 40, 24, 16, True, True),   # wide accumulator
]


def _id(c):
    ch, pe, ab, mb, ob, osg, pc = c
    return f"c{ch}-pe{pe}-acc{ab}-m{mb}-o{ob}{'s' if osg else 'u'}-{'pc' if pc else 'pt'}"


@pytest.mark.parametrize("pauses", [("random", "random"), ("3of4", "random")],
                         ids=lambda p: f"{p[0]}-{p[1]}")
@pytest.mark.parametrize("cfg", CONFIGS, ids=_id)
def test_requant_matches_arith_under_backpressure(cfg, pauses):
    ch, pe, ab, mb, ob, osg, pc = cfg
    _, want, _ = _run(ch, pe, ab, mb, ob, osg, per_channel=pc, src=pauses[0], sink=pauses[1],
                      seed=sum(cfg[:5]) + len(pauses[0]), negative=(ch % 2 == 0))
    lo, hi = arith.int_range(ob, osg)
    # the parameters exercise rounding, not only the clamp
    assert np.mean((want > lo) & (want < hi)) > 0.2 or ob == 1


def test_requant_shift_zero_and_custom_clamp():
    _run(6, 2, 8, 8, 8, True, shift0=True, src="random", sink="random", transfers=600)
    _run(4, 2, 16, 12, 8, True, clamp=(-5, 7), src="random", sink="3of4", transfers=600)


def test_requant_rounds_half_up_on_ties():
    # M = 1, s = 2: acc/4 with ties (acc = 4k + 2) rounding towards +inf
    x = np.arange(-64, 64, dtype=np.int64).reshape(-1, 2)
    dut = Requantize(channels=2, pe=2, acc_bits=8, multiplier=1, shift=2, out_bits=8,
                     out_signed=True)
    out, _ = run_stream(dut, {"i": x}, {"o": len(x)}, src_pause="random", sink_pause="random")
    np.testing.assert_array_equal(out["o"], arith.requantize(x, 1, 2, 0, -128, 127))
    assert out["o"][x == -2].item() == 0 and out["o"][x == 2].item() == 1


def test_requant_full_throughput_and_latency():
    dut, _, cycles = _run(8, 2, 16, 16, 8, True, transfers=200)
    est = Requantize.estimate(channels=8, pe=2, acc_bits=16, multiplier=3, shift=4, out_bits=8,
                              out_signed=True)
    assert est.cycles == 1 and est.latency == (dut.pipeline_stages() + QL)
    assert cycles == 200 + (dut.pipeline_stages() + QL)


@pytest.mark.parametrize("kwargs,match", [
    (dict(pe=4), "pe must be a positive divisor of 6, not 4"),
    (dict(multiplier=1 << 32), "multiplier must satisfy"),
    (dict(shift=63), "shift must be in 0..62, not 63"),
    (dict(multiplier=np.ones(5, dtype=int)), r"multiplier must be a scalar or have shape \(6,\)"),
    (dict(lo=-200), r"lo must be an int in \[-128, 127\], not -200"),
    (dict(lo=5, hi=2), "lo must not exceed hi"),
    (dict(acc_bits=0), "acc_bits must be an int in 1..48, not 0"),
    (dict(out_bits=40), "out_bits must be an int in 1..32, not 40"),
])
def test_requant_rejects_bad_parameters(kwargs, match):
    base = dict(channels=6, pe=2, acc_bits=16, multiplier=3, shift=4, zero_point=0, out_bits=8,
                out_signed=True)
    base.update(kwargs)
    with pytest.raises(ValueError, match=match):
        Requantize(**base)
    with pytest.raises(TypeError, match="multiplier must be an integer"):
        Requantize(channels=2, acc_bits=8, multiplier=0.5, shift=1, out_bits=8, out_signed=True)


def test_requant_estimate_dsp_pieces():
    kw = dict(channels=8, pe=2, acc_bits=16, multiplier=3, shift=4, out_bits=8, out_signed=True)
    c = Requantize.estimate(**kw)
    assert isinstance(c, Cost) and c.dsp == 2 and c.ebr == 0
    c = Requantize.estimate(**dict(kw, acc_bits=32, multiplier=(1 << 31) + 5))
    assert c.dsp == 2 * 4      # 32x32 unsigned-multiplier product: 2x2 pieces per lane


def test_requant_bench_config_runs():
    name, factory, feeds, expect = bench_config()[0]
    dut = factory()
    out, _ = run_stream(dut, feeds, expect)
    x = feeds["i"]
    ch = np.arange(x.size).reshape(x.shape) % dut.channels
    want = arith.requantize(x, dut.multiplier[ch], dut.shift[ch], dut.zero_point[ch],
                            dut.lo, dut.hi)
    np.testing.assert_array_equal(out["o"], want)


@pytest.mark.sim
def test_requant_verilator():
    from onnx2hw.sim.cocotb_run import run_cocotb
    rng = np.random.default_rng(11)
    c, pe, ab = 6, 2, 24
    m, s, z = _params(c, ab, 31, 8, True, rng, negative=True)
    x = rng.integers(-(1 << 23), 1 << 23, size=(900, pe))
    dut = Requantize(channels=c, pe=pe, acc_bits=ab, multiplier=m, shift=s, zero_point=z,
                     out_bits=8, out_signed=True)
    out, _ = run_cocotb(dut, {"i": x}, {"o": len(x)}, src_pause="random", sink_pause="random")
    ch = np.arange(x.size).reshape(x.shape) % c
    np.testing.assert_array_equal(out["o"], arith.requantize(x, m[ch], s[ch], z[ch], -128, 127))


@pytest.mark.synth
@pytest.mark.parametrize("c,pe,ab,mbits,per_channel,dsp", [
    (16, 2, 16, 16, False, 1),      # 16x16: one MULT18X18D per lane
    (8, 1, 32, 32, True, 6),        # 32-bit acc x 41-bit normalised multiplier: 2x3 pieces
])
def test_requant_synth_dsp_count_and_estimate(c, pe, ab, mbits, per_channel, dsp, summary):
    from onnx2hw.rtl.synth_check import yosys_stat
    rng = np.random.default_rng(6)
    n = c if per_channel else 1
    m = rng.integers(1 << (mbits - 2), 1 << (mbits - 1), size=n)
    s = rng.integers(10, 20, size=n)
    if per_channel:
        s[0], s[1] = 10, 19
    kw = dict(channels=c, pe=pe, acc_bits=ab, multiplier=m if per_channel else int(m[0]),
              shift=s if per_channel else int(s[0]), zero_point=3, out_bits=8, out_signed=True)
    stat = yosys_stat(Requantize(**kw))
    est = Requantize.estimate(**kw)
    got = stat["lut"] + 2 * stat["ccu2c"]
    summary(f"rq{c}p{pe}a{ab}m{mbits}", f"Requantize c{c} PE{pe} acc{ab} M{mbits}b: LUT4eq {got} "
            f"(est {est.lut}), FF {stat['ff']} (est {est.ff}), DSP {stat['dsp']}")
    assert stat["dsp"] == est.dsp == pe * dsp
    assert abs(est.lut - got) <= 0.3 * got, (est, stat)
