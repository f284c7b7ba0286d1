"""Concat along channels: per pixel the channels of input 0, then input 1, ...; every input
requantized onto the output grid with one rounding (:func:`onnx2hw.arith.requantize` of
``x - zeros[k]``)::

    y_k = clamp(zero_point + (((x_k - zeros[k]) * multipliers[k] + 2**(shifts[k]-1)) >> shifts[k]), lo, hi)

(ties to even instead, ``ties="even"``, where the output quantizer rounds so and every rounding
input's multiplier is its scale ratio exactly: :func:`~onnx2hw.layers._scale.ties_for`).
``multipliers[k] / 2**shifts[k]`` is the input-to-output scale ratio (31 bits of precision);
an input already on the output grid is copied (``1 / 2**0`` with the output zero point), so
inputs that all share the output grid are a pure interleave. ONNX forms: Concat (axis 1, the
channels of an NCHW image or the features of a vector) of dequantized tensors followed by a
quantizer (QDQ, QONNX; the post-training quantizer gives it its own output grid), or of inputs
that share one grid when no quantizer follows; com.microsoft QLinearConcat. Hardware: the
ConcatUnit block; the pipeline forks a tensor read twice (a U-Net skip) and buffers the branch
read later, as for Add.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from .. import arith
from ..ir.errors import UnsupportedError
from ..ir.graph import Node
from ..rtl.concat import ConcatUnit
from ..rtl.stage import Block
from .builder import Acc, Builder, QT, Target, need, node_error, quantize_output, real_view
from ._layout import nhwc
from ._scale import ratio_to_multiplier_shift, ties_for
from .base import LayerKind, Lowered, Pattern, divisors, ties_param
from .types import elem_shape

__all__ = ["Concat", "KIND", "PATTERNS"]

MS = "com.microsoft"
_QUANTIZERS = frozenset({"QuantizeLinear", "Quant"})


@dataclass(frozen=True)
class Concat(LayerKind):
    """Inputs requantized by ``(zeros[k], multipliers[k], shifts[k])`` onto the output grid
    ``zero_point`` clamped to ``[lo, hi]`` (module docstring)."""

    zeros: tuple[int, ...]
    multipliers: tuple[int, ...]
    shifts: tuple[int, ...]
    zero_point: int
    lo: int
    hi: int
    ties: str = "up"

    def __post_init__(self):
        super().__post_init__()
        if self.ties not in arith.TIES:
            raise ValueError(f"Concat {self.name!r}: ties must be one of {arith.TIES!r}, not {self.ties!r}")
        for f in ("zeros", "multipliers", "shifts"):
            object.__setattr__(self, f, tuple(int(v) for v in getattr(self, f)))
        for f in ("zero_point", "lo", "hi"):
            object.__setattr__(self, f, int(getattr(self, f)))
        n = len(self.inputs)
        if n < 2 or any(len(getattr(self, f)) != n for f in ("zeros", "multipliers", "shifts")):
            raise ValueError(f"Concat {self.name!r}: needs two or more inputs and one zero point, multiplier and "
                             f"shift per input")
        if any(abs(m) >= 1 << 31 for m in self.multipliers) or any(not 0 <= s <= 62 for s in self.shifts):
            raise ValueError(f"Concat {self.name!r}: multipliers must be below 2**31 in magnitude and shifts in "
                             f"0..62, not {self.multipliers!r} / {self.shifts!r}")

    def validate(self, ins):
        out = self.output
        rest = {s.shape[:-1] for s in ins}
        if len(ins) != len(self.inputs) or len(rest) != 1 or len({len(s.shape) for s in ins}) != 1:
            raise self.error(f"inputs {[s.shape for s in ins]!r} must differ in their channels only")
        want = ins[0].shape[:-1] + (sum(s.shape[-1] for s in ins),)
        if out.shape != want:
            raise self.error(f"output shape {out.shape!r} != expected {want!r}")
        if not out.dtype.lo <= self.lo <= self.hi <= out.dtype.hi:
            raise self.error(f"clamp [{self.lo}, {self.hi}] outside output type {out.dtype}")

    def reference(self, *xs):
        parts = [arith.requantize(np.asarray(x, np.int64) - z, m, s, self.zero_point, self.lo, self.hi, self.ties)
                 for x, z, m, s in zip(xs, self.zeros, self.multipliers, self.shifts)]
        return np.concatenate(parts, axis=-1)

    def hardware_problem(self, ins):
        if self.output.dtype.bipolar or any(s.dtype.bipolar for s in ins):
            return "bipolar Concat is not supported"
        return None

    def fold_options(self, ins):
        return [(d, d) for d in divisors(math.gcd(*(s.shape[-1] for s in ins)))]

    def cycles(self, ins, pe, simd):
        return int(np.prod(self.output.shape)) // simd

    def lower(self, ins, pe, simd, family, mul=None):
        params = dict(in_shapes=tuple(elem_shape(s.dtype) for s in ins), channels=tuple(s.shape[-1] for s in ins),
                      out_shape=elem_shape(self.output.dtype), lanes=simd,
                      pixels=int(np.prod(self.output.shape[:-1], dtype=np.int64)), zeros=self.zeros,
                      mults=self.multipliers, shifts=self.shifts, zero_point=self.zero_point, lo=self.lo, hi=self.hi,
                      **ties_param(self))
        block = Block(ConcatUnit, params, ConcatUnit.estimate(**params, family=family))
        return Lowered((block,), block.cost.cycles, self.output.dtype.bits, self.output.dtype.signed, fill=0.0)


# ---- import ---------------------------------------------------------------------------------------

def _inputs(b: Builder, node: Node, xs: list[QT]) -> tuple[int, ...]:
    """Check the inputs agree outside the channel axis; the ONNX output shape (without batch)."""
    if len(xs) < 2:
        raise node_error(node, "Concat of a single input is not supported", UnsupportedError)
    rank = len(xs[0].onnx_shape)
    axis = int(node.attr("axis", 1))
    axis = axis + rank + 1 if axis < 0 else axis
    if axis != 1:
        raise node_error(node, f"Concat along axis {axis} (only the channel axis 1 is supported)", UnsupportedError)
    for x in xs:
        b.natural(x, node)
        if len(x.onnx_shape) != rank or x.onnx_shape[1:] != xs[0].onnx_shape[1:] or rank not in (1, 3):
            raise node_error(node, f"Concat of shapes {[x.onnx_shape for x in xs]!r} (inputs must be (N, C, H, W) "
                             f"images of one size or (N, F) vectors)", UnsupportedError)
        if b.specs[x.tensor].dtype.bipolar:
            raise node_error(node, "Concat of bipolar tensors is not supported", UnsupportedError)
    return (sum(x.onnx_shape[0] for x in xs),) + xs[0].onnx_shape[1:]


def _concat(b: Builder, node: Node):
    xs = [b.get(name, node) for name in node.inputs]
    if not all(isinstance(x, QT) for x in xs):
        xs = [need(node, x, QT, f"input {k}") for k, x in enumerate(xs)]
    shape = _inputs(b, node, xs)
    readers = [n for n in b.graph.nodes if node.outputs[0] in n.inputs]
    if readers and all(n.op_type in _QUANTIZERS for n in readers) and node.outputs[0] not in b.graph.output_names:
        xs = [need(node, x, QT, f"input {k}") for k, x in enumerate(xs)]
        b.set(node, Acc("concat", emit, node, tuple(xs), shape))
        return
    # no quantizer after it: the inputs must share one grid, which the output keeps (a pure interleave)
    x0 = xs[0]
    if any(not math.isclose(x.scale, x0.scale, rel_tol=1e-6) or x.zp != x0.zp or x.dtype != x0.dtype
           or x.real != x0.real for x in xs):
        raise node_error(node, "Concat of inputs on different quantization grids must be followed by a quantizer "
                         "(its output grid)", UnsupportedError)
    t = Target(node.outputs[0], x0.scale, x0.zp, x0.dtype, x0.dtype.lo, x0.dtype.hi)
    q = emit(b, Acc("concat", emit, node, tuple(xs), shape), t)
    b.set(node, replace(q, real=x0.real))


def emit(b: Builder, v: Acc, t: Target) -> QT:
    """One (zero point, multiplier, shift) per input from its scale ratio to ``t`` (module docstring)."""
    zeros, mults, shifts = [], [], []
    for x in v.inputs:
        if math.isclose(x.scale, t.scale, rel_tol=1e-6):
            m, s = 1, 0
        else:
            ms, ss = ratio_to_multiplier_shift(x.scale / t.scale, f"node {v.node.name!r} input scale ratio")
            m, s = int(ms[0]), int(ss[0])
        zeros.append(x.zp)
        mults.append(m)
        shifts.append(s)
    rounding = [k for k, s in enumerate(shifts) if s]     # the inputs a tie can occur in
    ties = ties_for([v.inputs[k].scale for k in rounding], t.scale, [mults[k] for k in rounding],
                    [shifts[k] for k in rounding], t.half_even) if rounding else "up"
    spec = b.new_tensor(t.name, nhwc(v.onnx_shape), t.dtype)
    layer = Concat(v.node.name, tuple(x.tensor for x in v.inputs), spec, zeros, mults, shifts, t.zp, t.lo, t.hi,
                   ties)
    return b.emit(layer, v.onnx_shape, t)


def _qlinear_concat(b: Builder, node: Node):
    """com.microsoft QLinearConcat: ``(y_scale, y_zp, x0, s0, z0, x1, s1, z1, ...)``."""
    if len(node.inputs) < 8 or (len(node.inputs) - 2) % 3:
        raise node_error(node, f"QLinearConcat needs y_scale, y_zero_point and two or more (x, scale, zero point) "
                         f"triples, not {len(node.inputs)} inputs", UnsupportedError)
    xs = [real_view(b, node, k, k + 1, k + 2) for k in range(2, len(node.inputs), 3)]
    acc = Acc("concat", emit, node, tuple(xs), _inputs(b, node, xs))
    quantize_output(b, node, acc, 0, 1, xs[0])


PATTERNS = (
    Pattern("", "Concat", "ConcatUnit (channels; each input requantized onto the output grid) with Fork + FIFO "
            "for a branch", _concat, ptq="layer"),
    Pattern(MS, "QLinearConcat", "ConcatUnit (channels; each input requantized onto the output grid)",
            _qlinear_concat, {"qoperator"}),
)

#: the layer kind this module declares
KIND = Concat
