"""Elementwise table lookup on a stream: any function of one small integer (activations)."""
from __future__ import annotations

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ..arith import int_range
from . import _blockparams as _p
from ._arith_pipe import register_stage, rom
from .cost import Cost

__all__ = ["LookupUnit", "MAX_IN_BITS", "bench_config"]

#: widest input a table is built for (2**8 entries per lane)
MAX_IN_BITS = 8


class LookupUnit(wiring.Component):
    """``y = table[x - min(in_shape)]`` on every lane.

    Parameters
    ----------
    in_shape, out_shape : ShapeLike
        Lane shapes; ``in_shape`` at most :data:`MAX_IN_BITS` wide.
    table : sequence of int
        ``2**in_width`` output values, the first for the smallest input of ``in_shape``; each
        must fit ``out_shape``. With ``channels > 1``: ``channels`` such tables one after the
        other (channel-major), channel ``c`` of a pixel read through table ``c``.
    lanes : int
        Lanes per transfer (>= 1); every lane has its own synchronous-read ROM (LUT logic).
    channels : int
        1 (one table for every element) or the channels per pixel (a table per channel; ``lanes``
        divides it, and lane ``j`` of the ``f``-th transfer of a pixel is channel ``f * lanes + j``:
        each lane's ROM holds its ``channels / lanes`` tables, addressed by a fold counter).

    Latency 1 cycle, one transfer per cycle. ``o.valid``/``o.payload`` are registers (the ROM
    outputs, which hold while ``o`` stalls); ``i.ready = ~o.valid | o.ready``, so ``o.valid``
    never depends on ``o.ready`` combinationally.

    Ports: ``i`` (in), ``o`` (out).
    """

    def __init__(self, in_shape, out_shape, table, lanes: int = 1, channels: int = 1):
        self.in_shape = _p.elem_shape(in_shape, "in_shape")
        self.out_shape = _p.elem_shape(out_shape, "out_shape")
        self.lanes = _p.positive_int(lanes, "lanes")
        self.channels = _p.positive_int(channels, "channels")
        if self.channels > 1 and self.channels % self.lanes:
            raise ValueError(f"lanes {lanes!r} must divide channels {channels!r}")
        if self.in_shape.width > MAX_IN_BITS:
            raise ValueError(f"in_shape must be at most {MAX_IN_BITS} bits wide, not {in_shape!r}")
        self.table = tuple(_p.integer(v, "table entry") for v in table)
        if len(self.table) != self.channels << self.in_shape.width:
            raise ValueError(f"table must have {self.channels << self.in_shape.width} entries for {in_shape!r} "
                             f"and {self.channels} channel(s), not {len(self.table)}")
        lo, hi = _range(self.out_shape)
        bad = [v for v in self.table if not lo <= v <= hi]
        if bad:
            raise ValueError(f"table entry {bad[0]!r} does not fit out_shape {out_shape!r}")
        super().__init__({"i": In(stream.Signature(_p.lanes_layout(self.in_shape, self.lanes))),
                          "o": Out(stream.Signature(_p.lanes_layout(self.out_shape, self.lanes)))})

    def elaborate(self, platform):
        m = Module()
        width, mask = self.in_shape.width, (1 << self.out_shape.width) - 1
        n = 1 << width
        words = [v & mask for v in self.table]
        bias = -_range(self.in_shape)[0]
        accept = register_stage(m, self.i, self.o)
        nf = self.channels // self.lanes if self.channels > 1 else 1
        fold = Signal(range(nf), name="fold")
        if nf > 1:
            with m.If(accept):
                m.d.sync += fold.eq(Mux(fold == nf - 1, 0, fold + 1))
        for j in range(self.lanes):
            offset = (self.i.payload[j] + bias)[:width]
            if self.channels > 1:  # this lane's tables, one per fold
                lane_words = [w for f in range(nf)
                              for w in words[(f * self.lanes + j) * n:(f * self.lanes + j + 1) * n]]
                addr = Cat(offset, fold) if nf > 1 else offset
            else:
                lane_words, addr = words, offset
            data = rom(m, lane_words, self.out_shape.width, addr, self.i.ready, f"table{j}")
            m.d.comb += self.o.payload[j].eq(data)
        return m

    @staticmethod
    def estimate(in_shape, out_shape, table, lanes: int = 1, channels: int = 1, family: str = "ecp5") -> Cost:
        """Per lane a ROM of ``2**in_width`` (times ``channels / lanes`` with per-channel tables) x
        ``out_width`` bits in LUT4 logic (16 bits per LUT4, plus about a quarter more for the
        multiplexers; Yosys keeps ROMs this small out of EBR)."""
        shape_in = _p.elem_shape(in_shape, "in_shape")
        width = _p.elem_shape(out_shape, "out_shape").width
        lanes = _p.positive_int(lanes, "lanes")
        channels = _p.positive_int(channels, "channels")
        _p.family(family)
        nf = channels // lanes if channels > 1 else 1
        words = max(1, (nf << shape_in.width) // 16)
        return Cost(1, 1, lut=lanes * width * words * 5 // 4 + 2, ff=lanes * width + 1, dsp=0, ebr=0)


def _range(shape) -> tuple[int, int]:
    return int_range(shape.width, shape.signed)


def bench_config():
    """Representative configuration for ``bench.rtl`` (name, factory, feeds, expect): an 8-bit
    activation table on 8 lanes. (A per-channel table, ``channels > 1``, trips an assertion
    of YoWASP Yosys 0.70's abc9 flow in ``synth_ecp5``, so it is not benched.)"""
    import numpy as np
    from amaranth.hdl import signed
    rng = np.random.default_rng(0)
    x = rng.integers(-128, 128, size=(2000, 8))
    table = [int(v) for v in rng.integers(-128, 128, size=256)]
    return [("Lookup s8->s8 x8", lambda: LookupUnit(signed(8), signed(8), table, 8),
             {"i": x}, {"o": len(x)})]
