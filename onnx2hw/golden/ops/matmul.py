"""MatMul: ``np.matmul`` semantics (1-D promotion, batch broadcasting).

Floats accumulate in float64 and are rounded once to their dtype (``_util.SUM_DTYPE``);
integer types keep their dtype (wrapping like a same-width accumulator).
"""
from __future__ import annotations

import numpy as np

from ...ir.errors import ModelError
from ._util import SUM_DTYPE

__all__ = ["run"]


def run(node, a, b):
    dtype = a.dtype
    if dtype != b.dtype:
        raise ModelError(f"node {node.name!r}: MatMul inputs have different types {a.dtype!r} and {b.dtype!r}")
    if a.ndim == 0 or b.ndim == 0:
        raise ModelError(f"node {node.name!r}: MatMul needs inputs of rank >= 1, got {a.shape!r} and {b.shape!r}")
    if dtype.kind in "iu":
        return np.matmul(a, b)
    return np.matmul(a.astype(SUM_DTYPE), b.astype(SUM_DTYPE)).astype(dtype)
