"""MatMul: ``np.matmul`` semantics (1-D promotion, batch broadcasting).

float16/bfloat16 are multiplied in float32 and cast back; integer types keep
their dtype (wrapping like a same-width accumulator).
"""
from __future__ import annotations

import numpy as np

from ...ir.errors import ModelError

__all__ = ["run"]


def run(node, a, b):
    dtype = a.dtype
    if dtype != b.dtype:
        raise ModelError(f"node {node.name!r}: MatMul inputs have different types {a.dtype!r} and {b.dtype!r}")
    if a.ndim == 0 or b.ndim == 0:
        raise ModelError(f"node {node.name!r}: MatMul needs inputs of rank >= 1, got {a.shape!r} and {b.shape!r}")
    if dtype.kind == "f" and dtype.itemsize >= 4 or dtype.kind in "iu":
        return np.matmul(a, b)
    return np.matmul(a.astype(np.float32), b.astype(np.float32)).astype(dtype)
