"""QuantizeLinear: ``y = saturate(rint(x / y_scale) + y_zero_point)`` (round half to even).

Per tensor, per axis (``axis``) or blocked (``block_size``, opset 21). Output type:
the zero point's type, else the ``output_dtype`` attribute, else uint8. Integer
outputs: uint8/int8/uint16/int16/uint4/int4/uint2/int2 (narrow types as ml_dtypes
arrays). Float8 outputs: ``x / y_scale`` cast with ``saturate`` (out-of-range and
infinite values clipped to the largest finite value, NaN kept); float4e2m1 always
saturates. ``x / y_scale`` is evaluated in float32 (float64 for float64 ``x``) or in
the ``precision`` type when that attribute is set.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
from onnx import TensorProto, helper

from ...ir.errors import ModelError, UnsupportedError
from ._quant_util import axis_param, is_int, rint_clip

__all__ = ["run"]

_FLOAT8 = tuple(np.dtype(t) for t in (ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e4m3fnuz,
                                      ml_dtypes.float8_e5m2, ml_dtypes.float8_e5m2fnuz))
_SMALL_FLOATS = tuple(np.dtype(getattr(ml_dtypes, n)) for n in ("float4_e2m1fn", "float6_e2m3fn", "float6_e3m2fn")
                      if hasattr(ml_dtypes, n))


def _np_dtype(code: int, node) -> np.dtype:
    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(code))
    except (KeyError, ValueError, TypeError):
        raise ModelError(f"node {node.name!r}: unknown output_dtype {code!r}") from None


def run(node, x, y_scale, y_zero_point=None):
    axis = int(node.attr("axis", 1))
    block_size = int(node.attr("block_size", 0))
    saturate = bool(node.attr("saturate", 1))
    output_dtype = int(node.attr("output_dtype", 0))
    if y_zero_point is not None:
        out = np.asarray(y_zero_point).dtype
        if output_dtype and _np_dtype(output_dtype, node) != out:
            raise ModelError(f"node {node.name!r}: output_dtype {output_dtype!r} differs from zero point type {out!r}")
    else:
        out = _np_dtype(output_dtype or TensorProto.UINT8, node)
    precision = int(node.attr("precision", 0))
    if precision:
        cd = _np_dtype(precision, node)
    else:
        cd = np.dtype(np.float64 if x.dtype == np.float64 else np.float32)
    scale = axis_param(y_scale, x.shape, axis, block_size, what="y_scale").astype(cd)
    y = x.astype(cd) / scale
    if cd not in (np.float32, np.float64):
        y = y.astype(np.float32)
    if is_int(out):
        zp = 0 if y_zero_point is None else axis_param(y_zero_point, x.shape, axis, block_size,
                                                      what="y_zero_point").astype(np.int64)
        return rint_clip(y, zp, out)
    if out in _FLOAT8:
        if saturate:
            big = float(ml_dtypes.finfo(out).max)
            y = np.clip(y, -big, big)  # NaN stays NaN, +-inf become +-max
        return y.astype(out)
    if out in _SMALL_FLOATS:
        return y.astype(out)
    raise UnsupportedError(f"node {node.name!r}: QuantizeLinear to {out!r} is not supported")
