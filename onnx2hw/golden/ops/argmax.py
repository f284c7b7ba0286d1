"""ArgMax along ``axis`` (default 0) as int64; ``keepdims`` (default 1);
``select_last_index`` (opset 12) picks the last of equal maxima."""
import numpy as np

from ._util import as_array, fail, norm_axis

__all__ = ["run"]


def run(node, x):
    x = as_array(x)
    axis = norm_axis(node, node.attr("axis", 0), x.ndim)
    if x.shape[axis] == 0:
        raise fail(node, f"cannot take ArgMax over empty axis {axis}")
    if node.attr("select_last_index", 0):
        idx = x.shape[axis] - 1 - np.argmax(np.flip(x, axis), axis=axis)
    else:
        idx = np.argmax(x, axis=axis)
    idx = as_array(idx).astype(np.int64)
    return np.expand_dims(idx, axis) if node.attr("keepdims", 1) else idx
