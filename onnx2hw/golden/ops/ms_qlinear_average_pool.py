"""com.microsoft QLinearAveragePool (2-D), onnxruntime's CPU evaluation order::

    d = float32(x_scale) * (x - x_zp)                       # dequantize, float32
    s = d[h0, w0] + d[h0, w0 + 1] + ...                      # window taps inside the image, row-major,
                                                              # accumulated one by one in float32
    y = saturate(nearbyint(s / count / y_scale + y_zp))       # count = kernel area with count_include_pad,
                                                              # else the taps inside the image

``pads`` / ``auto_pad`` / ``strides`` / ``ceil_mode``; ``channels_last=1`` reads NHWC. Window sums
are vectorized over batch, channels and outputs (one pass per kernel tap).
"""
from __future__ import annotations

import math

import numpy as np

from ._quant_util import int_bounds, zero_point
from ._util import fail

__all__ = ["run"]


def _geometry(node, hw):
    kernel = tuple(int(k) for k in node.attr("kernel_shape", ()) or ())
    if len(kernel) != 2:
        raise fail(node, f"only 2-D pooling is supported, kernel_shape {kernel!r}")
    strides = tuple(node.attr("strides", None) or (1, 1))
    auto = node.attr("auto_pad", "NOTSET")
    ceil = bool(node.attr("ceil_mode", 0))
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        out = [-(-hw[i] // strides[i]) for i in range(2)]
        total = [max(0, (out[i] - 1) * strides[i] + kernel[i] - hw[i]) for i in range(2)]
        small = [t // 2 for t in total]
        begin = [t - s if auto == "SAME_LOWER" else s for t, s in zip(total, small)]
        return kernel, strides, begin, out
    pads = tuple(node.attr("pads", None) or (0, 0, 0, 0)) if auto == "NOTSET" else (0, 0, 0, 0)
    rnd = math.ceil if ceil else math.floor
    out = [int(rnd((hw[i] + pads[i] + pads[i + 2] - kernel[i]) / strides[i])) + 1 for i in range(2)]
    for i in range(2):  # a last window starting inside the end padding is dropped
        if ceil and (out[i] - 1) * strides[i] >= hw[i] + pads[i]:
            out[i] -= 1
    return kernel, strides, list(pads[:2]), out


def run(node, x, x_scale, x_zero_point, y_scale, y_zero_point=None):
    last = bool(node.attr("channels_last", 0))
    if x.ndim != 4:
        raise fail(node, f"only 4-D inputs are supported, got shape {x.shape!r}")
    xs = np.moveaxis(x, -1, 1) if last else x
    d = (xs.astype(np.int64) - zero_point(x_zero_point).reshape(())).astype(np.float32) * np.float32(x_scale)
    n, c, h, w = d.shape
    kernel, strides, begin, (oh, ow) = _geometry(node, (h, w))
    include_pad = bool(node.attr("count_include_pad", 0))
    hs = np.arange(oh) * strides[0] - begin[0]
    ws = np.arange(ow) * strides[1] - begin[1]
    total = np.zeros((n, c, oh, ow), np.float32)
    count = np.zeros((oh, ow), np.int64)
    for i in range(kernel[0]):
        for j in range(kernel[1]):
            hi, wj = hs + i, ws + j
            vh, vw = (hi >= 0) & (hi < h), (wj >= 0) & (wj < w)
            tap = d[:, :, np.clip(hi, 0, h - 1)][:, :, :, np.clip(wj, 0, w - 1)]
            valid = vh[:, None] & vw[None, :]
            total = (total + np.where(valid, tap, np.float32(0))).astype(np.float32)
            count += valid
    if include_pad:
        count = np.full_like(count, kernel[0] * kernel[1])
    y = (total / count.astype(np.float32)).astype(np.float32)
    zp = np.float32(zero_point(y_zero_point).reshape(()))
    out_dtype = np.asarray(y_zero_point).dtype if y_zero_point is not None else x.dtype
    lo, hi = int_bounds(out_dtype)
    q = np.clip(np.rint((y / np.float32(y_scale) + zp).astype(np.float32)), lo, hi).astype(np.int64).astype(out_dtype)
    return np.moveaxis(q, 1, -1) if last else q
