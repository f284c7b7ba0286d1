"""Clip: ``min(max(x, lo), hi)``.

Opset < 11 takes ``min``/``max`` attributes (defaults: the float range); from 11
they are optional scalar inputs (absent means unbounded). When ``lo > hi`` every
element becomes ``hi``, as in the ONNX reference.
"""
import numpy as np

from ._util import as_array, fail

__all__ = ["run"]


def _bound(node, value, name, x):
    if value is None:
        return None
    arr = np.asarray(value)
    if arr.size != 1:
        raise fail(node, f"{name} must be a scalar, got shape {arr.shape!r}")
    return arr.reshape(()).astype(x.dtype)


def run(node, x, lo=None, hi=None):
    x = as_array(x)
    if node.since_version < 11:
        lo, hi = node.attr("min"), node.attr("max")
    lo, hi = _bound(node, lo, "min", x), _bound(node, hi, "max", x)
    out = x
    if lo is not None:
        out = np.maximum(out, lo)
    if hi is not None:
        out = np.minimum(out, hi)
    return as_array(out).astype(x.dtype, copy=False)
