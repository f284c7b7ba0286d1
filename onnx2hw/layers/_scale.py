"""Float scale ratio -> integer ``(multiplier, shift)`` for :func:`onnx2hw.arith.requantize`."""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from ..ir.errors import ModelError

__all__ = ["check_scale", "ratio_to_multiplier_shift", "exact_ratio", "ties_for", "rational_ratio"]

MULT_BITS = 31  # multiplier < 2**31 (fits a signed or unsigned 32-bit word)
MAX_SHIFT = 62
#: largest odd divisor of a rational requantization (the hardware's constants grow with it)
MAX_DIVISOR = 1 << 12


def check_scale(scale, what: str) -> np.ndarray:
    """``scale`` as a float64 array; ``ModelError`` (a ``ValueError``) naming ``what`` if any is zero, negative, NaN or inf."""
    s = np.asarray(scale, dtype=np.float64)
    bad = ~np.isfinite(s) | (s <= 0)
    if np.any(bad):
        raise ModelError(f"{what}: scale {s[bad].reshape(-1)[0]!r} is not a positive finite number")
    return s


def ratio_to_multiplier_shift(ratio, what: str = "requantization") -> tuple[np.ndarray, np.ndarray]:
    """Per-element ``(M, s)`` with ``M / 2**s`` nearest to ``ratio``: the largest shift ``s <= 62``
    with ``M = round(ratio * 2**s) < 2**31``.

    A ratio so small that ``M`` would be 0 even at ``s = 62`` or so large that ``M >= 2**31``
    at ``s = 0`` is not representable and raises ``ModelError``.
    """
    r = check_scale(ratio, what).reshape(-1)
    ms, ss = [], []
    for x in r:
        x = float(x)
        mant, exp = math.frexp(x)  # x = mant * 2**exp, 0.5 <= mant < 1
        s = MULT_BITS - exp        # then x * 2**s = mant * 2**31 < 2**31
        s = min(s, MAX_SHIFT)
        if s < 0:
            raise ModelError(f"{what}: scale ratio {x!r} is too large to represent as a 32-bit multiplier")
        m = round(x * 2.0 ** s)
        if m >= 1 << MULT_BITS:   # rounding reached 2**31: one bit less precision
            s -= 1
            if s < 0:
                raise ModelError(f"{what}: scale ratio {x!r} is too large to represent as a 32-bit multiplier")
            m = round(x * 2.0 ** s)
        if m == 0:
            raise ModelError(f"{what}: scale ratio {x!r} is too small to represent (multiplier 0 at shift {s})")
        ms.append(m)
        ss.append(s)
    return np.array(ms, dtype=np.int64), np.array(ss, dtype=np.int64)


def exact_ratio(num, den, multiplier, shift) -> bool:
    """Whether ``|multiplier| / 2**shift`` is the real ratio ``num / den`` exactly, element by
    element (``num``, ``den`` the float scales as the model states them, compared as rationals)."""
    num, den, m, s = np.broadcast_arrays(np.asarray(num, np.float64), np.asarray(den, np.float64),
                                         np.asarray(multiplier, np.int64), np.asarray(shift, np.int64))
    return all(Fraction(float(a)) / Fraction(float(b)) == Fraction(abs(int(mi)), 1 << int(si))
               for a, b, mi, si in zip(num.reshape(-1), den.reshape(-1), m.reshape(-1), s.reshape(-1)))


def ties_for(num, den, multiplier, shift, half_even: bool) -> str:
    """The ``ties`` of a requantization by ``multiplier / 2**shift`` of values on the grid ``num``
    onto the grid ``den`` whose quantizer rounds half to even (``half_even``) or half up.

    ``"even"`` where the quantizer rounds half to even and the multiplier is the scale ratio
    exactly (:func:`exact_ratio`): then an integer tie is a real one and the real value's
    rounding is the quantizer's, on every element. Otherwise ``"up"``: with an inexact multiplier
    no integer tie is a real one (the real value lies on one side of it, by less than the
    multiplier's error), so neither rule is closer to the spec and half up costs no logic.
    """
    return "even" if half_even and exact_ratio(num, den, multiplier, shift) else "up"


def rational_ratio(ratio: Fraction) -> tuple[int, int, int] | None:
    """``(M, s, divisor)`` with ``M / (divisor * 2**s)`` equal to the positive ``ratio`` exactly,
    where it has real ties no binary multiplier gives: its reduced denominator is even (an odd one
    puts no value half way) and not a power of two, with an odd part of at most
    :data:`MAX_DIVISOR`; ``M < 2**31``, ``s <= 62``. ``None`` otherwise."""
    num, den = ratio.numerator, ratio.denominator
    s = (den & -den).bit_length() - 1     # the power of two in the denominator
    odd = den >> s
    if num <= 0 or s < 1 or s > MAX_SHIFT or odd == 1 or odd > MAX_DIVISOR or num >= 1 << MULT_BITS:
        return None
    return num, s, odd
