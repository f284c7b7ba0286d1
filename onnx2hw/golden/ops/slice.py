"""Slice with ONNX clamping rules.

Opset < 10 takes ``starts``/``ends``/``axes`` attributes (step 1); from 10 they
are inputs, with optional ``axes`` and ``steps``. Negative starts/ends count from
the end; out-of-range values clamp to ``[0, dim]`` (``[-1, dim-1]`` for negative
steps, where -1 means "before the first element").
"""
from ._util import as_array, fail, int_list, norm_axes

__all__ = ["run"]


def _bounds(start: int, end: int, step: int, dim: int) -> slice:
    if start < 0:
        start += dim
    if end < 0:
        end += dim
    if step > 0:
        start, end = min(max(start, 0), dim), min(max(end, 0), dim)
    else:
        start, end = min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)
    return slice(start, None if end < 0 else end, step)


def run(node, x, starts=None, ends=None, axes=None, steps=None):
    x = as_array(x)
    if node.since_version < 10:
        starts, ends, axes = node.attr("starts"), node.attr("ends"), node.attr("axes")
    if starts is None or ends is None:
        raise fail(node, "missing starts or ends")
    starts, ends = int_list(node, starts, "starts"), int_list(node, ends, "ends")
    n = len(starts)
    axes = tuple(range(n)) if axes is None else int_list(node, axes, "axes")
    steps = (1,) * n if steps is None else int_list(node, steps, "steps")
    if not len(ends) == len(axes) == len(steps) == n:
        raise fail(node, f"starts {starts!r}, ends {ends!r}, axes {axes!r}, steps {steps!r} differ in length")
    axes = norm_axes(node, axes, x.ndim)
    index = [slice(None)] * x.ndim
    for a, s, e, st in zip(axes, starts, ends, steps):
        if st == 0:
            raise fail(node, f"steps {steps!r} contain 0")
        index[a] = _bounds(s, e, st, x.shape[a])
    return x[tuple(index)]
