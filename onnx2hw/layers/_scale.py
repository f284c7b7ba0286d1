"""Float scale ratio -> integer ``(multiplier, shift)`` for :func:`onnx2hw.arith.requantize`."""
from __future__ import annotations

import math

import numpy as np

from ..ir.errors import ModelError

__all__ = ["check_scale", "ratio_to_multiplier_shift"]

MULT_BITS = 31  # multiplier < 2**31 (fits a signed or unsigned 32-bit word)
MAX_SHIFT = 62


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
