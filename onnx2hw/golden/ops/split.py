"""Split along ``axis`` (default 0) into ``len(node.outputs)`` parts.

The parts: opsets 2 and 11 take a ``split`` attribute, 13 and up a ``split`` input (its entries
non-negative, summing to the axis length); without it, equal parts (the axis divisible by the
number of outputs before opset 18; from 18 ``num_outputs`` parts of ``ceil(dim / n)``, the last
one smaller).
"""
import numpy as np

from ._util import as_array, fail, int_list, norm_axis

__all__ = ["run"]


def _sizes(node, dim: int, split) -> list[int]:
    n = len(node.outputs)
    if split is None and node.since_version < 13 and node.attr("split") is not None:
        split = np.asarray(node.attr("split"), np.int64)
    if split is not None:
        sizes = list(int_list(node, split, "split"))
        if len(sizes) != n or sum(sizes) != dim or any(s < 0 for s in sizes):
            raise fail(node, f"split {sizes!r} does not cut the {dim} entries of the axis into {n} parts")
        return sizes
    if node.since_version >= 18:
        parts = node.attr("num_outputs")
        if parts is None or int(parts) != n:
            raise fail(node, f"num_outputs {parts!r} must be given and equal the {n} outputs")
        size = -(-dim // n)
        sizes = [size] * (n - 1) + [dim - size * (n - 1)]
        if sizes[-1] < 0:
            raise fail(node, f"{dim} entries do not make {n} parts of {size}")
        return sizes
    if dim % n:
        raise fail(node, f"{dim} entries do not split into {n} equal parts")
    return [dim // n] * n


def run(node, x, split=None):
    x = as_array(x)
    axis = norm_axis(node, node.attr("axis", 0), x.ndim)
    bounds = np.cumsum([0] + _sizes(node, x.shape[axis], split))
    index = [slice(None)] * x.ndim
    parts = []
    for a, b in zip(bounds[:-1], bounds[1:]):
        index[axis] = slice(int(a), int(b))
        parts.append(x[tuple(index)].copy())
    return tuple(parts)
