"""GlobalAveragePool: mean over all spatial dims, kept as size-1 dims.

The sum is taken in float64 and rounded once (``_util.SUM_DTYPE``).
"""
from __future__ import annotations

import numpy as np

from ._util import SUM_DTYPE

__all__ = ["run"]


def run(node, x):
    axes = tuple(range(2, x.ndim))
    return np.mean(x, axis=axes, keepdims=True, dtype=SUM_DTYPE).astype(x.dtype, copy=False)
