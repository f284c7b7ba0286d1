"""Exact integer matmul and NHWC window helpers of the golden integer layers."""
from __future__ import annotations

import numpy as np

__all__ = ["exact_matmul", "pad_nhwc", "windows"]

_FLOAT_EXACT = 1 << 53


def exact_matmul(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """``x @ w.T`` for integer ``x`` (M, K) and ``w`` (N, K), exact, as int64.

    float64 BLAS is used when every partial sum is below 2**53 in magnitude
    (``sum |w| * max |x|`` bounds them), else NumPy's int64 matmul.
    """
    x = np.asarray(x, dtype=np.int64)
    w = np.asarray(w, dtype=np.int64)
    xmax = int(np.max(np.abs(x))) if x.size else 0
    wsum = int(np.max(np.sum(np.abs(w), axis=1))) if w.size else 0
    if xmax * wsum < _FLOAT_EXACT:
        return (x.astype(np.float64) @ w.T.astype(np.float64)).astype(np.int64)
    if xmax * wsum >= 1 << 63:
        raise OverflowError("integer matmul would overflow int64")
    return x @ w.T


def pad_nhwc(x: np.ndarray, pads, value: int) -> np.ndarray:
    t, l, b, r = (int(p) for p in pads)
    if not (t or l or b or r):
        return x
    return np.pad(x, ((0, 0), (t, b), (l, r), (0, 0)), constant_values=value)


def windows(x: np.ndarray, kernel, stride) -> np.ndarray:
    """``(N, OH, OW, kh, kw, C)`` view-copy of every window of a padded NHWC ``x``."""
    n, h, w, c = x.shape
    kh, kw = kernel
    sh, sw = stride
    oh, ow = (h - kh) // sh + 1, (w - kw) // sw + 1
    out = np.empty((n, oh, ow, kh, kw, c), dtype=x.dtype)
    for i in range(kh):
        for j in range(kw):
            out[:, :, :, i, j, :] = x[:, i:i + sh * (oh - 1) + 1:sh, j:j + sw * (ow - 1) + 1:sw, :]
    return out
