"""Lookup: an elementwise function of one quantized tensor, tabulated for every input integer::

    y = table[x - in_lo]

ONNX forms: Sigmoid, Tanh, LeakyRelu, PRelu (a constant slope shared by every channel), Selu,
Elu, HardSigmoid, HardSwish, Softplus between a DequantizeLinear and a QuantizeLinear (QDQ,
QOperator models; float models through the post-training quantizer, which gives the op its own
output quantizer); Relu and Clip (ReLU6) of a dequantized tensor that no layer's clamp can
absorb (:mod:`.activation` folds them into the layer before them when there is one). A
parameter with one value per channel (PRelu's slope as torch's ``PReLU(C)`` or Keras'
``PReLU(shared_axes=[1, 2])`` export it) gives one table per channel (``table`` of shape
``(C, entries)``; each lane's ROM then holds the tables of its channels); a parameter that varies
within a channel is refused. The table is the quantized model's own arithmetic, entry by entry:
``QuantizeLinear(op(DequantizeLinear(q)))`` in float32 by the ONNX spec (the op evaluated by
the golden executor), saturated to the output type and to any Relu/Clip that follows. Exact
for every input. Hardware: a LookupUnit (one ROM per lane) for inputs of at most 8 bits.

QONNX (Brevitas' QuantSigmoid, QuantTanh, QuantHardSwish, ...): the op between two ``Quant``
nodes is one table of the op then the second ``Quant`` (evaluated by the QONNX semantics, so any
rounding mode); the op of a layer's unquantized output (``Conv -> Sigmoid -> Quant``) stays
pending on the accumulator (``Acc.fn``) for the quantizer after it, which makes the layer's exact
thresholds of the composite where that is non-decreasing over the accumulator's range
(:mod:`.qonnx`; a HardSwish onto an unsigned grid is, its dip clamped to zero).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..ir.errors import UnsupportedError
from ..ir.graph import Node
from ..ir.load import FINN_DOMAIN, QONNX_DOMAIN
from ..rtl.lookup import MAX_IN_BITS, LookupUnit
from ..rtl.stage import Block
from .builder import Acc, Builder, Const, QConst, QT, Target, need, node_error
from ._layout import nhwc
from .base import LayerKind, Lowered, Pattern
from .types import elem_shape, readonly

__all__ = ["Lookup", "KIND", "PATTERNS"]


@dataclass(frozen=True)
class Lookup(LayerKind):
    """``table[i]`` is the output for input ``in_lo + i``; one entry per value of the input type
    (``table[c, i]`` for channel ``c`` when the table is per channel)."""

    table: np.ndarray
    in_lo: int

    def __post_init__(self):
        super().__post_init__()
        object.__setattr__(self, "table", readonly(self.table))
        object.__setattr__(self, "in_lo", int(self.in_lo))

    def validate(self, ins):
        if len(ins) != 1 or ins[0].shape != self.output.shape:
            raise self.error(f"needs one input of the output's shape {self.output.shape!r}")
        t = ins[0].dtype
        if self.table.ndim not in (1, 2) or (self.in_lo, self.table.shape[-1]) != (t.lo, t.hi - t.lo + 1):
            raise self.error(f"table of {self.table.shape} from {self.in_lo} does not cover input type {t}")
        if self.table.ndim == 2 and self.table.shape[0] != self.output.shape[-1]:
            raise self.error(f"{self.table.shape[0]} per-channel tables for {self.output.shape[-1]} channels")
        out = self.output.dtype
        if self.table.size and not (out.lo <= int(self.table.min()) and int(self.table.max()) <= out.hi):
            raise self.error(f"table values [{int(self.table.min())}, {int(self.table.max())}] outside {out}")

    def reference(self, x):
        idx = np.asarray(x, dtype=np.int64) - self.in_lo
        if self.table.ndim == 1:
            return self.table[idx]
        return self.table[np.broadcast_to(np.arange(self.table.shape[0]), idx.shape), idx]

    def hardware_problem(self, ins):
        t = ins[0].dtype
        if t.bipolar or self.output.dtype.bipolar:
            return "bipolar lookups are not supported"
        if t.bits > MAX_IN_BITS:
            return f"a {t.bits}-bit input needs a table of {1 << t.bits} entries (at most {MAX_IN_BITS} bits)"
        return None

    def lower(self, ins, pe, simd, family, mul=None):
        params = dict(in_shape=elem_shape(ins[0].dtype), out_shape=elem_shape(self.output.dtype),
                      table=tuple(int(v) for v in self.table.reshape(-1)), lanes=simd,
                      channels=self.table.shape[0] if self.table.ndim == 2 else 1)
        block = Block(LookupUnit, params, LookupUnit.estimate(**params, family=family))
        cycles = int(np.prod(ins[0].shape)) // simd
        return Lowered((block,), cycles, self.output.dtype.bits, self.output.dtype.signed, fill=0.0)


# ---- import ---------------------------------------------------------------------------------------

#: QONNX/FINN quantizers that read a layer's real value through exact thresholds
#: (:mod:`.qonnx`), so they take an elementwise function of it too
THRESHOLD_READERS = frozenset((d, op) for d in (QONNX_DOMAIN, FINN_DOMAIN)
                              for op in ("Quant", "BipolarQuant", "Trunc", "MultiThreshold"))
#: the pending layers whose accumulator such a quantizer thresholds
_THRESHOLD_KINDS = ("dense", "conv", "avgpool")


def _function(b: Builder, node: Node):
    x = b.get(node.inputs[0], node)
    if isinstance(x, Acc):
        b.set(node, _pending(b, node, x))
        return
    x = need(node, x, QT, "input")
    if b.specs[x.tensor].dtype.bipolar:
        raise node_error(node, "a bipolar input cannot be tabulated", UnsupportedError)
    consts = tuple(_parameter(b, node, i, x.onnx_shape, x.perm) for i in range(1, len(node.inputs)))
    b.set(node, Acc("lookup", emit, node, (x,), x.onnx_shape, params={"consts": consts}))


def _pending(b: Builder, node: Node, v: Acc) -> Acc:
    """The function of a layer's unquantized output (Brevitas: Conv -> Sigmoid -> Quant): pending
    on the accumulator (``Acc.fn``) for the quantizer that reads it, which thresholds the composite
    (exact where it is non-decreasing over the accumulator's range, which that quantizer checks)."""
    if v.kind not in _THRESHOLD_KINDS or v.fn is not None:
        what = "another function" if v.fn is not None else f"a layer of kind {v.kind}"
        raise node_error(node, f"{node.op_type} of the unquantized output of {what} is not supported (quantize its "
                         f"input first)", UnsupportedError)
    out = node.outputs[0]
    readers = [n for n in b.graph.nodes if out in n.inputs]
    if out in b.graph.output_names or not readers or any((n.domain, n.op_type) not in THRESHOLD_READERS or
                                                         n.inputs[0] != out for n in readers):
        raise node_error(node, f"{node.op_type} of a layer's unquantized output must be read only by QONNX "
                         f"quantizers (Quant, BipolarQuant, Trunc, MultiThreshold: thresholds of the composite)",
                         UnsupportedError)
    if b.evaluate is None:
        raise node_error(node, "no float evaluator to tabulate the op with", UnsupportedError)
    consts = tuple(_parameter(b, node, i, v.onnx_shape) for i in range(1, len(node.inputs)))
    args = [c if c is None else (c[:, None] if c.ndim == 1 else c).astype(np.float32) for c in consts]

    def fn(real):   # rows: output channels (per-channel parameters as columns)
        return np.asarray(b.evaluate(node, np.asarray(real, np.float32), *args)[0], np.float64)
    return replace(v, fn=fn)


def tabulate(b: Builder, node: Node):
    """The handler for an elementwise op of a dequantized tensor (Relu and Clip, from :mod:`.activation`)."""
    _function(b, node)


def _parameter(b: Builder, node: Node, i: int, shape, perm=None):
    """Constant input ``i`` (PRelu's slope, Clip's bounds) for the evaluator: a scalar, or ``(C,)``
    values per channel of the input of ONNX shape ``shape`` (``perm``: a flattened image); refused
    when it varies within a channel."""
    if not node.inputs[i]:
        return None
    v = b.get(node.inputs[i], node)
    if not isinstance(v, (Const, QConst)):
        raise node_error(node, f"input {node.inputs[i]!r} must be a constant", UnsupportedError)
    arr = np.asarray(v.value if isinstance(v, Const) else v.real())
    if arr.size <= 1 or np.all(arr == arr.reshape(-1)[0]):
        return arr.reshape(-1)[:1].reshape(()) if arr.size else arr
    full = (1,) + tuple(shape)
    if perm is not None:
        raise node_error(node, f"{node.op_type} of a flattened image with a parameter that is not a scalar is not "
                         f"supported", UnsupportedError)
    if node.since_version < 7 and arr.ndim == 1 and len(full) > 2:  # old PRelu: a 1-D slope is per channel
        arr = arr.reshape((-1,) + (1,) * (len(full) - 2))
    try:
        per = np.broadcast_to(arr, full)
    except ValueError:
        raise node_error(node, f"parameter {node.inputs[i]!r} of shape {arr.shape!r} does not broadcast to "
                         f"{full!r}", UnsupportedError) from None
    per = np.moveaxis(per, 1, -1).reshape(-1, full[1])
    if not np.all(per == per[:1]):
        raise node_error(node, f"{node.op_type} with a parameter {node.inputs[i]!r} of shape {arr.shape!r} that "
                         f"varies within a channel is not supported (one table per channel at most)",
                         UnsupportedError)
    return per[0]


def emit(b: Builder, v: Acc, t: Target) -> QT:
    """The table of ``v``'s op from the input's grid onto ``t`` (module docstring)."""
    x = v.inputs[0]
    in_type = b.specs[x.tensor].dtype
    q = np.arange(in_type.lo, in_type.hi + 1, dtype=np.int64)
    real = (q - x.zp).astype(np.float32) * np.float32(x.scale)
    if b.evaluate is None:
        raise node_error(v.node, "no float evaluator to tabulate the op with", UnsupportedError)
    consts = v.params.get("consts", ())
    per_channel = [c for c in consts if c is not None and c.ndim == 1]
    channels = per_channel[0].size if per_channel else 0
    rows = []
    for ch in range(max(channels, 1)):
        args = [c if c is None else (c[ch] if c.ndim == 1 else c).astype(np.float32) for c in consts]
        y = np.asarray(b.evaluate(v.node, real, *args)[0], np.float32)
        for node, fixed in v.params.get("after", ()):
            y = np.asarray(b.evaluate(node, y, *fixed)[0], np.float32)
        rows.append(np.clip(np.rint(y / np.float32(t.scale)).astype(np.int64) + t.zp, t.lo, t.hi))
    table = np.stack(rows) if channels else rows[0]
    spec = b.new_tensor(t.name, nhwc(v.onnx_shape), t.dtype)
    return b.emit(Lookup(v.node.name, (x.tensor,), spec, table, in_type.lo), v.onnx_shape, t, x.perm)


_TABLE = "LookupUnit (the quantized function, tabulated; of a QONNX layer's unquantized output: that layer's thresholds)"
_FLAVOURS = frozenset({"qdq", "qoperator", "qonnx"})
#: elementwise functions that are always a table (Relu and Clip are declared by :mod:`.activation`)
FUNCTIONS = ("Sigmoid", "Tanh", "LeakyRelu", "PRelu", "Selu", "Elu", "HardSigmoid", "HardSwish", "Softplus", "Mish")
#: functions with a constant parameter input (PRelu's slope), written unquantized
_PARAMETERS = {"PRelu": 1}
PATTERNS = tuple(Pattern("", op, _TABLE, _function, _FLAVOURS, ptq="layer", const_inputs=_PARAMETERS.get(op))
                 for op in FUNCTIONS)

#: the layer kind this module declares
KIND = Lookup
