"""com.microsoft QLinearAveragePool (onnxruntime semantics): dequantize to float32,
ONNX AveragePool (all its attributes), quantize with rounding half to even::

    y = saturate(rint(avgpool(float32(x_scale) * (x - x_zp)) / y_scale + y_zp))

(the zero point is added in float32 before rounding, as onnxruntime does).

``channels_last=1`` (NHWC) is transposed around the NCHW pool.
"""
from __future__ import annotations

import numpy as np

from ._quant_util import rint_clip, zero_point
from .average_pool import run as average_pool

__all__ = ["run"]


def run(node, x, x_scale, x_zero_point, y_scale, y_zero_point=None):
    last = bool(node.attr("channels_last", 0))
    xf = (x.astype(np.int64) - zero_point(x_zero_point).reshape(())).astype(np.float32) * np.float32(x_scale)
    if last:
        xf = np.moveaxis(xf, -1, 1)
    y = average_pool(node, xf)
    if last:
        y = np.moveaxis(y, 1, -1)
    out_dtype = np.asarray(y_zero_point).dtype if y_zero_point is not None else x.dtype
    zp = np.float32(zero_point(y_zero_point).reshape(()))
    return rint_clip((y / np.float32(y_scale) + zp).astype(np.float32), 0, out_dtype)
