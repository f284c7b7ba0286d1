"""The divided form of requantization: ``acc * M / (d * 2**s)`` rounded exactly by one multiply.

For a ratio ``P / D`` (``P = M``, ``D = d * 2**s``) the rounded value is ``Q = floor(x / 2D)``
with ``x = 2P acc + D`` (round half up), and ``x / 2D`` is a tie exactly where ``2D`` divides
``x``. With the magic multiplier ``M' = ceil(2**S / 2D)`` (error ``e = 2D M' - 2**S``, ``0 <= e <
2D``) and ``x + 2D K = 2D Q' + r`` (``Q' = Q + K >= 0`` over the accumulator range, ``0 <= r <
2D``)::

    (x + 2D K) M' = Q' 2**S + (Q' e + r M')

and ``0 <= Q' e + r M' < 2**S`` with ``Q' e < M'`` whenever ``(Q'_max + 1) e < M'``. Then
``v = acc * (2P M') + (D M' + K e)`` (that product less ``K 2**S``) has ``v >> S = Q`` and low
``S`` bits ``Q' e + r M'``, which are below ``M'`` exactly where ``r = 0``: the tie. Round half to
even takes one off an odd ``Q`` there. ``S`` is the least shift that satisfies every class's bound
(a pool with a divisor per position has a class per divisor, one shift for all).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import arith

__all__ = ["DividedForm", "divided_form"]

#: accumulator ranges up to this many values are checked against the spec exhaustively
_CHECK_ALL = 1 << 16


@dataclass(frozen=True)
class DividedForm:
    """``y = q - (tie & q odd)``, ``q = v >> shift``, ``tie = (v mod 2**shift) < tie_below[c]``,
    ``v = acc * mult[c] + half[c]`` for class ``c`` (see the module docstring); ``tie_below`` is 0
    for round half up (no tie is taken off)."""

    shift: int
    mult: tuple
    half: tuple
    tie_below: tuple

    def apply(self, acc, c: int) -> np.ndarray:
        """The form on integers ``acc`` of class ``c`` (Python integers: the product is wide)."""
        v = np.asarray(acc, dtype=np.int64).astype(object) * self.mult[c] + self.half[c]
        q = v >> self.shift
        tie = (v & ((1 << self.shift) - 1)) < self.tie_below[c]
        return np.asarray(q - (tie & (q & 1 == 1)), dtype=np.int64)


def _bound_holds(p: int, den: int, acc_lo: int, acc_hi: int, shift: int) -> bool:
    x_lo, x_hi = sorted((2 * p * acc_lo + den, 2 * p * acc_hi + den))
    k = max(0, -(x_lo // (2 * den)))
    mp = -(-(1 << shift) // (2 * den))
    e = 2 * den * mp - (1 << shift)
    return (x_hi // (2 * den) + k + 1) * e < mp


def divided_form(ratios, acc_lo: int, acc_hi: int, ties: str) -> DividedForm:
    """The :class:`DividedForm` of the classes ``ratios`` (``(M, s, d)`` each, ``M != 0``) for
    accumulators in ``[acc_lo, acc_hi]``, checked against :func:`onnx2hw.arith.requantize`."""
    if ties not in arith.TIES:
        raise ValueError(f"ties must be one of {arith.TIES!r}, not {ties!r}")
    classes = [(int(m), int(d) << int(s)) for m, s, d in ratios]
    if any(p == 0 for p, _ in classes):
        raise ValueError("a divided form needs non-zero multipliers")
    shift = 1
    while not all(_bound_holds(p, den, acc_lo, acc_hi, shift) for p, den in classes):
        shift += 1
    mult, half, tie = [], [], []
    for p, den in classes:
        x_lo = min(2 * p * acc_lo + den, 2 * p * acc_hi + den)
        k = max(0, -(x_lo // (2 * den)))
        mp = -(-(1 << shift) // (2 * den))
        mult.append(2 * p * mp)
        half.append(den * mp + k * (2 * den * mp - (1 << shift)))
        tie.append(mp if ties == "even" else 0)
    form = DividedForm(shift, tuple(mult), tuple(half), tuple(tie))
    _check(form, ratios, acc_lo, acc_hi, ties)
    return form


def _check(form: DividedForm, ratios, acc_lo: int, acc_hi: int, ties: str) -> None:
    """The form equals the spec on every accumulator of a small range, else at its ends, around
    zero and on a sample (the module docstring proves the rest)."""
    if acc_hi - acc_lo < _CHECK_ALL:
        acc = np.arange(acc_lo, acc_hi + 1, dtype=np.int64)
    else:
        rng = np.random.default_rng(0)
        ends = [acc_lo + i for i in range(64)] + [acc_hi - i for i in range(64)] + list(range(-64, 64))
        acc = np.clip(np.concatenate([np.array(ends, np.int64), rng.integers(acc_lo, acc_hi, 4096)]), acc_lo, acc_hi)
    for c, (m, s, d) in enumerate(ratios):
        want = arith.requantize(acc, int(m), int(s), 0, -(1 << 62), 1 << 62, ties, int(d))
        if not np.array_equal(form.apply(acc, c), want):
            raise AssertionError(f"divided form of {m} / ({d} * 2**{s}) differs from the spec")
