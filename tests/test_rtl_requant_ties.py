"""Round half to even (``ties="even"``) in ``arith.requantize``, the Requantize block (wide and narrow
forms) and DivisorRequantize, under random valid/ready stalls, against the rounding rule written
here in Python integers: ``q, r = divmod(acc * M, 2**s)``, then ``q + 1`` where ``r > 2**(s-1)``
or ``r == 2**(s-1)`` and ``q`` is odd (``s = 0``: ``acc * M``), plus the zero point, clamped."""
from __future__ import annotations

import numpy as np
import pytest

from onnx2hw import arith
from onnx2hw.rtl.pool_divisor import DivisorRequantize
from onnx2hw.rtl.requant import Requantize
from onnx2hw.rtl.requant_plan import narrow_plan
from onnx2hw.sim.pysim import run_stream

pytestmark = pytest.mark.filterwarnings("ignore:.*created but never used")


def _half_even(acc, m, s, z, lo, hi) -> np.ndarray:
    """The rule of the module docstring, element by element (``m``, ``s``, ``z`` broadcast)."""
    acc, m, s, z = np.broadcast_arrays(*(np.asarray(v, dtype=object) for v in (acc, m, s, z)))
    out = np.empty(acc.shape, np.int64)
    for i in np.ndindex(acc.shape):
        p, sh = int(acc[i]) * int(m[i]), int(s[i])
        if sh == 0:
            y = p
        else:
            q, r = divmod(p, 1 << sh)            # floor division: 0 <= r < 2**s
            half = 1 << (sh - 1)
            y = q + (r > half or (r == half and q % 2 == 1))
        out[i] = min(max(y + int(z[i]), lo), hi)
    return out


def _ties(acc, m, s) -> int:
    """How many elements lie exactly half way between two integers (``s >= 1``)."""
    acc, m, s = np.broadcast_arrays(*(np.asarray(v, dtype=object) for v in (acc, m, s)))
    return sum(1 for i in np.ndindex(acc.shape)
               if int(s[i]) and (int(acc[i]) * int(m[i])) % (1 << int(s[i])) == 1 << (int(s[i]) - 1))


def test_arith_half_even_equals_the_rule():
    rng = np.random.default_rng(1)
    acc = rng.integers(-600, 600, size=(400, 6))
    m = np.array([1, 3, -5, 1, 7, -1])
    s = np.array([1, 2, 3, 0, 4, 1])           # per channel, with s = 0
    z = np.array([0, -3, 2, 1, 0, 5])
    got = arith.requantize(acc, m, s, z, -300, 300, ties="even")
    np.testing.assert_array_equal(got, _half_even(acc, m, s, z, -300, 300))
    assert _ties(acc, m, s) > 300
    # half up differs exactly at the ties with an even quotient
    assert np.count_nonzero(got != arith.requantize(acc, m, s, z, -300, 300)) > 100
    # products beyond int64 take Python integers
    big = np.array([[(1 << 40) + 3, -(1 << 40) - 1]])
    np.testing.assert_array_equal(arith.requantize(big, (1 << 30) + 1, 40, 0, -(1 << 40), 1 << 40, "even"),
                                  _half_even(big, (1 << 30) + 1, 40, 0, -(1 << 40), 1 << 40))
    with pytest.raises(ValueError, match="ties must be one of"):
        arith.requantize(acc, 1, 1, 0, -1, 1, ties="down")


# (channels, pe, acc bits, multipliers, shifts, zero points, out bits, signed, pauses)
WIDE = [
    (4, 2, 12, [1, 3, -5, 7], [1, 2, 3, 4], [0, -2, 3, 1], 8, True, ("random", "random")),
    (6, 3, 16, [3, 1, 1, -9, 5, 1], [0, 1, 2, 5, 3, 6], [0, 0, 0, 0, 0, 0], 8, True, ("3of4", "random")),
    (3, 3, 14, 5, 3, 7, 8, False, ("random", "3of4")),                     # per tensor, constants
    (8, 2, 20, [(1 << 30) - 1] * 8, [30, 31, 32, 33, 30, 31, 32, 33], [0] * 8, 16, True, ("random", "random")),
]


@pytest.mark.parametrize("c,pe,ab,m,s,z,ob,osg,pauses", WIDE)
def test_wide_requantize_half_even_under_backpressure(c, pe, ab, m, s, z, ob, osg, pauses):
    rng = np.random.default_rng(c * 10 + pe)
    lo, hi = arith.int_range(ob, osg)
    n = 1200 // pe
    x = rng.integers(-(1 << (ab - 1)), 1 << (ab - 1), size=(n, pe))
    if ab <= 16:   # small accumulators, so that the outputs do not all saturate
        x = rng.integers(-(1 << 9), 1 << 9, size=(n, pe))
    x[:2] = [[-(1 << (ab - 1))] * pe, [(1 << (ab - 1)) - 1] * pe]
    dut = Requantize(channels=c, pe=pe, acc_bits=ab, multiplier=np.asarray(m), shift=np.asarray(s),
                     zero_point=np.asarray(z), out_bits=ob, out_signed=osg, ties="even")
    assert dut.plan is None
    out, _ = run_stream(dut, {"i": x}, {"o": n}, src_pause=pauses[0], sink_pause=pauses[1], seed=3)
    ch = np.arange(x.size).reshape(x.shape) % c
    per = [np.broadcast_to(np.asarray(v), (c,))[ch] for v in (m, s, z)]
    np.testing.assert_array_equal(out["o"], _half_even(x, *per, lo, hi))
    assert _ties(x, per[0], per[1]) > 0 or min(np.atleast_1d(s)) > 20   # wide shifts: random ties are rare


def test_wide_requantize_half_even_on_every_tie():
    """acc / 4 for every 10-bit accumulator: each tie 4k + 2 goes to the even neighbour."""
    x = np.arange(-512, 512, dtype=np.int64).reshape(-1, 2)
    dut = Requantize(channels=2, pe=2, acc_bits=10, multiplier=1, shift=2, out_bits=8, out_signed=True, ties="even")
    out, _ = run_stream(dut, {"i": x}, {"o": len(x)}, src_pause="random", sink_pause="random")
    np.testing.assert_array_equal(out["o"], _half_even(x, 1, 2, 0, -128, 127))
    assert [out["o"][x == v].item() for v in (-6, -2, 2, 6)] == [-2, 0, 0, 2]


# (multiplier, shift, zero point, clamp, accumulator range, pe, ties in the range)
NARROW = [
    (3, 3, 0, (-128, 127), (-3000, 3000), 2, True),           # ties at acc * 3 = 8k + 4
    (1 << 20, 22, 5, (0, 255), (-2000, 4000), 1, True),      # a power of two: acc / 4
    (1431655765, 33, -3, (-128, 127), (-2000, 2000), 2, False),   # ~1/6: no product on a tie
]


@pytest.mark.parametrize("m,s,z,clamp,arange,pe,ties", NARROW)
def test_narrow_requantize_half_even_under_backpressure(m, s, z, clamp, arange, pe, ties):
    """The narrow form where no accumulator of the range is a tie; with ties, none exists (the
    runs of equal outputs alternate in length by two, ``floor((a * M' + B) / 2**s')`` by at most
    one) and the block is the wide form."""
    lo, hi = clamp
    a = np.arange(arange[0], arange[1] + 1)
    assert (_ties(a, m, s) > 0) == ties
    plan = narrow_plan([m], [s], [z], lo, hi, [arange[0]], [arange[1]], "even")
    assert (plan is None) == ties
    if plan is not None:
        np.testing.assert_array_equal(np.clip(plan.apply(a, 0), lo, hi), _half_even(a, m, s, z, lo, hi))
    dut = Requantize(channels=2, pe=pe, acc_bits=14, multiplier=m, shift=s, zero_point=z, out_bits=8,
                     out_signed=lo < 0, lo=lo, hi=hi, ties="even", acc_lo=arange[0], acc_hi=arange[1])
    assert (dut.plan is None) == ties
    rng = np.random.default_rng(s)
    x = rng.integers(arange[0], arange[1] + 1, size=(1000 // pe, pe))
    out, _ = run_stream(dut, {"i": x}, {"o": len(x)}, src_pause="random", sink_pause="3of4", seed=s)
    np.testing.assert_array_equal(out["o"], _half_even(x, m, s, z, lo, hi))


def test_divisor_requantize_half_even_under_backpressure():
    """A 2x2 stride-2 ceil-mode pool on 5x5 (divisors 4, 2, 1 of its input grid: exact ties of
    sum / divisor) and a per-channel factor: every class rounds its ties to even."""
    rows = (0, 0, 1)                                    # counts 2, 2, 1
    mult = np.broadcast_to(np.array([1, 3])[None, None, :], (2, 2, 2)).copy()
    shift = np.array([[2, 1], [1, 0]])[:, :, None] + np.zeros((1, 1, 2), np.int64)   # / 4, / 2, / 1
    dut = DivisorRequantize(channels=2, pe=1, acc_bits=12, rows=rows, cols=rows, multiplier=mult, shift=shift,
                            zero_point=-1, out_bits=8, out_signed=True, ties="even")
    rng = np.random.default_rng(4)
    images = 40
    x = rng.integers(-300, 300, size=(images * 9 * 2, 1))
    out, _ = run_stream(dut, {"i": x}, {"o": len(x)}, src_pause="random", sink_pause="random", seed=2)
    t = np.arange(len(x))
    pix, chan = (t // 2) % 9, t % 2
    r, k = np.array(rows)[pix // 3], np.array(rows)[pix % 3]
    m_el, s_el = mult[r, k, chan], shift[r, k, chan]
    want = _half_even(x[:, 0], m_el, s_el, -1, -128, 127)
    np.testing.assert_array_equal(out["o"][:, 0], want)
    assert _ties(x[:, 0], m_el, s_el) > 100


def test_ties_parameter_checked_and_costed():
    kw = dict(channels=4, pe=2, acc_bits=16, multiplier=3, shift=4, out_bits=8, out_signed=True)
    with pytest.raises(ValueError, match="ties must be one of"):
        Requantize(**kw, ties="odd")
    up, even = Requantize.estimate(**kw), Requantize.estimate(**kw, ties="even")
    assert even.lut > up.lut and (even.dsp, even.ebr, even.latency) == (up.dsp, up.ebr, up.latency)


@pytest.mark.synth
@pytest.mark.parametrize("c,pe,ab,mbits,per_channel", [(16, 2, 16, 16, False), (8, 1, 32, 32, True),
                                                      (4, 2, 14, 31, False)])
def test_half_even_synth_matches_estimate(c, pe, ab, mbits, per_channel, summary):
    """Yosys synth_ecp5 of the wide form with each rule: the estimate within 30 % (LUT4
    equivalents) and what half to even adds within 30 LUT4 equivalents per lane of the measured."""
    from onnx2hw.rtl.synth_check import yosys_stat
    rng = np.random.default_rng(6)
    n = c if per_channel else 1
    m = rng.integers(1 << (mbits - 2), 1 << (mbits - 1), size=n)
    s = rng.integers(10, 20, size=n)
    kw = dict(channels=c, pe=pe, acc_bits=ab, multiplier=m if per_channel else int(m[0]),
              shift=s if per_channel else int(s[0]), zero_point=3, out_bits=8, out_signed=True)
    got, est = {}, {}
    for ties in ("up", "even"):
        stat = yosys_stat(Requantize(**kw, ties=ties))
        got[ties], est[ties] = stat["lut"] + 2 * stat["ccu2c"], Requantize.estimate(**kw, ties=ties).lut
        assert abs(est[ties] - got[ties]) <= 0.3 * got[ties], (ties, est[ties], stat)
    summary(f"rq_even{c}p{pe}a{ab}", f"Requantize c{c} PE{pe} acc{ab} M{mbits}b half to even: LUT4eq "
            f"{got['even']} (est {est['even']}), half up {got['up']} (est {est['up']})")
    assert abs((est["even"] - est["up"]) - (got["even"] - got["up"])) <= 30 * pe


@pytest.mark.parametrize("ma,mb,shift,lanes", [(3, 5, 3, 2), (1, 1, 1, 1), (4, -6, 4, 2)])
def test_add_unit_half_even_under_backpressure(ma, mb, shift, lanes):
    """AddUnit: ``(a - za) * Ma + (b - zb) * Mb`` rounded by the shift, ties to even."""
    from amaranth.hdl import signed
    from onnx2hw.rtl.add import AddUnit
    rng = np.random.default_rng(shift)
    a = rng.integers(-128, 128, size=(900 // lanes, lanes))
    b = rng.integers(-128, 128, size=a.shape)
    dut = AddUnit(signed(8), signed(8), signed(8), lanes, a_zero=3, a_mult=ma, b_zero=-2, b_mult=mb, shift=shift,
                  zero_point=1, ties="even")
    out, _ = run_stream(dut, {"a": a, "b": b}, {"o": len(a)}, src_pause="random", sink_pause="random", seed=1)
    acc = (a - 3) * ma + (b + 2) * mb
    np.testing.assert_array_equal(out["o"], _half_even(acc, 1, shift, 1, -128, 127))
    assert _ties(acc, 1, shift) > 50


def test_concat_unit_half_even_under_backpressure():
    """ConcatUnit: input 0 copied, input 1 by 3/8 and input 2 by 5/2 (shifts equalised), ties to even."""
    from amaranth.hdl import signed
    from onnx2hw.rtl.concat import ConcatUnit
    rng = np.random.default_rng(8)
    pixels, chans, lanes = 200, (2, 4, 2), 2
    xs = [rng.integers(-128, 128, size=(pixels * c // lanes, lanes)) for c in chans]
    zeros, mults, shifts = (0, 4, -1), (1, 3, 5), (0, 3, 1)
    dut = ConcatUnit([signed(8)] * 3, chans, signed(8), lanes, pixels=pixels, zeros=zeros, mults=mults, shifts=shifts,
                     zero_point=0, ties="even")
    out, _ = run_stream(dut, {f"i{k}": x for k, x in enumerate(xs)}, {"o": pixels * sum(chans) // lanes},
                        src_pause="random", sink_pause="3of4", seed=4)
    want = []
    for p in range(pixels):     # per pixel: the beats of input 0, then 1, then 2
        for k, c in enumerate(chans):
            rows = xs[k][p * c // lanes:(p + 1) * c // lanes]
            want.append(_half_even(rows - zeros[k], mults[k], shifts[k], 0, -128, 127))
    np.testing.assert_array_equal(out["o"], np.concatenate(want))
    assert sum(_ties(x - z, m, s) for x, z, m, s in zip(xs, zeros, mults, shifts)) > 50
