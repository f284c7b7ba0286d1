"""LogSoftmax: ``x - max - log(sum(exp(x - max)))`` along ``axis`` with Softmax's opset rules
(before 13: over the input coerced to 2-D at ``axis``, default 1; from 13: along ``axis``,
default -1)."""
import numpy as np

from ._util import as_array, float_compute, norm_axis

__all__ = ["run"]


def _log_softmax(x: np.ndarray, axis: int) -> np.ndarray:
    shifted = x - np.max(x, axis=axis, keepdims=True)
    return shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))


def run(node, x):
    x = as_array(x)
    xf = x.astype(float_compute(x), copy=False)
    if not x.ndim:
        return np.zeros_like(xf).astype(x.dtype)
    if node.since_version < 13:
        axis = norm_axis(node, node.attr("axis", 1), x.ndim)
        rows = int(np.prod(x.shape[:axis], dtype=np.int64))
        out = _log_softmax(xf.reshape(rows, -1), 1).reshape(x.shape)
    else:
        out = _log_softmax(xf, norm_axis(node, node.attr("axis", -1), x.ndim))
    return as_array(out).astype(x.dtype, copy=False)
