"""Build one :class:`Stage` from one IntegerGraph layer at a given folding (PE, SIMD, product style)."""
from __future__ import annotations

from ..ir.errors import UnsupportedError
from ..layers import LayerKind, TensorSpec
from ..layers.base import sum_costs
from ..rtl.cost import Cost
from .pipeline import Stage

__all__ = ["build_stage"]


def build_stage(name: str, layer: LayerKind, ins: list[TensorSpec], pe: int, simd: int, family: str,
                mul: str | None = None) -> Stage:
    """The stage of ``layer`` folded at (pe, simd) with products in ``mul`` ("dsp", "lut"; None:
    the blocks' choice by width): its kind's blocks (``layer.lower``) and their costs."""
    why = layer.hardware_problem(ins)
    if why:
        raise UnsupportedError(f"layer {layer.name!r}: {why}")
    try:
        low = layer.lower(ins, pe, simd, family, mul=mul)
    except (ValueError, TypeError) as exc:  # a block's own parameter check: name the layer
        raise UnsupportedError(f"layer {layer.name!r}: {exc}") from None
    cost = sum_costs(low.blocks)
    delay = sum(b.cost.latency for b in low.blocks if not b.latency_in_fill)
    cost = Cost(low.cycles, delay, cost.lut, cost.ff, cost.dsp, cost.ebr)
    return Stage(name=name, layer=layer.name, op=layer.kind(), inputs=tuple(layer.inputs),
                 output=layer.output.name, pe=pe, simd=simd,
                 in_lanes=low.in_lanes or (simd,) * len(layer.inputs),
                 out_lanes=pe, out_bits=low.out_bits, out_signed=low.out_signed, blocks=low.blocks,
                 cycles=low.cycles, latency=cost.latency, cost=cost, macs=low.macs,
                 multipliers=low.multipliers, fill=low.fill, mul=low.mul)
