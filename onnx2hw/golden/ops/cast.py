"""Cast to the numeric type ``to`` (a ``TensorProto`` data type number).

Float8 targets follow the ``saturate`` attribute (default 1): finite values and
infinities beyond the type's range become its largest finite value, NaN stays NaN;
with ``saturate=0`` ml_dtypes' overflow (NaN, or Inf for E5M2) applies. Rounding is
to nearest even. FLOAT8E8M0 (a power of two) honours ``round_mode``
(``up``/``down``/``nearest``; ties round up). Other conversions are NumPy's
``astype`` on ml_dtypes types (int4/uint4/int2/uint2 wrap around, float to int
truncates toward zero). Strings are not supported.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
from onnx import TensorProto
from onnx.helper import tensor_dtype_to_np_dtype

from ...ir.errors import UnsupportedError
from ._util import as_array, fail

__all__ = ["run", "cast_to"]

_FLOAT8 = {TensorProto.FLOAT8E4M3FN, TensorProto.FLOAT8E4M3FNUZ, TensorProto.FLOAT8E5M2, TensorProto.FLOAT8E5M2FNUZ}
_E8M0 = getattr(TensorProto, "FLOAT8E8M0", None)


def _to_e8m0(x: np.ndarray, saturate: bool, round_mode: str) -> np.ndarray:
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    exp = ((bits >> 23) & 0xFF).astype(np.uint16)
    frac = bits & 0x7FFFFF
    # value = 2**(exp-127) * (1 + frac/2**23); float32 subnormals (exp 0) are
    # frac * 2**-149, i.e. 2**-127 * (frac / 2**22): between codes 0 and 1 when frac > 2**22
    sub = exp == 0
    if round_mode == "up":
        inc = np.where(sub, frac > 0x400000, frac != 0)
    elif round_mode == "nearest":
        inc = np.where(sub, frac >= 0x600000, frac >= 0x400000)
    elif round_mode == "down":
        inc = np.where(sub, frac >= 0x800000, False)
    else:
        raise ValueError(f"unknown round_mode {round_mode!r} (expected 'up', 'down' or 'nearest')")
    exp = exp + inc
    special = ((bits >> 23) & 0xFF) == 0xFF
    nan = special & (frac != 0)
    overflow = (exp >= 0xFF) | (special & (frac == 0))
    code = np.minimum(exp, 0xFE).astype(np.uint8)
    if saturate:
        code[overflow] = 0xFE
    else:
        code[overflow | ((bits & 0x7FFFFFFF) == 0)] = 0xFF
    code[nan] = 0xFF
    return code.view(ml_dtypes.float8_e8m0fnu)


def cast_to(x: np.ndarray, to: int, *, saturate: bool = True, round_mode: str = "up") -> np.ndarray:
    """``x`` converted to ONNX data type ``to`` (see the module docstring)."""
    if to == TensorProto.STRING or x.dtype == object:
        raise UnsupportedError(f"Cast from {x.dtype} to data type {to!r}: strings are not supported")
    target = np.dtype(tensor_dtype_to_np_dtype(to))
    if x.dtype == target:
        return x
    with np.errstate(invalid="ignore", over="ignore"):
        if to == _E8M0:
            return _to_e8m0(x.astype(np.float32), saturate, round_mode)
        if to in _FLOAT8 and saturate:
            # narrow floats go exactly through float32; float64 is clipped in float64
            wide = x.astype(np.float64 if x.dtype == np.float64 else np.float32)
            limit = float(ml_dtypes.finfo(target).max)
            return np.clip(wide, -limit, limit).astype(target)
        return x.astype(target)


def run(node, x):
    x = as_array(x)
    to = node.attr("to")
    if to is None:
        raise fail(node, "missing 'to' attribute")
    if isinstance(to, str):  # opset 1 spelled the type as a string
        to = TensorProto.DataType.Value(to.upper())
    try:
        return cast_to(x, int(to), saturate=bool(node.attr("saturate", 1)),
                       round_mode=node.attr("round_mode", "up"))
    except ValueError as e:
        if isinstance(e, UnsupportedError):
            raise
        raise fail(node, str(e)) from None
