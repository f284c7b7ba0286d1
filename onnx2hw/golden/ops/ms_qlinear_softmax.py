"""com.microsoft QLinearSoftmax: Softmax of a quantized tensor, defined here as its meaning::

    y = saturate(rint(Softmax(float32((x - x_zp) * x_scale)) / y_scale) + y_zp)

with the Softmax of ONNX opset ``opset`` (attribute, e.g. 13: along ``axis``, default -1; below
13 over the input coerced to 2-D at ``axis``, default 1). onnxruntime's kernel tabulates ``exp``
over the 256 input codes and may differ from this by one code (compare with a tolerance).
"""
from __future__ import annotations

import numpy as np

from ._quant_util import rint_clip, zero_point
from ._util import fail
from .softmax import softmax

__all__ = ["run"]


def run(node, x, x_scale, x_zero_point, y_scale, y_zero_point=None):
    x = np.asarray(x)
    if x.dtype not in (np.uint8, np.int8):
        raise fail(node, f"input must be uint8 or int8, not {x.dtype}")
    real = ((x.astype(np.int32) - zero_point(x_zero_point, np.int32).reshape(()))
            .astype(np.float32) * np.float32(np.asarray(x_scale).reshape(())))
    y = softmax(node, real, int(node.attr("opset", 13)))
    out_dtype = np.asarray(y_zero_point).dtype if y_zero_point is not None else x.dtype
    return rint_clip(y / np.float32(np.asarray(y_scale).reshape(())), zero_point(y_zero_point).reshape(()), out_dtype)
