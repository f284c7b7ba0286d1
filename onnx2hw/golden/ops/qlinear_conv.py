"""QLinearConv: quantized conv with float requantization (ONNX/ORT semantics).

``y = saturate(rint(float32(acc) * (x_scale * w_scale / y_scale)) + y_zero_point)``
with ``acc = conv(x - x_zp, w - w_zp) + B`` exact in integers, the multiplier
computed in float32 in that order (per output channel when ``w_scale`` is 1-D), and
rounding half to even.
"""
from __future__ import annotations

import numpy as np

from ...ir.errors import ModelError
from ._conv_util import conv_integer_acc
from ._quant_util import requantize_float

__all__ = ["run"]


def run(node, x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point=None, b=None):
    m = w.shape[0]
    spatial = (1,) * (x.ndim - 2)
    bmax = 0
    if b is not None:
        b = np.asarray(b, dtype=np.int64)
        if b.size not in (1, m):
            raise ModelError(f"node {node.name!r}: bias shape {b.shape!r} does not match {m} output channels")
        bmax = int(np.max(np.abs(b)))
    acc = conv_integer_acc(node, x, x_zero_point, w, w_zero_point, extra=bmax)
    if b is not None:  # exact: the accumulator dtype has headroom for the bias
        acc += b.reshape((-1,) + spatial).astype(acc.dtype)
    ws = np.asarray(w_scale, dtype=np.float32)
    if ws.size not in (1, m):
        raise ModelError(f"node {node.name!r}: w_scale shape {ws.shape!r} does not match {m} output channels")
    mult = (np.float32(np.asarray(x_scale, dtype=np.float32).reshape(())) * ws.reshape(-1)
            / np.float32(np.asarray(y_scale, dtype=np.float32).reshape(())))
    mult = mult.reshape((-1,) + spatial) if mult.size > 1 else mult.reshape(())
    out_dtype = np.asarray(y_zero_point).dtype if y_zero_point is not None else np.asarray(x).dtype
    zp = np.asarray(y_zero_point if y_zero_point is not None else 0, dtype=np.int64).reshape(())
    return requantize_float(acc, mult, zp, out_dtype)
