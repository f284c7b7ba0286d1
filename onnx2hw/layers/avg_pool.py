"""AvgPool, NHWC: ``acc = window sum + bias`` (``bias = -kernel_area * input zero point``; padding
adds ``pad_value``), then a :class:`Requant` whose ratio includes ``1 / kernel_area``.

ONNX forms: AveragePool / GlobalAveragePool / ReduceMean over the spatial axes on dequantized views (QDQ, QONNX, float for the
post-training quantizer), com.microsoft QLinearAveragePool / QLinearGlobalAveragePool.
GlobalAvgPool is an AvgPool whose kernel is the whole image. A 1-D pool on ``(N, C, L)`` is the
2-D one on an ``H = 1`` image. (The QONNX importer turns a pool
with a narrow output quantizer into a depthwise Conv with thresholds instead.) Hardware:
AvgPoolUnit or GlobalAvgPoolUnit window sum + a registered ``+ bias`` Cast + Requantize.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from .. import arith
from ..ir.errors import UnsupportedError
from ..ir.graph import Node
from ..rtl.cast import Cast
from ..rtl.cost import Cost
from ..rtl.pool import AvgPoolUnit, GlobalAvgPoolUnit
from ..rtl.stage import Block
from ._importer import Acc, Builder, QT, Target, need, node_error, pads_of, quantize_output, real_view
from ._windows import as_image, pad_nhwc, spatial_out, windows
from .base import LayerKind, Lowered, Pattern, act_blocks, check_act, check_window, window_fill, window_problem
from .types import Requant, elem_shape, window_out

__all__ = ["AvgPool", "KIND", "PATTERNS"]

MS = "com.microsoft"


@dataclass(frozen=True)
class AvgPool(LayerKind):
    """Window sum + ``bias`` (the input zero point correction), then ``act``; padding adds ``pad_value``."""

    kernel: tuple[int, int]
    stride: tuple[int, int]
    pads: tuple[int, int, int, int]
    act: Requant
    bias: int = 0
    pad_value: int = 0

    def __post_init__(self):
        super().__post_init__()
        for f in ("kernel", "stride", "pads"):
            object.__setattr__(self, f, tuple(int(v) for v in getattr(self, f)))
        object.__setattr__(self, "bias", int(self.bias))
        object.__setattr__(self, "pad_value", int(self.pad_value))

    def validate(self, ins):
        check_window(self, ins)
        check_act(self, self.act, ins[0].shape[-1], self.output)

    def reference(self, x):
        x = pad_nhwc(np.asarray(x, dtype=np.int64), self.pads, self.pad_value)
        acc = windows(x, self.kernel, self.stride).sum(axis=(3, 4)) + self.bias
        return self.act(acc)

    def hardware_problem(self, ins):
        return window_problem(self)

    def lower(self, ins, pe, simd, family):
        spec = ins[0]
        h, w, c = spec.shape
        es = elem_shape(spec.dtype)
        area = self.kernel[0] * self.kernel[1]
        if self.kernel == (h, w) and self.pads == (0, 0, 0, 0):
            params = dict(height=h, width=w, channels=c, elem_shape=es, simd=simd)
            window = Block(GlobalAvgPoolUnit, params, GlobalAvgPoolUnit.estimate(**params, family=family))
        else:
            params = dict(height=h, width=w, channels=c, kernel=self.kernel, stride=self.stride,
                          pads=self.pads, elem_shape=es, simd=simd, pad_value=self.pad_value)
            window = Block(AvgPoolUnit, params, AvgPoolUnit.estimate(**params, family=family))
        lo, hi = spec.dtype.lo * area + self.bias, spec.dtype.hi * area + self.bias
        acc_bits = arith.acc_bits(min(lo, 0), max(hi, 0))
        act, ob, osg = act_blocks(self.act, c, simd, acc_bits, self.output.dtype, family)
        return Lowered((window, _offset_block(acc_bits, self.bias), *act), window.cost.cycles, ob, osg,
                       fill=window_fill(self.kernel[0], self.pads[0], h))


def _offset_block(bits: int, offset: int) -> Block:
    """The registered lane-wise ``+ offset`` (rtl ``Cast``) into a signed accumulator."""
    lut = bits if offset else 0
    return Block(Cast, dict(bits=bits, signed=True, offset=offset),
                 Cost(1, 1 if offset else 0, lut, bits if offset else 0, 0, 0))


# ---- import ---------------------------------------------------------------------------------------

def accumulate(b: Builder, node: Node, x: QT, kernel, strides, pads) -> Acc:
    """The pending average pool of the dequantized image (or 1-D signal, an ``H = 1`` image) ``x``."""
    x = b.natural(x, node)
    _, (c, h, w) = as_image(node, x.onnx_shape)
    area = kernel[0] * kernel[1]
    oh = window_out(h, kernel[0], strides[0], pads[0], pads[2])
    ow = window_out(w, kernel[1], strides[1], pads[1], pads[3])
    return Acc("avgpool", emit, node, (x,), spatial_out(x.onnx_shape, c, oh, ow), np.full(c, x.scale / area),
               bias=np.full(c, -area * x.zp, np.int64), bias_real=np.zeros(c),
               params={"kernel": tuple(kernel), "stride": tuple(strides), "pads": tuple(pads), "out_hw": (oh, ow)})


def emit(b: Builder, v: Acc, t: Target) -> QT:
    bias, act = b.requant(v, t)
    x = v.inputs[0]
    spec = b.new_tensor(t.name, (*v.params["out_hw"], v.onnx_shape[0]), t.dtype)
    layer = AvgPool(v.node.name, (x.tensor,), spec, v.params["kernel"], v.params["stride"], v.params["pads"], act,
                    int(bias[0]), x.zp)
    return b.emit(layer, v.onnx_shape, t)


def geometry(node: Node, x: QT):
    """``(kernel, strides, pads)`` of an AveragePool node on ``x`` (a 1-D pool as the 2-D one on ``H = 1``)."""
    node, (_, h, w) = as_image(node, x.onnx_shape)
    kernel = tuple(node.attr("kernel_shape"))
    strides = tuple(node.attr("strides", (1, 1)))
    pads = pads_of(node, (h, w), kernel, strides)
    if any(pads) and not int(node.attr("count_include_pad", 0)):
        raise node_error(node, "padding with count_include_pad=0 divides by a varying count", UnsupportedError)
    if tuple(node.attr("dilations", (1, 1))) != (1, 1):
        raise node_error(node, "dilations are not supported", UnsupportedError)
    return kernel, strides, pads


def _global(b: Builder, node: Node, x: QT) -> Acc:
    _, (_, h, w) = as_image(node, x.onnx_shape)
    return accumulate(b, node, x, (h, w), (1, 1), (0, 0, 0, 0))


def _global_avgpool(b: Builder, node: Node):
    b.set(node, _global(b, node, need(node, b.get(node.inputs[0], node), QT, "input")))


def _reduce_mean(b: Builder, node: Node):
    """ReduceMean over the spatial axes (what torch's dynamo exporter writes for a global average
    pool): a GlobalAveragePool; with ``keepdims=0`` its output is the channel vector."""
    x = need(node, b.get(node.inputs[0], node), QT, "input")
    rank = len(x.onnx_shape) + 1
    if len(node.inputs) > 1 and node.inputs[1]:
        axes = [int(a) for a in np.asarray(b.const(node.inputs[1], node, "axes")).reshape(-1)]
    else:
        axes = list(node.attr("axes", []) or [])
    spatial = list(range(2, rank))
    if rank not in (3, 4) or sorted(a + rank if a < 0 else a for a in axes) != spatial:
        raise node_error(node, f"ReduceMean over axes {axes!r} of a {rank}-D tensor: only the mean over the spatial "
                         f"axes {spatial} (a global average pool) is supported", UnsupportedError)
    acc = _global(b, node, x)
    if not int(node.attr("keepdims", 1)):
        acc = replace(acc, onnx_shape=acc.onnx_shape[:1])
    b.set(node, acc)


def _avgpool(b: Builder, node: Node):
    x = need(node, b.get(node.inputs[0], node), QT, "input")
    b.set(node, accumulate(b, node, x, *geometry(node, x)))


def _channels_first(node: Node):
    if int(node.attr("channels_last", 0)):
        raise node_error(node, "channels_last=1 is not supported", UnsupportedError)


def _qlinear_avgpool(b: Builder, node: Node):
    _channels_first(node)
    x = real_view(b, node, 0, 1, 2)
    quantize_output(b, node, accumulate(b, node, x, *geometry(node, x)), 3, 4, x)


def _qlinear_global_avgpool(b: Builder, node: Node):
    _channels_first(node)
    x = real_view(b, node, 0, 1, 2)
    quantize_output(b, node, _global(b, node, x), 3, 4, x)


PATTERNS = (
    Pattern("", "AveragePool", "AvgPoolUnit + Requantize (1-D and 2-D)", _avgpool, ptq="layer"),
    Pattern("", "GlobalAveragePool", "GlobalAvgPoolUnit + Requantize (1-D and 2-D)", _global_avgpool, ptq="layer"),
    Pattern("", "ReduceMean", "GlobalAvgPoolUnit + Requantize (mean over the spatial axes only)", _reduce_mean,
            ptq="layer"),
    Pattern(MS, "QLinearAveragePool", "AvgPoolUnit + Requantize", _qlinear_avgpool, {"qoperator"}),
    Pattern(MS, "QLinearGlobalAveragePool", "GlobalAvgPoolUnit + Requantize", _qlinear_global_avgpool, {"qoperator"}),
)

#: the layer kind this module declares
KIND = AvgPool
