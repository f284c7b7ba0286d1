"""The accelerator top: a :class:`~onnx2hw.dataflow.Pipeline` elaborated into one
Amaranth component with one input stream and one output stream.

Every stage is its chain of blocks; every link is a (width converter +) FIFO. Between blocks
whose lane shapes differ (e.g. an unsigned window sum into a signed requantizer) a lane-wise
value-preserving cast is wired in; a :class:`~onnx2hw.rtl.cast.Cast` block is a registered
``lane + offset`` stage.
"""
from __future__ import annotations

from amaranth.hdl import Module, Shape
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ._dsp import plan_dsp_sites
from .cast import Cast
from .fifo import StreamFIFO
from .stage import INPUT, OUTPUT, stream_ports
from .width import WidthConverter

__all__ = ["AcceleratorCore", "join"]


def join(m: Module, src, dst) -> None:
    """Wire stream ``src`` into ``dst`` lane by lane (value-preserving when shapes differ)."""
    if len(src.payload) != len(dst.payload):
        raise ValueError(f"cannot join {len(src.payload)} lanes into {len(dst.payload)}")
    m.d.comb += [dst.valid.eq(src.valid), src.ready.eq(dst.ready)]
    m.d.comb += [dst.payload[j].eq(src.payload[j]) for j in range(len(src.payload))]


class AcceleratorCore(wiring.Component):
    """The whole pipeline as one streaming component.

    Ports
    -----
    i : In(stream.Signature(ArrayLayout(input elem, input lanes)))
        The quantized input tensor, NHWC order, ``elements / lanes`` transfers per inference;
        for a model with several inputs, all of them one after the other in graph-input order,
        elements of their common type (the pipeline's split stage deals them out).
    o : Out(stream.Signature(ArrayLayout(output elem, output lanes)))
        The integer output tensor, NHWC order; for several outputs, all of them one after the
        other in graph-output order (joined by the pipeline's join stage).

    Initiation interval and latency: ``pipeline.ii`` / ``pipeline.latency`` (estimates).
    """

    def __init__(self, pipeline):
        """``pipeline``: an :class:`onnx2hw.dataflow.Pipeline` (its stages, links and end links)."""
        self.pipeline = pipeline
        li, lo = pipeline.input_link, pipeline.output_link
        self.in_layout = data.ArrayLayout(Shape(li.bits, li.signed), li.dst_lanes)
        self.out_layout = data.ArrayLayout(Shape(lo.bits, lo.signed), lo.src_lanes)
        super().__init__({"i": In(stream.Signature(self.in_layout)), "o": Out(stream.Signature(self.out_layout))})

    def _stage(self, m: Module, index: int, stage):
        """Instantiate a stage's blocks, named ``s<index>_<k>_<kind>`` by position (not by the
        model's node names, so that the same hardware from differently named exports gives the
        same Verilog); returns (input streams by port, output streams by port)."""
        blocks = []
        prev = None
        for k, b in enumerate(stage.blocks):
            params = dict(b.params)
            if b.block is Cast and prev is not None:  # a first Cast names its in_shape itself
                params.update(in_shape=prev.o.payload.shape().elem_shape, lanes=len(prev.o.payload))
            block = b.block(**params)
            m.submodules[f"s{index}_{k}_{b.kind.lower()}"] = block
            if prev is not None:
                join(m, prev.o, block.i)
            blocks.append(block)
            prev = block
        return stream_ports(blocks[0])[0], stream_ports(blocks[-1])[1]

    def elaborate(self, platform):
        m = Module()
        p = self.pipeline
        plan_dsp_sites(platform, p.total.dsp)   # (the stages' DSPs, in order, on spread sites)
        ports = {}
        for index, stage in enumerate(p.stages):
            ports[stage.name] = self._stage(m, index, stage)
        for n, link in enumerate(p.links):
            src = self.i if link.src == INPUT else ports[link.src][1][link.src_port]
            dst = self.o if link.dst == OUTPUT else ports[link.dst][0][link.dst_port]
            shape = Shape(link.bits, link.signed)
            if link.src != INPUT and link.src_lanes != link.dst_lanes:
                conv = WidthConverter(shape, link.src_lanes, link.dst_lanes)
                m.submodules[f"link{n}_width"] = conv
                join(m, src, conv.i)
                src = conv.o
            lanes = link.dst_lanes if link.src != INPUT else link.src_lanes
            fifo = StreamFIFO(shape, lanes, link.fifo_depth)
            m.submodules[f"link{n}_fifo"] = fifo
            join(m, src, fifo.i)
            join(m, fifo.o, dst)
        return m
