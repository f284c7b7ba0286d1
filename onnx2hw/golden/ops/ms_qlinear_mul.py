"""com.microsoft QLinearMul in onnxruntime's x86 (SSE2) float32 evaluation order::

    ratio = float32(float32(a_scale * b_scale) / c_scale)
    y     = saturate(rint(float32(float32(float32((a - a_zp) * (b - b_zp)) * ratio) + c_zp)))

The integer product is exact (int32), each float operation rounds to float32, ``rint`` rounds
half to even. The output type is the output zero point's (A's when omitted). NumPy broadcasting.
"""
from __future__ import annotations

import numpy as np

from ._quant_util import int_bounds, zero_point

__all__ = ["run"]

f32 = np.float32


def run(node, a, a_scale, a_zero_point, b, b_scale, b_zero_point, c_scale, c_zero_point=None):
    ratio = f32(f32(np.asarray(a_scale, f32).reshape(()) * np.asarray(b_scale, f32).reshape(()))
                / np.asarray(c_scale, f32).reshape(()))
    prod = ((np.asarray(a, np.int64) - zero_point(a_zero_point).reshape(()))
            * (np.asarray(b, np.int64) - zero_point(b_zero_point).reshape(())))
    y = (prod.astype(f32) * ratio).astype(f32) + f32(zero_point(c_zero_point).reshape(()))
    out_dtype = np.asarray(c_zero_point).dtype if c_zero_point is not None else np.asarray(a).dtype
    lo, hi = int_bounds(out_dtype)
    return np.clip(np.rint(y.astype(f32)), lo, hi).astype(np.int64).astype(out_dtype)
