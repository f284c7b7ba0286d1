"""Concat along ``axis`` (default 1 in opset 1, required from 4)."""
import numpy as np

from ._util import as_array, fail, norm_axis

__all__ = ["run"]


def run(node, *xs):
    xs = [as_array(x) for x in xs if x is not None]
    if not xs:
        raise fail(node, "has no inputs")
    axis = node.attr("axis", 1 if node.since_version < 4 else None)
    if axis is None:
        raise fail(node, "missing 'axis' attribute")
    axis = norm_axis(node, axis, xs[0].ndim)
    for x in xs[1:]:
        if x.ndim != xs[0].ndim or x.shape[:axis] + x.shape[axis + 1:] != xs[0].shape[:axis] + xs[0].shape[axis + 1:]:
            raise fail(node, f"input shapes {[x.shape for x in xs]!r} do not match outside axis {axis}")
        if x.dtype != xs[0].dtype:
            raise fail(node, f"input dtypes differ: {xs[0].dtype} and {x.dtype}")
    return np.concatenate(xs, axis=axis)
