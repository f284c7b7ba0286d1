"""Gather along ``axis`` (default 0); negative indices count from the end."""
import numpy as np

from ._util import as_array, fail, norm_axis

__all__ = ["run"]


def run(node, x, indices):
    x, indices = as_array(x), as_array(indices)
    if indices.dtype.kind not in "iu":
        raise fail(node, f"indices must be integers, got dtype {indices.dtype}")
    axis = norm_axis(node, node.attr("axis", 0), x.ndim)
    n = x.shape[axis]
    if indices.size and (indices.min() < -n or indices.max() >= n):
        raise fail(node, f"an index is out of range [{-n}, {n}) for axis {axis}")
    return np.take(x, np.where(indices < 0, indices + n, indices), axis=axis)
