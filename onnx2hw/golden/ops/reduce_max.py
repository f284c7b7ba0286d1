"""ReduceMax over ``axes`` (attribute before opset 18, optional input from 18; no axes: all axes,
unless ``noop_with_empty_axes=1``); the reduction of an empty axis is the type's lowest value (the
ONNX reference's rule)."""
import numpy as np

from .reduce_mean import reduce

__all__ = ["run"]


def _max(x, axes, keepdims):
    low = False if x.dtype.kind == "b" else np.iinfo(x.dtype).min if x.dtype.kind in "iu" else -np.inf
    return np.max(x, axis=axes, keepdims=keepdims, initial=low)


def run(node, x, axes=None):
    return reduce(node, x, axes, _max)
