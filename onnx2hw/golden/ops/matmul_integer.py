"""MatMulInteger: exact ``(A - a_zero_point) @ (B - b_zero_point)`` as int32.

``a_zero_point`` is per tensor or per row of A (shape (M,)); ``b_zero_point`` per
tensor or per column of B (shape (N,)). Exact accumulation (float64 BLAS when
provably exact, int64 otherwise), then wrapped to int32.
"""
from __future__ import annotations

import numpy as np

from ._quant_util import absmax, exact_dtype, zero_point

__all__ = ["run", "integer_matmul"]


def integer_matmul(a, b, a_zero_point=None, b_zero_point=None) -> np.ndarray:
    """The exact int64 product used by MatMulInteger and QLinearMatMul."""
    az = zero_point(a_zero_point)
    bz = zero_point(b_zero_point)
    ai = a.astype(np.int64)
    bi = b.astype(np.int64)
    if az.ndim == 1 and az.size > 1 and ai.ndim >= 2:
        az = az.reshape(-1, 1)  # per row of A
    ai = ai - az
    bi = bi - bz
    cd = exact_dtype(absmax(ai), absmax(bi), a.shape[-1])
    y = np.matmul(ai.astype(cd, copy=False), bi.astype(cd, copy=False))
    return y if cd == np.int64 else y.astype(np.int64)


def run(node, a, b, a_zero_point=None, b_zero_point=None):
    return integer_matmul(a, b, a_zero_point, b_zero_point).astype(np.int32)
