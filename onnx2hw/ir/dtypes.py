"""ONNX element types <-> NumPy dtypes, and checked tensor decoding.

Sub-byte types are decoded to ``ml_dtypes`` arrays (``int4``/``uint4`` packed
two per byte, low nibble first, as ``onnx.numpy_helper.to_array`` does);
float8 and bfloat16 also load as ``ml_dtypes`` arrays.
"""
from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from .errors import ModelError

__all__ = ["elem_type_name", "numpy_dtype", "storage_bits", "raw_nbytes",
           "check_tensor", "tensor_to_array", "sparse_to_dense", "HARDWARE_ELEM_TYPES"]

#: element types the integer/float hardware path can represent
HARDWARE_ELEM_TYPES = frozenset({
    TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.BFLOAT16,
    TensorProto.INT8, TensorProto.INT16, TensorProto.INT32, TensorProto.INT64,
    TensorProto.UINT8, TensorProto.UINT16, TensorProto.UINT32, TensorProto.UINT64,
    TensorProto.BOOL, TensorProto.INT4, TensorProto.UINT4,
    TensorProto.FLOAT8E4M3FN, TensorProto.FLOAT8E4M3FNUZ, TensorProto.FLOAT8E5M2,
    TensorProto.FLOAT8E5M2FNUZ,
})

_PACKED_BITS = {
    TensorProto.INT4: 4, TensorProto.UINT4: 4, TensorProto.FLOAT4E2M1: 4,
    TensorProto.INT2: 2, TensorProto.UINT2: 2,
    TensorProto.FLOAT6E2M3: 6, TensorProto.FLOAT6E3M2: 6,
}

#: refuse to materialise tensors larger than this many elements (sparse densify)
MAX_DENSE_ELEMENTS = 1 << 28


def elem_type_name(elem_type: int) -> str:
    """``"FLOAT"``, ``"INT4"``... or ``"<unknown 99>"``."""
    try:
        return TensorProto.DataType.Name(elem_type)
    except ValueError:
        return f"<unknown {elem_type}>"


def _known(elem_type: int) -> bool:
    return elem_type in TensorProto.DataType.values() and elem_type != TensorProto.UNDEFINED


def numpy_dtype(elem_type: int) -> np.dtype:
    """NumPy (or ``ml_dtypes``) dtype of an ONNX element type; ``object`` for strings."""
    if not _known(elem_type):
        raise ModelError(f"unknown tensor element type {elem_type!r}")
    return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))


def storage_bits(elem_type: int) -> int | None:
    """Bits per element in ``raw_data`` (``None`` for strings)."""
    if elem_type == TensorProto.STRING:
        return None
    if elem_type in _PACKED_BITS:
        return _PACKED_BITS[elem_type]
    return numpy_dtype(elem_type).itemsize * 8


def _count(dims, where: str) -> int:
    for d in dims:
        if d < 0:
            raise ModelError(f"{where}: negative dimension {d} in shape {list(dims)}")
    return math.prod(dims)


def raw_nbytes(t: TensorProto, where: str) -> int:
    """Bytes the tensor's data occupies in ``raw_data`` / external storage."""
    if not _known(t.data_type):
        raise ModelError(f"{where}: unknown tensor element type {t.data_type!r}")
    bits = storage_bits(t.data_type)
    if bits is None:
        raise ModelError(f"{where}: string tensors cannot use raw or external data")
    return (_count(t.dims, where) * bits + 7) // 8


def check_tensor(t: TensorProto, where: str) -> None:
    """Cheap checks of an in-memory tensor (no decoding): type, dims, data size.

    Raises :class:`ModelError` naming ``where`` when the type is unknown, a
    dimension is negative, or ``raw_data``/``string_data`` does not match the shape.
    """
    if t.data_location == TensorProto.EXTERNAL:
        raise ModelError(f"{where}: external data was not resolved")
    if t.HasField("segment"):
        raise ModelError(f"{where}: segmented tensors are not supported")
    if not _known(t.data_type):
        raise ModelError(f"{where}: unknown tensor element type {t.data_type!r}")
    count = _count(t.dims, where)
    if t.data_type in (TensorProto.UNDEFINED,):
        raise ModelError(f"{where}: tensor has no element type")
    if t.HasField("raw_data"):
        want = raw_nbytes(t, where)
        if len(t.raw_data) != want:
            raise ModelError(f"{where}: raw_data holds {len(t.raw_data)} bytes, shape {list(t.dims)} of "
                             f"{elem_type_name(t.data_type)} needs {want}")
    elif t.data_type == TensorProto.STRING:
        if len(t.string_data) != count:
            raise ModelError(f"{where}: {len(t.string_data)} strings for shape {list(t.dims)}")


def tensor_to_array(t: TensorProto, where: str) -> np.ndarray:
    """Decode an in-memory ``TensorProto`` (external data must already be inlined)."""
    check_tensor(t, where)
    try:
        array = numpy_helper.to_array(t)
    except Exception as exc:  # noqa: BLE001 - any decoder failure is a bad tensor
        raise ModelError(f"{where}: cannot decode {elem_type_name(t.data_type)} tensor of shape "
                         f"{list(t.dims)}: {type(exc).__name__}: {exc}") from None
    if tuple(array.shape) != tuple(t.dims):
        raise ModelError(f"{where}: decoded shape {array.shape} does not match dims {list(t.dims)}")
    return array


def sparse_to_dense(s: onnx.SparseTensorProto, where: str) -> np.ndarray:
    """Densify a ``SparseTensorProto`` (COO, linear or per-axis indices)."""
    dims = tuple(s.dims)
    count = _count(dims, where)
    if count > MAX_DENSE_ELEMENTS:
        raise ModelError(f"{where}: sparse tensor of shape {list(dims)} is too large to densify")
    values = tensor_to_array(s.values, where + " (values)")
    indices = tensor_to_array(s.indices, where + " (indices)")
    if values.ndim != 1:
        raise ModelError(f"{where}: sparse values must be 1-D, got shape {values.shape}")
    nnz = values.shape[0]
    if not np.issubdtype(indices.dtype, np.integer):
        raise ModelError(f"{where}: sparse indices must be integers, got {indices.dtype}")
    if indices.shape == (nnz,):
        linear = indices.astype(np.int64)
    elif indices.shape == (nnz, len(dims)):
        idx = indices.astype(np.int64)
        if len(dims) and ((idx < 0).any() or (idx >= np.array(dims)).any()):
            raise ModelError(f"{where}: sparse index out of range for shape {list(dims)}")
        linear = np.ravel_multi_index(idx.T, dims) if len(dims) else np.zeros(nnz, np.int64)
    else:
        raise ModelError(f"{where}: sparse indices of shape {indices.shape} do not fit {nnz} values of rank {len(dims)}")
    if ((linear < 0) | (linear >= max(count, 1) if count else linear >= 0)).any():
        raise ModelError(f"{where}: sparse index out of range for shape {list(dims)}")
    if len(np.unique(linear)) != nnz:
        raise ModelError(f"{where}: duplicate sparse indices")
    dense = np.zeros(count, dtype=values.dtype)
    dense[linear] = values
    return dense.reshape(dims)
