"""Shared geometry and window helpers of the convolution and pooling ops.

All helpers work for any number of spatial dimensions (layout ``N, C, *spatial``).
Windows are visited as one strided slice per kernel offset, so the work is
vectorized over batch, channels and output positions; the only Python loop runs
over the ``prod(kernel_shape)`` kernel offsets.
"""
from __future__ import annotations

import itertools
import math

import numpy as np

from ...ir.errors import ModelError

__all__ = ["Geometry", "geometry", "pad_spatial", "window_slices", "im2col",
           "conv_matmul", "pool_reduce", "window_counts", "spatial_attrs", "conv_geometry", "conv_integer_acc"]


class Geometry:
    """Resolved window geometry: per spatial dim kernel, stride, dilation,
    pads at begin/end (extended at the end for ``ceil_mode`` windows) and output size.

    ``pads_end`` includes the extra end padding ceil mode needs so that every
    window lies inside the padded array; ``pads_end_declared`` is the padding the
    model asked for (used by AveragePool's ``count_include_pad``).
    """

    __slots__ = ("kernel", "strides", "dilations", "pads_begin", "pads_end",
                 "pads_end_declared", "out")

    def __init__(self, kernel, strides, dilations, pads_begin, pads_end, pads_end_declared, out):
        self.kernel = tuple(kernel)
        self.strides = tuple(strides)
        self.dilations = tuple(dilations)
        self.pads_begin = tuple(pads_begin)
        self.pads_end = tuple(pads_end)
        self.pads_end_declared = tuple(pads_end_declared)
        self.out = tuple(out)


def spatial_attrs(node, kernel: tuple[int, ...]):
    """``strides, dilations, pads`` attributes of ``node`` with their defaults, checked."""
    d = len(kernel)
    strides = tuple(node.attr("strides", None) or (1,) * d)
    dilations = tuple(node.attr("dilations", None) or (1,) * d)
    pads = tuple(node.attr("pads", None) or (0,) * (2 * d))
    if len(strides) != d or len(dilations) != d or len(pads) != 2 * d:
        raise ModelError(f"node {node.name!r}: strides {strides!r}, dilations {dilations!r} or pads {pads!r} "
                         f"do not match {d} spatial dims of kernel {kernel!r}")
    if any(s < 1 for s in strides) or any(x < 1 for x in dilations) or any(p < 0 for p in pads):
        raise ModelError(f"node {node.name!r}: bad strides {strides!r}, dilations {dilations!r} or pads {pads!r}")
    return strides, dilations, pads


def geometry(node, in_shape: tuple[int, ...], kernel: tuple[int, ...], *, ceil_mode: bool = False) -> Geometry:
    """Resolve ``auto_pad``/``pads``/``ceil_mode`` of ``node`` for spatial input ``in_shape``."""
    strides, dilations, pads = spatial_attrs(node, kernel)
    d = len(kernel)
    auto_pad = node.attr("auto_pad", "NOTSET") or "NOTSET"
    eff = [(k - 1) * dl + 1 for k, dl in zip(kernel, dilations)]
    pb, pe, out = [], [], []
    for i in range(d):
        n, s, e = in_shape[i], strides[i], eff[i]
        if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            o = -(-n // s)
            total = max((o - 1) * s + e - n, 0)
            small, large = total // 2, total - total // 2
            b, en = (small, large) if auto_pad == "SAME_UPPER" else (large, small)
        elif auto_pad == "VALID":
            b = en = 0
            o = ((n - e) // s if not ceil_mode else -(-(n - e) // s)) + 1
        elif auto_pad == "NOTSET":
            b, en = pads[i], pads[i + d]
            span = n + b + en - e
            if ceil_mode:
                o = -(-span // s) + 1
                if (o - 1) * s >= n + b:  # last window would start in the end padding
                    o -= 1
            else:
                o = span // s + 1
        else:
            raise ModelError(f"node {node.name!r}: unknown auto_pad {auto_pad!r}")
        if o < 1:
            raise ModelError(f"node {node.name!r}: kernel {kernel!r} (dilations {dilations!r}) does not fit "
                             f"spatial input {tuple(in_shape)!r} with pads {pads!r}")
        pb.append(b)
        pe.append(en)
        out.append(o)
    pe_full = [max(pe[i], (out[i] - 1) * strides[i] + eff[i] - in_shape[i] - pb[i]) for i in range(d)]
    return Geometry(kernel, strides, dilations, pb, pe_full, pe, out)


def pad_spatial(x: np.ndarray, g: Geometry, value) -> np.ndarray:
    """``x`` padded with ``value`` on its spatial dims (no copy when there is no padding)."""
    d = len(g.kernel)
    if not any(g.pads_begin) and not any(g.pads_end):
        return x
    shape = list(x.shape[:-d]) + [x.shape[-d + i] + g.pads_begin[i] + g.pads_end[i] for i in range(d)]
    xp = np.full(shape, value, dtype=x.dtype)
    xp[(...,) + tuple(slice(b, b + n) for b, n in zip(g.pads_begin, x.shape[-d:]))] = x
    return xp


def window_slices(g: Geometry):
    """Yield ``(offset index, slices)``: the spatial slices of a padded array that hold,
    for every output position, the input element under kernel offset ``offset``."""
    ranges = [range(k) for k in g.kernel]
    for idx, off in enumerate(itertools.product(*ranges)):
        yield idx, off, tuple(slice(o * dl, o * dl + (n - 1) * s + 1, s)
                              for o, dl, n, s in zip(off, g.dilations, g.out, g.strides))


def im2col(xp: np.ndarray, g: Geometry, dtype=None) -> np.ndarray:
    """Columns of padded ``xp`` (N, C, *padded) as an array (C, K, N, *out), K = prod(kernel).

    Channels lead so a grouped conv is one batched matmul over (G, Cg*K, N*P).
    """
    n, c = xp.shape[:2]
    xt = np.moveaxis(xp, 1, 0)  # (C, N, *padded) view
    k = math.prod(g.kernel)
    cols = np.empty((c, k, n) + g.out, dtype=dtype or xp.dtype)
    for idx, _, sl in window_slices(g):
        cols[:, idx] = xt[(slice(None), slice(None)) + sl]
    return cols


def conv_matmul(xp: np.ndarray, w: np.ndarray, g: Geometry, group: int, compute_dtype) -> np.ndarray:
    """Grouped N-D convolution of padded ``xp`` (N, C, ...) with ``w`` (M, C/group, *kernel).

    Returns (N, M, *out) in ``compute_dtype``; the products go through one
    ``np.matmul`` per call (BLAS for floats).
    """
    n, c = xp.shape[:2]
    m = w.shape[0]
    cg, mg = c // group, m // group
    k = math.prod(g.kernel)
    p = math.prod(g.out)
    cols = im2col(xp, g, compute_dtype).reshape(group, cg * k, n * p)
    wg = np.asarray(w, dtype=compute_dtype).reshape(group, mg, cg * k)
    y = np.matmul(wg, cols)  # (G, Mg, N*P)
    y = y.reshape(m, n, p).transpose(1, 0, 2)
    return np.ascontiguousarray(y).reshape((n, m) + g.out)


def pool_reduce(xp: np.ndarray, g: Geometry, op, out_dtype=None) -> np.ndarray:
    """Reduce every window of padded ``xp`` with binary ufunc ``op`` (np.maximum, np.add)."""
    acc = None
    for _, _, sl in window_slices(g):
        v = xp[(Ellipsis,) + sl]
        if acc is None:
            acc = np.array(v, dtype=out_dtype or xp.dtype)
        else:
            op(acc, v, out=acc)
    return acc


def window_counts(in_shape: tuple[int, ...], g: Geometry, include_pad: bool) -> np.ndarray:
    """Per output position, how many window taps fall inside the input (or inside the
    input plus its declared padding when ``include_pad``); shape ``g.out``."""
    d = len(g.kernel)
    full = tuple(n + b + e for n, b, e in zip(in_shape, g.pads_begin, g.pads_end))
    mask = np.zeros(full, dtype=np.float64)
    if include_pad:
        region = tuple(slice(0, b + n + e) for b, n, e in zip(g.pads_begin, in_shape, g.pads_end_declared))
    else:
        region = tuple(slice(b, b + n) for b, n in zip(g.pads_begin, in_shape))
    mask[region] = 1.0
    assert mask.ndim == d
    return pool_reduce(mask, g, np.add)


def conv_geometry(node, x: np.ndarray, w: np.ndarray) -> tuple[Geometry, int]:
    """Check the shapes of a Conv-like node and resolve its geometry and ``group``."""
    if x.ndim < 3 or w.ndim != x.ndim:
        raise ModelError(f"node {node.name!r}: input shape {x.shape!r} and weight shape {w.shape!r} "
                         "must both be (N, C, *spatial) / (M, C/group, *kernel)")
    kernel = tuple(int(k) for k in w.shape[2:])
    declared = node.attr("kernel_shape", None)
    if declared is not None and tuple(declared) != kernel:
        raise ModelError(f"node {node.name!r}: kernel_shape {tuple(declared)!r} does not match weight shape {w.shape!r}")
    group = int(node.attr("group", 1))
    c, m = x.shape[1], w.shape[0]
    if group < 1 or c % group or m % group or w.shape[1] != c // group:
        raise ModelError(f"node {node.name!r}: group {group!r} does not fit {c} input channels "
                         f"and weight shape {w.shape!r}")
    return geometry(node, x.shape[2:], kernel), group


def conv_integer_acc(node, x, x_zp, w, w_zp) -> np.ndarray:
    """Exact int64 accumulator of ``conv(x - x_zp, w - w_zp)`` (padding holds ``x_zp``,
    i.e. zero after the subtraction). ``x_zp`` is per tensor; ``w_zp`` per tensor or
    per output channel (shape (M,))."""
    from ._quant_util import absmax, exact_dtype, zero_point

    g, group = conv_geometry(node, x, w)
    xz = zero_point(x_zp)
    if xz.size != 1:
        raise ModelError(f"node {node.name!r}: input zero point must be per tensor, not shape {xz.shape!r}")
    wz = zero_point(w_zp)
    if wz.size != 1:
        if wz.ndim != 1 or wz.shape[0] != w.shape[0]:
            raise ModelError(f"node {node.name!r}: weight zero point shape {wz.shape!r} "
                             f"is neither per tensor nor per output channel ({w.shape[0]})")
        wz = wz.reshape((-1,) + (1,) * (w.ndim - 1))
    xi = x.astype(np.int64) - xz.reshape(())
    wi = w.astype(np.int64) - (wz.reshape(()) if wz.size == 1 else wz)
    cd = exact_dtype(absmax(xi), absmax(wi), (x.shape[1] // group) * math.prod(g.kernel))
    y = conv_matmul(pad_spatial(xi, g, 0), wi, g, group, cd)
    return y if cd == np.int64 else y.astype(np.int64)
