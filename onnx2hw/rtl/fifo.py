"""Stream FIFO between dataflow stages."""
from __future__ import annotations

from amaranth.hdl import Module
from amaranth.lib import fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from . import _blockparams as _p
from .cost import Cost

__all__ = ["StreamFIFO"]


class StreamFIFO(wiring.Component):
    """First-in first-out buffer on a ``data.ArrayLayout(elem_shape, lanes)`` stream.

    Parameters
    ----------
    elem_shape : ShapeLike
        Shape of one lane.
    lanes : int
        Lanes per transfer (>= 1).
    depth : int
        Entries (>= 0). ``0``: wires, no storage. ``1``, ``2``: ``amaranth.lib.fifo.SyncFIFO``
        (flip-flops / distributed RAM). ``>= 3``: ``amaranth.lib.fifo.SyncFIFOBuffered``, whose
        storage is a synchronous-read ``Memory`` that Yosys maps to block RAM (DP16KD) when deep
        and wide enough, else to distributed RAM.

    Latency: 0 (depth 0), 1 cycle (depth 1-2), 2 cycles (depth >= 3) from input to output
    transfer on an empty FIFO. Initiation interval: 1, except depth 1 which alternates full and
    empty (one transfer every 2 cycles). Backpressure: ``i.ready`` is low only while full;
    ``o.valid`` and ``o.payload`` come from registers / memory that change only on a read, so
    the output honours the stream rules whatever the input does (at depth 0 it passes the input
    through, so the input must honour them).

    Ports: ``i`` (in), ``o`` (out).
    """

    def __init__(self, elem_shape, lanes: int = 1, depth: int = 2):
        self.elem_shape = _p.elem_shape(elem_shape)
        self.lanes = _p.positive_int(lanes, "lanes")
        self.depth = _p.positive_int(depth, "depth", minimum=0)
        layout = _p.lanes_layout(self.elem_shape, self.lanes)
        super().__init__({"i": In(stream.Signature(layout)), "o": Out(stream.Signature(layout))})

    def elaborate(self, platform):
        m = Module()
        if self.depth == 0:
            wiring.connect(m, wiring.flipped(self.i), wiring.flipped(self.o))
            return m
        width = self.elem_shape.width * self.lanes
        cls = fifo.SyncFIFO if self.depth <= 2 else fifo.SyncFIFOBuffered
        m.submodules.fifo = q = cls(width=width, depth=self.depth)
        m.d.comb += [
            q.w_data.eq(self.i.payload), q.w_en.eq(self.i.valid), self.i.ready.eq(q.w_rdy),
            self.o.payload.eq(q.r_data), self.o.valid.eq(q.r_rdy), q.r_en.eq(self.o.ready),
        ]
        return m

    @staticmethod
    def estimate(elem_shape, lanes: int = 1, depth: int = 2, family: str = "ecp5") -> Cost:
        """Cost without elaboration (calibrated against Yosys 0.70 ``synth_ecp5``)."""
        w = _p.elem_shape(elem_shape).width * _p.positive_int(lanes, "lanes")
        depth = _p.positive_int(depth, "depth", minimum=0)
        _p.family(family)
        if depth == 0:
            return Cost(1, 0, 0, 0, 0, 0)
        if depth == 1:        # one register, half rate
            return Cost(2, 1, lut=3, ff=w + 1, dsp=0, ebr=0)
        if depth == 2:        # SyncFIFO: distributed RAM on ECP5, flip-flops on iCE40
            if family == "ecp5":
                return Cost(1, 1, lut=9 + 6 * -(-w // 4), ff=4, dsp=0, ebr=0)
            return Cost(1, 1, lut=w + 12, ff=2 * w + 4, dsp=0, ebr=0)
        inner = depth - 1     # SyncFIFOBuffered: memory of depth-1 plus an output register
        abits = max(1, (inner - 1).bit_length())
        if _uses_bram(inner, w, family):
            ctrl = 6 * abits + 8 if family == "ecp5" else 8 * abits
            return Cost(1, 2, lut=w + ctrl, ff=2 * w + 4 * abits + 3, dsp=0,
                        ebr=_bram_count(inner, w, family))
        ff = w + 3 * abits + 3
        if family == "ecp5":  # TRELLIS_DPR16X4 (16x4), 6 LUT4-equivalents each, plus a mux
            rows = -(-inner // 16)
            dpr = rows * -(-w // 4)
            return Cost(1, 2, lut=6 * abits + 8 + 6 * dpr + w * (rows - 1), ff=ff, dsp=0,
                        ebr=0)
        return Cost(1, 2, lut=6 * abits + 8 + inner * w // 2, ff=ff + inner * w, dsp=0, ebr=0)


def _uses_bram(entries: int, width: int, family: str) -> bool:
    if family == "ice40":
        return entries * width > 32
    return entries * width > 1024 or entries > 64


def _bram_count(entries: int, width: int, family: str) -> int:
    if family == "ice40":   # SB_RAM40_4K: 256x16, 512x8, 1024x4, 2048x2
        for d, wd in ((256, 16), (512, 8), (1024, 4), (2048, 2)):
            if entries <= d:
                return -(-width // wd)
        return -(-entries // 2048) * -(-width // 2)
    for d, wd in ((512, 36), (1024, 18), (2048, 9), (4096, 4), (8192, 2), (16384, 1)):
        if entries <= d:
            return -(-width // wd)
    return -(-entries // 16384) * width


def bench_config():
    """Representative configurations for ``bench.rtl`` (name, factory, feeds, expect)."""
    import numpy as np
    from amaranth.hdl import signed
    x = np.random.default_rng(0).integers(-128, 128, size=(2000, 8))
    return [("StreamFIFO s8x8 depth 512 (BRAM)", lambda: StreamFIFO(signed(8), 8, 512),
             {"i": x}, {"o": len(x)}),
            ("StreamFIFO s8x8 depth 16 (LUT RAM)", lambda: StreamFIFO(signed(8), 8, 16),
             {"i": x}, {"o": len(x)})]
