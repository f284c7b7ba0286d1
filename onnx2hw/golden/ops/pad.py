"""Pad with modes ``constant``, ``reflect``, ``edge`` and ``wrap``.

``pads`` is ``[b_1, ..., b_n, e_1, ..., e_n]`` (begin and end counts per padded axis);
negative counts crop. Opset 1 names the attribute ``paddings``; opsets 2-10 take
``pads``/``value`` attributes; from 11 they are inputs (``constant_value`` optional,
default 0); from 18 an optional ``axes`` input selects the padded axes.
"""
import numpy as np

from ._util import as_array, fail, int_list, norm_axes

__all__ = ["run"]

_NUMPY_MODE = {"constant": "constant", "reflect": "reflect", "edge": "edge", "wrap": "wrap"}


def run(node, x, pads=None, constant_value=None, axes=None):
    x = as_array(x)
    mode = node.attr("mode", "constant")
    if mode not in _NUMPY_MODE:
        raise fail(node, f"unknown mode {mode!r}")
    if node.since_version < 11:
        pads = node.attr("paddings" if node.since_version < 2 else "pads")
        constant_value = node.attr("value", 0.0)
    if pads is None:
        raise fail(node, "missing pads")
    pads = int_list(node, pads, "pads")
    axes = tuple(range(x.ndim)) if axes is None else norm_axes(node, int_list(node, axes, "axes"), x.ndim)
    if len(pads) != 2 * len(axes):
        raise fail(node, f"pads {pads!r} must have 2 * {len(axes)} entries")
    width = [[0, 0] for _ in range(x.ndim)]
    for i, a in enumerate(axes):
        width[a] = [pads[i], pads[i + len(axes)]]
    # crop negative pads, then pad the positive ones
    crop = tuple(slice(max(-b, 0), x.shape[a] - max(-e, 0)) for a, (b, e) in enumerate(width))
    for a, (b, e) in enumerate(width):
        if max(-b, 0) + max(-e, 0) > x.shape[a]:
            raise fail(node, f"pads {pads!r} crop more than the {x.shape[a]} elements of axis {a}")
    x = x[crop]
    width = [(max(b, 0), max(e, 0)) for b, e in width]
    if mode == "constant":
        value = np.zeros((), x.dtype) if constant_value is None else np.asarray(constant_value).reshape(()).astype(x.dtype)
        if not any(b or e for b, e in width):
            return x
        out = np.full(tuple(d + b + e for d, (b, e) in zip(x.shape, width)), value, dtype=x.dtype)
        out[tuple(slice(b, b + d) for d, (b, _) in zip(x.shape, width))] = x
        return out
    for a, (b, e) in enumerate(width):
        if (b or e) and x.shape[a] == 0:
            raise fail(node, f"cannot {mode}-pad empty axis {a}")
    return np.pad(x, width, mode=_NUMPY_MODE[mode])
