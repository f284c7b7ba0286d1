"""Elementwise Add of two quantized tensors, one rounding (:func:`onnx2hw.arith.add_requantized`)::

    acc = (a - za) * ma + (b - zb) * mb
    y   = clamp(zero_point + ((acc + 2**(shift-1)) >> shift), lo, hi)

(ties to even instead, ``ties="even"``, where the output quantizer rounds so and both multipliers
are the scale ratios exactly: :func:`~onnx2hw.layers._scale.ties_for`).

``ma / 2**shift`` and ``mb / 2**shift`` are the input-to-output scale ratios (the larger with
31 bits of precision). ONNX forms: Add of two dequantized tensors (QDQ, QONNX, float for the
post-training quantizer), com.microsoft QLinearAdd. An ONNX Add of a layer output and a
constant is a bias folded into that layer instead. Hardware: the residual AddUnit block; the
pipeline forks the shared tensor and buffers the branch read later.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from .. import arith
from ..ir.errors import UnsupportedError
from ..ir.graph import Node
from ..rtl.add import AddUnit
from ..rtl.stage import Block
from .builder import (Acc, Builder, Const, QConst, QT, Target, need, node_error, quantize_output, real_view,
                        scale_input)
from ._layout import nhwc
from ._scale import ratio_to_multiplier_shift, ties_for
from .base import LayerKind, Lowered, Pattern, ties_param
from .canonical import Rewrite
from .types import elem_shape

__all__ = ["Add", "KIND", "PATTERNS"]

MS = "com.microsoft"


@dataclass(frozen=True)
class Add(LayerKind):
    """Inputs ``a``, ``b`` with zero points ``zero_points`` scaled by ``multipliers`` (module docstring)."""

    zero_points: tuple[int, int]
    multipliers: tuple[int, int]
    zero_point: int
    lo: int
    hi: int
    shift: int = 0
    ties: str = "up"

    def __post_init__(self):
        super().__post_init__()
        if self.ties not in arith.TIES:
            raise ValueError(f"Add {self.name!r}: ties must be one of {arith.TIES!r}, not {self.ties!r}")
        object.__setattr__(self, "zero_points", tuple(int(v) for v in self.zero_points))
        object.__setattr__(self, "multipliers", tuple(int(v) for v in self.multipliers))
        for f in ("zero_point", "lo", "hi", "shift"):
            object.__setattr__(self, f, int(getattr(self, f)))
        if not 0 <= self.shift <= 62:
            raise ValueError(f"Add {self.name!r}: shift must be 0..62, not {self.shift!r}")
        if len(self.multipliers) != 2 or not all(0 < abs(m) < 1 << 31 for m in self.multipliers):
            raise ValueError(f"Add {self.name!r}: multipliers must be two non-zero integers below 2**31 in "
                             f"magnitude, not {self.multipliers!r}")

    def validate(self, ins):
        out = self.output
        if len(ins) != 2 or ins[0].shape != ins[1].shape or out.shape != ins[0].shape:
            raise self.error(f"input shapes {[s.shape for s in ins]!r} / output {out.shape!r} must all match")
        if not out.dtype.lo <= self.lo <= self.hi <= out.dtype.hi:
            raise self.error(f"clamp [{self.lo}, {self.hi}] outside output type {out.dtype}")

    def reference(self, a, b):
        (za, zb), (ma, mb) = self.zero_points, self.multipliers
        return arith.add_requantized(a, b, a_zero=za, a_mult=ma, b_zero=zb, b_mult=mb, shift=self.shift,
                                     zero_point=self.zero_point, lo=self.lo, hi=self.hi, ties=self.ties)

    def hardware_problem(self, ins):
        if self.output.dtype.bipolar:
            return "bipolar Add is not supported"
        return None

    def lower(self, ins, pe, simd, family, mul=None):
        (za, zb), (ma, mb) = self.zero_points, self.multipliers
        params = dict(a_shape=elem_shape(ins[0].dtype), b_shape=elem_shape(ins[1].dtype),
                      out_shape=elem_shape(self.output.dtype), lanes=simd, a_zero=za, a_mult=ma,
                      b_zero=zb, b_mult=mb, shift=self.shift, zero_point=self.zero_point, lo=self.lo, hi=self.hi,
                      **ties_param(self))
        block = Block(AddUnit, params, AddUnit.estimate(**params, family=family))
        cycles = int(np.prod(ins[0].shape)) // simd
        return Lowered((block,), cycles, self.output.dtype.bits, self.output.dtype.signed, fill=0.0)


# ---- import ---------------------------------------------------------------------------------------

def accumulate(b: Builder, node: Node, x: QT, y: QT) -> Acc:
    if x.onnx_shape != y.onnx_shape:
        raise node_error(node, f"Add of shapes {x.onnx_shape!r} and {y.onnx_shape!r} (broadcasting is not supported)",
                         UnsupportedError)
    if (x.perm is None) != (y.perm is None) or (x.perm is not None and not np.array_equal(x.perm, y.perm)):
        raise node_error(node, "Add of tensors in different layouts", UnsupportedError)
    return Acc("add", emit, node, (x, y), x.onnx_shape)


def emit(b: Builder, v: Acc, t: Target) -> QT:
    """Multipliers ``ma``, ``mb`` and the shared ``shift`` from the scale ratios (module docstring)."""
    x, y = v.inputs
    ra, rb = x.scale / t.scale, y.scale / t.scale
    _, s = ratio_to_multiplier_shift(max(ra, rb), f"node {v.node.name!r} add scale")
    shift = int(s[0])
    ma, mb = round(ra * 2.0 ** shift), round(rb * 2.0 ** shift)
    if min(ma, mb) == 0:
        raise node_error(v.node, f"input scales {x.scale!r} and {y.scale!r} differ too much to add exactly",
                         UnsupportedError)
    ties = ties_for([x.scale, y.scale], t.scale, [ma, mb], shift, t.half_even)
    spec = b.new_tensor(t.name, nhwc(v.onnx_shape), t.dtype)
    layer = Add(v.node.name, (x.tensor, y.tensor), spec, (x.zp, y.zp), (ma, mb), t.zp, t.lo, t.hi, shift, ties)
    return b.emit(layer, v.onnx_shape, t, x.perm)


def _add(b: Builder, node: Node):
    if scale_input(b, node, "add"):
        return
    x, y = b.get(node.inputs[0], node), b.get(node.inputs[1], node)
    if isinstance(x, QT) and isinstance(y, QT):
        need(node, x, QT, "input A"), need(node, y, QT, "input B")
        b.set(node, accumulate(b, node, x, y))
        return
    if isinstance(y, Acc) and isinstance(x, (Const, QConst)):
        x, y = y, x
    if isinstance(x, Acc) and isinstance(y, (Const, QConst)) and x.kind in ("dense", "conv"):
        b.set(node, _bias(node, x, y))
        return
    raise node_error(node, "Add needs two dequantized tensors or a layer plus a constant bias", UnsupportedError)


def _bias(node: Node, x: Acc, y) -> Acc:
    """A constant added to a dense/conv result: a real-valued bias of the layer."""
    v = np.asarray(y.value if isinstance(y, Const) else y.real(), np.float64)
    n = x.onnx_shape[0]
    if x.kind == "conv" and v.size == n:
        v = v.reshape(-1)
    if v.size not in (1, n) or (v.size == n and x.kind == "dense" and v.shape[-1:] != (n,)):
        raise node_error(node, f"adds a constant of shape {v.shape!r} to a layer with {n} outputs",
                         UnsupportedError)
    return replace(x, bias_real=x.bias_real + np.broadcast_to(v.reshape(-1), (n,)))


def _qlinear_add(b: Builder, node: Node):
    x = real_view(b, node, 0, 1, 2)
    y = real_view(b, node, 3, 4, 5)
    quantize_output(b, node, accumulate(b, node, x, y), 6, 7, x)


def _canonical_add(node: Node, rw: Rewrite) -> Node | None:
    """A scalar or per-channel constant added right after a linear layer shifts its bias; any other
    Add sums two activations."""
    if rw.fold_constant(node, "shift"):
        return None
    if any(i in rw.inits for i in node.inputs):
        raise node_error(node, "Add of a constant is not supported (only the sum of two activations)",
                         UnsupportedError)
    return node


PATTERNS = (
    Pattern("", "Add", "Fork + FIFO + AddUnit (residual), or a constant bias folded into its layer (or into the host "
            "input quantizer)", _add, ptq="layer", canonical=_canonical_add),
    Pattern(MS, "QLinearAdd", "Fork + FIFO + AddUnit (residual)", _qlinear_add, {"qoperator"}),
)

#: the layer kind this module declares
KIND = Add
