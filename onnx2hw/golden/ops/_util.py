"""Helpers shared by the golden op modules (attribute/input checks, axes)."""
from __future__ import annotations

import numpy as np

from ...ir.errors import ModelError

__all__ = ["fail", "norm_axis", "norm_axes", "int_list", "float_compute", "as_array"]


def fail(node, message: str) -> ModelError:
    """A :class:`ModelError` naming ``node``: ``raise fail(node, "...")``."""
    return ModelError(f"{node.op_type} node {node.name!r}: {message}")


def norm_axis(node, axis: int, rank: int, name: str = "axis") -> int:
    """``axis`` in ``[-rank, rank)`` mapped to ``[0, rank)``."""
    axis = int(axis)
    if not -rank <= axis < rank:
        raise fail(node, f"{name} {axis!r} is out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


def norm_axes(node, axes, rank: int, name: str = "axes") -> tuple[int, ...]:
    """Normalized, duplicate-free axes (order kept)."""
    out = tuple(norm_axis(node, a, rank, name) for a in axes)
    if len(set(out)) != len(out):
        raise fail(node, f"{name} {tuple(int(a) for a in axes)!r} repeats an axis")
    return out


def int_list(node, value, name: str) -> tuple[int, ...]:
    """A 1-D integer tensor input (or an ints attribute) as a tuple of ints."""
    arr = np.asarray(value)
    if arr.dtype.kind not in "iu":
        raise fail(node, f"{name} must be an integer tensor, got dtype {arr.dtype}")
    if arr.ndim > 1:
        raise fail(node, f"{name} must be 1-D, got shape {arr.shape!r}")
    return tuple(int(v) for v in arr.reshape(-1))


#: the dtype float sums of products (Conv, MatMul, Gemm) and means accumulate in: a float32 sum's
#: rounding follows the order BLAS or NumPy's SIMD loop adds in, which differs between CPUs, thread
#: counts and even output channels, and the golden float path calibrates the quantization (a scale
#: one ulp apart is a different model). In float64 the sum is rounded once, to the input's dtype.
SUM_DTYPE = np.dtype(np.float64)


def float_compute(x: np.ndarray) -> np.dtype:
    """The dtype to compute a transcendental function of ``x`` in.

    Half-precision and narrower floats (float16, bfloat16, float8) are computed in
    float32 and rounded back once, like onnxruntime's CPU kernels.
    """
    if x.dtype.kind == "f" and x.dtype.itemsize >= 4:
        return x.dtype
    return np.dtype(np.float32)


def as_array(value) -> np.ndarray:
    """``np.asarray`` keeping 0-d results as arrays (numpy ufuncs return scalars)."""
    return value if isinstance(value, np.ndarray) else np.asarray(value)
