"""GlobalAveragePool: mean over all spatial dims, kept as size-1 dims.

The sum is taken in float64 and rounded once: a float32 sum's rounding depends on the order NumPy's
SIMD loop adds in (which differs between CPUs and between channels), and a network whose logits are
~1e10 (onnx's light squeezenet) turns one float32 ulp into a different softmax.
"""
from __future__ import annotations

import numpy as np

__all__ = ["run"]


def run(node, x):
    axes = tuple(range(2, x.ndim))
    return np.mean(x, axis=axes, keepdims=True, dtype=np.float64).astype(x.dtype, copy=False)
