"""QLinearMatMul: quantized matmul with float requantization (ONNX/ORT semantics).

``y = saturate(rint(float32(acc) * (a_scale * b_scale / y_scale)) + y_zero_point)``,
``acc = (a - a_zp) @ (b - b_zp)`` exact; the multiplier is computed in float32 in
that order (scales/zero points per tensor, per row of A or per column of B).
"""
from __future__ import annotations

import numpy as np

from .matmul_integer import integer_matmul
from ._quant_util import requantize_float, zero_point

__all__ = ["run"]


def run(node, a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point=None):
    acc = integer_matmul(a, b, a_zero_point, b_zero_point)
    sa = np.asarray(a_scale, dtype=np.float32)
    if sa.size > 1:
        sa = sa.reshape(-1, 1)  # per row of A
    else:
        sa = sa.reshape(())
    sb = np.asarray(b_scale, dtype=np.float32)
    sb = sb.reshape(()) if sb.size == 1 else sb  # per column of B
    sy = np.asarray(y_scale, dtype=np.float32)
    sy = sy.reshape(()) if sy.size == 1 else sy
    mult = sa * sb / sy
    out_dtype = np.asarray(y_zero_point).dtype if y_zero_point is not None else a.dtype
    zp = zero_point(y_zero_point)
    if zp.size == 1:
        zp = zp.reshape(())
    return requantize_float(acc, mult, zp, out_dtype)
