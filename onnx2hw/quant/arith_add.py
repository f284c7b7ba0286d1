"""Exact integer semantics of the quantized elementwise Add (hardware block ``rtl.add.Add``).

Both inputs are brought onto a common scale by their own integer multiplier, summed, and
requantized once with a shared shift (round half up, see :mod:`onnx2hw.quant.arith`)::

    acc = (a - a_zero) * a_mult + (b - b_zero) * b_mult
    y   = clamp(zero_point + ((acc + (1 << (shift - 1))) >> shift), lo, hi)   # shift >= 1
    y   = clamp(zero_point + acc, lo, hi)                                      # shift == 0

For real scales ``Sa``, ``Sb`` and output scale ``Sy``: ``a_mult / 2**shift ~= Sa / Sy`` and
``b_mult / 2**shift ~= Sb / Sy`` (pick ``shift`` so the larger multiplier has the precision
wanted, e.g. 15..16 bits). One rounding, so the result is at most 1/2 LSB (plus multiplier
quantization error) from the real sum. Parameters are per-tensor scalars.
"""
from __future__ import annotations

import numpy as np

from .arith import requantize

__all__ = ["add_requantized"]


def add_requantized(a, b, *, a_zero: int, a_mult: int, b_zero: int, b_mult: int, shift: int,
                    zero_point: int, lo: int, hi: int) -> np.ndarray:
    """Quantized ``a + b`` (int64), broadcasting ``a`` against ``b``; see module docstring."""
    for name, v in (("a_zero", a_zero), ("a_mult", a_mult), ("b_zero", b_zero),
                    ("b_mult", b_mult), ("shift", shift), ("zero_point", zero_point)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise TypeError(f"{name} must be an integer scalar, not {v!r}")
    if lo > hi:
        raise ValueError(f"empty clamp range [{lo!r}, {hi!r}]")
    a = np.asarray(a, dtype=np.int64)
    b = np.asarray(b, dtype=np.int64)
    acc = (a - int(a_zero)) * int(a_mult) + (b - int(b_zero)) * int(b_mult)
    return requantize(acc, 1, int(shift), int(zero_point), lo, hi)
