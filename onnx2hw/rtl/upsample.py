"""UpsampleUnit: nearest-neighbour upsampling by integer factors, with a one-row line buffer."""
from __future__ import annotations

from amaranth.hdl import Module, Signal
from amaranth.lib import memory, stream, wiring
from amaranth.lib.wiring import In, Out

from . import _blockparams as _p
from ._linebuf import ram_cost
from .cost import Cost

__all__ = ["UpsampleUnit", "bench_config"]


class UpsampleUnit(wiring.Component):
    """``y[h, w, c] = x[h // scale_h, w // scale_w, c]`` on an NHWC stream.

    Parameters
    ----------
    elem_shape : ShapeLike
        Lane shape (input and output).
    height, width, channels : int
        Input image size; ``lanes`` divides ``channels``.
    scale_h, scale_w : int
        Integer factors (>= 1).
    lanes : int
        Lanes per transfer.

    Every input row is written once into a one-row buffer (``width * channels / lanes`` words of
    ``lanes`` lanes) and read ``scale_h`` times, each pixel's transfers repeated ``scale_w``
    times. Reading a row may start as soon as its first pixel is written; the next row is
    written into the places the last reading pass has finished with, so the input is taken
    while the output streams. Output: one transfer per cycle while the data is there
    (``scale_h * scale_w`` output transfers per input transfer), latency 2 cycles (buffer read
    and output register). ``i.ready`` depends only on registers (the write permission);
    ``o.valid``/``o.payload`` are registers held while ``o`` stalls (global enable
    ``~o.valid | o.ready``).

    Ports: ``i`` (in), ``o`` (out).
    """

    def __init__(self, elem_shape, height: int, width: int, channels: int, scale_h: int, scale_w: int,
                 lanes: int = 1):
        (self.elem_shape, self.height, self.width, self.channels, self.scale_h, self.scale_w,
         self.lanes) = _params(elem_shape, height, width, channels, scale_h, scale_w, lanes)
        layout = _p.lanes_layout(self.elem_shape, self.lanes)
        super().__init__({"i": In(stream.Signature(layout)), "o": Out(stream.Signature(layout))})

    def elaborate(self, platform):
        m = Module()
        g_n, w_n, sh, sw = self.channels // self.lanes, self.width, self.scale_h, self.scale_w
        depth = g_n * w_n
        word = self.elem_shape.width * self.lanes
        mem = memory.Memory(shape=word, depth=depth, init=[])
        m.submodules.row = mem
        wr = mem.write_port()
        rd = mem.read_port()
        # writer position (pixel, beat) and reader position (pass, pixel, repeat, beat)
        wpix, wg, wptr = Signal(range(w_n)), Signal(range(g_n)), Signal(range(depth))
        rr, rpix, rrep, rg = Signal(range(sh)), Signal(range(w_n)), Signal(range(sw)), Signal(range(g_n))
        rbase = Signal(range(depth))  # rpix * g_n
        ahead = Signal()  # the writer is on the row after the one being read
        en = Signal()
        m.d.comb += en.eq(~self.o.valid | self.o.ready)
        can_write = Signal()
        can_read = Signal()
        m.d.comb += [
            can_write.eq(~ahead | ((rr == sh - 1) & (rpix > wpix))),
            can_read.eq(ahead | (rbase + rg < wptr)),
            self.i.ready.eq(can_write),
        ]
        write = self.i.valid & can_write
        read = en & can_read
        wfin, rfin = Signal(), Signal()
        m.d.comb += [
            wr.addr.eq(wptr), wr.data.eq(self.i.payload.as_value()), wr.en.eq(write),
            rd.addr.eq(rbase + rg), rd.en.eq(en),
            wfin.eq(write & (wptr == depth - 1)),
            rfin.eq(read & (rr == sh - 1) & (rpix == w_n - 1) & (rrep == sw - 1) & (rg == g_n - 1)),
        ]
        with m.If(write):
            m.d.sync += wptr.eq(wptr + 1)
            with m.If(wptr == depth - 1):
                m.d.sync += wptr.eq(0)
            with m.If(wg == g_n - 1):
                m.d.sync += [wg.eq(0), wpix.eq(wpix + 1)]
                with m.If(wpix == w_n - 1):
                    m.d.sync += wpix.eq(0)
            with m.Else():
                m.d.sync += wg.eq(wg + 1)
        with m.If(wfin & ~rfin):
            m.d.sync += ahead.eq(1)
        with m.Elif(rfin & ~wfin):
            m.d.sync += ahead.eq(0)
        with m.If(read):
            with m.If(rg != g_n - 1):
                m.d.sync += rg.eq(rg + 1)
            with m.Else():
                m.d.sync += rg.eq(0)
                with m.If(rrep != sw - 1):
                    m.d.sync += rrep.eq(rrep + 1)
                with m.Else():
                    m.d.sync += rrep.eq(0)
                    with m.If(rpix != w_n - 1):
                        m.d.sync += [rpix.eq(rpix + 1), rbase.eq(rbase + g_n)]
                    with m.Else():
                        m.d.sync += [rpix.eq(0), rbase.eq(0), rr.eq(rr + 1)]
                        with m.If(rr == sh - 1):
                            m.d.sync += rr.eq(0)
        with m.If(en):
            m.d.sync += self.o.valid.eq(can_read)
        m.d.comb += self.o.payload.eq(rd.data)
        return m

    @staticmethod
    def estimate(elem_shape, height: int, width: int, channels: int, scale_h: int, scale_w: int,
                 lanes: int = 1, family: str = "ecp5") -> Cost:
        """The row buffer (:func:`ram_cost`) plus about 60 LUTs of counters and comparisons;
        cycles = output transfers per inference."""
        shape, h, w, c, sh, sw, lanes = _params(elem_shape, height, width, channels, scale_h, scale_w, lanes)
        ram = ram_cost(w * c // lanes, shape.width * lanes, _p.family(family))
        cycles = h * sh * w * sw * c // lanes
        return Cost(cycles, 2, ram.lut + 4 * ram.lutram + 60, ram.ff + shape.width * lanes + 40, 0, ram.ebr)


def _params(elem_shape, height, width, channels, scale_h, scale_w, lanes):
    shape = _p.elem_shape(elem_shape)
    h, w, c = (_p.positive_int(v, n) for v, n in ((height, "height"), (width, "width"), (channels, "channels")))
    sh, sw = _p.positive_int(scale_h, "scale_h"), _p.positive_int(scale_w, "scale_w")
    lanes = _p.positive_int(lanes, "lanes")
    if c % lanes:
        raise ValueError(f"lanes {lanes!r} must divide channels {c!r}")
    return shape, h, w, c, sh, sw, lanes


def bench_config():
    """Representative configuration for ``bench.rtl`` (name, factory, feeds, expect): 2x
    nearest-neighbour upsampling of a 16x16x16 8-bit map, 8 lanes."""
    import numpy as np
    from amaranth.hdl import signed
    x = np.random.default_rng(0).integers(-128, 128, size=(16 * 16 * 2, 8))
    return [("Upsample s8 16x16x16 x2 x8", lambda: UpsampleUnit(signed(8), 16, 16, 16, 2, 2, 8),
             {"i": x}, {"o": 4 * len(x)})]
