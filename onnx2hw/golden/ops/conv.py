"""Conv: N-D grouped convolution (auto_pad, pads, strides, dilations, bias).

im2col per kernel offset plus one batched ``np.matmul``; float16/bfloat16 are
computed in float32 and cast back, float32/float64 natively.
"""
from __future__ import annotations

import numpy as np

from ._conv_util import conv_geometry, conv_matmul, pad_spatial

__all__ = ["run"]


def compute_dtype(dtype: np.dtype) -> np.dtype:
    return np.dtype(np.float64) if dtype == np.float64 else np.dtype(np.float32)


def run(node, x, w, b=None):
    g, group = conv_geometry(node, x, w)
    cd = compute_dtype(x.dtype)
    xp = pad_spatial(x, g, 0)
    y = conv_matmul(xp, w, g, group, cd)
    if b is not None:
        y += np.asarray(b, dtype=cd).reshape((-1,) + (1,) * len(g.out))
    return y.astype(x.dtype, copy=False)
