"""Constant from exactly one of ``value`` (tensor), ``sparse_value`` (densified),
``value_float(s)`` (float32), ``value_int(s)`` (int64), ``value_string(s)`` (object)."""
from __future__ import annotations

import numpy as np
from onnx import numpy_helper

from ._util import fail

__all__ = ["run"]

_KINDS = ("value", "sparse_value", "value_float", "value_floats", "value_int", "value_ints",
          "value_string", "value_strings")


def _dense(sparse) -> np.ndarray:
    values = numpy_helper.to_array(sparse.values)
    indices = numpy_helper.to_array(sparse.indices).astype(np.int64)
    dims = tuple(sparse.dims)
    out = np.zeros(dims, dtype=values.dtype)
    if indices.ndim == 2:  # [NNZ, rank] coordinates
        out[tuple(indices.T)] = values
    else:  # [NNZ] linear indices
        out.reshape(-1)[indices] = values
    return out


def run(node):
    given = [k for k in _KINDS if k in node.attrs]
    if len(given) != 1:
        raise fail(node, f"needs exactly one value attribute, got {given!r}")
    kind, value = given[0], node.attrs[given[0]]
    if kind == "value":
        return np.array(value)
    if kind == "sparse_value":
        return _dense(value)
    if kind in ("value_float", "value_floats"):
        return np.array(value, dtype=np.float32)
    if kind in ("value_int", "value_ints"):
        return np.array(value, dtype=np.int64)
    return np.array(value, dtype=object)
