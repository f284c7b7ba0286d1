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

A 1-D convolution (ONNX ``(N, C, L)``) is imported as an ``H = 1`` image. A dilated
convolution's window reads taps ``dilation`` apart (the SlidingWindow's dilated tap pattern).

A transposed convolution (ONNX ConvTranspose, weight ``(Cin, Cout/group, kh, kw)``) is the
ordinary convolution, at stride 1, of its input with ``stride - 1`` input zero points inserted
between rows and between columns (``upsample``; a ZeroInsert block in front of the window),
padded by ``d*(k-1) - pad_begin`` at the start and ``d*(k-1) - pad_end + output_padding`` at
the end, with the weight flipped spatially and its channel axes swapped per group. Cost: the
matrix-vector unit also multiplies the inserted zeros, so its work is ``sh*sw`` times the
transposed convolution's own (a sub-pixel decomposition into ``sh*sw`` stride-1 convolutions
of the original input would avoid that).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..ir.errors import UnsupportedError
from ..ir.graph import Node
from ..rtl.depthwise import DepthwiseUnit
from ..rtl.stage import Block
from ..rtl.window import SlidingWindow
from ..rtl.zero_insert import ZeroInsert
from .builder import (Acc, Builder, QConst, QT, Target, as_tensor, need, node_error, opt, pads_of, qconst,
                        quantize_output, real_view, scalar, int_view, zp_input)
from ._exact import exact_conv, zero_inserted
from ._windows import as_image, spatial_out
from .base import (MUL_CHOICES, LayerKind, Linear, Lowered, Pattern, act_blocks, check_linear, divisors,
                   linear_mul, linear_mul_options, linear_problem, mvu_block, window_fill)
from .canonical import Rewrite
from .types import Act, IntType, acc_bits_for, accumulator_bounds, apply_act, elem_shape, readonly, window_out

__all__ = ["Conv", "KIND", "PATTERNS"]


@dataclass(frozen=True)
class Conv(LayerKind):
    """``weights`` ``(Cout, kh, kw, Cin/group)``; ``pads`` ``(t, l, b, r)``; ``dilation``: the
    distance of kernel taps; ``upsample`` ``(sh, sw)``: ``sh - 1`` rows and ``sw - 1`` columns of
    ``pad_value`` inserted between the input's rows and columns before padding (a transposed
    convolution)."""

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
    upsample: tuple[int, int] = (1, 1)

    def __post_init__(self):
        super().__post_init__()
        object.__setattr__(self, "weights", readonly(self.weights))
        object.__setattr__(self, "bias", readonly(self.bias))
        for f in ("stride", "pads", "dilation", "upsample"):
            object.__setattr__(self, f, tuple(int(v) for v in getattr(self, f)))
        for f in ("dilation", "upsample"):
            if len(getattr(self, f)) != 2 or min(getattr(self, f)) < 1:
                raise ValueError(f"Conv {self.name!r}: {f} must be two positive integers, not {getattr(self, f)!r}")

    @property
    def extent(self) -> tuple[int, int]:
        """Rows and columns one window spans: ``(k - 1) * dilation + 1``."""
        kh, kw = self.weights.shape[1:3]
        return (kh - 1) * self.dilation[0] + 1, (kw - 1) * self.dilation[1] + 1

    def window_input(self, ins) -> tuple[int, int, int]:
        """``(H, W, C)`` of the image the window slides over (the upsampled input)."""
        h, w, c = ins[0].shape
        return (h - 1) * self.upsample[0] + 1, (w - 1) * self.upsample[1] + 1, c

    def validate(self, ins):
        if len(ins) != 1 or len(ins[0].shape) != 3:
            raise self.error("needs one (H, W, C) input")
        h, w, c = self.window_input(ins)
        co, kh, kw, cg = self.weights.shape if self.weights.ndim == 4 else (0, 0, 0, 0)
        if self.weights.ndim != 4 or self.group < 1 or cg * self.group != c or co % self.group:
            raise self.error(f"weights {self.weights.shape!r} / group {self.group!r} do not match input channels {c}")
        if not ins[0].dtype.lo <= self.pad_value <= ins[0].dtype.hi:
            raise self.error(f"pad value {self.pad_value!r} outside input type {ins[0].dtype}")
        eh, ew = self.extent
        oh = window_out(h, eh, self.stride[0], self.pads[0], self.pads[2])
        ow = window_out(w, ew, self.stride[1], self.pads[1], self.pads[3])
        check_linear(self, ins[0], co, (oh, ow, co))

    def reference(self, x):
        """Insert ``pad_value`` rows/columns (``upsample``), pad with ``pad_value``, im2col of the
        dilated taps, exact matmul per group (float BLAS when every partial sum is exact in it:
        :func:`._exact.exact_conv`), ``act``."""
        x = zero_inserted(np.asarray(x), self.upsample, self.pad_value)
        acc = exact_conv(x, self.weights, self.bias, self.stride, self.pads, self.pad_value,
                         self.group, self.dilation)
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
        h, w, cin = self.window_input(ins)
        if self.depthwise:
            return max(h * w * cin // simd, oh * ow * kh * kw * cin // simd)
        return max(h * w * cin // simd, oh * ow * (kh * kw * cg // simd) * (cout // pe))

    def mul_options(self, ins):
        # depthwise: bipolar weights are 2-bit signed factors (bipolar inputs are not supported)
        return MUL_CHOICES if self.depthwise else linear_mul_options(self.in_type, self.w_type)

    def lower(self, ins, pe, simd, family, mul=None):
        h, w, c = self.window_input(ins)
        cout, kh, kw, cg = self.weights.shape
        oh, ow, _ = self.output.shape
        wparams = dict(height=h, width=w, channels=c, kernel=(kh, kw), stride=self.stride,
                       pads=self.pads, elem_shape=elem_shape(self.in_type), simd=simd,
                       pad_value=self.pad_value, depthwise=self.group > 1)
        if self.dilation != (1, 1):
            wparams["dilation"] = self.dilation
        window = Block(SlidingWindow, wparams, SlidingWindow.estimate(**wparams, family=family))
        front = ()
        if self.upsample != (1, 1):
            zparams = dict(height=ins[0].shape[0], width=ins[0].shape[1], channels=c, stride=self.upsample,
                           elem_shape=elem_shape(self.in_type), simd=simd, fill=self.pad_value)
            front = (Block(ZeroInsert, zparams, ZeroInsert.estimate(**zparams, family=family)),)
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
        cycles = max(window.cost.cycles, oh * ow * unit.cost.cycles, *(b.cost.cycles for b in front))
        return Lowered((*front, window, unit, *act), cycles, ob, osg, fill=window_fill(self.extent[0], self.pads[0], h),
                       macs=macs, multipliers=multipliers, mul=style)


# ---- import ---------------------------------------------------------------------------------------

def accumulate(b: Builder, node: Node, x: QT, w: QConst, bias) -> Acc:
    """The pending convolution of the dequantized view ``x`` (ONNX NCHW weights -> NHWC); a 1-D
    convolution (input ``(N, C, L)``, weight ``(M, C/group, k)``) is the 2-D one on ``H = 1``."""
    x, node, (c, h, wd), w = _image(b, node, x, w)
    co, cg, kh, kw = w.q.shape
    group = int(node.attr("group", 1))
    if group < 1 or cg * group != c or co % group:
        raise node_error(node, f"weight {w.q.shape!r} with group {group} does not match {c} input channels")
    dilation = _pair_attr(node, "dilations")
    strides = tuple(node.attr("strides", (1, 1)))
    extent = tuple((k - 1) * d + 1 for k, d in zip((kh, kw), dilation))
    pads = pads_of(node, (h, wd), extent, strides)
    return _conv_acc(b, node, x, w, bias, (h, wd), {"stride": strides, "pads": pads, "group": group,
                                                   "dilation": dilation, "upsample": (1, 1)})


def _image(b: Builder, node: Node, x: QT, w: QConst):
    """``(x, node, (C, H, W), w)`` of a window op on ``x``: a 1-D one lifted to ``H = 1``
    (:func:`._windows.as_image`, the weight given a unit kernel row)."""
    x = b.natural(x, node)
    if len(x.onnx_shape) == 2 and w.q.ndim == 3:
        w = replace(w, q=w.q[:, :, None, :])
    if len(x.onnx_shape) not in (2, 3) or w.q.ndim != 4:
        raise node_error(node, f"only 1-D and 2-D convolutions are supported (input {x.onnx_shape!r}, weight "
                         f"{w.q.shape!r})", UnsupportedError)
    one_d = len(x.onnx_shape) == 2
    node, chw = as_image(node, x.onnx_shape)
    if one_d:   # the attributes as_image does not lift
        attrs = dict(node.attrs)
        for key in ("output_padding", "output_shape"):
            if key in attrs:
                v = tuple(int(d) for d in attrs[key])
                if len(v) != 1:
                    raise node_error(node, f"{key} {list(v)!r} does not match the 1-D input", UnsupportedError)
                attrs[key] = (1 if key == "output_shape" else 0, v[0])
        node = replace(node, attrs=attrs)
    return x, node, chw, w


def _pair_attr(node: Node, key: str, default=1) -> tuple[int, int]:
    """A 2-D attribute of positive integers (``dilations``, ``strides``) with its default."""
    v = tuple(int(d) for d in node.attr(key, (default, default)))
    if len(v) != 2 or min(v) < 1:
        raise node_error(node, f"{key} {list(v)!r} must be two positive integers", UnsupportedError)
    return v


def _out_hw(hw, kernel, p) -> tuple[int, int]:
    """Output rows and columns of the convolution of geometry ``p`` on an ``hw`` input (no
    ``dilation``/``upsample`` entry: 1, as in the average pools the QONNX importer makes
    convolutions)."""
    up, dil, st, pads = p.get("upsample", (1, 1)), p.get("dilation", (1, 1)), p["stride"], p["pads"]
    return tuple(window_out((hw[i] - 1) * up[i] + 1, (kernel[i] - 1) * dil[i] + 1, st[i], pads[i], pads[i + 2])
                 for i in range(2))


def _conv_acc(b: Builder, node: Node, x: QT, w: QConst, bias, hw, geometry: dict) -> Acc:
    """The pending convolution of ``x`` by the ONNX-layout weight ``w`` ``(Cout, Cin/group, kh,
    kw)`` with ``geometry`` (stride, pads, group, dilation, upsample): weights NHWC, the input
    zero point folded into the bias (padding and inserted elements hold it, so it is exact)."""
    co = w.q.shape[0]
    wi, ws, wtype = b.fold_weights(node, w, 0, co)
    wi = wi.transpose(0, 2, 3, 1)
    scale = x.scale * ws
    ib, bias_real = b.bias_of(node, bias, scale, co)
    ib = ib - x.zp * wi.reshape(co, -1).sum(axis=1)
    oh, ow = _out_hw(hw, wi.shape[1:3], geometry)
    if oh < 1 or ow < 1:
        raise node_error(node, f"the output of {(oh, ow)!r} pixels is empty")
    return Acc("conv", emit, node, (x,), spatial_out(x.onnx_shape, co, oh, ow), scale, wi, wtype, ib, bias_real,
               geometry)


def transpose_accumulate(b: Builder, node: Node, x: QT, w: QConst, bias) -> Acc:
    """The pending transposed convolution of ``x`` (module docstring): the stride-1 convolution
    of the zero-inserted, padded input by the flipped weight with its channel axes swapped."""
    x, node, (c, h, wd), w = _image(b, node, x, w)
    cin, cog, kh, kw = w.q.shape
    group = int(node.attr("group", 1))
    if group < 1 or cin != c or cin % group:
        raise node_error(node, f"weight {w.q.shape!r} with group {group} does not match {c} input channels")
    strides, dilation = _pair_attr(node, "strides"), _pair_attr(node, "dilations")
    extent = tuple((k - 1) * d + 1 for k, d in zip((kh, kw), dilation))
    outpad = tuple(int(v) for v in node.attr("output_padding", (0, 0)))
    if len(outpad) != 2 or min(outpad) < 0:
        raise node_error(node, f"output_padding {list(outpad)!r} must be two non-negative integers")
    begin, end = _transpose_pads(node, (h, wd), extent, strides, outpad)
    # conv padding: extent - 1 - pad at the start, extent - 1 - pad + output_padding at the end
    pads = (extent[0] - 1 - begin[0], extent[1] - 1 - begin[1],
            extent[0] - 1 - end[0] + outpad[0], extent[1] - 1 - end[1] + outpad[1])
    if min(pads) < 0:
        raise node_error(node, f"pads {list(begin + end)!r} larger than the dilated kernel extent minus one "
                         f"{[e - 1 for e in extent]!r} (output cropped inside the input) are not supported",
                         UnsupportedError)
    wc = _conv_weight(node, w, group)
    return _conv_acc(b, node, x, wc, bias, (h, wd), {"stride": (1, 1), "pads": pads, "group": group,
                                                     "dilation": dilation, "upsample": strides})


def _transpose_pads(node: Node, hw, extent, strides, outpad):
    """``((top, left), (bottom, right))`` of a ConvTranspose: its ``pads``, or for ``auto_pad``
    SAME_* / an ``output_shape`` the total padding ``s*(in-1) + output_padding + extent - out``
    split evenly (an odd total, which the ONNX spec and onnxruntime split differently, is refused)."""
    auto = node.attr("auto_pad", "NOTSET")
    shape = node.attr("output_shape", None)
    if auto not in ("NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER"):
        raise node_error(node, f"auto_pad {auto!r} is not supported", UnsupportedError)
    if shape is None and auto in ("NOTSET", "VALID"):
        p = tuple(int(v) for v in node.attr("pads", (0, 0, 0, 0))) if auto == "NOTSET" else (0, 0, 0, 0)
        if len(p) != 4 or min(p) < 0:
            raise node_error(node, f"pads {list(p)!r} must be four non-negative integers")
        return p[:2], p[2:]
    out = tuple(int(v) for v in shape)[-2:] if shape is not None else tuple(n * s for n, s in zip(hw, strides))
    if len(out) != 2:
        raise node_error(node, f"output_shape {list(shape)!r} does not match the input", UnsupportedError)
    total = [s * (n - 1) + op + e - o for n, s, op, e, o in zip(hw, strides, outpad, extent, out)]
    if min(total) < 0 or any(t % 2 for t in total):
        why = "negative" if min(total) < 0 else "odd"
        raise node_error(node, f"output_shape/auto_pad giving an {why} total padding {total!r} is not supported",
                         UnsupportedError)
    return (total[0] // 2, total[1] // 2), (total[0] // 2, total[1] // 2)


def _conv_weight(node: Node, w: QConst, group: int) -> QConst:
    """The ordinary convolution's weight ``(Cout, Cin/group, kh, kw)`` of a ConvTranspose weight
    ``(Cin, Cout/group, kh, kw)``: per group the channel axes swapped and the kernel flipped;
    a per-channel scale/zero point (axis 1, ``Cout/group`` entries) repeated for every group."""
    cin, cog, kh, kw = w.q.shape
    q = w.q.reshape(group, cin // group, cog, kh, kw)[..., ::-1, ::-1].transpose(0, 2, 1, 3, 4)
    q = np.ascontiguousarray(q).reshape(group * cog, cin // group, kh, kw)
    per = [a.reshape(-1) for a in (w.scale, w.zp)]
    if any(a.size > 1 for a in per) and (w.axis != 1 or any(a.size not in (1, cog) for a in per)):
        raise node_error(node, f"weight scale/zero point of shape {w.scale.shape!r} (axis {w.axis}) is not per "
                         "tensor or per output channel (axis 1)", UnsupportedError)
    scale, zp = (np.tile(a, group) if a.size > 1 else a for a in per)
    return replace(w, q=q, scale=scale, zp=zp, axis=0)


def emit(b: Builder, v: Acc, t: Target, act=None) -> QT:
    """Emit the Conv layer of ``v`` with ``act`` (default: the Requant onto ``t``)."""
    bias, act = (v.bias, act) if act is not None else b.requant(v, t)
    x = v.inputs[0]
    in_type = b.specs[x.tensor].dtype
    p = v.params
    h, w, _ = b.specs[x.tensor].shape
    oh, ow = _out_hw((h, w), v.weights.shape[1:3], p)
    spec = b.new_tensor(t.name, (oh, ow, v.weights.shape[0]), t.dtype)
    layer = Conv(v.node.name, (x.tensor,), spec, v.weights, bias, p["stride"], p["pads"], x.zp, p["group"],
                 p.get("dilation", (1, 1)), in_type, v.w_type, acc_bits_for(v.weights, bias, in_type), act,
                 p.get("upsample", (1, 1)))
    return b.emit(layer, v.onnx_shape, t)


def _conv(b: Builder, node: Node):
    x = need(node, as_tensor(b, b.get(node.inputs[0], node)), QT, "input")
    w = need(node, b.get(node.inputs[1], node), QConst, "weight")
    b.set(node, accumulate(b, node, x, w, opt(b, node, 2)))


def _conv_transpose(b: Builder, node: Node):
    x = need(node, as_tensor(b, b.get(node.inputs[0], node)), QT, "input")
    w = need(node, b.get(node.inputs[1], node), QConst, "weight")
    b.set(node, transpose_accumulate(b, node, x, w, opt(b, node, 2)))


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


def _canonical_conv_transpose(node: Node, rw: Rewrite) -> Node:
    """Constant float32 weights ``(Cin, Cout/group, kh, kw)`` and a constant bias (zeros when the
    node has none)."""
    w = rw.const(node, 1, "weight").astype(np.float32)
    bias = rw.const(node, 2, "bias")
    cout = w.shape[1] * int(node.attr("group", 1))
    bias = np.zeros(cout, np.float32) if bias is None else bias.astype(np.float32)
    base = node.name or node.outputs[0]
    wn, bn = rw.add(f"{base}.weight", w), rw.add(f"{base}.bias", bias)
    return replace(node, inputs=(node.inputs[0], wn, bn))


_HW = "SlidingWindow + MatrixVectorUnit (grouped: one window per group; depthwise: DepthwiseUnit){}; 1-D and 2-D, dilated"
PATTERNS = (
    Pattern("", "Conv", _HW.format(" + Requantize"), _conv, ptq="layer", canonical=_canonical_conv,
            linear=Linear(stat="mean")),
    Pattern("", "ConvTranspose", "ZeroInsert (stride - 1 zero points between pixels) + SlidingWindow + "
            "MatrixVectorUnit (depthwise: DepthwiseUnit) + Requantize: the stride-1 convolution of the zero-inserted "
            "input; 1-D and 2-D", _conv_transpose, {"qdq", "qonnx"}, ptq="layer",
            canonical=_canonical_conv_transpose, linear=Linear(axis=1, stat="mean")),
    Pattern("", "QLinearConv", _HW.format(" + Requantize"), _qlinear_conv, {"qoperator"}),
    Pattern("", "ConvInteger", _HW.format(""), _conv_integer, {"qoperator"}),
)

#: the layer kind this module declares
KIND = Conv
