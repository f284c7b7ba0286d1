"""Flatten to 2-D: ``(prod(shape[:axis]), prod(shape[axis:]))``; ``axis`` in ``[-r, r]``."""
import numpy as np

from ._util import as_array, fail

__all__ = ["run"]


def run(node, x):
    x = as_array(x)
    axis = int(node.attr("axis", 1))
    if not -x.ndim <= axis <= x.ndim:
        raise fail(node, f"axis {axis!r} is out of range for rank {x.ndim}")
    if axis < 0:
        axis += x.ndim
    rows = int(np.prod(x.shape[:axis], dtype=np.int64))
    return x.reshape(rows, int(np.prod(x.shape[axis:], dtype=np.int64)))
