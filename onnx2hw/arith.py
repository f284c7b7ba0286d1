"""Exact integer arithmetic shared by the layer kinds, the golden executor and the RTL.

These NumPy functions *define* the integer semantics; hardware blocks are tested
against them bit for bit. All inputs are integer arrays; results are ``int64``.

Requantization (rounding rule ``ties``: ``"up"``, round half up, i.e. towards +inf on ties;
``"even"``, round half to even)::

    y = clamp(zp + ((acc * M + (1 << (s - 1))) >> s), lo, hi)                  ties="up", s >= 1
    y = clamp(zp + ((acc * M + (1 << (s - 1)) - 1 + bit_s(acc * M)) >> s), lo, hi)  ties="even", s >= 1
    y = clamp(zp + acc * M, lo, hi)                                              s == 0

``>>`` is an arithmetic (flooring) shift and ``bit_s(p) = (p >> s) & 1`` the parity of the
floored quotient: a tie (remainder exactly ``2**(s-1)``) then rounds up only from an odd
quotient, every other remainder as round half up. In hardware this is one multiply, one
constant add (plus that one bit) and a wire shift. The importer takes ``"even"`` where the
model's quantizer rounds half to even (ONNX QuantizeLinear, QONNX ``ROUND``) and ``M / 2**s`` is
the real scale ratio exactly, so the integer ties are the real ones (``layers/_scale.py``
``exact_ratio``). ``M`` is an unsigned or signed integer of at most
32 bits, ``0 <= s <= 62``.

With an integer ``divisor`` other than 1 the rounded value is ``acc * M / (divisor * 2**s)``,
to the nearest integer, ties by the same rule: the requantization of a ratio that is a rational
of a denominator other than a power of two exactly (an average pool's ``1 / 6`` on its input's
own grid), whose ties are real ones no binary multiplier reaches. ``M``/``s``/``zp`` are scalars (per tensor) or arrays
broadcast over the channel axis (per channel; channels last, NHWC).

Multi-threshold activation (FINN style), for outputs of at most 4 bits::

    y = lo + sum_i (acc >= T[..., i])

with ``T`` of shape ``(C, 2**bits - 1)`` (or ``(1, n)`` per tensor), each row
non-decreasing.

Quantized elementwise add (:func:`add_requantized`, hardware block ``rtl.add.Add``): both inputs
are brought onto a common accumulator grid by their own integer multiplier, summed, and
rounded once with a shared shift (round half up as below, or half to even: ``ties``)::

    acc = (a - a_zero) * a_mult + (b - b_zero) * b_mult
    y   = clamp(zero_point + ((acc + (1 << (shift - 1))) >> shift), lo, hi)   # shift >= 1

For real scales ``Sa``, ``Sb`` and output scale ``Sy``: ``a_mult / 2**shift ~= Sa / Sy`` and
``b_mult / 2**shift ~= Sb / Sy``.
"""
from __future__ import annotations

import numpy as np

__all__ = ["int_range", "requantize", "TIES", "multithreshold", "acc_bits", "clamp", "add_requantized", "qonnx_round"]


def int_range(bits: int, signed: bool, narrow: bool = False) -> tuple[int, int]:
    """Inclusive range of a ``bits``-wide integer (``narrow`` drops the most negative)."""
    if not 1 <= bits <= 64:
        raise ValueError(f"bit width must be 1..64, not {bits!r}")
    if signed:
        return -(1 << (bits - 1)) + int(narrow), (1 << (bits - 1)) - 1
    return 0, (1 << bits) - 1 - int(narrow)


def clamp(x, lo: int, hi: int) -> np.ndarray:
    return np.clip(np.asarray(x, dtype=np.int64), lo, hi)


#: the rounding rules of :func:`requantize` on an exact tie
TIES = ("up", "even")


def requantize(acc, multiplier, shift, zero_point, lo: int, hi: int, ties: str = "up",
               divisor=1) -> np.ndarray:
    """Multiply-and-shift requantization, ties rounded by ``ties`` (see module docstring); with a
    ``divisor`` other than 1, ``acc * M / (divisor * 2**s)`` rounded to the nearest integer
    exactly (:func:`_divided`).

    Products are computed in Python integers when they could overflow int64.
    """
    if ties not in TIES:
        raise ValueError(f"ties must be one of {TIES!r}, not {ties!r}")
    if np.any(np.asarray(divisor) != 1):
        return np.clip(_divided(acc, multiplier, shift, divisor, ties) + np.asarray(zero_point, np.int64),
                       lo, hi).astype(np.int64)
    acc = np.asarray(acc, dtype=np.int64)
    m = np.asarray(multiplier, dtype=np.int64)
    s = np.asarray(shift, dtype=np.int64)
    zp = np.asarray(zero_point, dtype=np.int64)
    if np.any(s < 0) or np.any(s > 62):
        raise ValueError(f"shift must be in 0..62, not {shift!r}")
    amax = int(np.max(np.abs(acc))) if acc.size else 0
    mmax = int(np.max(np.abs(m))) if m.size else 0
    if amax * mmax >= (1 << 62):
        prod = acc.astype(object) * m.astype(object)
        s, zp = s.astype(object), zp.astype(object)
        half = np.where(s > 0, np.left_shift(1, np.maximum(s - 1, 0)), 0).astype(object)
    else:
        prod = acc * m
        half = np.where(s > 0, np.left_shift(np.int64(1), np.maximum(s - 1, 0)), 0)
    if ties == "even":   # 2**(s-1) - 1 + bit s: a tie goes up from an odd quotient only
        half = np.where(s > 0, half - 1 + ((prod >> s) & 1), 0)
    y = ((prod + half) >> s) + zp
    return np.clip(y, lo, hi).astype(np.int64)


def _divided(acc, multiplier, shift, divisor, ties: str) -> np.ndarray:
    """``acc * M / (divisor * 2**s)`` rounded to the nearest integer, ties by ``ties``, in exact
    integers: ``q, r = divmod(acc * M, divisor * 2**s)``, then ``q + 1`` where ``2r`` exceeds the
    denominator, or equals it and ``ties`` is ``"up"`` or ``q`` is odd."""
    acc = np.asarray(acc, dtype=np.int64)
    d = np.asarray(divisor, dtype=np.int64)
    s = np.asarray(shift, dtype=np.int64)
    if np.any(d < 1):
        raise ValueError(f"divisor must be positive, not {divisor!r}")
    if np.any(s < 0) or np.any(s > 62):
        raise ValueError(f"shift must be in 0..62, not {shift!r}")
    m = np.asarray(multiplier, np.int64)
    amax = int(np.max(np.abs(acc))) if acc.size else 0
    wide = amax * int(np.max(np.abs(m))) >= (1 << 61) or int(np.max(d)) << int(np.max(s)) >= (1 << 61)
    num = acc.astype(object) * m.astype(object) if wide else acc * m
    den = d.astype(object) * np.left_shift(1, s.astype(object)) if wide else d << s
    q, r = np.floor_divide(num, den), np.mod(num, den)      # floor division: 0 <= r < den
    tie = 2 * r == den
    up = (2 * r > den) | (tie & (q % 2 == 1)) if ties == "even" else 2 * r >= den
    return np.asarray(q + up.astype(np.int64)).astype(np.int64)


def multithreshold(acc, thresholds, lo: int = 0) -> np.ndarray:
    """``lo + count(acc >= T)`` per channel (channel = last axis of ``acc``)."""
    acc = np.asarray(acc, dtype=np.int64)
    t = np.asarray(thresholds, dtype=np.int64)
    if t.ndim != 2:
        raise ValueError(f"thresholds must be 2-D (channels, steps), not shape {t.shape!r}")
    if t.shape[0] == 1:
        t = np.broadcast_to(t, (acc.shape[-1], t.shape[1]))
    return lo + np.sum(acc[..., None] >= t, axis=-1, dtype=np.int64)


def acc_bits(lo: int, hi: int) -> int:
    """Smallest two's-complement width holding every integer in ``[lo, hi]``."""
    bits = 1
    while not (-(1 << (bits - 1)) <= lo and hi <= (1 << (bits - 1)) - 1):
        bits += 1
    return bits


def add_requantized(a, b, *, a_zero: int, a_mult: int, b_zero: int, b_mult: int, shift: int,
                    zero_point: int, lo: int, hi: int, ties: str = "up") -> np.ndarray:
    """Quantized ``a + b`` (int64), broadcasting ``a`` against ``b``, ties by ``ties`` (see
    :func:`requantize`); see the module docstring."""
    for name, v in (("a_zero", a_zero), ("a_mult", a_mult), ("b_zero", b_zero),
                    ("b_mult", b_mult), ("shift", shift), ("zero_point", zero_point)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise TypeError(f"{name} must be an integer scalar, not {v!r}")
    if lo > hi:
        raise ValueError(f"empty clamp range [{lo!r}, {hi!r}]")
    a = np.asarray(a, dtype=np.int64)
    b = np.asarray(b, dtype=np.int64)
    acc = (a - int(a_zero)) * int(a_mult) + (b - int(b_zero)) * int(b_mult)
    return requantize(acc, 1, int(shift), int(zero_point), lo, hi, ties)


def qonnx_round(y: np.ndarray, mode: str) -> np.ndarray:
    """QONNX rounding modes (case-insensitive): ROUND = HALF_EVEN, CEIL, FLOOR,
    ROUND_TO_ZERO = DOWN (truncate), UP (away from zero), HALF_UP (ties away from
    zero), HALF_DOWN (ties towards zero)."""
    m = str(mode).upper()
    if m in ("ROUND", "HALF_EVEN"):
        return np.round(y)
    if m == "CEIL":
        return np.ceil(y)
    if m == "FLOOR":
        return np.floor(y)
    if m in ("ROUND_TO_ZERO", "DOWN"):
        return np.trunc(y)
    a = np.abs(y)
    if m == "UP":
        return np.copysign(np.ceil(a), y)
    if m in ("HALF_UP", "HALF_DOWN"):
        r = np.floor(a)
        frac = a - r  # exact
        r = r + ((frac >= 0.5) if m == "HALF_UP" else (frac > 0.5))
        return np.copysign(r, y)
    raise ValueError(f"unknown rounding_mode {mode!r}")
