"""The narrow requantizer's plan: integer multiplier, shift and bias forms proved equal to the spec.

:func:`narrow_plan` searches, in integers only (NumPy, no hardware description), for a
:class:`NarrowPlan`: the accumulator clamped to its unsaturated window, multiplied by a narrowed
multiplier that fits one signed 18-bit DSP port (plus a low part of a few signed powers of two,
or no DSP at all), a bias carrying rounding and zero point, and a per-channel shift, such that
the result equals ``arith.requantize`` at every reachable accumulator. ``rtl.requant.Requantize``
builds the plan it is given.
"""
from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

import numpy as np

from .. import arith

__all__ = ["NarrowPlan", "narrow_plan"]

#: the signed operand width of one ECP5 MULT18X18D
_DSP_BITS = 18
#: most nonzero signed digits of a LUT-only multiplier (no DSP) and of the LUT low part
_LUT_ONLY_DIGITS = 2
_LOW_DIGITS = 3
#: widest low part (bits below the DSP multiplier) tried
_MAX_LOW_BITS = 8


@dataclass(frozen=True)
class NarrowPlan:
    """Parameters of the narrow requantizer (see :func:`narrow_plan`).

    ``y = clamp((a * (mult_hi[c] << low_bits) + a * low + bias[c]) >> shift[c], lo, hi)`` with
    ``a = clamp(acc, clamp_lo, clamp_hi) - offset`` (a bound of ``None`` is not applied); ``a`` fits
    ``a_bits`` signed bits; ``low`` is ``sum(sign * 2**e for sign, e in low_digits)``;
    ``mult_hi`` is 0 everywhere for a LUT-only form; ``g_lo``/``g_hi`` bound the shifted sum.
    """

    clamp_lo: int | None
    clamp_hi: int | None
    offset: int
    a_bits: int
    shift: tuple
    low_bits: int
    low_digits: tuple
    mult_hi: tuple
    bias: tuple
    g_lo: int
    g_hi: int

    @property
    def dsp(self) -> bool:
        return any(self.mult_hi)

    def multiplier(self, c: int) -> int:
        """The whole narrow multiplier ``M'`` of channel ``c``."""
        return (self.mult_hi[c] << self.low_bits) + sum(sg << e for sg, e in self.low_digits)

    def apply(self, acc, channel) -> np.ndarray:
        """The narrow formula on integers ``acc`` of channels ``channel`` (int64, for the checks)."""
        acc = np.asarray(acc, dtype=np.int64)
        ch = np.broadcast_to(np.asarray(channel), acc.shape)
        a = np.clip(acc, -(1 << 62) if self.clamp_lo is None else self.clamp_lo,
                    (1 << 62) if self.clamp_hi is None else self.clamp_hi) - self.offset
        m = np.array([self.multiplier(c) for c in range(len(self.mult_hi))], dtype=np.int64)[ch]
        b = np.array(self.bias, dtype=np.int64)[ch]
        return (a * m + b) >> np.array(self.shift, dtype=np.int64)[ch]


def _naf_weight(v: int) -> int:
    """Nonzero digits of the non-adjacent form of ``v`` (fewest signed powers of two summing to it)."""
    v, w = abs(int(v)), 0
    while v:
        if v & 1:
            w += 1
            v = v + 1 if v & 3 == 3 else v - 1
        v >>= 1
    return w


def _naf_digits(v: int) -> tuple:
    """``(sign, exponent)`` digits of the non-adjacent form of ``v``."""
    out, e, v = [], 0, int(v)
    while v:
        if v & 1:
            d = 2 - (v & 3)   # +1 or -1
            out.append((d, e))
            v -= d
        v >>= 1
        e += 1
    return tuple(out)


def _edges(m: int, s: int, z: int, lo: int, hi: int, ties: str = "up") -> tuple[int, int]:
    """``(CL, CH)``: the spec's output is constant for ``acc <= CL`` and for ``acc >= CH``."""
    h = (1 << (s - 1)) if s else 0
    x_lo = ((lo - z + 1) << s) - h - 1    # zp + q(acc) <= lo  <=>  acc * m <= x_lo
    x_hi = ((hi - z) << s) - h            # zp + q(acc) >= hi  <=>  acc * m >= x_hi
    if ties == "even" and s:    # a tie goes to its even neighbour: the one above lo - z down to it
        x_lo += (lo - z + 1) & 1    # if lo - z is even, the one below hi - z up to it only if hi - z is
        x_hi += (hi - z) & 1
    if m > 0:
        return x_lo // m, -(-x_hi // m)
    return x_hi // m, -(-x_lo // m)


def _slope_interval(a, lcon, ucon, m0: int, reach: int):
    """Integer ``M'`` with ``max(lcon - a*M') <= min(ucon - a*M')`` (an interval, the gap being
    convex in ``M'``), searched in ``[m0 - reach, m0 + reach]``; ``None`` if there is none."""
    def gap(mp):
        v = a * mp
        return int(np.max(lcon - v)) - int(np.min(ucon - v))

    lo_, hi_ = m0 - reach, m0 + reach
    # the minimum of a convex function on integers: binary search on the forward difference
    a_, b_ = lo_, hi_
    while a_ < b_:
        mid = (a_ + b_) // 2
        if gap(mid + 1) < gap(mid):
            a_ = mid + 1
        else:
            b_ = mid
    best = a_
    if gap(best) > 0:
        return None
    a_, b_ = lo_, best        # first feasible
    while a_ < b_:
        mid = (a_ + b_) // 2
        if gap(mid) <= 0:
            b_ = mid
        else:
            a_ = mid + 1
    left = a_
    a_, b_ = best, hi_        # last feasible
    while a_ < b_:
        mid = (a_ + b_ + 1) // 2
        if gap(mid) <= 0:
            a_ = mid
        else:
            b_ = mid - 1
    return left, a_


def _in_interval(lo_: int, hi_: int, base: int, step: int, lim_lo: int, lim_hi: int):
    """Some ``k`` in ``[lim_lo, lim_hi]`` with ``lo_ <= k * step + base <= hi_``, or ``None``."""
    k0 = max(-(-(lo_ - base) // step), lim_lo)
    return k0 if k0 <= min((hi_ - base) // step, lim_hi) else None


def _lut_only_table():
    vals = set()
    for e1 in range(48):
        for s1 in (1, -1):
            vals.add(s1 << e1)
            for e2 in range(e1 - 1):
                vals.update({(s1 << e1) + (1 << e2), (s1 << e1) - (1 << e2)})
    v = np.array(sorted(vals), dtype=np.int64)
    w = np.array([_naf_weight(int(x)) for x in v])
    return v, w


def _low_table():
    rows = []
    for low_bits in range(1, _MAX_LOW_BITS + 1):
        for low in range(-(1 << low_bits) + 1, 1 << low_bits):
            w = _naf_weight(low)
            if 1 <= w <= _LOW_DIGITS:
                rows.append((w, low_bits, low))
    return sorted(rows)


_LUT_ONLY = _lut_only_table()
_LOW = _low_table()


def _encode(m1: int, m2: int, single: bool):
    """Cheapest ``(cost, mult_hi, low_bits, low_digits)`` with ``M'`` in ``[m1, m2]``; cost is
    ``(dsp, adders)``. LUT-only forms and a LUT low part need one multiplier (``single``)."""
    h_lo, h_hi = -(1 << (_DSP_BITS - 1)), (1 << (_DSP_BITS - 1)) - 1
    if single:   # LUT only: M' with at most _LUT_ONLY_DIGITS signed digits
        vals, weights = _LUT_ONLY
        i, j = np.searchsorted(vals, m1, "left"), np.searchsorted(vals, m2, "right")
        if i < j:
            k = i + int(np.argmin(weights[i:j]))
            return (0, int(weights[k]) - 1), 0, 0, _naf_digits(int(vals[k]))
    k = _in_interval(m1, m2, 0, 1, h_lo, h_hi)
    if k is not None:
        return (1, 0), k, 0, ()
    if not single:
        return None
    for w, low_bits, low in _LOW:
        k = _in_interval(m1, m2, low, 1 << low_bits, h_lo, h_hi)
        if k is not None:
            return (1, w), k, low_bits, _naf_digits(low)
    return None


@functools.lru_cache(maxsize=256)
def _narrow_plan_cached(key):
    m, s, z, lo, hi, acc_lo, acc_hi, ties = key
    return _search(np.array(m, dtype=np.int64), np.array(s, dtype=np.int64), np.array(z, dtype=np.int64),
                   lo, hi, [int(v) for v in acc_lo], [int(v) for v in acc_hi], ties)


def narrow_plan(multiplier, shift, zero_point, lo, hi, acc_lo, acc_hi, ties="up"):
    """A :class:`NarrowPlan` equal to ``arith.requantize(acc, M, s, zp, lo, hi, ties)`` for every
    integer ``acc`` of channel ``c`` in ``[acc_lo[c], acc_hi[c]]``, or ``None``.

    Per-channel arrays of equal length (``multiplier``, ``shift``, ``zero_point``, ``acc_lo``,
    ``acc_hi``). The argument:

    1. The spec ``f(acc) = clamp(zp + ((acc*M + h) >> s), lo, hi)`` (half to even: ``h`` is
       ``2**(s-1) - 1`` plus bit ``s`` of ``acc*M``) is monotone in ``acc`` (rounding to the
       nearest, floor and clamp are), so it is constant (saturated) on ``acc <= CL`` and on ``acc >= CH``,
       with ``CL``, ``CH`` the last / first saturated accumulators (:func:`_edges`, exact integer
       division). Hence ``f(acc) == f(clamp(acc, CL, CH))``, and the unsaturated window
       ``[CL, CH]`` is about ``(hi - lo) * 2**s / |M|`` wide whatever the accumulator width.
    2. The pre-clamp ``[PL, PH]`` is the hull over channels of ``[CL_c, CH_c]`` intersected with
       the reachable range; for a reachable ``acc`` of channel ``c`` either ``clamp(acc, PL, PH)
       == acc`` or both lie on the same saturated side of channel ``c``, so ``f_c`` agrees.
       The clamped operand ranges over the finite interval ``J_c = [clamp(acc_lo_c, PL, PH),
       clamp(acc_hi_c, PL, PH)]``; when ``[PL, PH]`` needs more than 18 signed bits but spans
       fewer than ``2**18`` values, a constant ``offset`` (its centre) is subtracted beside the
       clamp and folded into the bias.
    3. On ``J_c`` the narrow sum ``g(a) = (a*M' + B) >> s'`` is compared with ``f_c`` at every
       integer (NumPy, int64): ``clamp(g(a), lo, hi) == f_c(a)`` for all ``a`` in ``J_c`` is the
       whole proof of exactness for every reachable accumulator, by 1 and 2.

    ``M'`` and ``B`` are searched, per group of channels with equal parameters and per shift
    ``s'`` (its own for each group), as the integer points of the convex set
    ``max_a(L(a) - a*M') <= min_a(U(a) - a*M')`` where ``L``/``U`` bound ``a*M' + B`` so that
    ``g(a)`` is the spec's value (or beyond the clamp when saturated); only the ends of each
    constant-output run of ``a`` bind, so the search works on those points and step 3 then
    checks every integer. ``M'`` is written as ``(mult_hi << low_bits) + low`` with ``mult_hi``
    fitting a signed 18-bit DSP port and ``low`` a few signed powers of two (LUT shift-and-add,
    one shared constant; per-channel multipliers use ``low = 0`` and the final shift is chosen
    per channel from the parameter ROM); a ``M'`` of at most two signed
    digits needs no DSP at all. No pre-shift of ``a`` is used: it is exact only when every
    output step starts at a multiple of the shift, which real scales do not give.
    """
    key = tuple(tuple(int(v) for v in np.asarray(x).reshape(-1))
                for x in (multiplier, shift, zero_point)) + (int(lo), int(hi)) + \
        tuple(tuple(int(v) for v in np.asarray(x).reshape(-1)) for x in (acc_lo, acc_hi)) + (ties,)
    return _narrow_plan_cached(key)


def _group_search(a_pts, o_pts, mk, sk, lo, hi, out_max, a_max, single):
    """Cheapest ``(cost, shift, (cost, mult_hi, low_bits, low_digits))`` for one group's critical
    points, over the shifts ``s'`` that give ``|M'|`` from 1 to ``2**(17 + _MAX_LOW_BITS)``."""
    top = sk - abs(mk).bit_length()
    best = None
    for sp in range(max(0, top), max(0, top + _DSP_BITS - 1 + _MAX_LOW_BITS) + 1):
        if out_max << sp >= 1 << 60 or a_max << (sp + 2) >= 1 << 60:   # keep int64 exact
            break
        lcon = np.where(o_pts > lo, o_pts << sp, np.int64(-(1 << 61)))
        ucon = np.where(o_pts < hi, ((o_pts + 1) << sp) - 1, np.int64(1 << 61))
        m0 = (mk << sp) >> sk if sp <= sk else mk << (sp - sk)
        iv = _slope_interval(a_pts, lcon, ucon, m0, abs(m0) // 2 + 4)
        if iv is None:
            continue
        enc = _encode(*iv, single)
        if enc is not None and (best is None or enc[0] < best[0]):
            best = (enc[0], sp, enc)
            if enc[0] <= (1, 0):    # no cheaper form at a larger shift but a LUT-only one
                if enc[0] == (0, 0) or not single:
                    break
    return best


def _search(m, s, z, lo, hi, acc_lo, acc_hi, ties):
    """The plan of :func:`narrow_plan`, uncached: ``m``, ``s``, ``z`` int64 arrays, ``acc_lo``,
    ``acc_hi`` lists of ints, one per channel."""
    c = len(m)
    if lo >= hi or np.any(m == 0) or any(a > b for a, b in zip(acc_lo, acc_hi)):
        return None
    edges = [_edges(int(m[k]), int(s[k]), int(z[k]), lo, hi, ties) for k in range(c)]
    img = [(min(max(acc_lo[k], cl), ch), min(max(acc_hi[k], cl), ch)) for k, (cl, ch) in enumerate(edges)]
    pl, ph = min(v[0] for v in img), max(v[1] for v in img)
    offset = 0
    a_bits = arith.acc_bits(min(pl, 0), max(ph, 0))
    if a_bits > _DSP_BITS:    # centre the window on 0 (e.g. a ReLU's [0, N] window up to 2**18)
        offset = (pl + ph + 1) >> 1
        a_bits = arith.acc_bits(min(pl - offset, 0), max(ph - offset, 0))
        if a_bits > _DSP_BITS:
            return None
    # groups of channels with the same spec parameters, checked on the hull of their intervals
    groups = {}
    for k in range(c):
        j = (min(max(acc_lo[k], pl), ph), min(max(acc_hi[k], pl), ph))
        g = groups.setdefault((int(m[k]), int(s[k]), int(z[k])), [j[0], j[1], []])
        g[0], g[1] = min(g[0], j[0]), max(g[1], j[1])
        g[2].append(k)
    single = len(groups) == 1
    a_max = max(abs(pl - offset), abs(ph - offset)) + 1
    mult_hi, bias, shift = [0] * c, [0] * c, [0] * c
    low_bits, low_digits = 0, ()
    checks = []
    for (mk, sk, zk), (j0, j1, chans) in groups.items():
        a = np.arange(j0, j1 + 1, dtype=np.int64)
        out = arith.requantize(a, mk, sk, zk, lo, hi, ties)
        change = np.flatnonzero(np.diff(out))
        idx = np.unique(np.concatenate([[0, len(a) - 1], change, change + 1]))
        ca, co = a[idx] - offset, out[idx]
        found = _group_search(ca, co, mk, sk, lo, hi, int(np.max(np.abs(out))) + 2, a_max, single)
        if found is None:
            return None
        _, sp, (cost, mh, lb, ld) = found
        low_bits, low_digits = lb, ld
        mp = (mh << lb) + sum(sg << e for sg, e in ld)
        lcon = np.where(co > lo, co << sp, np.int64(-(1 << 61)))
        ucon = np.where(co < hi, ((co + 1) << sp) - 1, np.int64(1 << 61))
        b = int(np.max(lcon - ca * mp))
        if b < -(1 << 59):    # every output saturated low: the largest bias that stays there
            b = int(np.min(ucon - ca * mp))
        for k in chans:
            mult_hi[k], bias[k], shift[k] = mh, b, sp
        checks.append((a, out, chans[0]))
    if not single and not all(mult_hi):
        return None
    plan = NarrowPlan(clamp_lo=pl if pl > min(acc_lo) else None,
                      clamp_hi=ph if ph < max(acc_hi) else None, offset=offset, a_bits=a_bits,
                      shift=tuple(shift),
                      low_bits=low_bits, low_digits=tuple(low_digits), mult_hi=tuple(mult_hi),
                      bias=tuple(bias), g_lo=0, g_hi=0)
    # step 3: every integer of every group's interval, against the spec
    g_lo, g_hi = None, None
    for a, out, k in checks:
        g = plan.apply(a, k)
        if not np.array_equal(np.clip(g, lo, hi), out):
            return None
        g_lo = int(g.min()) if g_lo is None else min(g_lo, int(g.min()))
        g_hi = int(g.max()) if g_hi is None else max(g_hi, int(g.max()))
    return dataclasses.replace(plan, g_lo=g_lo, g_hi=g_hi)
