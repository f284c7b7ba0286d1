"""MaxPool: N-D max pooling (auto_pad, pads, strides, dilations, ceil_mode) with
the optional Indices output (flat indices into the unpadded input; row-major, or
column-major over the spatial dims when ``storage_order`` is 1)."""
from __future__ import annotations

import numpy as np

from ...ir.errors import ModelError
from ._conv_util import geometry, pad_spatial, pool_reduce, window_slices

__all__ = ["run"]


def _lowest(dtype):
    if dtype.kind == "f":
        return -np.inf
    if dtype.kind in "iu":
        return np.iinfo(dtype).min
    raise ModelError(f"MaxPool does not support element type {dtype!r}")


def run(node, x):
    kernel = tuple(node.attr("kernel_shape", None) or ())
    d = x.ndim - 2
    if len(kernel) != d:
        raise ModelError(f"node {node.name!r}: kernel_shape {kernel!r} does not match input shape {x.shape!r}")
    g = geometry(node, x.shape[2:], kernel, ceil_mode=bool(node.attr("ceil_mode", 0)))
    xp = pad_spatial(x, g, _lowest(x.dtype))
    want_indices = len(node.outputs) > 1 and node.outputs[1]
    if not want_indices:
        return pool_reduce(xp, g, np.maximum)
    spatial = x.shape[2:]
    if node.attr("storage_order", 0):
        # column-major over the spatial dims: the first spatial dim varies fastest
        strides = [int(np.prod(spatial[:i])) for i in range(d)]
    else:
        strides = [int(np.prod(spatial[i + 1:])) for i in range(d)]
    best = best_idx = None
    for _, off, sl in window_slices(g):
        v = xp[(Ellipsis,) + sl]
        idx = 0
        for i in range(d):
            coord = np.arange(g.out[i]) * g.strides[i] + off[i] * g.dilations[i] - g.pads_begin[i]
            idx = np.add.outer(idx, coord * strides[i]) if i else coord * strides[i]
        if best is None:
            best = v.copy()
            best_idx = np.broadcast_to(idx, v.shape).astype(np.int64)
        else:
            better = v > best
            np.copyto(best, v, where=better)
            np.copyto(best_idx, np.broadcast_to(idx, v.shape), where=better)
    n, c = x.shape[:2]
    plane = int(np.prod(spatial))
    base = (np.arange(n * c, dtype=np.int64) * plane).reshape((n, c) + (1,) * d)
    return best, best_idx + base
