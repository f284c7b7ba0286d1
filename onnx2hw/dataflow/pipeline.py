"""Typed, frozen boundary of the dataflow stage: a folded streaming :class:`Pipeline`.

A pipeline is a DAG of :class:`Stage` s joined by :class:`Link` s. Every stage is a chain of
RTL blocks (:class:`Block`, a class name in :mod:`onnx2hw.rtl` plus its constructor keyword
arguments) with one stream in per input and one stream out. A link carries one tensor in NHWC
order, channels folded into lanes; where the producer's lanes differ from the consumer's a
width converter is built, and every link is buffered by a FIFO of ``fifo_depth`` transfers.
The pipeline's own input and output are the pseudo stages ``"input"`` and ``"output"``; each
carries one stream. With several model inputs (outputs) that stream holds them one after the
other per inference, in graph order, and a split (join) stage connects it to the model's inputs
(outputs) (:mod:`onnx2hw.dataflow.compile`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

from ..layers.graph import IntegerGraph
from ..protocol import LinkPart
from ..rtl.cost import Cost
from ..rtl.stage import INPUT, OUTPUT, Block, Link, Stage

__all__ = ["Block", "Stage", "Link", "Pipeline", "INPUT", "OUTPUT"]


@dataclass(frozen=True)
class Pipeline:
    graph: IntegerGraph
    stages: tuple[Stage, ...]
    links: tuple[Link, ...]
    family: str
    #: layer name -> (pe, simd) actually used, (pe, simd, mul) for a layer with a product style
    #: ("dsp" or "lut", see :data:`onnx2hw.dataflow.Folding`)
    folding: Mapping[str, tuple] = field(default_factory=dict)

    def __post_init__(self):
        object.__setattr__(self, "folding", MappingProxyType(dict(self.folding)))

    @property
    def ii(self) -> int:
        """Estimated initiation interval: cycles per inference of the slowest stage."""
        return max(s.cycles for s in self.stages)

    @property
    def latency(self) -> int:
        """Estimated cycles from the first input transfer to the last output transfer of one
        inference without backpressure.

        Along the longest path, a stage starts producing once ``fill`` of its input has
        arrived, and its input arrives at the pace of the slowest stage so far (``rate``); the
        last stage then streams its whole output. Block pipeline latencies add up.
        """
        by_name = {s.name: s for s in self.stages}
        start: dict[str, tuple[float, int]] = {INPUT: (0.0, 0)}  # (time of first output, rate)
        for s in self.stages:
            t, rate = max(start[l.src] for l in self.links if l.dst == s.name)
            rate = max(rate, s.cycles)
            start[s.name] = (t + s.fill * rate + s.latency, rate)
        last = by_name[next(l.src for l in self.links if l.dst == OUTPUT)]
        t, _ = max(start[l.src] for l in self.links if l.dst == last.name)
        return int(round(t + last.cycles + last.latency))

    @property
    def total(self) -> Cost:
        lut = sum(s.cost.lut for s in self.stages) + sum(_fifo_lut(l) for l in self.links)
        ff = sum(s.cost.ff for s in self.stages)
        return Cost(self.ii, self.latency, lut, ff, sum(s.cost.dsp for s in self.stages),
                    sum(s.cost.ebr for s in self.stages) + sum(_fifo_ebr(l) for l in self.links))

    @property
    def link_cost(self) -> Cost:
        """LUTs and block RAM of the links' FIFOs (part of :attr:`total`)."""
        return Cost(0, 0, sum(_fifo_lut(l) for l in self.links), 0, 0, sum(_fifo_ebr(l) for l in self.links))

    @property
    def input_link(self) -> Link:
        return next(l for l in self.links if l.src == INPUT)

    @property
    def output_link(self) -> Link:
        return next(l for l in self.links if l.dst == OUTPUT)

    @property
    def output_links(self) -> tuple[Link, ...]:
        """The link that carries each model output (graph-output order) to the pipeline's end:
        the output link itself, or the link into the output's port of the join stage."""
        specs = self.graph.output_specs
        if len(specs) == 1:
            return (self.output_link,)
        join = self.output_link.src
        by_port = {l.dst_port: l for l in self.links if l.dst == join}
        return tuple(by_port[k] for k in range(len(specs)))

    @property
    def input_parts(self) -> tuple[LinkPart, ...]:
        """The model's inputs as the input stream carries them, in order: hardware tensor name,
        NHWC shape and element type."""
        return tuple(LinkPart(s.name, s.shape, s.dtype.bits, s.dtype.signed) for s in self.graph.input_specs)

    @property
    def output_parts(self) -> tuple[LinkPart, ...]:
        """The model's outputs as the output stream carries them, in order (the element type of
        each is that of the link that brings it: an accumulator's width for a raw output)."""
        return tuple(LinkPart(s.name, s.shape, l.bits, l.signed)
                     for s, l in zip(self.graph.output_specs, self.output_links))

    @property
    def multipliers(self) -> int:
        return sum(s.multipliers for s in self.stages)

    @property
    def macs(self) -> int:
        return sum(s.macs for s in self.stages)

    def describe(self) -> dict:
        """Machine-readable description for the driver and reports (JSON-ready). ``input`` and
        ``output`` describe the two streams; with several model inputs or outputs, ``inputs``
        and ``outputs`` list the tensors each stream carries one after the other (a one-input,
        one-output stream is its tensor: ``input``/``output`` name it)."""
        g, li, lo = self.graph, self.input_link, self.output_link
        if len(g.input_specs) == 1 and len(g.output_specs) == 1:
            i, o = g.input_specs[0], g.output_specs[0]
            streams = {
                "input": {"tensor": i.name, "shape": list(i.shape), "bits": i.dtype.bits, "signed": i.dtype.signed,
                          "lanes": li.dst_lanes},
                "output": {"tensor": o.name, "shape": list(o.shape), "bits": lo.bits, "signed": lo.signed,
                           "lanes": lo.src_lanes}}
        else:
            streams = {
                "input": {"tensor": li.tensor, "shape": [li.elements], "bits": li.bits, "signed": li.signed,
                          "lanes": li.dst_lanes},
                "output": {"tensor": lo.tensor, "shape": [lo.elements], "bits": lo.bits, "signed": lo.signed,
                           "lanes": lo.src_lanes},
                "inputs": [p.describe() for p in self.input_parts],
                "outputs": [p.describe() for p in self.output_parts]}
        return {
            "model": g.model_name,
            "family": self.family,
            "ii_cycles": self.ii,
            "latency_cycles": self.latency,
            **streams,
            "stages": [{"name": s.name, "layer": s.layer, "op": s.op, "pe": s.pe, "simd": s.simd,
                        **({"mul": s.mul} if s.mul else {}), "cycles": s.cycles, "latency": s.latency, "lut": s.cost.lut, "dsp": s.cost.dsp,
                        "ebr": s.cost.ebr, "ff": s.cost.ff, "macs": s.macs,
                        "blocks": [b.kind for b in s.blocks]} for s in self.stages],
            "links": [{"tensor": l.tensor, "src": l.src, "dst": l.dst, "lanes": [l.src_lanes, l.dst_lanes],
                       "bits": l.bits, "signed": l.signed, "fifo_depth": l.fifo_depth} for l in self.links],
            "folding": {k: list(v) for k, v in self.folding.items()},
        }


def _fifo_ebr(link: Link) -> int:
    bits = link.fifo_depth * link.dst_lanes * link.bits
    return 0 if link.fifo_depth <= 32 or bits <= 4096 else -(-bits // 18432)


def _fifo_lut(link: Link) -> int:
    width = link.dst_lanes * link.bits
    return 20 + (width if link.fifo_depth <= 32 else 0) * max(1, link.fifo_depth // 16)
