"""The parts of a streaming pipeline the RTL elaborates: :class:`Block`, :class:`Stage`, :class:`Link`.

A stage is a chain of RTL blocks (a :class:`Block` is a class of this package plus its
constructor keyword arguments) with one stream in per input and one stream out. A link carries
one tensor in NHWC order, channels folded into lanes. The pipeline's own input and output are
the pseudo stages :data:`INPUT` and :data:`OUTPUT`. :class:`onnx2hw.dataflow.Pipeline` holds them.
"""
from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Mapping

from amaranth.lib import stream
from amaranth.lib.wiring import In

from .cost import Cost

__all__ = ["Block", "Stage", "Link", "INPUT", "OUTPUT", "stream_ports"]

INPUT, OUTPUT = "input", "output"


@dataclass(frozen=True)
class Block:
    """One RTL block: ``block`` is its class (an Amaranth component of :mod:`onnx2hw.rtl`),
    ``params`` its constructor's keyword arguments, ``cost`` its estimate."""

    block: type
    params: Mapping[str, Any]
    cost: Cost

    def __post_init__(self):
        object.__setattr__(self, "params", MappingProxyType(dict(self.params)))

    @property
    def kind(self) -> str:
        """The block's class name (reports, ``accelerator.json``)."""
        return self.block.__name__

    @property
    def latency_in_fill(self) -> bool:
        """The block's latency is the wait for its first input rows, which the stage's ``fill``
        already models (a block class says so with ``LATENCY_IN_FILL = True``)."""
        return getattr(self.block, "LATENCY_IN_FILL", False)

    @property
    def input_burst(self) -> bool:
        """The block reads its whole input tensor in one burst and then none for a while (a
        block class says so with ``INPUT_BURST = True``): the link into it buffers the whole
        tensor so that its producer never waits meanwhile."""
        return getattr(self.block, "INPUT_BURST", False)

    def waits_for(self, port: int) -> int | None:
        """The input the block reads whole before it reads any of input ``port`` (a block class
        says so with ``waits_for(params, port)``: a broadcast gate), or ``None``."""
        waits = getattr(self.block, "waits_for", None)
        return None if waits is None else waits(self.params, port)


def stream_ports(component) -> tuple[list, list]:
    """The stream ports of an elaborated block, ``(inputs, outputs)``, each in the order its
    signature declares them: a stage's links name its ports by these positions."""
    ins, outs = [], []
    for name, member in component.signature.members.items():
        if member.is_signature and isinstance(member.signature, stream.Signature):
            (ins if member.flow == In else outs).append(getattr(component, name))
    return ins, outs


@dataclass(frozen=True)
class Stage:
    """One layer in hardware.

    ``cycles`` is the stage's initiation interval per inference at full throughput and
    ``latency`` the cycles from its first input to its first output (both estimates from the
    blocks' cost models). ``in_lanes``/``out_lanes`` are the lanes per transfer it consumes on
    each input / produces.
    """

    name: str
    layer: str
    op: str
    inputs: tuple[str, ...]
    output: str
    pe: int
    simd: int
    in_lanes: tuple[int, ...]
    out_lanes: int
    out_bits: int
    out_signed: bool
    blocks: tuple[Block, ...]
    cycles: int
    latency: int
    cost: Cost
    macs: int = 0
    #: number of multipliers instantiated (PE*SIMD for MVUs)
    multipliers: int = 0
    #: fraction of its input a stage needs before its first output (1.0 for a dense layer,
    #: about kernel rows / image rows for windows)
    fill: float = 1.0
    #: how its products are built: "dsp" (MULT18X18D) or "lut" (LUT/carry logic); None for a
    #: stage without a choice
    mul: str | None = None


@dataclass(frozen=True)
class Link:
    """A stream from ``src`` (stage name or ``INPUT``) to input ``dst_port`` of ``dst``."""

    tensor: str
    src: str
    dst: str
    dst_port: int
    src_port: int
    src_lanes: int
    dst_lanes: int
    bits: int
    signed: bool
    elements: int  # per inference
    fifo_depth: int

    @property
    def transfers(self) -> int:
        """Transfers per inference at the consumer's lane count."""
        return self.elements // self.dst_lanes
