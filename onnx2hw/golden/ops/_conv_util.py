"""Shared geometry and window helpers of the convolution and pooling ops.

All helpers work for any number of spatial dimensions (layout ``N, C, *spatial``).
Windows are visited as one strided slice per kernel offset, so the work is
vectorized over batch, channels and output positions; Python loops run only over
kernel offsets (and, in the convolution, over cache-sized chunks of samples).
"""
from __future__ import annotations

import itertools
import math

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ...ir.errors import ModelError
from ._quant_util import centered, exact_dtype, offset_bound, zero_point

__all__ = ["Geometry", "geometry", "pad_spatial", "window_slices", "im2col",
           "conv_nd", "pool_reduce", "window_counts", "spatial_attrs", "conv_geometry", "conv_integer_acc"]


#: target size of one chunk of im2col columns (stays in the CPU caches between copy and GEMM)
_CHUNK_BYTES = 1 << 18


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

    @property
    def dilated_kernel(self) -> tuple[int, ...]:
        """Extent of one window: ``(k - 1) * dilation + 1`` per spatial dim."""
        return tuple((k - 1) * dl + 1 for k, dl in zip(self.kernel, self.dilations))


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
    """Resolve ``auto_pad``/``pads``/``ceil_mode`` of ``node`` for spatial input ``in_shape``.

    ``ceil_mode`` rounds the window count up (a last window may not start in the
    end padding); with ``auto_pad=VALID`` it applies too, as in onnxruntime and ONNX
    shape inference (onnx's reference evaluator rounds down there).
    """
    strides, dilations, pads = spatial_attrs(node, kernel)
    if any(int(k) < 1 for k in kernel):
        raise ModelError(f"node {node.name!r}: bad kernel shape {list(kernel)!r} (every dim must be positive)")
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
    """Yield ``(index, offset, slices)`` per kernel offset (row-major order): the
    spatial slices of a padded array that hold, for every output position, the
    input element under that kernel offset."""
    ranges = [range(k) for k in g.kernel]
    for idx, off in enumerate(itertools.product(*ranges)):
        yield idx, off, tuple(slice(o * dl, o * dl + (n - 1) * s + 1, s)
                              for o, dl, n, s in zip(off, g.dilations, g.out, g.strides))


def im2col(xp: np.ndarray, g: Geometry, group: int, dtype=None) -> np.ndarray:
    """Columns of padded ``xp`` (N, C, *padded) as a contiguous (N, G, K*Cg, P) array
    (K = prod(kernel), P = prod(out), column index = kernel offset * Cg + channel).

    One strided window view and one copy; batch leads so the convolution is one
    batched matmul with no transpose of the result.
    """
    n, c = xp.shape[:2]
    d = len(g.kernel)
    view = sliding_window_view(xp, g.dilated_kernel, axis=tuple(range(2, 2 + d)))
    # (N, C, *out_full, *dilated_kernel) -> take strides and dilations
    view = view[(slice(None), slice(None)) + tuple(slice(None, None, s) for s in g.strides)
                + tuple(slice(None, None, dl) for dl in g.dilations)]
    view = view[(slice(None), slice(None)) + tuple(slice(0, o) for o in g.out)]
    view = view.reshape((n, group, c // group) + g.out + g.kernel)
    order = (0, 1) + tuple(range(3 + d, 3 + 2 * d)) + (2,) + tuple(range(3, 3 + d))
    cols = np.empty((n, group) + g.kernel + (c // group,) + g.out, dtype=dtype or xp.dtype)
    np.copyto(cols, view.transpose(order), casting="unsafe")
    return cols.reshape(n, group, math.prod(g.kernel) * (c // group), math.prod(g.out))


def conv_nd(x: np.ndarray, w: np.ndarray, g: Geometry, group: int, compute_dtype, bias=None) -> np.ndarray:
    """Grouped N-D convolution of unpadded ``x`` (N, C, ...) with ``w`` (M, C/group, *kernel),
    zero padding per ``g``, plus ``bias`` (M,) when given. Returns a contiguous
    (N, M, *out) array in ``compute_dtype``.

    Two formulations, both vectorized over batch and positions:

    * stride 1 everywhere: the "flat" im2col. Input goes channel-major into one
      zero-padded buffer (C, N * F), F = prod(padded spatial), so the input under
      kernel offset k is the contiguous slice starting at that offset's flat shift.
      Columns are K large contiguous copies, the product one GEMM per group; outputs
      at positions a window cannot reach (the right/bottom margins) are cropped.
      The columns of a chunk of samples stay cache-sized; the bias rides along as
      a row of ones in the columns.
    * otherwise: strided-window im2col (N, G, K*Cg, P) and one batched matmul.
    """
    n, c = x.shape[:2]
    m = w.shape[0]
    cg, mg = c // group, m // group
    d = len(g.kernel)
    k = math.prod(g.kernel)
    wc = np.asarray(w).astype(compute_dtype, copy=False)
    # weights as (G, Mg, K*Cg), column = kernel offset * Cg + channel in group
    wg = wc.reshape(group, mg, cg, k).transpose(0, 1, 3, 2).reshape(group, mg, k * cg)
    if all(s == 1 for s in g.strides):
        padded = tuple(b + sz + e for b, sz, e in zip(g.pads_begin, x.shape[2:], g.pads_end))
        f = math.prod(padded)
        rs = [math.prod(padded[i + 1:]) for i in range(d)]  # flat stride of each spatial dim
        shifts = [sum(o * dl * r for o, dl, r in zip(off, g.dilations, rs))
                  for _, off, _ in window_slices(g)]
        length = n * f
        buf = np.zeros((c, length + max(shifts)), dtype=compute_dtype)
        inner = buf[:, :length].reshape((c, n) + padded)
        inner[(slice(None), slice(None)) + tuple(slice(b, b + sz) for b, sz in zip(g.pads_begin, x.shape[2:]))] = \
            np.moveaxis(x, 1, 0)
        out = np.empty((n, m) + g.out, dtype=compute_dtype)
        crop = (slice(None), slice(None)) + tuple(slice(0, o) for o in g.out)
        bufg = buf.reshape(group, cg, -1)
        rows = k * cg + (bias is not None)
        if bias is not None:
            bcol = np.asarray(bias, dtype=compute_dtype).reshape(group, mg, 1)
            wg = np.concatenate([wg, bcol], axis=2)
        # samples per chunk: the columns of one chunk stay cache-sized
        chunk = max(1, _CHUNK_BYTES // (group * rows * f * buf.itemsize))
        full = None
        for n0 in range(0, n, chunk):
            nc = min(chunk, n - n0)
            span = nc * f
            if full is None or full.shape[-1] != span:
                full = np.empty((group, rows, span), dtype=compute_dtype)
                full[:, k * cg:] = 1  # the bias row
            for idx, sh in enumerate(shifts):
                full[:, idx * cg:(idx + 1) * cg] = bufg[:, :, n0 * f + sh:n0 * f + sh + span]
            y = np.matmul(wg, full)  # (G, Mg, nc*F)
            out[n0:n0 + nc] = np.moveaxis(y.reshape((m, nc) + padded)[crop], 0, 1)
        return out
    cols = im2col(pad_spatial(x, g, 0), g, group, compute_dtype)  # (N, G, K*Cg, P)
    y = np.matmul(wg, cols).reshape((n, m) + g.out)  # (N, G, Mg, P)
    if bias is not None:
        y += np.asarray(bias, dtype=compute_dtype).reshape((m,) + (1,) * d)
    return y


def pool_reduce(xp: np.ndarray, g: Geometry, op) -> np.ndarray:
    """Reduce every window of padded ``xp`` with the associative binary ufunc ``op``
    (``np.maximum``, ``np.add``).

    A box window is separable, so the spatial dims are reduced one after another
    (innermost first): ``sum(kernel)`` vectorized passes instead of ``prod(kernel)``.
    """
    d = len(g.kernel)
    cur = xp
    for i in reversed(range(d)):
        axis = cur.ndim - d + i
        k, dl, s, o = g.kernel[i], g.dilations[i], g.strides[i], g.out[i]
        views = []
        for j in range(k):
            sl = [slice(None)] * cur.ndim
            sl[axis] = slice(j * dl, j * dl + (o - 1) * s + 1, s)
            views.append(cur[tuple(sl)])
        acc = op(views[0], views[1]) if k > 1 else np.array(views[0])
        for v in views[2:]:
            op(acc, v, out=acc)
        cur = acc
    return cur if cur is not xp else cur.copy()


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
        raise ModelError(f"node {node.name!r}: kernel_shape {tuple(declared)!r} does not match "
                         f"weight shape {w.shape!r}")
    group = int(node.attr("group", 1))
    c, m = x.shape[1], w.shape[0]
    if group < 1 or c % group or m % group or w.shape[1] != c // group:
        raise ModelError(f"node {node.name!r}: group {group!r} does not fit {c} input channels "
                         f"and weight shape {w.shape!r}")
    return geometry(node, x.shape[2:], kernel), group


def conv_integer_acc(node, x, x_zp, w, w_zp, extra: int = 0) -> np.ndarray:
    """Exact accumulator of ``conv(x - x_zp, w - w_zp)`` (padding holds ``x_zp``, i.e.
    zero after the subtraction), integer-valued in the fastest exact dtype (float32,
    float64 or int64; see :func:`._quant_util.exact_dtype`) with headroom for adding
    integers up to ``extra`` in magnitude. ``x_zp`` is per tensor; ``w_zp`` per tensor
    or per output channel (shape (M,))."""
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
    else:
        wz = wz.reshape(())
    k = (x.shape[1] // group) * math.prod(g.kernel)
    cd = exact_dtype(offset_bound(x.dtype, xz) * offset_bound(w.dtype, wz) * k + extra)
    return conv_nd(centered(x, xz.reshape(()), cd), centered(w, wz, cd), g, group, cd)
