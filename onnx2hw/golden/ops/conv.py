"""Conv: N-D grouped convolution (auto_pad, pads, strides, dilations, bias).

im2col plus one batched ``np.matmul`` (depthwise: one multiply-add per kernel
offset); every float type accumulates in float64 and is rounded once to its own
dtype (``_util.SUM_DTYPE``).
"""
from __future__ import annotations

import numpy as np

from ...ir.errors import ModelError
from ._conv_util import conv_geometry, conv_nd
from ._util import SUM_DTYPE

__all__ = ["run"]


def run(node, x, w, b=None):
    g, group = conv_geometry(node, x, w)
    if b is not None and np.asarray(b).shape != (w.shape[0],):
        raise ModelError(f"node {node.name!r}: bias shape {np.asarray(b).shape!r} does not match "
                         f"{w.shape[0]} output channels")
    y = conv_nd(x, w, g, group, SUM_DTYPE, b)
    return y.astype(x.dtype, copy=False)
