"""Shared helpers of the integer and quantization ops: integer ranges of
(ml_dtypes) integer types, per-axis/blocked parameter broadcasting, exact integer
matmul and ONNX/ORT float requantization."""
from __future__ import annotations

import ml_dtypes
import numpy as np

from ... import arith
from ...ir.errors import ModelError

__all__ = ["int_bounds", "is_int", "axis_param", "exact_dtype", "requantize_float", "zero_point",
           "offset_bound", "centered", "to_int32",
           "rint_clip", "qonnx_round", "qonnx_bounds"]

#: ml_dtypes' narrow integer types (numpy kind "V", not "i"/"u")
_ML_INTS = tuple(np.dtype(getattr(ml_dtypes, n)) for n in ("int2", "uint2", "int4", "uint4")
                 if hasattr(ml_dtypes, n))


def is_int(dtype) -> bool:
    dtype = np.dtype(dtype)
    return dtype.kind in "iu" or dtype in _ML_INTS


def int_bounds(dtype) -> tuple[int, int]:
    """Inclusive range of an integer dtype, including ml_dtypes int2/int4/uint2/uint4."""
    info = ml_dtypes.iinfo(np.dtype(dtype))
    return int(info.min), int(info.max)


def zero_point(zp, dtype=np.int64):
    """``zp`` as ``dtype`` (0 when the optional input is omitted)."""
    if zp is None:
        return np.zeros((), dtype=dtype)
    return np.asarray(zp).astype(dtype)


def axis_param(p: np.ndarray, shape: tuple[int, ...], axis: int, block_size: int = 0, *, what="parameter"):
    """Broadcast a scale/zero point to ``shape``: scalar or shape (1,) (per tensor),
    1-D of ``shape[axis]`` (per axis) or, with ``block_size`` > 0, the input's shape
    with ``ceil(shape[axis] / block_size)`` at ``axis`` (blocked)."""
    p = np.asarray(p)
    if p.ndim == 0 or p.size == 1 and block_size <= 0:
        return p.reshape(())
    rank = len(shape)
    if not -rank <= axis < rank:
        raise ModelError(f"axis {axis!r} out of range for input rank {rank}")
    axis %= rank
    if block_size > 0:
        want = tuple(-(-n // block_size) if i == axis else n for i, n in enumerate(shape))
        if p.shape != want:
            raise ModelError(f"blocked {what} shape {p.shape!r} does not match input shape {shape!r} "
                             f"with block_size {block_size!r} on axis {axis}")
        return np.repeat(p, block_size, axis=axis)[tuple(slice(0, n) for n in shape)]
    if p.ndim != 1 or p.shape[0] != shape[axis]:
        raise ModelError(f"per-axis {what} shape {p.shape!r} does not match input dim {shape[axis]} on axis {axis}")
    return p.reshape((-1,) + (1,) * (rank - axis - 1))


def exact_dtype(bound: int) -> np.dtype:
    """Fastest dtype in which sums of integer products stay exact when every partial
    sum is at most ``bound`` in magnitude: float32 below 2^24, float64 below 2^53
    (both through BLAS), else int64."""
    if bound < (1 << 24):
        return np.dtype(np.float32)
    if bound < (1 << 53):
        return np.dtype(np.float64)
    return np.dtype(np.int64)


def offset_bound(dtype, zp) -> int:
    """Largest ``|v - zp|`` over every value ``v`` of integer ``dtype`` and every zero point."""
    lo, hi = int_bounds(dtype)
    z = np.asarray(zp, dtype=np.int64)
    zmin, zmax = (int(z.min()), int(z.max())) if z.size else (0, 0)
    return max(hi - zmin, zmax - lo, 0)


def centered(a: np.ndarray, zp, dtype) -> np.ndarray:
    """``a - zp`` as ``dtype`` (exact: integer values that fit the dtype's mantissa)."""
    out = a.astype(dtype)
    z = np.asarray(zp)
    if z.size and np.any(z != 0):
        out -= z.astype(dtype)
    return out


def to_int32(acc: np.ndarray) -> np.ndarray:
    """Integer-valued accumulator (float32/float64/int64) as int32, wrapping like a
    32-bit accumulator."""
    if acc.dtype == np.float32:  # exact below 2^24
        return acc.astype(np.int32)
    return acc.astype(np.int64, copy=False).astype(np.int32)


def rint_clip(y: np.ndarray, zp, out_dtype) -> np.ndarray:
    """``saturate(rint(y) + zp)`` as ``out_dtype`` (round half to even)."""
    lo, hi = int_bounds(out_dtype)
    q = np.rint(y)
    q = q + np.asarray(zp, dtype=q.dtype)
    return np.clip(q, lo, hi).astype(np.int64).astype(out_dtype)


def requantize_float(acc: np.ndarray, multiplier, zp, out_dtype) -> np.ndarray:
    """ORT/ONNX requantization of an int32 accumulator: ``float32(acc) * multiplier``
    in float32, rounded half to even, plus the zero point, saturated to ``out_dtype``.

    ``acc`` is integer-valued (int64, or float32/float64 holding exact integers)."""
    if acc.dtype != np.float32:
        acc = to_int32(acc).astype(np.float32)  # int32 wrap, then ORT's int -> float
    y = acc * np.asarray(multiplier, dtype=np.float32)
    lo, hi = int_bounds(out_dtype)
    np.rint(y, out=y)
    y += np.asarray(zp, dtype=np.float32)
    np.clip(y, lo, hi, out=y)
    return y.astype(out_dtype)


def qonnx_round(y: np.ndarray, mode: str, node=None) -> np.ndarray:
    """:func:`onnx2hw.arith.qonnx_round`, an unknown mode reported as a ``ModelError`` naming ``node``."""
    try:
        return arith.qonnx_round(y, mode)
    except ValueError as exc:
        where = f"node {node.name!r}: " if node is not None else ""
        raise ModelError(f"{where}{exc}") from None


def qonnx_bounds(signed: bool, narrow: bool, bitwidth) -> tuple[np.ndarray, np.ndarray]:
    """QONNX ``min_int``/``max_int`` (float64 arrays broadcast like ``bitwidth``):
    signed ``[-2^(b-1) + narrow, 2^(b-1) - 1]``, unsigned ``[0, 2^b - 1 - narrow]``."""
    b = np.asarray(bitwidth, dtype=np.float64)
    if np.any(b < 1) or np.any(b != np.round(b)):
        raise ModelError(f"bit width must be a positive integer, not {bitwidth!r}")
    if signed:
        return -(2.0 ** (b - 1)) + float(narrow), 2.0 ** (b - 1) - 1
    return np.zeros_like(b), 2.0 ** b - 1 - float(narrow)
