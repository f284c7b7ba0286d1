"""ReduceMean over ``axes`` (attribute before opset 18, optional input from 18).

No axes means all axes, unless ``noop_with_empty_axes=1`` (opset 18), which returns
the input unchanged. Floats accumulate in float64 (``_util.SUM_DTYPE``); integer means are
truncated toward zero, like the ONNX reference (``astype`` of the float mean).
"""
import numpy as np

from ._util import SUM_DTYPE, as_array, int_list, norm_axes

__all__ = ["run", "reduce"]


def _reduced_axes(node, x, axes, since: int = 18) -> tuple[int, ...] | None:
    """The axes a Reduce* ``node`` reduces (the attribute before opset ``since``, then the
    input); ``None`` for ``noop_with_empty_axes=1`` without axes (the input unchanged)."""
    if node.since_version < since:
        axes = node.attr("axes")
    axes = () if axes is None else int_list(node, axes, "axes")
    if not axes:
        if node.attr("noop_with_empty_axes", 0):
            return None
        axes = tuple(range(x.ndim))
    return norm_axes(node, axes, x.ndim)


def reduce(node, x, axes, fn):
    """A Reduce* ``node`` of ``x``: ``fn(x, axes, keepdims)`` over its axes, cast to ``x``'s type
    (``x`` itself for ``noop_with_empty_axes`` without axes)."""
    x = as_array(x)
    axes = _reduced_axes(node, x, axes)
    if axes is None:
        return x
    return as_array(fn(x, axes, bool(node.attr("keepdims", 1)))).astype(x.dtype)


def _mean(x, axes, keepdims):
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.mean(x.astype(SUM_DTYPE, copy=False), axis=axes, keepdims=keepdims)


def run(node, x, axes=None):
    return reduce(node, x, axes, _mean)
