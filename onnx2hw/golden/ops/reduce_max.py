"""ReduceMax over ``axes`` (attribute before opset 18, optional input from 18; no axes: all axes,
unless ``noop_with_empty_axes=1``); the reduction of an empty axis is the type's lowest value (the
ONNX reference's rule)."""
import numpy as np

from ._util import as_array
from .reduce_mean import reduced_axes

__all__ = ["run"]


def run(node, x, axes=None):
    x = as_array(x)
    axes = reduced_axes(node, x, axes)
    if axes is None:
        return x
    keepdims = bool(node.attr("keepdims", 1))
    low = False if x.dtype.kind == "b" else np.iinfo(x.dtype).min if x.dtype.kind in "iu" else -np.inf
    return as_array(np.max(x, axis=axes, keepdims=keepdims, initial=low)).astype(x.dtype)
