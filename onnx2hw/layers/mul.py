"""Elementwise Mul of a quantized tensor by a constant (a scalar or one value per channel: a scale
layer), requantized onto the output grid with one rounding::

    y = clamp(zero_point + (((x - in_zero) * M[c] + 2**(s[c]-1)) >> s[c]), lo, hi)

(:func:`onnx2hw.arith.requantize` of ``x - in_zero``); ``M[c] / 2**s[c]`` is
``constant[c] * input scale / output scale`` (31 bits of precision; a negative constant gives a
negative multiplier, a zero constant the output zero point). ONNX forms: Mul of a dequantized
tensor and a constant (float or quantized), followed by a quantizer (QDQ, QONNX; the
post-training quantizer gives it its own output grid).

A Mul by a positive constant that directly follows a Gemm/MatMul/Conv/average pool (before its
quantizer) is folded into that layer's requantization scale instead (no layer of its own), and a
Mul of a model input by a scalar into the host-side input quantizer. Hardware: a registered
``- in_zero`` (Cast) and a Requantize block.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from .. import arith
from ..ir.errors import UnsupportedError
from ..ir.graph import Node
from ..rtl.cast import Cast
from ..rtl.cost import Cost
from ..rtl.requant import Requantize
from ..rtl.stage import Block
from .builder import Acc, Builder, Const, QConst, QT, Target, node_error, scale_input
from ._layout import nhwc
from ._scale import ratio_to_multiplier_shift
from .base import LayerKind, Lowered, Pattern, check_act
from .canonical import Rewrite
from .types import Requant, elem_shape

__all__ = ["Mul", "KIND", "PATTERNS"]


@dataclass(frozen=True)
class Mul(LayerKind):
    """``act(x - in_zero)``: ``act`` is a :class:`Requant` with one (signed) multiplier per
    channel or per tensor (module docstring)."""

    in_zero: int
    act: Requant

    def __post_init__(self):
        super().__post_init__()
        object.__setattr__(self, "in_zero", int(self.in_zero))
        if not isinstance(self.act, Requant):
            raise ValueError(f"Mul {self.name!r}: act must be a Requant, not {type(self.act).__name__}")

    def validate(self, ins):
        if len(ins) != 1 or ins[0].shape != self.output.shape:
            raise self.error(f"needs one input of the output's shape {self.output.shape!r}")
        check_act(self, self.act, self.output.shape[-1], self.output)

    def reference(self, x):
        return self.act(np.asarray(x, np.int64) - self.in_zero)

    def hardware_problem(self, ins):
        if ins[0].dtype.bipolar or self.output.dtype.bipolar:
            return "bipolar Mul is not supported"
        return None

    def _acc_bits(self, ins) -> int:
        t = ins[0].dtype
        return arith.acc_bits(min(t.lo - self.in_zero, 0), max(t.hi - self.in_zero, 0))

    def lower(self, ins, pe, simd, family, mul=None):
        c = self.output.shape[-1]
        bits = self._acc_bits(ins)
        a = self.act
        m = a.multiplier if a.multiplier.shape[0] > 1 else int(a.multiplier[0])
        s = a.shift if a.shift.shape[0] > 1 else int(a.shift[0])
        params = dict(channels=c, pe=simd, acc_bits=bits, multiplier=m, shift=s, zero_point=a.zero_point,
                      out_bits=self.output.dtype.bits, out_signed=self.output.dtype.signed, lo=a.lo, hi=a.hi)
        blocks = [Block(Requantize, params, Requantize.estimate(**params, family=family))]
        if self.in_zero:
            blocks.insert(0, Block(Cast, dict(bits=bits, signed=True, offset=-self.in_zero,
                                              in_shape=elem_shape(ins[0].dtype), lanes=simd),
                                   Cost(1, 1, bits * simd, bits * simd, 0, 0)))
        cycles = int(np.prod(ins[0].shape)) // simd
        return Lowered(tuple(blocks), cycles, self.output.dtype.bits, self.output.dtype.signed, fill=0.0)


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
    if isinstance(y, (Acc, QT)):
        x, y = y, x
    if not isinstance(y, (Const, QConst)):
        raise node_error(node, "Mul is only supported by a constant (scalar or per channel)", UnsupportedError)
    v = np.asarray(y.value if isinstance(y, Const) else y.real(), np.float64)
    if not np.all(np.isfinite(v)):
        raise node_error(node, "Mul by a constant that is not finite", UnsupportedError)
    if isinstance(x, Acc) and x.kind in ("dense", "conv", "avgpool"):
        b.set(node, _fold(node, x, v))
        return
    if not (isinstance(x, QT) and x.real):
        raise node_error(node, "Mul must scale a dequantized tensor or directly follow a quantized layer",
                         UnsupportedError)
    x = b.natural(x, node)
    if b.specs[x.tensor].dtype.bipolar:
        raise node_error(node, "Mul of a bipolar tensor is not supported", UnsupportedError)
    c = _channel_values(node, v, x.onnx_shape)
    b.set(node, Acc("mul", emit, node, (x,), x.onnx_shape, scale=x.scale * c))


def emit(b: Builder, v: Acc, t: Target) -> QT:
    """Signed per-channel multipliers from ``constant * input scale / output scale``."""
    x = v.inputs[0]
    ratio = v.scale / t.scale
    m = np.zeros(ratio.shape, np.int64)
    s = np.zeros(ratio.shape, np.int64)
    nz = ratio != 0
    if np.any(nz):
        mm, ss = ratio_to_multiplier_shift(np.abs(ratio[nz]), f"node {v.node.name!r} requantization")
        m[nz], s[nz] = mm * np.sign(ratio[nz]).astype(np.int64), ss
    if np.all(m == m[0]) and np.all(s == s[0]):
        m, s = m[:1], s[:1]
    spec = b.new_tensor(t.name, nhwc(v.onnx_shape), t.dtype)
    layer = Mul(v.node.name, (x.tensor,), spec, x.zp, Requant(m, s, t.zp, t.lo, t.hi))
    return b.emit(layer, v.onnx_shape, t)


def _canonical_mul(node: Node, rw: Rewrite) -> Node | None:
    """A scalar or per-channel constant factor right after a linear layer scales its weights and bias."""
    return None if rw.fold_constant(node, "scale") else node


PATTERNS = (
    Pattern("", "Mul", "Requantize (a quantized tensor times a constant scalar or per-channel scale), or folded "
            "into the requantizer of the layer before it (positive rescale) or into the host input quantizer",
            _mul, ptq="layer", canonical=_canonical_mul, fuse="rescale", const_inputs=0),
)

#: the layer kind this module declares
KIND = Mul
