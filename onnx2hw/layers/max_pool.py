"""MaxPool, NHWC: the integer maximum over each window; padded positions never win.

ONNX forms: MaxPool and GlobalMaxPool on integer tensors (any flavour; for the post-training
quantizer they reuse their input's quantization, exact for integers). Hardware: the MaxPoolUnit
window block, channels folded into lanes. A 1-D pool on ``(N, C, L)`` is the 2-D one on an
``H = 1`` image. A dilated pool reads taps ``dilation`` apart (the window block's dilated tap
pattern); one whose window could hold only padding is refused.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..ir.errors import UnsupportedError
from ..ir.graph import Node
from ..rtl.pool import MaxPoolUnit
from ..rtl.stage import Block
from .builder import QT, Builder, node_error, pads_of
from ._windows import as_image, pad_nhwc, spatial_out, spatial_reduction, windows
from .base import LayerKind, Lowered, Pattern, check_window, window_fill, window_problem
from .canonical import Rewrite
from .types import elem_shape, window_out

__all__ = ["MaxPool", "KIND", "PATTERNS"]


@dataclass(frozen=True)
class MaxPool(LayerKind):
    """``kernel`` taps ``dilation`` apart, sliding by ``stride`` over the input padded by ``pads``
    ``(t, l, b, r)``."""

    kernel: tuple[int, int]
    stride: tuple[int, int]
    pads: tuple[int, int, int, int]
    dilation: tuple[int, int] = (1, 1)

    def __post_init__(self):
        super().__post_init__()
        for f in ("kernel", "stride", "pads", "dilation"):
            object.__setattr__(self, f, tuple(int(v) for v in getattr(self, f)))

    @property
    def extent(self) -> tuple[int, int]:
        """Rows and columns one window spans: ``(k - 1) * dilation + 1``."""
        return tuple((k - 1) * d + 1 for k, d in zip(self.kernel, self.dilation))

    def validate(self, ins):
        if self.dilation == (1, 1):
            check_window(self, ins)
        else:
            check_window(replace(self, kernel=self.extent, dilation=(1, 1)), ins)
        if self.output.dtype != ins[0].dtype:
            raise self.error(f"output type {self.output.dtype} != input type {ins[0].dtype}")

    def reference(self, x):
        x = pad_nhwc(np.asarray(x, dtype=np.int64), self.pads, np.iinfo(np.int64).min)
        taps = windows(x, self.extent, self.stride)[:, :, :, ::self.dilation[0], ::self.dilation[1]]
        return taps.max(axis=(3, 4))

    def hardware_problem(self, ins):
        return window_problem(self)

    def lower(self, ins, pe, simd, family, mul=None):
        h, w, c = ins[0].shape
        params = dict(height=h, width=w, channels=c, kernel=self.kernel, stride=self.stride,
                      pads=self.pads, elem_shape=elem_shape(ins[0].dtype), simd=simd)
        if self.dilation != (1, 1):
            params["dilation"] = self.dilation
        block = Block(MaxPoolUnit, params, MaxPoolUnit.estimate(**params, family=family))
        return Lowered((block,), block.cost.cycles, ins[0].dtype.bits, ins[0].dtype.signed,
                       fill=window_fill(self.extent[0], self.pads[0], h))


# ---- import ---------------------------------------------------------------------------------------

def _emit(b: Builder, node: Node, x: QT, kernel, strides, pads, dilation=(1, 1)) -> QT:
    _, (c, h, w) = as_image(node, x.onnx_shape)
    extent = [(k - 1) * d + 1 for k, d in zip(kernel, dilation)]
    oh = window_out(h, extent[0], strides[0], pads[0], pads[2])
    ow = window_out(w, extent[1], strides[1], pads[1], pads[3])
    spec = b.new_tensor(node.outputs[0], (oh, ow, c), x.dtype)
    b.layers.append(MaxPool(node.name, (x.tensor,), spec, kernel, strides, pads, dilation))
    return replace(x, tensor=spec.name, onnx_shape=spatial_out(x.onnx_shape, c, oh, ow))


def _image(b: Builder, node: Node) -> QT:
    x = b.get(node.inputs[0], node)
    if not isinstance(x, QT):
        raise node_error(node, f"{node.op_type} of a value that is not a quantized tensor", UnsupportedError)
    x = b.natural(x, node)
    as_image(node, x.onnx_shape)  # (N, C, L) or (N, C, H, W)
    return x


def _maxpool(b: Builder, node: Node):
    x = _image(b, node)
    node2d, (_, h, w) = as_image(node, x.onnx_shape)
    if int(node.attr("storage_order", 0)) != 0:
        raise node_error(node, "storage_order is not supported", UnsupportedError)
    if len(node.outputs) > 1 and node.outputs[1]:
        raise node_error(node, "the Indices output is not supported", UnsupportedError)
    kernel = tuple(node2d.attr("kernel_shape"))
    strides = tuple(node2d.attr("strides", (1, 1)))
    dilation = tuple(int(d) for d in node2d.attr("dilations", (1, 1)))
    if len(dilation) != 2 or min(dilation) < 1:
        raise node_error(node, f"dilations {list(dilation)!r} must be two positive integers", UnsupportedError)
    extent = tuple((k - 1) * d + 1 for k, d in zip(kernel, dilation))
    pads = pads_of(node2d, (h, w), extent, strides)
    if dilation != (1, 1) and _padding_only_window((h, w), kernel, strides, pads, dilation):
        raise node_error(node, f"dilations {list(dilation)!r} with pads {list(pads)!r} give a window of padding "
                         "only", UnsupportedError)
    b.set(node, _emit(b, node, x, kernel, strides, pads, dilation))


def _padding_only_window(hw, kernel, strides, pads, dilation) -> bool:
    """Whether some window's taps all fall in the padding (along rows or along columns)."""
    for i in range(2):
        n, k, s, d, p0 = hw[i], kernel[i], strides[i], dilation[i], pads[i]
        out = window_out(n, (k - 1) * d + 1, s, p0, pads[i + 2])
        taps = np.arange(out)[:, None] * s - p0 + np.arange(k)[None, :] * d
        if not np.all(((taps >= 0) & (taps < n)).any(axis=1)):
            return True
    return False


def _global_maxpool(b: Builder, node: Node):
    x = _image(b, node)
    _, (_, h, w) = as_image(node, x.onnx_shape)
    b.set(node, _emit(b, node, x, (h, w), (1, 1), (0, 0, 0, 0)))


def _reduce_max(b: Builder, node: Node):
    """ReduceMax over the spatial axes (what torch's dynamo exporter writes for a global max pool,
    ``amax``): a GlobalMaxPool; with ``keepdims=0`` its output is the channel vector."""
    x = _image(b, node)
    keep = spatial_reduction(node, b.reduce_axes(node), x.onnx_shape, "a global max pool")
    _, (_, h, w) = as_image(node, x.onnx_shape)
    y = _emit(b, node, x, (h, w), (1, 1), (0, 0, 0, 0))
    b.set(node, y if keep else replace(y, onnx_shape=y.onnx_shape[:1]))


def _canonical_maxpool(node: Node, rw: Rewrite) -> Node:
    if len(node.outputs) > 1 and node.outputs[1]:
        raise node_error(node, "the Indices output is not supported", UnsupportedError)
    return node


PATTERNS = (
    Pattern("", "MaxPool", "MaxPoolUnit (1-D and 2-D, dilated)", _maxpool, ptq="pass", canonical=_canonical_maxpool),
    Pattern("", "GlobalMaxPool", "MaxPoolUnit over the whole image or signal", _global_maxpool, ptq="pass"),
    Pattern("", "ReduceMax", "MaxPoolUnit over the whole image or signal (the maximum over the spatial axes only)",
            _reduce_max, ptq="pass", const_inputs=1),
)

#: the layer kind this module declares
KIND = MaxPool
