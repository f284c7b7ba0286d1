"""2-D convolution, NHWC: ``acc = sum over the window and input channels of w * x + bias``, then ``act``.

ONNX forms: Conv on dequantized views (QDQ, QONNX, float for the post-training quantizer),
QLinearConv, ConvInteger (+ Cast, rescale Mul, bias Add). Weights become ``(Cout, kh, kw,
Cin/group)``; padding uses ``pad_value`` (the input zero point, so the zero-point fold stays
exact at borders). Hardware, by ``group``:

* ``group == 1``: SlidingWindow + matrix-vector unit + Requantize or Thresholds;
* depthwise, ``group == Cin`` (``Cout = M * Cin``, channel multiplier ``M``; also the QONNX
  average pools imported as all-ones depthwise convolutions): SlidingWindow in depthwise order
  + DepthwiseUnit (one MAC per output channel lane, ``pe`` input channels in parallel, one
  kernel tap per cycle) + Requantize or Thresholds;
* grouped, ``1 < group < Cin``: SlidingWindow in depthwise order (``simd`` divides ``Cin/group``,
  so each group's window is ``kh*kw*Cin/group`` consecutive elements) + matrix-vector unit with
  ``groups = group`` (each group of ``Cout/group`` rows reads its own window vector; weight
  columns in the window's order) + Requantize or Thresholds.

A 1-D convolution (ONNX ``(N, C, L)``) is imported as an ``H = 1`` image.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..ir.errors import UnsupportedError
from ..ir.graph import Node
from ..rtl.depthwise import DepthwiseUnit
from ..rtl.stage import Block
from ..rtl.window import SlidingWindow
from .builder import (Acc, Builder, QConst, QT, Target, as_tensor, need, node_error, opt, pads_of, qconst,
                        quantize_output, real_view, scalar, int_view, zp_input)
from ._exact import exact_conv
from ._windows import as_image, spatial_out
from .base import (MUL_CHOICES, LayerKind, Linear, Lowered, Pattern, act_blocks, check_linear, divisors,
                   linear_mul, linear_mul_options, linear_problem, mvu_block, window_fill)
from .canonical import Rewrite
from .types import Act, IntType, acc_bits_for, accumulator_bounds, apply_act, elem_shape, readonly, window_out

__all__ = ["Conv", "KIND", "PATTERNS"]


@dataclass(frozen=True)
class Conv(LayerKind):
    """``weights`` ``(Cout, kh, kw, Cin/group)``; ``pads`` ``(t, l, b, r)``."""

    weights: np.ndarray
    bias: np.ndarray
    stride: tuple[int, int]
    pads: tuple[int, int, int, int]
    pad_value: int
    group: int
    dilation: tuple[int, int]
    in_type: IntType
    w_type: IntType
    acc_bits: int
    act: Act

    def __post_init__(self):
        super().__post_init__()
        object.__setattr__(self, "weights", readonly(self.weights))
        object.__setattr__(self, "bias", readonly(self.bias))
        for f in ("stride", "pads", "dilation"):
            object.__setattr__(self, f, tuple(int(v) for v in getattr(self, f)))
        if self.dilation != (1, 1):
            raise ValueError(f"Conv {self.name!r}: only dilation (1, 1) is supported, not {self.dilation!r}")

    def validate(self, ins):
        if len(ins) != 1 or len(ins[0].shape) != 3:
            raise self.error("needs one (H, W, C) input")
        h, w, c = ins[0].shape
        co, kh, kw, cg = self.weights.shape if self.weights.ndim == 4 else (0, 0, 0, 0)
        if self.weights.ndim != 4 or self.group < 1 or cg * self.group != c or co % self.group:
            raise self.error(f"weights {self.weights.shape!r} / group {self.group!r} do not match input channels {c}")
        if not ins[0].dtype.lo <= self.pad_value <= ins[0].dtype.hi:
            raise self.error(f"pad value {self.pad_value!r} outside input type {ins[0].dtype}")
        oh = window_out(h, kh, self.stride[0], self.pads[0], self.pads[2])
        ow = window_out(w, kw, self.stride[1], self.pads[1], self.pads[3])
        check_linear(self, ins[0], co, (oh, ow, co))

    def reference(self, x):
        """Pad with ``pad_value``, im2col, exact matmul per group (float BLAS when every partial
        sum is exact in it: :func:`._exact.exact_conv`), ``act``."""
        acc = exact_conv(np.asarray(x), self.weights, self.bias, self.stride, self.pads, self.pad_value,
                         self.group)
        return apply_act(acc, self.act)

    @property
    def depthwise(self) -> bool:
        """One input channel per group (``group == Cin``): built as a DepthwiseUnit."""
        return self.group > 1 and self.weights.shape[3] == 1

    @property
    def multiplier(self) -> int:
        """Output channels per group (the depthwise channel multiplier)."""
        return self.weights.shape[0] // self.group

    def window_weights(self, simd: int) -> np.ndarray:
        """``(Cout, kh*kw*Cin/group)``: each row in the order its input vector streams in:
        ``(kh, kw, c)`` for ``group == 1``; for a grouped convolution the depthwise window order
        ``(channel fold, kh, kw, lane)`` of ``simd`` lanes within the group."""
        co, kh, kw, cg = self.weights.shape
        if self.group == 1:
            return self.weights.reshape(co, -1)
        return self.weights.reshape(co, kh, kw, cg // simd, simd).transpose(0, 3, 1, 2, 4).reshape(co, -1)

    def hardware_problem(self, ins):
        if len(ins[0].shape) != 3:
            return "convolution input must be an image (H, W, C)"
        problem = linear_problem(self)
        if problem is None and self.depthwise and self.in_type.bipolar:
            return f"depthwise convolution (group={self.group}) of bipolar inputs is not supported"
        return problem

    def fold_options(self, ins):
        cout, kh, kw, cg = self.weights.shape
        cin = ins[0].shape[-1]
        if self.depthwise:  # pe * M output lanes from pe input channel lanes
            return [(d * self.multiplier, d) for d in divisors(cin)]
        pes = divisors(cout // self.group)    # grouped: lanes within a group's outputs and inputs
        return sorted(((p, s) for p in pes for s in divisors(cg)), key=lambda ps: (ps[0] * ps[1], ps))

    def cycles(self, ins, pe, simd):
        cout, kh, kw, cg = self.weights.shape
        oh, ow, _ = self.output.shape
        h, w, cin = ins[0].shape
        if self.depthwise:
            return max(h * w * cin // simd, oh * ow * kh * kw * cin // simd)
        return max(h * w * cin // simd, oh * ow * (kh * kw * cg // simd) * (cout // pe))

    def mul_options(self, ins):
        # depthwise: bipolar weights are 2-bit signed factors (bipolar inputs are not supported)
        return MUL_CHOICES if self.depthwise else linear_mul_options(self.in_type, self.w_type)

    def lower(self, ins, pe, simd, family, mul=None):
        h, w, c = ins[0].shape
        cout, kh, kw, cg = self.weights.shape
        oh, ow, _ = self.output.shape
        wparams = dict(height=h, width=w, channels=c, kernel=(kh, kw), stride=self.stride,
                       pads=self.pads, elem_shape=elem_shape(self.in_type), simd=simd,
                       pad_value=self.pad_value, depthwise=self.group > 1)
        window = Block(SlidingWindow, wparams, SlidingWindow.estimate(**wparams, family=family))
        macs = oh * ow * cout * kh * kw * cg
        if self.depthwise:
            if pe != simd * self.multiplier:
                raise ValueError(f"Conv {self.name!r}: a depthwise folding has pe = {self.multiplier} * simd, "
                                 f"not pe={pe!r}, simd={simd!r}")
            wb, ws = (2, True) if self.w_type.bipolar else (self.w_type.bits, self.w_type.signed)
            params = dict(weights=self.weights.reshape(cout, kh * kw), bias=self.bias,
                          in_bits=self.in_type.bits, in_signed=self.in_type.signed, weight_bits=wb,
                          weight_signed=ws, pe=simd, multiplier=self.multiplier, acc_bits=self.acc_bits)
            if mul is not None:
                params["mul_style"] = mul
            unit = Block(DepthwiseUnit, params, DepthwiseUnit.estimate(**params, family=family))
            multipliers = pe
            style = DepthwiseUnit.product_style(self.in_type.bits, wb, mul or "auto")
        else:
            unit = mvu_block(self.window_weights(simd), self.bias, self.in_type, self.w_type,
                             pe, simd, self.acc_bits, family, groups=self.group, mul=mul)
            multipliers = pe * simd
            style = linear_mul(self.in_type, self.w_type, mul)
        act, ob, osg = act_blocks(self.act, cout, pe, self.acc_bits, self.output.dtype, family,
                                  accumulator_bounds(self.weights, self.bias, self.in_type.lo, self.in_type.hi))
        cycles = max(window.cost.cycles, oh * ow * unit.cost.cycles)
        return Lowered((window, unit, *act), cycles, ob, osg, fill=window_fill(kh, self.pads[0], h),
                       macs=macs, multipliers=multipliers, mul=style)


# ---- import ---------------------------------------------------------------------------------------

def accumulate(b: Builder, node: Node, x: QT, w: QConst, bias) -> Acc:
    """The pending convolution of the dequantized view ``x`` (ONNX NCHW weights -> NHWC); a 1-D
    convolution (input ``(N, C, L)``, weight ``(M, C/group, k)``) is the 2-D one on ``H = 1``."""
    x = b.natural(x, node)
    if len(x.onnx_shape) == 2 and w.q.ndim == 3:
        w = replace(w, q=w.q[:, :, None, :])
    if len(x.onnx_shape) not in (2, 3) or w.q.ndim != 4:
        raise node_error(node, f"only 1-D and 2-D convolutions are supported (input {x.onnx_shape!r}, weight "
                         f"{w.q.shape!r})", UnsupportedError)
    node, (c, h, wd) = as_image(node, x.onnx_shape)
    co, cg, kh, kw = w.q.shape
    group = int(node.attr("group", 1))
    if group < 1 or cg * group != c or co % group:
        raise node_error(node, f"weight {w.q.shape!r} with group {group} does not match {c} input channels")
    if tuple(node.attr("dilations", (1, 1))) != (1, 1):
        raise node_error(node, f"dilations {node.attr('dilations')!r} are not supported", UnsupportedError)
    strides = tuple(node.attr("strides", (1, 1)))
    pads = pads_of(node, (h, wd), (kh, kw), strides)
    wi, ws, wtype = b.fold_weights(node, w, 0, co)
    wi = wi.transpose(0, 2, 3, 1)
    scale = x.scale * ws
    ib, bias_real = b.bias_of(node, bias, scale, co)
    ib = ib - x.zp * wi.reshape(co, -1).sum(axis=1)
    oh = window_out(h, kh, strides[0], pads[0], pads[2])
    ow = window_out(wd, kw, strides[1], pads[1], pads[3])
    return Acc("conv", emit, node, (x,), spatial_out(x.onnx_shape, co, oh, ow), scale, wi, wtype, ib, bias_real,
               {"stride": strides, "pads": pads, "group": group})


def emit(b: Builder, v: Acc, t: Target, act=None) -> QT:
    """Emit the Conv layer of ``v`` with ``act`` (default: the Requant onto ``t``)."""
    bias, act = (v.bias, act) if act is not None else b.requant(v, t)
    x = v.inputs[0]
    in_type = b.specs[x.tensor].dtype
    p = v.params
    h, w, _ = b.specs[x.tensor].shape
    kh, kw = v.weights.shape[1:3]
    oh = window_out(h, kh, p["stride"][0], p["pads"][0], p["pads"][2])
    ow = window_out(w, kw, p["stride"][1], p["pads"][1], p["pads"][3])
    spec = b.new_tensor(t.name, (oh, ow, v.weights.shape[0]), t.dtype)
    layer = Conv(v.node.name, (x.tensor,), spec, v.weights, bias, p["stride"], p["pads"], x.zp, p["group"], (1, 1),
                 in_type, v.w_type, acc_bits_for(v.weights, bias, in_type), act)
    return b.emit(layer, v.onnx_shape, t)


def _conv(b: Builder, node: Node):
    x = need(node, as_tensor(b, b.get(node.inputs[0], node)), QT, "input")
    w = need(node, b.get(node.inputs[1], node), QConst, "weight")
    b.set(node, accumulate(b, node, x, w, opt(b, node, 2)))


def _qlinear_conv(b: Builder, node: Node):
    x = real_view(b, node, 0, 1, 2)
    ws = scalar(b, node, 4, "weight scale")
    w = qconst(b, node, node.inputs[3], ws, zp_input(b, node, 5), 0)
    bias = None
    if len(node.inputs) > 8 and node.inputs[8]:
        bias = qconst(b, node, node.inputs[8], x.scale * ws.reshape(-1), None, 0)
    quantize_output(b, node, accumulate(b, node, x, w, bias), 6, 7, x)


def _conv_integer(b: Builder, node: Node):
    x = int_view(b, node, 2)
    w = qconst(b, node, node.inputs[1], np.ones(1), zp_input(b, node, 3), 0)
    b.set(node, accumulate(b, node, x, w, None))


def _canonical_conv(node: Node, rw: Rewrite) -> Node:
    """Constant float32 weights and a constant bias (zeros when the node has none)."""
    w = rw.const(node, 1, "weight").astype(np.float32)
    bias = rw.const(node, 2, "bias")
    bias = np.zeros(w.shape[0], np.float32) if bias is None else bias.astype(np.float32)
    base = node.name or node.outputs[0]
    wn, bn = rw.add(f"{base}.weight", w), rw.add(f"{base}.bias", bias)
    return replace(node, inputs=(node.inputs[0], wn, bn))


_HW = "SlidingWindow + MatrixVectorUnit (grouped: one window per group; depthwise: DepthwiseUnit){}; 1-D and 2-D"
PATTERNS = (
    Pattern("", "Conv", _HW.format(" + Requantize"), _conv, ptq="layer", canonical=_canonical_conv,
            linear=Linear(stat="mean")),
    Pattern("", "QLinearConv", _HW.format(" + Requantize"), _qlinear_conv, {"qoperator"}),
    Pattern("", "ConvInteger", _HW.format(""), _conv_integer, {"qoperator"}),
)

#: the layer kind this module declares
KIND = Conv
