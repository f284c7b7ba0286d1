"""Add, Sub, Mul, Div with NumPy (multidirectional) broadcasting.

Integer results wrap around like C fixed-width arithmetic; integer Div truncates
toward zero (C semantics, not NumPy's floor) and rejects a zero divisor. Opsets
before 7 used ``broadcast``/``axis`` attributes (B aligned at ``axis``, or as a
suffix of A's shape); they are honoured.
"""
from __future__ import annotations

import numpy as np

from ._util import as_array, fail, norm_axis

__all__ = ["run"]


def _legacy_broadcast(node, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if not node.attr("broadcast", 0):
        if a.shape != b.shape:
            raise fail(node, f"shapes {a.shape!r} and {b.shape!r} differ and broadcast is 0")
        return b
    axis = node.attr("axis")
    axis = a.ndim - b.ndim if axis is None else norm_axis(node, axis, a.ndim)
    if axis + b.ndim > a.ndim:
        raise fail(node, f"B of shape {b.shape!r} does not fit A of shape {a.shape!r} at axis {axis!r}")
    return b.reshape(b.shape + (1,) * (a.ndim - axis - b.ndim))


def _int_div(node, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if np.any(b == 0):
        raise fail(node, "integer division by zero")
    q = np.floor_divide(a, b)
    if a.dtype.kind == "i":
        # floor -> truncation: bump quotients of inexact negative results
        inexact = (q * b) != a
        q = q + (inexact & ((a < 0) != (b < 0))).astype(q.dtype)
    return q


_UFUNC = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide}


def run(node, a, b):
    a, b = as_array(a), as_array(b)
    if a.dtype != b.dtype:
        raise fail(node, f"input dtypes differ: {a.dtype} and {b.dtype}")
    if node.since_version < 7:
        b = _legacy_broadcast(node, a, b)
    try:
        np.broadcast_shapes(a.shape, b.shape)
    except ValueError:
        raise fail(node, f"shapes {a.shape!r} and {b.shape!r} do not broadcast") from None
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        if node.op_type == "Div" and a.dtype.kind in "iu":
            out = _int_div(node, a, b)
        else:
            out = _UFUNC[node.op_type](a, b)
    return as_array(out).astype(a.dtype, copy=False)
