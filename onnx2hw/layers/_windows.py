"""Exact integer matmul and NHWC window helpers of the golden integer layers; the 1-D window ops
(Conv, MaxPool, AveragePool on ``(N, C, L)``) seen as the 2-D ops on ``H = 1`` images."""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..ir.errors import UnsupportedError
from ..ir.graph import Node
from .builder import node_error

__all__ = ["pad_nhwc", "windows", "as_image", "spatial_out", "ceil_end_pad", "axis_counts", "same_begin",
           "spatial_reduction"]

_LIFT = {"kernel_shape": 1, "strides": 1, "dilations": 1}


def spatial_reduction(node: Node, axes, onnx_shape, what: str) -> bool:
    """``keepdims`` of a Reduce* ``node`` (``axes`` its constant axes) that reduces exactly the
    spatial axes of a tensor of ONNX shape ``onnx_shape`` (no batch): a global pool (``what``);
    any other reduction is refused in one line."""
    rank = len(onnx_shape) + 1
    spatial = list(range(2, rank))
    if rank not in (3, 4) or sorted(int(a) + rank if int(a) < 0 else int(a) for a in axes) != spatial:
        raise node_error(node, f"{node.op_type} over axes {list(axes)!r} of a {rank}-D tensor: only the reduction "
                         f"over the spatial axes {spatial} ({what}) is supported", UnsupportedError)
    return bool(int(node.attr("keepdims", 1)))


def as_image(node: Node, onnx_shape) -> tuple[Node, tuple[int, int, int]]:
    """``(node, (C, H, W))`` of a window op on an input of ONNX shape ``onnx_shape`` (no batch).

    A 1-D input ``(C, L)`` is the image ``(C, 1, L)``: the node comes back with its 1-D
    ``kernel_shape``/``strides``/``dilations`` lifted to ``(1, k)`` and ``pads`` ``(b, e)`` to
    ``(0, b, 0, e)`` (``auto_pad`` then pads nothing along the unit axis), so the 2-D handlers
    apply unchanged. A 2-D input ``(C, H, W)`` comes back as it is.
    """
    shape = tuple(int(d) for d in onnx_shape)
    if len(shape) == 3:
        return node, shape
    if len(shape) != 2:
        raise node_error(node, f"input {shape!r} must be (N, C, L) or (N, C, H, W)", UnsupportedError)
    attrs = dict(node.attrs)
    for key in _LIFT:
        if key in attrs:
            v = tuple(int(d) for d in attrs[key])
            if len(v) != 1:
                raise node_error(node, f"{key} {list(v)!r} does not match the 1-D input {shape!r}", UnsupportedError)
            attrs[key] = (1, v[0])
    if "pads" in attrs:
        p = tuple(int(d) for d in attrs["pads"])
        if len(p) != 2:
            raise node_error(node, f"pads {list(p)!r} do not match the 1-D input {shape!r}", UnsupportedError)
        attrs["pads"] = (0, p[0], 0, p[1])
    return replace(node, attrs=attrs), (shape[0], 1, shape[1])


def spatial_out(onnx_shape, channels: int, oh: int, ow: int) -> tuple[int, ...]:
    """The ONNX output shape (no batch) of a window op on ``onnx_shape``: ``(C, OH, OW)``, or
    ``(C, OW)`` for a 1-D input."""
    return (channels, ow) if len(onnx_shape) == 2 else (channels, oh, ow)


def ceil_end_pad(n: int, k: int, s: int, begin: int, end: int) -> int | None:
    """The end padding with which the floor-mode window count on an axis of ``n`` (padded by
    ``begin``/``end``) equals ONNX's ceil-mode count, in which a last window may not start in the
    end padding; ``None`` if no padding does (only when ``end >= k``)."""
    o = -(-(n + begin + end - k) // s) + 1
    if (o - 1) * s >= n + begin:
        o -= 1
    pad = max(end, (o - 1) * s + k - n - begin)
    return pad if (n + begin + pad - k) // s + 1 == o else None


def same_begin(auto: str, n: int, k: int, s: int) -> int:
    """The start padding of ``auto_pad`` ``SAME_UPPER``/``SAME_LOWER`` on an axis of ``n`` as
    onnxruntime computes it: the total ``(ceil(n / s) - 1) * s + k - n`` halved towards zero (the
    odd one at the end for UPPER, at the start for LOWER). A total below zero (a stride beyond the
    kernel) pads nothing unless this is negative: then onnxruntime's windows start inside the
    input (its 1-D pools of opset 19; other versions refuse negative padding)."""
    total = (-(-n // s) - 1) * s + k - n
    return int(total / 2) if auto == "SAME_UPPER" else int((total + 1) / 2)


def axis_counts(n: int, k: int, s: int, begin: int, end: int, out: int, include_pad: bool) -> tuple[int, ...]:
    """Per window along an axis of ``n`` padded by ``begin``/``end`` (the declared padding, not a
    ceil-mode extension): the positions ONNX's AveragePool divides by, those inside the padded
    axis (``include_pad``, ``count_include_pad=1``) or inside the input."""
    lo, hi = (-begin, n + end) if include_pad else (0, n)
    return tuple(min(i * s - begin + k, hi) - max(i * s - begin, lo) for i in range(out))


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
