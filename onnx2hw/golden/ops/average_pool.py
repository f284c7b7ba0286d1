"""AveragePool: N-D average pooling (auto_pad, pads, strides, dilations, ceil_mode,
count_include_pad). The divisor counts the window taps inside the input, or inside
input plus declared padding with ``count_include_pad``; taps that fall only in the
extra end padding ceil mode adds are never counted."""
from __future__ import annotations

import numpy as np

from ...ir.errors import ModelError
from ._conv_util import geometry, pad_spatial, pool_reduce, window_counts

__all__ = ["run"]


def run(node, x):
    kernel = tuple(node.attr("kernel_shape", None) or ())
    d = x.ndim - 2
    if len(kernel) != d:
        raise ModelError(f"node {node.name!r}: kernel_shape {kernel!r} does not match input shape {x.shape!r}")
    g = geometry(node, x.shape[2:], kernel, ceil_mode=bool(node.attr("ceil_mode", 0)))
    cd = np.float64 if x.dtype == np.float64 else np.float32
    xp = pad_spatial(x.astype(cd, copy=False), g, 0)
    total = pool_reduce(xp, g, np.add)
    counts = window_counts(x.shape[2:], g, bool(node.attr("count_include_pad", 0)))
    return (total / counts.astype(cd)).astype(x.dtype, copy=False)
