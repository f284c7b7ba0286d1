"""com.microsoft QLinearGlobalAveragePool (onnxruntime semantics)::

    y = saturate(rint(float32(sum(x) - x_zp * HW) * float32(x_scale / HW / y_scale)) + y_zp)

per image and channel, the sum exact in integers; ``channels_last`` selects NHWC.
"""
from __future__ import annotations

import numpy as np

from ._quant_util import rint_clip, zero_point
from ._util import fail

__all__ = ["run"]


def run(node, x, x_scale, x_zero_point, y_scale, y_zero_point=None):
    if x.ndim < 3:
        raise fail(node, f"input must have spatial dims, got shape {x.shape!r}")
    last = bool(node.attr("channels_last", 0))
    axes = tuple(range(1, x.ndim - 1)) if last else tuple(range(2, x.ndim))
    size = int(np.prod([x.shape[i] for i in axes]))
    acc = x.astype(np.int64).sum(axis=axes, keepdims=True) - int(zero_point(x_zero_point).reshape(())) * size
    mult = np.float32(x_scale) / np.float32(size) / np.float32(y_scale)
    out_dtype = np.asarray(y_zero_point).dtype if y_zero_point is not None else x.dtype
    return rint_clip(acc.astype(np.float32) * mult, zero_point(y_zero_point).reshape(()), out_dtype)
