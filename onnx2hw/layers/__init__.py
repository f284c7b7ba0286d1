"""The layer registry: one module per layer kind, one place per ONNX op.

Layer kinds (IntegerGraph node classes; see :mod:`.base` for what each declares):
:class:`Dense` (:mod:`.dense`), :class:`Conv` (:mod:`.conv`), :class:`MaxPool` (:mod:`.max_pool`),
:class:`AvgPool` (:mod:`.avg_pool`), :class:`Add` (:mod:`.add`), ``Lookup`` (:mod:`.lookup`),
``Concat`` (:mod:`.concat`), ``Resize`` (:mod:`.resize`), ``Mul`` (:mod:`.mul`), ``ChannelSelect``
(:mod:`.channels`: Slice, Split and Gather of channels), ``PixelShuffle`` (:mod:`.pixel_shuffle`:
DepthToSpace, SpaceToDepth). Ops
folded into a layer or into the host converters have no node of their own: :mod:`.activation` (Relu, Clip,
BatchNormalization), :mod:`.shape` (Flatten, Reshape, Squeeze, Identity, Dropout, Constant,
Cast), :mod:`.qdq` (QuantizeLinear, DequantizeLinear), :mod:`.qonnx` (Quant, BipolarQuant,
Trunc).

Everything that asks "is this op supported, and how?" reads :data:`PATTERNS`: the importers'
handler tables (:func:`handlers`), the post-training quantizer (:func:`ptq_ops`; each float op's
canonical form, linear weights, fusion and constant inputs, declared on its :class:`Pattern`
and applied through :mod:`.canonical`), the pre-import check and ``inspect``'s column
(:func:`support`), and the README's table (:func:`support_table`). To add a layer kind, add its
module (node class, ``KIND``, ``PATTERNS``) and list it in :data:`KIND_MODULES`.
"""
from __future__ import annotations

from types import MappingProxyType

from . import (activation, add, avg_pool, channels, concat, conv, dense, lookup, max_pool, mul, pixel_shuffle, qdq, qonnx,
               resize, shape)
from .add import Add
from .avg_pool import AvgPool
from .base import FLAVOURS, LayerKind, Linear, Lowered, Pattern
from .conv import Conv
from .dense import Dense
from .graph import PRE_OPS, InputQuant, IntegerGraph, OutputDequant, apply_pre, dequantize_outputs, quantize_inputs
from .max_pool import MaxPool
from .types import (Act, IntType, Requant, TensorSpec, Thresholds, accumulator_bounds, apply_act,
                    elem_shape, int_type_for)

__all__ = ["KINDS", "PATTERNS", "handlers", "support", "ptq_ops", "support_table",
           "LayerKind", "Lowered", "Pattern", "Linear", "Dense", "Conv", "MaxPool", "AvgPool", "Add",
           "IntegerGraph", "InputQuant", "OutputDequant", "quantize_inputs", "dequantize_outputs", "apply_pre", "PRE_OPS",
           "IntType", "TensorSpec", "Requant", "Thresholds", "Act", "apply_act", "accumulator_bounds",
           "int_type_for", "elem_shape"]

#: modules of the layer kinds, and of the ops folded away
KIND_MODULES = (dense, conv, max_pool, avg_pool, add, lookup, concat, resize, mul, channels, pixel_shuffle)
FOLDED_MODULES = (activation, shape, qdq, qonnx)

#: the IntegerGraph node classes
KINDS: tuple[type[LayerKind], ...] = tuple(m.KIND for m in KIND_MODULES)


def _collect():
    table: dict[tuple[str, str], Pattern] = {}
    for module in KIND_MODULES + FOLDED_MODULES:
        for p in module.PATTERNS:
            if p.key in table:
                raise RuntimeError(f"op {p.key!r} is declared by two layer modules")
            table[p.key] = p
    return MappingProxyType(table)


#: (domain, op_type) -> :class:`Pattern`
PATTERNS = _collect()


def handlers(flavour: str) -> dict:
    """(domain, op_type) -> handler for one importer flavour (``qdq``, ``qoperator``, ``qonnx``)."""
    if flavour not in FLAVOURS or flavour == "float":
        raise ValueError(f"importer flavour must be qdq, qoperator or qonnx, not {flavour!r}")
    return {k: p.handler for k, p in PATTERNS.items() if flavour in p.flavours}


def support(domain: str, op_type: str) -> str | None:
    """How the hardware path maps the op, or ``None`` when it cannot."""
    p = PATTERNS.get((domain, op_type))
    return None if p is None else p.hardware


def ptq_ops(role: str | None = None) -> frozenset[str]:
    """Default-domain float ops the post-training quantizer takes (with ``role``: only those)."""
    return frozenset(p.op_type for p in PATTERNS.values()
                     if p.ptq and not p.domain and (role is None or p.ptq == role))


def support_table() -> str:
    """The Markdown table of supported ops (README): op, domain, formats, hardware mapping."""
    rows = ["| op | domain | formats | hardware |", "|---|---|---|---|"]
    for (domain, op), p in sorted(PATTERNS.items(), key=lambda kv: (kv[0][0] != "", kv[0][0], kv[0][1])):
        formats = ", ".join(f for f in FLAVOURS if f in p.flavours)
        rows.append(f"| {op} | {domain or 'ai.onnx'} | {formats} | {p.hardware} |")
    return "\n".join(rows) + "\n"
