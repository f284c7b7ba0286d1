"""Softmax.

Opset < 13 coerces the input to 2-D at ``axis`` (default 1): the softmax runs over
all of ``shape[axis:]`` flattened. From 13 it runs along ``axis`` (default -1).
The maximum is subtracted first, so large inputs do not overflow.
"""
import numpy as np

from ._util import as_array, float_compute, norm_axis

__all__ = ["run", "softmax"]


def _softmax(x: np.ndarray, axis: int) -> np.ndarray:
    shifted = x - np.max(x, axis=axis, keepdims=True)
    e = np.exp(shifted)
    return e / np.sum(e, axis=axis, keepdims=True)


def run(node, x):
    return softmax(node, as_array(x), node.since_version)


def softmax(node, x: np.ndarray, version: int, axis=None) -> np.ndarray:
    """Softmax of ``x`` with the semantics of opset ``version`` (``axis``: the node's, by default)."""
    xf = x.astype(float_compute(x), copy=False)
    if version < 13:
        axis = norm_axis(node, node.attr("axis", 1) if axis is None else axis, max(x.ndim, 1)) if x.ndim else 0
        rows = int(np.prod(x.shape[:axis], dtype=np.int64))
        cols = int(np.prod(x.shape[axis:], dtype=np.int64))
        out = _softmax(xf.reshape(rows, cols), 1).reshape(x.shape)
    else:
        out = _softmax(xf, norm_axis(node, node.attr("axis", -1) if axis is None else axis, x.ndim)) if x.ndim else np.ones_like(xf)
    return as_array(out).astype(x.dtype, copy=False)
