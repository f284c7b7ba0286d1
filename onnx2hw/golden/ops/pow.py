"""Pow: ``x ** y`` with NumPy (multidirectional) broadcasting; the result has ``x``'s type.

A float base is raised in its own precision; an integer base is raised in float64 and cast back
(exact while the result fits the 53-bit mantissa; a negative exponent truncates toward zero).
"""
from __future__ import annotations

import numpy as np

from ._util import as_array

__all__ = ["run"]


def run(node, x, y):
    x, y = as_array(x), as_array(y)
    if x.dtype.kind == "f":
        return np.power(x, y.astype(x.dtype, copy=False)).astype(x.dtype, copy=False)
    return np.trunc(np.power(x.astype(np.float64), y.astype(np.float64))).astype(x.dtype)
