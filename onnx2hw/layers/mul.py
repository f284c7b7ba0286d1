"""Elementwise Mul, requantized onto the output grid with one rounding (:func:`onnx2hw.arith.requantize`:
round half up, or half to even where the multiplier is exact, ``layers._scale.ties_for``), in two forms:

* a quantized tensor times a constant (a scalar or one value per channel: a scale layer)::

    y = clamp(zero_point + (((x - in_zero) * M[c] + 2**(s[c]-1)) >> s[c]), lo, hi)

  ``M[c] / 2**s[c]`` is ``constant[c] * input scale / output scale`` (a negative constant gives a
  negative multiplier, a zero constant the output zero point);
* the product of two quantized tensors (squeeze-and-excitation gating, SiLU ``x * sigmoid(x)``,
  ``x * hardsigmoid(x)``)::

    y = clamp(zero_point + ((((a - in_zero) * (b - other_zero)) * M + 2**(s-1)) >> s), lo, hi)

  ``M / 2**s`` is ``scale_a * scale_b / output scale`` (times a constant factor folded after
  it). ``a`` has the output's shape; ``b`` has it too (the operands pair element by element), or
  is one value per channel of each image (the gate ``(N, C, 1, 1)``, broadcast over the pixels),
  one value per pixel (the spatial gate ``(N, 1, H, W)`` or ``(N, 1, L)``, broadcast over the
  channels), or one value per image.

``M`` has 31 bits of precision (:func:`~onnx2hw.layers._scale.ratio_to_multiplier_shift`).
ONNX forms: Mul of a dequantized tensor and a constant (float or quantized) or of two dequantized
tensors, followed by a quantizer (QDQ, QONNX; the post-training quantizer gives it its own output
grid), com.microsoft QLinearMul (QOperator). Bipolar operands are refused.

A Mul by a positive constant that directly follows a Gemm/MatMul/Conv/average pool (before its
quantizer) is folded into that layer's requantization scale instead (no layer of its own), a Mul
by a constant right after a product into the product's multiplier, and a Mul of a model input by
a scalar into the host-side input quantizer. Hardware: by a constant, a registered ``- in_zero``
(Cast) and a Requantize block; a product, a ProductUnit (the exact product, in a DSP or in LUTs;
a channel gate is loaded per image before the other operand streams through, a pixel gate streams
beside it, one value per pixel) and a Requantize block.
``x * f(x)`` where ``f(x)`` is a table (Lookup layer) of an ``x`` of at most 8 bits (SiLU, the
HardSwish an exporter writes as ``x * HardSigmoid(x)``) is that table composed with the product,
entry by entry this layer's own integer result: one Lookup layer (named after the Mul), the
table of ``f`` dropped when nothing else reads it. The pipeline forks a tensor read by both
operands and each fork branch holds its whole tensor, so the branch carrying ``x`` to a gate
computed from all of ``x`` never stalls the branch computing the gate.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from .. import arith
from ..ir.errors import UnsupportedError
from ..ir.graph import Node
from ..rtl.cast import Cast
from ..rtl.cost import Cost
from ..rtl.lookup import MAX_IN_BITS
from ..rtl.product import ProductUnit, product_range
from ..rtl.requant import Requantize
from ..rtl.stage import Block
from .builder import (Acc, Builder, Const, QConst, QT, Target, need, node_error, qconst, quantize_output,
                      real_view, scalar, scale_input, zp_input)
from ._layout import nhwc
from ._scale import ratio_to_multiplier_shift, ties_for
from .base import MUL_CHOICES, LayerKind, Lowered, Pattern, act_blocks, check_act, divisors, ties_param
from .canonical import Rewrite
from .types import Requant, elem_shape

MS = "com.microsoft"

__all__ = ["Mul", "KIND", "PATTERNS"]


@dataclass(frozen=True)
class Mul(LayerKind):
    """One input: ``act(x - in_zero)``, ``act`` a :class:`Requant` with one (signed) multiplier
    per channel or per tensor. Two inputs (``other_zero`` given): ``act((a - in_zero) * (b -
    other_zero))``, ``b`` of ``a``'s shape, or one value per channel, per pixel or per image of
    ``a`` (module docstring)."""

    in_zero: int
    act: Requant
    other_zero: int | None = None

    def __post_init__(self):
        super().__post_init__()
        object.__setattr__(self, "in_zero", int(self.in_zero))
        if self.other_zero is not None:
            object.__setattr__(self, "other_zero", int(self.other_zero))
        if not isinstance(self.act, Requant):
            raise ValueError(f"Mul {self.name!r}: act must be a Requant, not {type(self.act).__name__}")

    @property
    def product(self) -> bool:
        """The product of two tensors (else a tensor by a constant)."""
        return self.other_zero is not None

    def gate(self, ins) -> int | None:
        """A product's per-image broadcast operand: ``None`` (``b`` has ``a``'s shape, or is a
        pixel gate), or its values per image (the output's channel count, or 1)."""
        if ins[1].shape == ins[0].shape or self.pixel_gate(ins):
            return None
        return int(np.prod(ins[1].shape))

    @staticmethod
    def pixel_gate(ins) -> bool:
        """``b`` is one value per pixel of ``a`` (``(H, W, 1)`` of an ``(H, W, C)``, more than
        one pixel and one channel)."""
        a, b = ins[0].shape, ins[1].shape
        return len(a) == len(b) and b[-1] == 1 < a[-1] and b[:-1] == a[:-1] and int(np.prod(b)) > 1

    def validate(self, ins):
        out = self.output.shape
        if len(ins) != 1 + self.product or ins[0].shape != out:
            raise self.error(f"needs {1 + self.product} input(s), the first of the output's shape {out!r}")
        if self.product:
            g = self.gate(ins)
            if g is not None and (g not in (1, out[-1]) or ins[1].shape[-1] != g):
                raise self.error(f"input {ins[1].shape!r} is neither of the output's shape {out!r} nor one value per "
                                 f"channel, per pixel or per image")
        check_act(self, self.act, out[-1], self.output)

    def reference(self, x, y=None):
        a = np.asarray(x, np.int64) - self.in_zero
        if not self.product:
            return self.act(a)
        b = np.asarray(y, np.int64) - self.other_zero
        if b.shape[1:-1] != a.shape[1:-1]:   # one value per channel (or per image) of each image
            b = b.reshape((b.shape[0],) + (1,) * (a.ndim - 2) + (-1,))
        return self.act(a * b)

    def hardware_problem(self, ins):
        if any(t.dtype.bipolar for t in ins) or self.output.dtype.bipolar:
            return "bipolar Mul is not supported"
        return None

    def fold_options(self, ins):
        """Channel lanes; a gate of one value per image streams one lane (its one element)."""
        if self.product and self.gate(ins) == 1 and self.output.shape[-1] > 1:
            return [(1, 1)]
        return super().fold_options(ins)

    def cycles(self, ins, pe, simd):
        n = int(np.prod(self.output.shape))
        g = self.gate(ins) if self.product else None
        return (n + (g or 0)) // simd   # a pixel gate streams beside ``a``

    def mul_options(self, ins):
        return MUL_CHOICES if self.product else ()

    def _acc_bits(self, ins) -> int:
        t = ins[0].dtype
        return arith.acc_bits(min(t.lo - self.in_zero, 0), max(t.hi - self.in_zero, 0))

    def lower(self, ins, pe, simd, family, mul=None):
        if self.product:
            return self._lower_product(ins, simd, family, mul)
        c = self.output.shape[-1]
        bits = self._acc_bits(ins)
        a = self.act
        m = a.multiplier if a.multiplier.shape[0] > 1 else int(a.multiplier[0])
        s = a.shift if a.shift.shape[0] > 1 else int(a.shift[0])
        params = dict(channels=c, pe=simd, acc_bits=bits, multiplier=m, shift=s, zero_point=a.zero_point,
                      out_bits=self.output.dtype.bits, out_signed=self.output.dtype.signed, lo=a.lo, hi=a.hi,
                      **ties_param(a))
        blocks = [Block(Requantize, params, Requantize.estimate(**params, family=family))]
        if self.in_zero:
            blocks.insert(0, Block(Cast, dict(bits=bits, signed=True, offset=-self.in_zero,
                                              in_shape=elem_shape(ins[0].dtype), lanes=simd),
                                   Cost(1, 1, bits * simd, bits * simd, 0, 0)))
        cycles = int(np.prod(ins[0].shape)) // simd
        return Lowered(tuple(blocks), cycles, self.output.dtype.bits, self.output.dtype.signed, fill=0.0)

    def _lower_product(self, ins, simd, family, mul):
        """A ProductUnit (the exact product; a gate loaded per image) and a Requantize narrowed to
        the product's exact range."""
        c = self.output.shape[-1]
        n = int(np.prod(self.output.shape))
        g = self.gate(ins)
        a_shape, b_shape = elem_shape(ins[0].dtype), elem_shape(ins[1].dtype)
        params = dict(a_shape=a_shape, b_shape=b_shape, lanes=simd, a_zero=self.in_zero, b_zero=self.other_zero,
                      mul_style=mul or "auto")
        pixel = self.pixel_gate(ins)
        if pixel:
            params.update(pixel_channels=c)
        elif g is not None:
            params.update(gate_channels=g, pixels=n // g)
        block = Block(ProductUnit, params, ProductUnit.estimate(**params, family=family))
        lo, hi = product_range(a_shape, self.in_zero, b_shape, self.other_zero)
        act, out_bits, out_signed = act_blocks(self.act, c, simd, arith.acc_bits(lo, hi), self.output.dtype,
                                               family, bounds=(lo, hi))
        return Lowered((block, *act), self.cycles(ins, simd, simd), out_bits, out_signed, fill=0.0, macs=n,
                       multipliers=simd, mul=ProductUnit.style(a_shape, b_shape, params["mul_style"]),
                       in_lanes=(simd, 1) if pixel else None)


# ---- import ---------------------------------------------------------------------------------------

def _channel_values(node: Node, v: np.ndarray, x_shape: tuple[int, ...]) -> np.ndarray:
    """A constant broadcast against an ONNX tensor of shape ``(N, *x_shape)``: its values per
    channel ``(C,)``; refuses anything that varies along other axes."""
    n = x_shape[0]
    full = (1,) + tuple(x_shape)
    try:
        b = np.broadcast_to(v, np.broadcast_shapes(v.shape, full))
    except ValueError:
        raise node_error(node, f"constant of shape {v.shape!r} does not broadcast to {full!r}",
                         UnsupportedError) from None
    if b.shape != full:
        raise node_error(node, f"constant of shape {v.shape!r} broadcasts the tensor to {b.shape!r}",
                         UnsupportedError)
    per = np.moveaxis(b.reshape(full), 1, -1).reshape(-1, n)
    if not np.all(per == per[:1]):
        raise node_error(node, "Mul by a constant that varies within a channel (only a scalar or one value per "
                         "channel is supported)", UnsupportedError)
    return per[0].astype(np.float64)


def _fold(node: Node, x: Acc, v: np.ndarray) -> Acc:
    """A constant positive rescale of a pending dense/conv/average pool: its real scale and bias."""
    n = x.onnx_shape[0]
    v = v.reshape(-1)
    if v.size not in (1, n) or np.any(v <= 0) or not np.all(np.isfinite(v)):
        raise node_error(node, f"rescale {v!r} of a layer output must be positive finite, per tensor or per output "
                         f"channel", UnsupportedError)
    v = np.broadcast_to(v, (n,))
    return replace(x, scale=x.scale * v, bias_real=x.bias_real * v)


def _mul(b: Builder, node: Node):
    if scale_input(b, node, "mul"):
        return
    x, y = b.get(node.inputs[0], node), b.get(node.inputs[1], node)
    if not isinstance(x, (Const, QConst)) and not isinstance(y, (Const, QConst)):
        need(node, x, QT, "input A"), need(node, y, QT, "input B")
        b.set(node, _product(b, node, x, y))
        return
    if isinstance(y, (Acc, QT)):
        x, y = y, x
    if not isinstance(y, (Const, QConst)):
        raise node_error(node, "Mul of a constant needs a quantized tensor or layer as its other input",
                         UnsupportedError)
    b.set(node, _by_constant(b, node, x, np.asarray(y.value if isinstance(y, Const) else y.real(), np.float64)))


def _by_constant(b: Builder, node: Node, x, v: np.ndarray) -> Acc:
    """``x`` times the constant ``v``: folded into the pending layer ``x`` (a positive rescale of a
    dense/conv/average pool, any factor of a product), else a scale layer of its own."""
    if not np.all(np.isfinite(v)):
        raise node_error(node, "Mul by a constant that is not finite", UnsupportedError)
    if isinstance(x, Acc) and x.kind in ("dense", "conv", "avgpool", "avgpool_counts"):
        return _fold(node, x, v)
    if isinstance(x, Acc) and x.kind == "mul" and len(x.inputs) == 2 and x.lo_real == -np.inf and x.hi_real == np.inf \
            and (v.size == 1 or not x.inputs[0].hwc):   # (a channels-last view's channels are not its axis 0)
        return replace(x, scale=x.scale * _channel_values(node, v, x.onnx_shape))
    if not (isinstance(x, QT) and x.real):
        raise node_error(node, "Mul must scale a dequantized tensor or directly follow a quantized layer",
                         UnsupportedError)
    x = b.natural(x, node)
    if b.specs[x.tensor].dtype.bipolar:
        raise node_error(node, "Mul of a bipolar tensor is not supported", UnsupportedError)
    c = _channel_values(node, v, x.onnx_shape)
    return Acc("mul", emit, node, (x,), x.onnx_shape, scale=x.scale * c)


def _product(b: Builder, node: Node, x: QT, y: QT) -> Acc:
    """The product of two dequantized tensors: ``(full, other)`` with ``full`` of the result's
    shape and ``other`` of it too, or one value per channel, per pixel or per image (module
    docstring)."""
    for t in (x, y):
        if b.specs[t.tensor].dtype.bipolar:
            raise node_error(node, f"Mul of the bipolar tensor {t.tensor!r} is not supported", UnsupportedError)
    if x.onnx_shape == y.onnx_shape:
        if (x.perm is None) != (y.perm is None) or (x.perm is not None and not np.array_equal(x.perm, y.perm)) \
                or x.hwc != y.hwc:
            raise node_error(node, "Mul of tensors in different layouts", UnsupportedError)
        full, other = x, y
    else:
        try:
            shape = np.broadcast_shapes((1,) + x.onnx_shape, (1,) + y.onnx_shape)[1:]
        except ValueError:
            raise node_error(node, f"Mul of shapes {x.onnx_shape!r} and {y.onnx_shape!r} that do not broadcast",
                             UnsupportedError) from None
        full, other = (x, y) if x.onnx_shape == shape else (y, x)
        if full.onnx_shape != shape:
            raise node_error(node, f"Mul of shapes {x.onnx_shape!r} and {y.onnx_shape!r}: neither has the result's "
                             f"shape {shape!r}", UnsupportedError)
        _check_gate(node, full, other)
    return Acc("mul", emit, node, (full, other), full.onnx_shape, scale=np.array([full.scale * other.scale]))


def _check_gate(node: Node, full: QT, gate: QT) -> None:
    """``gate`` holds one value per channel of ``full`` (an image or signal; channels first, or
    last when ``full`` is a channels-last view), one value per pixel (its channel axis 1, the
    others ``full``'s) or one value per image."""
    rank = len(full.onnx_shape)
    g = (1,) * (rank - len(gate.onnx_shape)) + tuple(gate.onnx_shape)
    axis = rank - 1 if full.hwc else 0
    scalar_gate = all(d == 1 for d in g)
    per_channel = rank in (2, 3) and all(d == 1 for i, d in enumerate(g) if i != axis)
    per_pixel = rank in (2, 3) and g[axis] == 1 and all(d == full.onnx_shape[i] for i, d in enumerate(g) if i != axis)
    same_layout = gate.perm is None and gate.hwc == full.hwc
    if full.perm is not None or not (scalar_gate or ((per_channel or per_pixel) and same_layout)):
        raise node_error(node, f"Mul broadcasting {gate.onnx_shape!r} over {full.onnx_shape!r} (only one value per "
                         f"channel, per pixel or per image of an image or signal is supported)", UnsupportedError)


def emit(b: Builder, v: Acc, t: Target) -> QT:
    """Signed per-channel multipliers from the Acc's real scale (a constant times the input scale,
    or the product of the two input scales) over the output scale."""
    x = v.inputs[0]
    ratio = v.scale / t.scale
    m = np.zeros(ratio.shape, np.int64)
    s = np.zeros(ratio.shape, np.int64)
    nz = ratio != 0
    if np.any(nz):
        mm, ss = ratio_to_multiplier_shift(np.abs(ratio[nz]), f"node {v.node.name!r} requantization")
        m[nz], s[nz] = mm * np.sign(ratio[nz]).astype(np.int64), ss
    ties = ties_for(np.broadcast_to(np.abs(v.scale), ratio.shape)[nz], t.scale, m[nz], s[nz],
                    t.half_even) if np.any(nz) else "up"
    if np.all(m == m[0]) and np.all(s == s[0]):
        m, s = m[:1], s[:1]
    shape = tuple(v.onnx_shape)
    spec = b.new_tensor(t.name, (1,) * (3 - len(shape)) + shape if x.hwc else nhwc(shape), t.dtype)
    act = Requant(m, s, t.zp, t.lo, t.hi, ties)
    if len(v.inputs) == 2:
        g = v.inputs[1]
        layer = Mul(v.node.name, (x.tensor, g.tensor), spec, x.zp, act, g.zp)
        layer = _as_table(b, v.node, layer, x, g) or layer
    else:
        layer = Mul(v.node.name, (x.tensor,), spec, x.zp, act)
    out = b.emit(layer, v.onnx_shape, t, x.perm)
    return replace(out, hwc=x.hwc)


def _as_table(b: Builder, node: Node, layer: Mul, x: QT, g: QT):
    """``x * f(x)`` (either order) where ``f(x)`` is a table (a Lookup layer) of an input of at
    most :data:`~onnx2hw.rtl.lookup.MAX_IN_BITS` bits and the product's multiplier is per tensor:
    that table composed with the product, entry by entry the product layer's own integer result
    (``Mul.reference`` of ``q`` and ``f``'s entry for ``q``), so the stage is one table and the
    result is the same. The Lookup of ``f`` goes when nothing else reads it. ``None`` otherwise."""
    if layer.act.channels != 1:
        return None
    zero = {x.tensor: layer.in_zero, g.tensor: layer.other_zero}
    for src, fn in ((x, g), (g, x)):
        f = next((lay for lay in b.layers if lay.output.name == fn.tensor), None)
        if f is None or f.kind() != "lookup" or tuple(f.inputs) != (src.tensor,) or src.tensor == fn.tensor \
                or b.specs[src.tensor].dtype.bits > MAX_IN_BITS:
            continue
        t = b.specs[src.tensor].dtype
        q = np.arange(t.lo, t.hi + 1, dtype=np.int64)
        acc = (q - zero[src.tensor]) * (np.asarray(f.table, np.int64) - zero[fn.tensor])
        table = layer.act(acc)
        if _read_only_by(b, node, fn.tensor, f):
            b.layers.remove(f)
        return replace(f, name=layer.name, output=layer.output, table=table)
    return None


def _read_only_by(b: Builder, node: Node, tensor: str, producer) -> bool:
    """Nothing but ``node`` reads ``tensor``: no other layer, no model output, no other ONNX node
    reads a value of it (its quantizer and dequantizer pass it on; a reader not yet interpreted
    counts as a reader)."""
    names = {k for k, val in b.vals.items() if isinstance(val, QT) and val.tensor == tensor}
    if names & set(b.graph.output_names) or any(tensor in lay.inputs for lay in b.layers if lay is not producer):
        return False
    return not any(n is not node and set(n.inputs) & names and not set(n.outputs) <= names for n in b.graph.nodes)


def _qlinear_mul(b: Builder, node: Node):
    """com.microsoft QLinearMul ``(A, A_scale, A_zp, B, B_scale, B_zp, C_scale, C_zp)``: the
    product of two quantized tensors, or of one and a quantized constant."""
    consts = [isinstance(b.get(node.inputs[i], node), Const) for i in (0, 3)]
    if all(consts):
        raise node_error(node, "QLinearMul of two constants", UnsupportedError)
    if any(consts):
        k, i = (0, 3) if consts[0] else (3, 0)
        x = real_view(b, node, i, i + 1, i + 2)
        c = qconst(b, node, node.inputs[k], scalar(b, node, k + 1, "scale"), zp_input(b, node, k + 2), 0)
        acc = _by_constant(b, node, x, c.real())
    else:
        x = real_view(b, node, 0, 1, 2)
        acc = _product(b, node, x, real_view(b, node, 3, 4, 5))
    quantize_output(b, node, acc, 6, 7, x)


def _canonical_mul(node: Node, rw: Rewrite) -> Node | None:
    """A scalar or per-channel constant factor right after a linear layer scales its weights and bias."""
    return None if rw.fold_constant(node, "scale") else node


PATTERNS = (
    Pattern("", "Mul", "ProductUnit + Requantize (two tensors: same shape, or a gate per channel, per pixel or "
            "per image; "
            "x * f(x) with f a table of x: one LookupUnit), Requantize (a tensor times a constant scalar or "
            "per-channel scale), or folded into the requantizer of the layer before it (positive rescale) or into "
            "the host input quantizer", _mul, ptq="layer", canonical=_canonical_mul, fuse="rescale", const_inputs=0),
    Pattern(MS, "QLinearMul", "ProductUnit + Requantize (x * f(x) with f a table of x: one LookupUnit), or "
            "Requantize (by a constant)", _qlinear_mul, {"qoperator"}),
)

#: the layer kind this module declares
KIND = Mul
