"""Requantize's narrow form (one 18x18 DSP per lane): bit-exact against the round-half-up
requantization written here from the spec, over the whole reachable accumulator range."""
import numpy as np
import pytest

from onnx2hw.layers.base import act_blocks
from onnx2hw.layers.types import IntType, Requant
from onnx2hw.rtl.requant import Requantize
from onnx2hw.rtl.requant_plan import narrow_plan
from onnx2hw.sim.pysim import run_stream
from onnx2hw.rtl._arith_pipe import OutputQueue

QL = OutputQueue.LATENCY   # the output queue after the pipeline

pytestmark = pytest.mark.filterwarnings("ignore:.*created but never used")


def spec(acc, m, s, zp, lo, hi):
    """``clamp(zp + floor((acc * m + 2**(s-1)) / 2**s), lo, hi)`` (no rounding term for s = 0):
    the ONNX-style requantization with round half up, in int64 (Python integers when the product
    could overflow)."""
    acc = np.asarray(acc, dtype=np.int64)
    m, s, zp = (np.broadcast_to(np.asarray(v, dtype=np.int64), acc.shape) for v in (m, s, zp))
    if acc.size and int(np.abs(acc).max()) * int(np.abs(m).max()) >= 1 << 61:
        acc, m, s, zp = (v.astype(object) for v in (acc, m, s, zp))
    half = np.where(s > 0, np.left_shift(1, np.maximum(s - 1, 0)), 0)
    return np.clip(zp + ((acc * m + half) >> s), lo, hi).astype(np.int64)


def fixed_point(scale):
    """(M, s) with ``M / 2**s ~= scale`` and ``2**30 <= |M| < 2**31`` (as the importers do)."""
    s = 30 - int(np.floor(np.log2(abs(scale))))
    return int(round(scale * 2.0 ** s)), s


def edges(m, s, zp, lo, hi, acc_lo, acc_hi):
    """Accumulators around every output step edge of ``spec`` in range, the range ends and
    far-out values: where a narrowed formula would first go wrong."""
    m_, s_ = int(m), int(s)
    pts = {acc_lo, acc_hi, acc_lo + 1, acc_hi - 1, 0, -1, 1}
    for level in range(lo - zp, hi - zp + 2):   # spec steps where acc*m + half crosses level*2**s
        x = (level << s_) - ((1 << (s_ - 1)) if s_ else 0)
        c = -(-x // m_) if m_ > 0 else x // m_
        pts.update({c - 1, c, c + 1})
    pts = np.array(sorted(pts), dtype=np.int64)
    return pts[(pts >= acc_lo) & (pts <= acc_hi)]


def _stream_inputs(rng, c, pe, m, s, z, lo, hi, alo, ahi, n_random):
    """Transfers of ``pe`` lanes covering each channel's edges, then random reachable values."""
    per_ch = [np.concatenate([edges(m[k], s[k], z[k], lo, hi, int(alo[k]), int(ahi[k])),
                              rng.integers(alo[k], ahi[k] + 1, size=n_random)]) for k in range(c)]
    n = max(len(v) for v in per_ch)
    cols = [np.resize(v, n) for v in per_ch]            # channel k's values, cycled to n
    x = np.stack(cols, axis=1).reshape(-1, pe)           # pixel-major: channel k is lane k % pe
    ch = np.tile(np.arange(c), n).reshape(-1, pe)
    return x, ch


def _check_block(dut, x, ch, m, s, z, lo, hi, src="random", sink="random", seed=0):
    out, cycles = run_stream(dut, {"i": x}, {"o": len(x)}, src_pause=src, sink_pause=sink, seed=seed)
    np.testing.assert_array_equal(out["o"], spec(x, m[ch], s[ch], z[ch], lo, hi))
    return cycles


# (name, channels, pe, acc_bits, out_bits, out_signed, per_channel, negative, clamp, windows):
# the output range covers ``windows`` accumulator values (a realistic scale). Per-channel
# multipliers have no shared LUT low part, so their 17-bit multipliers need smaller windows.
CONFIGS = [
    ("relu_u8_pt", 8, 2, 24, 8, False, False, False, None, (2000, 100000)),
    ("s8_zp_pc_neg", 6, 2, 22, 8, True, True, True, None, (300, 3000)),
    ("s8_clamp_pc", 6, 3, 20, 8, True, True, False, (-20, 90), (300, 3000)),
    ("u4_pe_all", 4, 4, 18, 4, False, True, False, None, (100, 2000)),
    ("s8_acc30", 4, 2, 30, 8, True, False, True, None, (2000, 100000)),
]


def _make(name, c, pe, ab, ob, osg, per_channel, negative, clamp, windows, seed):
    rng = np.random.default_rng(seed)
    lo, hi = clamp if clamp else ((-(1 << (ob - 1)), (1 << (ob - 1)) - 1) if osg else (0, (1 << ob) - 1))
    # reachable range per channel: up to the accumulator width, different per channel
    amax = (1 << (ab - 1)) - 1
    span = rng.integers(amax // 4, amax, size=c)
    alo = -span + rng.integers(0, amax // 8, size=c)
    ahi = span - rng.integers(0, amax // 8, size=c)
    # realistic scales: the output range covers a few thousand to ~100k accumulator values
    n = c if per_channel else 1
    window = rng.integers(*windows, size=n)
    scales = (hi - lo + 1) / window * (rng.choice([-1, 1], size=n) if negative else 1)
    ms, ss = zip(*(fixed_point(v) for v in scales))
    zp = rng.integers(lo // 2, hi // 2 + 1, size=n) if osg else np.zeros(n, np.int64)
    m, s, z = (np.broadcast_to(np.array(v, dtype=np.int64), (c,)).copy() for v in (ms, ss, zp))
    kw = dict(channels=c, pe=pe, acc_bits=ab, multiplier=m if per_channel else int(m[0]),
              shift=s if per_channel else int(s[0]), zero_point=z if per_channel else int(z[0]),
              out_bits=ob, out_signed=osg, lo=None if clamp is None else lo,
              hi=None if clamp is None else hi, acc_lo=alo, acc_hi=ahi)
    return kw, m, s, z, lo, hi, alo, ahi


@pytest.mark.parametrize("cfg", CONFIGS, ids=[c[0] for c in CONFIGS])
def test_narrow_block_exact_under_backpressure(cfg):
    kw, m, s, z, lo, hi, alo, ahi = _make(*cfg, seed=len(cfg[0]))
    dut = Requantize(**kw)
    assert dut.plan is not None and dut.plan.a_bits <= 18
    assert Requantize.estimate(**kw).dsp <= kw["pe"]
    rng = np.random.default_rng(3)
    x, ch = _stream_inputs(rng, kw["channels"], kw["pe"], m, s, z, lo, hi, alo, ahi, 40)
    # also far-out values at the reachable ends (saturated on both formulas)
    _check_block(dut, x, ch, m, s, z, lo, hi, seed=5)
    _check_block(dut, x[:300], ch[:300], m, s, z, lo, hi, src="3of4", sink="random", seed=6)


def test_narrow_plan_exhaustive_against_spec():
    """Every integer of each channel's reachable range, not only the stream's samples."""
    for seed, cfg in enumerate(CONFIGS[:4]):
        name, c, pe, ab, *rest = cfg
        cfg = (name, c, pe, min(ab, 21), *rest)   # reachable ranges small enough to enumerate
        kw, m, s, z, lo, hi, alo, ahi = _make(*cfg, seed=seed + 10)
        plan = narrow_plan(m, s, z, lo, hi, alo, ahi)
        assert plan is not None, name
        for k in range(c):
            a = np.arange(alo[k], ahi[k] + 1, dtype=np.int64)
            got = np.clip(plan.apply(a, k), lo, hi)
            np.testing.assert_array_equal(got, spec(a, m[k], s[k], z[k], lo, hi), err_msg=f"{name} ch{k}")


def test_narrow_offset_for_a_wide_relu_window():
    """A uint8 ReLU output over ~200k accumulator values: the window [~0, 200k] needs 19 signed
    bits, so its centre is subtracted (18 bits) and folded into the bias."""
    m, s = fixed_point(256 / 200_000)
    kw = dict(channels=4, pe=2, acc_bits=24, multiplier=m, shift=s, zero_point=0, out_bits=8,
              out_signed=False, acc_lo=-(1 << 22), acc_hi=(1 << 22) - 1)
    dut = Requantize(**kw)
    assert dut.plan is not None and dut.plan.offset > 0 and dut.plan.a_bits <= 18
    assert Requantize.estimate(**kw).dsp == 2
    c = np.full(4, 1, np.int64)
    alo, ahi = np.full(4, -(1 << 22)), np.full(4, (1 << 22) - 1)
    x, ch = _stream_inputs(np.random.default_rng(4), 4, 2, c * m, c * s, c * 0, 0, 255, alo, ahi, 30)
    _check_block(dut, x, ch, c * m, c * s, c * 0, 0, 255, seed=9)


def test_narrow_lut_only_power_of_two():
    """M / 2**s = 1/16 (an average of 16): no DSP, a shift; ties round up."""
    kw = dict(channels=4, pe=2, acc_bits=14, multiplier=1, shift=4, zero_point=-3, out_bits=8,
              out_signed=True, acc_lo=-16 * 128, acc_hi=16 * 127)
    dut = Requantize(**kw)
    assert dut.plan is not None and not dut.plan.dsp
    assert Requantize.estimate(**kw).dsp == 0
    x = np.arange(-16 * 128, 16 * 127 + 1, dtype=np.int64)
    x = x[: len(x) // 2 * 2].reshape(-1, 2)
    ch = np.tile(np.arange(4), len(x) // 2 + 1)[: x.size].reshape(-1, 2)
    c = np.zeros(4, np.int64)
    _check_block(dut, x, ch, c + 1, c + 4, c - 3, -128, 127)


def test_narrow_falls_back_to_wide_when_window_too_wide():
    """A tiny scale over a wide reachable range: the unsaturated window needs more than 18 bits."""
    m, s = fixed_point(255 / 3_000_000)
    kw = dict(channels=2, pe=2, acc_bits=26, multiplier=m, shift=s, out_bits=8, out_signed=False,
              acc_lo=-(1 << 24), acc_hi=1 << 24)
    dut = Requantize(**kw)
    assert dut.plan is None
    wide = Requantize.estimate(**{k: v for k, v in kw.items() if k not in ("acc_lo", "acc_hi")})
    assert Requantize.estimate(**kw) == wide and wide.dsp == 2 * 4
    rng = np.random.default_rng(1)
    x = rng.integers(-(1 << 24), (1 << 24) + 1, size=(400, 2))
    ch = np.zeros_like(x)
    c = np.zeros(1, np.int64)
    _check_block(dut, x, ch, c + m, c + s, c, 0, 255)


def test_narrow_dense640_one_dsp_per_lane():
    """A 640-input int8 Dense layer with a calibrated scale: one MULT18X18D per requantizer
    lane (the wide form takes two to four)."""
    rng = np.random.default_rng(640)
    n, k, pe = 32, 640, 4
    w = np.clip(np.round(rng.normal(0, 20, size=(n, k))), -127, 127).astype(np.int64)  # trained-like
    bias = rng.integers(-5000, 5000, size=n)
    in_lo, in_hi = -128, 127
    pos, neg = np.where(w > 0, w, 0).sum(1), np.where(w < 0, w, 0).sum(1)
    alo, ahi = pos * in_lo + neg * in_hi + bias, pos * in_hi + neg * in_lo + bias
    ab = int(max(abs(alo.min()), ahi.max())).bit_length() + 1
    # calibration-like scale: the int8 output spans +-4 sigma of the accumulator for inputs
    # of sigma 20
    sigma = float(np.sqrt((w.astype(float) ** 2).sum(1).mean())) * 20
    m, s = fixed_point(127 / (4 * sigma))
    act = Requant(np.array([m]), np.array([s]), 3, -128, 127)
    blocks, ob, osg = act_blocks(act, n, pe, ab, IntType(8, True), "ecp5", (alo, ahi))
    (blk,) = blocks
    assert blk.block is Requantize and blk.cost.dsp == pe
    blocks_wide, _, _ = act_blocks(act, n, pe, ab, IntType(8, True), "ecp5")
    assert blocks_wide[0].cost.dsp >= 2 * pe
    dut = Requantize(**blk.params)
    assert dut.plan is not None and dut.plan.dsp
    x, ch = _stream_inputs(rng, n, pe, np.full(n, m), np.full(n, s), np.full(n, 3), -128, 127,
                           alo, ahi, 8)
    c = np.zeros(n, np.int64)
    _check_block(dut, x, ch, c + m, c + s, c + 3, -128, 127, seed=2)


def test_narrow_latency_and_throughput():
    kw, m, s, z, lo, hi, alo, ahi = _make(*CONFIGS[0], seed=1)
    dut = Requantize(**kw)
    est = Requantize.estimate(**kw)
    assert est.cycles == 1 and est.latency == (dut.pipeline_stages() + QL)
    x = np.clip(np.arange(-200, 200, dtype=np.int64).reshape(-1, 2) * 97, alo.min(), ahi.max())
    ch = np.tile(np.arange(kw["channels"]), len(x))[: x.size].reshape(-1, 2)
    x = np.clip(x, alo[ch], ahi[ch])
    cycles = _check_block(dut, x, ch, m, s, z, lo, hi, src="none", sink="none")
    assert cycles == len(x) + (dut.pipeline_stages() + QL)


@pytest.mark.parametrize("kwargs,match", [
    (dict(acc_lo=-5), "acc_lo and acc_hi go together"),
    (dict(acc_lo=5, acc_hi=-5), "must be non-empty ranges"),
    (dict(acc_lo=-(1 << 20), acc_hi=5), "must be non-empty ranges within 16-bit"),
])
def test_narrow_rejects_bad_bounds(kwargs, match):
    base = dict(channels=2, pe=2, acc_bits=16, multiplier=3, shift=4, out_bits=8, out_signed=True)
    with pytest.raises(ValueError, match=match):
        Requantize(**base, **kwargs)


@pytest.mark.sim
def test_narrow_verilator():
    from onnx2hw.sim.cocotb_run import run_cocotb
    kw, m, s, z, lo, hi, alo, ahi = _make(*CONFIGS[1], seed=7)
    dut = Requantize(**kw)
    assert dut.plan is not None
    x, ch = _stream_inputs(np.random.default_rng(8), kw["channels"], kw["pe"], m, s, z, lo, hi,
                           alo, ahi, 20)
    out, _ = run_cocotb(dut, {"i": x}, {"o": len(x)}, src_pause="random", sink_pause="random")
    np.testing.assert_array_equal(out["o"], spec(x, m[ch], s[ch], z[ch], lo, hi))


SYNTH = [CONFIGS[0], CONFIGS[1], CONFIGS[3], CONFIGS[4],
         ("pt_pe8", 8, 8, 23, 8, False, False, False, None, (20000, 60000)),
         ("pc_pe2_rom64", 128, 2, 20, 8, True, True, False, None, (300, 2000))]


@pytest.mark.synth
@pytest.mark.parametrize("cfg", SYNTH, ids=lambda c: c[0])
def test_narrow_synth_dsp_count_and_estimate(cfg, summary):
    from onnx2hw.rtl.synth_check import yosys_stat
    kw, *_ = _make(*cfg, seed=len(cfg[0]))
    stat = yosys_stat(Requantize(**kw))
    est = Requantize.estimate(**kw)
    got = stat["lut"] + 2 * stat["ccu2c"]
    summary(f"rqn_{cfg[0]}", f"Requantize narrow {cfg[0]}: LUT4eq {got} (est {est.lut}), "
            f"FF {stat['ff']} (est {est.ff}), DSP {stat['dsp']} (est {est.dsp})")
    assert stat["dsp"] == est.dsp == kw["pe"]
    assert abs(est.lut - got) <= 0.3 * got, (est, stat)
