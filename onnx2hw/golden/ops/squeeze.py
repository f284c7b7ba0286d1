"""Squeeze: remove size-1 axes (``axes`` attribute before opset 13, input from 13;
absent means every size-1 axis)."""
import numpy as np

from ._util import as_array, fail, int_list, norm_axes

__all__ = ["run"]


def run(node, x, axes=None):
    x = as_array(x)
    if node.since_version < 13:
        axes = node.attr("axes")
    if axes is None:
        return x.reshape(tuple(d for d in x.shape if d != 1))
    axes = norm_axes(node, int_list(node, axes, "axes"), x.ndim)
    for a in axes:
        if x.shape[a] != 1:
            raise fail(node, f"cannot squeeze axis {a} of size {x.shape[a]} (shape {x.shape!r})")
    return np.squeeze(x, axis=axes)
