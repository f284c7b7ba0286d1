"""Fast exact integer convolution for the layers' ``reference`` functions.

A sum of integer products is computed exactly in floating point when every value it passes
through is an integer below the format's exact range (``2**24`` for float32, ``2**53`` for
float64): products and partial sums are then exact whatever order BLAS adds them in (fused
multiply-adds included). Every partial sum of ``sum_k w[k] * x[k]`` is bounded by
``sum_k |w[k]| * max |x|``, so that bound (taken over the output channels, with ``max |x|`` over
the data actually fed and the padding value) decides the format; above ``2**53`` the int64 path
runs (and raises ``OverflowError`` rather than wrap when even int64 could overflow).

The result is the same int64 array whichever path runs; only the time differs (im2col + one
BLAS GEMM per convolution, instead of int64 matmul, which NumPy does without BLAS).
"""
from __future__ import annotations

import numpy as np

from ._windows import windows

__all__ = ["float_type_for", "exact_conv", "exact_dense", "zero_inserted", "FLOAT32_EXACT", "FLOAT64_EXACT"]

#: magnitudes below these are integers float32 / float64 hold exactly, and so do their sums
FLOAT32_EXACT = 1 << 24
FLOAT64_EXACT = 1 << 53
_INT64_SAFE = 1 << 63


def _max_abs(x: np.ndarray) -> int:
    """``max |x|`` without allocating a temporary the size of ``x``."""
    return max(int(x.max()), -int(x.min())) if x.size else 0


def float_type_for(bound: int):
    """The narrowest float dtype that computes sums of magnitude ``< bound`` exactly, or ``None``."""
    if bound < FLOAT32_EXACT:
        return np.float32
    if bound < FLOAT64_EXACT:
        return np.float64
    return None


def _row_bound(weights: np.ndarray) -> int:
    """``max`` over output channels (rows) of ``sum |w|``."""
    co = weights.shape[0]
    return int(np.abs(weights).reshape(co, -1).sum(axis=1).max()) if weights.size else 0


def exact_dense(x: np.ndarray, weights: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """``x @ weights.T + bias`` for integer ``x`` ``(N, K)`` and ``weights`` ``(M, K)``, exact, as int64."""
    x = np.asarray(x)
    weights = np.asarray(weights, dtype=np.int64)
    bound = _max_abs(x) * _row_bound(weights)
    dt = float_type_for(bound)
    if dt is None:
        if bound >= _INT64_SAFE:
            raise OverflowError("integer matmul would overflow int64")
        acc = x.astype(np.int64, copy=False) @ weights.T
    else:
        acc = x.astype(dt) @ weights.T.astype(dt)
    return acc.astype(np.int64) + np.asarray(bias, dtype=np.int64)


def _padded(x: np.ndarray, pads, value: int, dtype) -> np.ndarray:
    """``x`` (NHWC) converted to ``dtype`` and padded with ``value`` in one copy."""
    t, l, b, r = (int(p) for p in pads)
    if not (t or l or b or r):
        return x.astype(dtype, copy=False)
    n, h, w, c = x.shape
    out = np.full((n, h + t + b, w + l + r, c), value, dtype=dtype)
    out[:, t:t + h, l:l + w, :] = x
    return out


def _int64_conv(cols: np.ndarray, weights: np.ndarray, group: int) -> np.ndarray:
    """The int64 im2col matmul per group (``cols`` ``(N, OH, OW, kh, kw, C)``), as NumPy's exact
    integer matmul computes it."""
    co, kh, kw, cg = weights.shape
    n, oh, ow = cols.shape[:3]
    cog = co // group
    parts = []
    for i in range(group):
        xi = cols[..., i * cg:(i + 1) * cg].reshape(n * oh * ow, kh * kw * cg)
        wi = weights[i * cog:(i + 1) * cog].reshape(cog, kh * kw * cg)
        parts.append(xi @ wi.T)
    return np.concatenate(parts, axis=1).reshape(n, oh, ow, co)


def _depthwise(x: np.ndarray, weights: np.ndarray, stride, oh: int, ow: int) -> np.ndarray:
    """One input channel per group (``weights`` ``(Cout, kh, kw, 1)``, ``Cout = M * Cin``):
    a multiply-add per kernel tap over the padded ``x``, output channel ``o`` reading input
    channel ``o // M``."""
    co, kh, kw, _ = weights.shape
    cin = x.shape[3]
    if co != cin:
        x = x[..., np.arange(co) // (co // cin)]
    sh, sw = stride
    acc = np.zeros((x.shape[0], oh, ow, co), dtype=x.dtype)
    w = weights.astype(x.dtype)
    for i in range(kh):
        for j in range(kw):
            acc += x[:, i:i + sh * (oh - 1) + 1:sh, j:j + sw * (ow - 1) + 1:sw, :] * w[:, i, j, 0]
    return acc


def zero_inserted(x: np.ndarray, factors, fill: int) -> np.ndarray:
    """NHWC ``x`` with ``sh - 1`` rows and ``sw - 1`` columns of ``fill`` between its rows and
    columns: ``(N, (H-1)*sh + 1, (W-1)*sw + 1, C)``, ``y[:, ::sh, ::sw] = x``."""
    sh, sw = (int(f) for f in factors)
    if (sh, sw) == (1, 1):
        return x
    n, h, w, c = x.shape
    y = np.full((n, (h - 1) * sh + 1, (w - 1) * sw + 1, c), fill, dtype=x.dtype)
    y[:, ::sh, ::sw] = x
    return y


def _dilated(weights: np.ndarray, dilation) -> np.ndarray:
    """``(Cout, kh, kw, Cg)`` weights spread over the kernel's extent ``(k-1)*d + 1`` with zeros
    between taps: the undilated convolution with them is the dilated one, exactly."""
    dh, dw = (int(d) for d in dilation)
    if (dh, dw) == (1, 1):
        return weights
    co, kh, kw, cg = weights.shape
    out = np.zeros((co, (kh - 1) * dh + 1, (kw - 1) * dw + 1, cg), dtype=weights.dtype)
    out[:, ::dh, ::dw] = weights
    return out


def exact_conv(x: np.ndarray, weights: np.ndarray, bias: np.ndarray, stride, pads, pad_value: int,
               group: int, dilation=(1, 1)) -> np.ndarray:
    """``sum over the window and the group's input channels of w * x + bias``, exact, as int64.

    ``x`` ``(N, H, W, C)`` integers; ``weights`` ``(Cout, kh, kw, C/group)``; ``pads``
    ``(t, l, b, r)`` filled with ``pad_value``; tap ``(i, j)`` of a window reads the padded
    input ``dilation * (i, j)`` past its corner. Returns ``(N, OH, OW, Cout)`` int64.
    """
    x = np.asarray(x)
    weights = _dilated(np.asarray(weights, dtype=np.int64), dilation)
    co, kh, kw, cg = weights.shape
    bound = max(_max_abs(x), abs(int(pad_value)) if any(pads) else 0) * _row_bound(weights)
    dt = float_type_for(bound)
    if dt is None and bound >= _INT64_SAFE:
        raise OverflowError("integer convolution would overflow int64")
    xp = _padded(x, pads, pad_value, np.int64 if dt is None else dt)
    if dt is None:
        acc = _int64_conv(windows(xp, (kh, kw), stride), weights, group)
    elif group > 1 and cg == 1:
        oh = (xp.shape[1] - kh) // stride[0] + 1
        ow = (xp.shape[2] - kw) // stride[1] + 1
        acc = _depthwise(xp, weights, stride, oh, ow)
    else:
        cols = windows(xp, (kh, kw), stride)           # (N, OH, OW, kh, kw, C)
        n, oh, ow = cols.shape[:3]
        m = n * oh * ow
        if group == 1:
            acc = cols.reshape(m, kh * kw * cg) @ weights.reshape(co, -1).T.astype(dt)
        else:                                          # one GEMM per group, batched
            cog = co // group
            xs = cols.reshape(m, kh * kw, group, cg).transpose(2, 0, 1, 3).reshape(group, m, kh * kw * cg)
            ws = weights.reshape(group, cog, kh * kw * cg).transpose(0, 2, 1).astype(dt)
            acc = np.matmul(xs, ws).transpose(1, 0, 2)
        acc = acc.reshape(n, oh, ow, co)
    return acc.astype(np.int64) + np.asarray(bias, dtype=np.int64)
