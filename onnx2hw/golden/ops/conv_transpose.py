"""ConvTranspose: N-D grouped transposed convolution (strides, dilations, pads, output_padding,
output_shape, auto_pad, bias).

Computed as the convolution at stride 1 of the input with ``s - 1`` zeros inserted between
elements along each spatial axis, padded by ``d*(k-1) - pad_begin`` at the start and
``d*(k-1) - pad_end + output_padding`` at the end (negative: cropped), by the weight flipped
along every spatial axis with its channel axes swapped per group. With ``output_shape`` or
``auto_pad`` SAME_*, the total padding ``s*(in-1) + output_padding + d*(k-1) + 1 - out`` is
split as the ONNX spec says: SAME_UPPER puts the odd element at the end, otherwise at the
start. Float types accumulate in float64 and are rounded once (``_util.SUM_DTYPE``).
"""
from __future__ import annotations

import numpy as np

from ...ir.errors import ModelError
from ._conv_util import Geometry, conv_nd
from ._util import SUM_DTYPE

__all__ = ["run"]


def _ints(node, key, default, d):
    v = tuple(int(a) for a in (node.attr(key, None) or default))
    if len(v) != d:
        raise ModelError(f"node {node.name!r}: {key} {list(v)!r} does not match {d} spatial dims")
    return v


def _pads(node, spatial, kernel, strides, dilations, outpad):
    """``(begin, end)`` padding of the transposed convolution's output, per spatial dim."""
    d = len(spatial)
    auto = node.attr("auto_pad", "NOTSET") or "NOTSET"
    shape = node.attr("output_shape", None)
    if auto not in ("NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER"):
        raise ModelError(f"node {node.name!r}: unknown auto_pad {auto!r}")
    if shape is None and auto in ("NOTSET", "VALID"):
        p = _ints(node, "pads", (0,) * (2 * d), 2 * d) if auto == "NOTSET" else (0,) * (2 * d)
        if min(p) < 0:
            raise ModelError(f"node {node.name!r}: negative pads {list(p)!r}")
        return p[:d], p[d:]
    out = tuple(int(v) for v in shape)[-d:] if shape is not None else tuple(n * s for n, s in zip(spatial, strides))
    if len(out) != d:
        raise ModelError(f"node {node.name!r}: output_shape {list(shape)!r} does not match {d} spatial dims")
    total = [s * (n - 1) + op + (k - 1) * dl + 1 - o
             for n, s, op, k, dl, o in zip(spatial, strides, outpad, kernel, dilations, out)]
    small = [t // 2 for t in total]
    large = [t - t // 2 for t in total]
    return (small, large) if auto == "SAME_UPPER" else (large, small)


def run(node, x, w, b=None):
    x, w = np.asarray(x), np.asarray(w)
    if x.ndim < 3 or w.ndim != x.ndim:
        raise ModelError(f"node {node.name!r}: input {x.shape!r} and weight {w.shape!r} must be "
                         "(N, C, *spatial) / (C, M/group, *kernel)")
    d = x.ndim - 2
    kernel = tuple(int(k) for k in w.shape[2:])
    declared = node.attr("kernel_shape", None)
    if declared is not None and tuple(declared) != kernel:
        raise ModelError(f"node {node.name!r}: kernel_shape {tuple(declared)!r} does not match weight {w.shape!r}")
    group = int(node.attr("group", 1))
    c = x.shape[1]
    if group < 1 or c % group or w.shape[0] != c:
        raise ModelError(f"node {node.name!r}: group {group!r} does not fit {c} input channels and weight {w.shape!r}")
    strides = _ints(node, "strides", (1,) * d, d)
    dilations = _ints(node, "dilations", (1,) * d, d)
    outpad = _ints(node, "output_padding", (0,) * d, d)
    if min(strides) < 1 or min(dilations) < 1 or min(outpad) < 0:
        raise ModelError(f"node {node.name!r}: bad strides {strides!r}, dilations {dilations!r} or "
                         f"output_padding {outpad!r}")
    m = w.shape[1] * group
    if b is not None and np.asarray(b).shape != (m,):
        raise ModelError(f"node {node.name!r}: bias shape {np.asarray(b).shape!r} does not match {m} output channels")
    begin, end = _pads(node, x.shape[2:], kernel, strides, dilations, outpad)
    # zero insertion, then padding (negative: cropping) of the stride-1 convolution's input
    up = tuple((n - 1) * s + 1 for n, s in zip(x.shape[2:], strides))
    lo = [(k - 1) * dl - p for k, dl, p in zip(kernel, dilations, begin)]
    hi = [(k - 1) * dl - p + op for k, dl, p, op in zip(kernel, dilations, end, outpad)]
    full = tuple(max(0, a) + n + max(0, z) for a, n, z in zip(lo, up, hi))
    xp = np.zeros(x.shape[:2] + full, dtype=SUM_DTYPE)
    xp[(slice(None), slice(None)) + tuple(slice(max(0, a), max(0, a) + n, s) for a, n, s in zip(lo, up, strides))] = x
    xp = xp[(slice(None), slice(None)) + tuple(slice(-min(0, a), f + min(0, z)) for a, f, z in zip(lo, full, hi))]
    extent = [(k - 1) * dl + 1 for k, dl in zip(kernel, dilations)]
    out = [n - e + 1 for n, e in zip(xp.shape[2:], extent)]
    if min(out) < 1:
        raise ModelError(f"node {node.name!r}: pads {list(begin) + list(end)!r} leave no output")
    cg = c // group
    wc = w.reshape((group, cg, m // group) + kernel)[(Ellipsis,) + (slice(None, None, -1),) * d]
    wc = np.swapaxes(wc, 1, 2).reshape((m, cg) + kernel)
    g = Geometry(kernel, (1,) * d, dilations, (0,) * d, (0,) * d, (0,) * d, out)
    y = conv_nd(xp, wc, g, group, SUM_DTYPE, b)
    return y.astype(x.dtype, copy=False)
