"""com.microsoft QGemm: ``Y = alpha * A' B'`` on dequantized 2-D operands, plus an int32 ``C``.

``acc = (A' - a_zp) @ (B' - b_zp) + C`` is exact (``C`` is quantized with scale
``alpha * a_scale * b_scale``, zero point 0). With ``y_scale`` the output is requantized
like onnxruntime: ``saturate(rint(float32(acc) * float32(alpha * a_scale * b_scale / y_scale)) + y_zp)``
(``b_scale`` per tensor or per column of B'); without it the output is float32
``acc * alpha * a_scale * b_scale``.
"""
from __future__ import annotations

import numpy as np

from ._quant_util import requantize_float, zero_point
from ._util import fail
from .matmul_integer import integer_matmul

__all__ = ["run"]


def run(node, a, a_scale, a_zero_point, b, b_scale, b_zero_point, c=None, y_scale=None, y_zero_point=None):
    if a.ndim != 2 or b.ndim != 2:
        raise fail(node, f"A and B must be 2-D, got {a.shape!r} and {b.shape!r}")
    trans_b = bool(node.attr("transB", 0))
    if node.attr("transA", 0):
        a = a.T
    bz = zero_point(b_zero_point)
    if trans_b:
        b = b.T
    bz = bz.reshape(()) if bz.size == 1 else bz.reshape(-1)
    if a.shape[1] != b.shape[0]:
        raise fail(node, f"inner dimensions differ: A' {a.shape!r}, B' {b.shape!r}")
    acc = integer_matmul(a, b, zero_point(a_zero_point).reshape(()), bz)
    if c is not None:
        acc = acc + np.asarray(c, dtype=np.int64)
    alpha = np.float32(node.attr("alpha", 1.0))
    sb = np.asarray(b_scale, dtype=np.float32)
    sb = sb.reshape(()) if sb.size == 1 else sb.reshape(-1)
    scale = alpha * np.asarray(a_scale, dtype=np.float32).reshape(()) * sb
    if y_scale is None:
        return (acc.astype(np.float32) * scale).astype(np.float32)
    mult = scale / np.asarray(y_scale, dtype=np.float32).reshape(())
    out_dtype = np.asarray(y_zero_point).dtype if y_zero_point is not None else np.dtype(np.uint8)
    return requantize_float(acc, mult, zero_point(y_zero_point).reshape(()), out_dtype)
