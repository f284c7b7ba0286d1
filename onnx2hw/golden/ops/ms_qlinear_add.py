"""com.microsoft QLinearAdd in onnxruntime's x86 (AVX2/FMA) float32 evaluation order::

    ra, rb = float32(a_scale / c_scale), float32(b_scale / c_scale)
    fixed  = float32(c_zp) - fma(a_zp, ra, rb * b_zp)
    y      = saturate(rint(fma(a, ra, fma(b, rb, fixed))))

with ``fma`` rounding once to float32 (emulated exactly in float64: the operands are small
integers times float32 values) and rounding half to even. When A is the input that is constant
along the last axis (onnxruntime's broadcaster then swaps the operands to run its scalar-B
kernel) the roles of A and B are exchanged. NumPy broadcasting.
"""
from __future__ import annotations

import numpy as np

from ._quant_util import rint_clip, zero_point

__all__ = ["run"]

f32 = np.float32


def _fma(x, r, c) -> np.ndarray:
    return (np.asarray(x, np.float64) * np.float64(r) + np.asarray(c, np.float64)).astype(np.float32)


def _constant_along_last(x: np.ndarray, other: np.ndarray) -> bool:
    return (x.shape[-1] if x.ndim else 1) == 1 and (other.shape[-1] if other.ndim else 1) != 1


def run(node, a, a_scale, a_zero_point, b, b_scale, b_zero_point, c_scale, c_zero_point=None):
    sc = f32(np.asarray(c_scale).reshape(()))
    x = (a, f32(np.asarray(a_scale).reshape(())) / sc, f32(zero_point(a_zero_point).reshape(())))
    s = (b, f32(np.asarray(b_scale).reshape(())) / sc, f32(zero_point(b_zero_point).reshape(())))
    if _constant_along_last(a, b):
        x, s = s, x
    zc = f32(zero_point(c_zero_point).reshape(()))
    fixed = f32(zc - _fma(x[2], x[1], f32(s[1] * s[2])))
    y = _fma(x[0].astype(np.float32), x[1], _fma(s[0].astype(np.float32), s[1], fixed))
    out_dtype = np.asarray(c_zero_point).dtype if c_zero_point is not None else a.dtype
    return rint_clip(y, 0, out_dtype)
