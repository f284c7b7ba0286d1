"""GlobalMaxPool: max over all spatial dims, kept as size-1 dims."""
from __future__ import annotations

import numpy as np

__all__ = ["run"]


def run(node, x):
    return np.max(x, axis=tuple(range(2, x.ndim)), keepdims=True)
