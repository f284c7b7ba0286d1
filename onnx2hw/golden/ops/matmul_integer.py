"""MatMulInteger: exact ``(A - a_zero_point) @ (B - b_zero_point)`` as int32.

``a_zero_point`` is per tensor or per row of A (shape (M,)); ``b_zero_point`` per
tensor or per column of B (shape (N,)). Exact accumulation (float32/float64 BLAS
when every partial sum provably fits the mantissa, int64 otherwise), then wrapped to int32.
"""
from __future__ import annotations

import numpy as np

from ._quant_util import centered, exact_dtype, offset_bound, to_int32, zero_point

__all__ = ["run", "integer_matmul"]


def integer_matmul(a, b, a_zero_point=None, b_zero_point=None) -> np.ndarray:
    """The exact product used by MatMulInteger and QLinearMatMul, integer-valued in
    the fastest exact dtype (float32, float64 or int64)."""
    az = zero_point(a_zero_point)
    bz = zero_point(b_zero_point)
    if az.ndim == 1 and az.size > 1 and a.ndim >= 2:
        az = az.reshape(-1, 1)  # per row of A
    cd = exact_dtype(offset_bound(a.dtype, az) * offset_bound(b.dtype, bz) * max(a.shape[-1], 1))
    return np.matmul(centered(a, az, cd), centered(b, bz, cd))


def run(node, a, b, a_zero_point=None, b_zero_point=None):
    return to_int32(integer_matmul(a, b, a_zero_point, b_zero_point))
