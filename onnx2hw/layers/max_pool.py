"""MaxPool, NHWC: the integer maximum over each window; padded positions never win.

ONNX forms: MaxPool and GlobalMaxPool on integer tensors (any flavour; for the post-training
quantizer they reuse their input's quantization, exact for integers). Hardware: the MaxPoolUnit
window block, channels folded into lanes. A 1-D pool on ``(N, C, L)`` is the 2-D one on an
``H = 1`` image.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..ir.errors import UnsupportedError
from ..ir.graph import Node
from ..rtl.pool import MaxPoolUnit
from ..rtl.stage import Block
from .builder import QT, Builder, node_error, pads_of
from ._windows import as_image, pad_nhwc, spatial_out, windows
from .base import LayerKind, Lowered, Pattern, check_window, window_fill, window_problem
from .canonical import Rewrite
from .types import elem_shape, window_out

__all__ = ["MaxPool", "KIND", "PATTERNS"]


@dataclass(frozen=True)
class MaxPool(LayerKind):
    kernel: tuple[int, int]
    stride: tuple[int, int]
    pads: tuple[int, int, int, int]

    def __post_init__(self):
        super().__post_init__()
        for f in ("kernel", "stride", "pads"):
            object.__setattr__(self, f, tuple(int(v) for v in getattr(self, f)))

    def validate(self, ins):
        check_window(self, ins)
        if self.output.dtype != ins[0].dtype:
            raise self.error(f"output type {self.output.dtype} != input type {ins[0].dtype}")

    def reference(self, x):
        x = pad_nhwc(np.asarray(x, dtype=np.int64), self.pads, np.iinfo(np.int64).min)
        return windows(x, self.kernel, self.stride).max(axis=(3, 4))

    def hardware_problem(self, ins):
        return window_problem(self)

    def lower(self, ins, pe, simd, family, mul=None):
        h, w, c = ins[0].shape
        params = dict(height=h, width=w, channels=c, kernel=self.kernel, stride=self.stride,
                      pads=self.pads, elem_shape=elem_shape(ins[0].dtype), simd=simd)
        block = Block(MaxPoolUnit, params, MaxPoolUnit.estimate(**params, family=family))
        return Lowered((block,), block.cost.cycles, ins[0].dtype.bits, ins[0].dtype.signed,
                       fill=window_fill(self.kernel[0], self.pads[0], h))


# ---- import ---------------------------------------------------------------------------------------

def _emit(b: Builder, node: Node, x: QT, kernel, strides, pads) -> QT:
    _, (c, h, w) = as_image(node, x.onnx_shape)
    oh = window_out(h, kernel[0], strides[0], pads[0], pads[2])
    ow = window_out(w, kernel[1], strides[1], pads[1], pads[3])
    spec = b.new_tensor(node.outputs[0], (oh, ow, c), x.dtype)
    b.layers.append(MaxPool(node.name, (x.tensor,), spec, kernel, strides, pads))
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
    if tuple(node2d.attr("dilations", (1, 1))) != (1, 1) or int(node.attr("storage_order", 0)) != 0:
        raise node_error(node, "dilations / storage_order are not supported", UnsupportedError)
    if len(node.outputs) > 1 and node.outputs[1]:
        raise node_error(node, "the Indices output is not supported", UnsupportedError)
    kernel = tuple(node2d.attr("kernel_shape"))
    strides = tuple(node2d.attr("strides", (1, 1)))
    pads = pads_of(node2d, (h, w), kernel, strides)
    b.set(node, _emit(b, node, x, kernel, strides, pads))


def _global_maxpool(b: Builder, node: Node):
    x = _image(b, node)
    _, (_, h, w) = as_image(node, x.onnx_shape)
    b.set(node, _emit(b, node, x, (h, w), (1, 1), (0, 0, 0, 0)))


def _canonical_maxpool(node: Node, rw: Rewrite) -> Node:
    if len(node.outputs) > 1 and node.outputs[1]:
        raise node_error(node, "the Indices output is not supported", UnsupportedError)
    return node


PATTERNS = (
    Pattern("", "MaxPool", "MaxPoolUnit (1-D and 2-D)", _maxpool, ptq="pass", canonical=_canonical_maxpool),
    Pattern("", "GlobalMaxPool", "MaxPoolUnit over the whole image or signal", _global_maxpool, ptq="pass"),
)

#: the layer kind this module declares
KIND = MaxPool
