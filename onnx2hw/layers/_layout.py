"""ONNX NCHW <-> IntegerGraph NHWC layout helpers."""
from __future__ import annotations

import numpy as np

__all__ = ["nhwc", "flatten_perm"]


def nhwc(shape) -> tuple[int, ...]:
    """Channels-last shape of an ONNX shape without batch: ``(C, H, W) -> (H, W, C)``, a 1-D
    signal ``(C, L) -> (1, L, C)`` (an ``H = 1`` image); others unchanged."""
    shape = tuple(int(d) for d in shape)
    if len(shape) == 2:
        return (1, shape[1], shape[0])
    return (shape[1], shape[2], shape[0]) if len(shape) == 3 else shape


def flatten_perm(onnx_shape) -> np.ndarray | None:
    """For an ONNX ``(C, H, W)`` tensor (or a 1-D signal ``(C, L)``, held as ``(1, L, C)``)
    flattened to ``C*H*W`` features: ``perm[i]`` is the NHWC row-major position of ONNX feature
    ``i``; ``None`` when the two orders agree (``H = W = 1`` or a tensor that is already a vector)."""
    shape = tuple(int(d) for d in onnx_shape)
    if len(shape) == 2:
        shape = (shape[0], 1, shape[1])
    if len(shape) != 3 or shape[1] * shape[2] == 1:
        return None
    c, h, w = shape
    ci, hi, wi = np.unravel_index(np.arange(c * h * w), (c, h, w))
    return ((hi * w + wi) * c + ci).astype(np.int64)
