"""Expand: ``input`` broadcast with ``shape`` both ways (NumPy's rule: the result has the
broadcast shape of the two)."""
import numpy as np

from ._util import as_array, fail

__all__ = ["run"]


def run(node, x, shape):
    x = as_array(x)
    dims = np.asarray(shape).reshape(-1)
    if dims.dtype.kind not in "iu" or np.any(dims < 0):
        raise fail(node, f"shape {dims.tolist()!r} must be non-negative integers")
    try:
        out = np.broadcast_shapes(x.shape, tuple(int(d) for d in dims))
    except ValueError:
        raise fail(node, f"shape {dims.tolist()!r} does not broadcast with the input's {list(x.shape)!r}") from None
    return np.array(np.broadcast_to(x, out))
