"""Pooling blocks on NHWC streams: MaxPoolUnit, AvgPoolUnit (window sum) and GlobalAvgPoolUnit (image sum).

AvgPoolUnit and GlobalAvgPoolUnit output the **sum** over the window / image, widened so it never
overflows; the division by the window size (and any rescaling to the output quantization) is
done by the separate ``Requantize`` block (``onnx2hw.arith.requantize`` semantics) with
multiplier/shift chosen for ``1/count``. The integer average pool is ``sum(x) - area*zp_x``
requantized, with padding elements equal to ``zp_x`` (``pad_value=zp_x``), so that the sum is the
exact real sum over the positions the pool counts whatever they are; where the count varies
with the position (``count_include_pad=0`` with padding, ceil-mode partial windows) a
:class:`~onnx2hw.rtl.pool_divisor.DivisorRequantize` picks the multiplier per output pixel.
"""
from __future__ import annotations

import numpy as np
from amaranth.hdl import Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, fifo, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from ..arith import acc_bits
from ._linebuf import Counter, Geometry, clog2, lands, ram_cost, shape_of
from .cost import FAMILIES, Cost
from .fifo import StreamFIFO
from .window import SlidingWindow

__all__ = ["MaxPoolUnit", "AvgPoolUnit", "GlobalAvgPoolUnit", "sum_shape", "bench_config"]


def _elem_range(shape):
    w = shape.width
    return (-(1 << (w - 1)), (1 << (w - 1)) - 1) if shape.signed else (0, (1 << w) - 1)


def sum_shape(elem_shape, count: int):
    """Narrowest shape holding the sum of ``count`` elements of ``elem_shape`` (same signedness)."""
    shape = shape_of(elem_shape)
    lo, hi = _elem_range(shape)
    if shape.signed:
        return signed(acc_bits(lo * count, hi * count))
    return unsigned(max(1, (hi * count).bit_length()))


class _WindowPool(wiring.Component):
    """SlidingWindow (depthwise order) followed by a reduction over ``KH*KW`` transfers."""

    #: its latency is the wait for its first input rows (the stage's ``fill``)
    LATENCY_IN_FILL = True

    _op = None  # "max" | "sum"

    def __init__(self, height, width, channels, kernel, *, stride=None, pads=0, dilation=1,
                 elem_shape=unsigned(8), simd=1, pad_value=None, buffer_rows=None):
        stride = kernel if stride is None else stride
        g = Geometry.make(height, width, channels, kernel, stride, pads, dilation, simd)
        self.geom = g
        self.elem_shape = shape_of(elem_shape)
        if any(p >= k for p, k in zip(g.pads, (g.eh, g.ew, g.eh, g.ew))):
            raise ValueError(f"pads {pads!r} must be smaller than the kernel's extent {(g.eh, g.ew)!r}")
        lo, _ = _elem_range(self.elem_shape)
        if pad_value is None:
            pad_value = lo if self._op == "max" else 0
        self.pad_value = pad_value
        self._window_args = dict(height=height, width=width, channels=channels, kernel=kernel,
                                 stride=stride, pads=pads, dilation=dilation,
                                 elem_shape=self.elem_shape, simd=simd, pad_value=pad_value,
                                 depthwise=True, buffer_rows=buffer_rows)
        # validates pad_value / buffer_rows
        self._window = SlidingWindow(**self._window_args)
        count = g.kh * g.kw
        self.out_elem_shape = self.elem_shape if self._op == "max" else sum_shape(self.elem_shape, count)
        super().__init__({
            "i": In(stream.Signature(data.ArrayLayout(self.elem_shape, g.simd))),
            "o": Out(stream.Signature(data.ArrayLayout(self.out_elem_shape, g.simd))),
        })

    @property
    def out_shape(self) -> tuple[int, int]:
        return self.geom.out_h, self.geom.out_w

    @property
    def in_transfers(self) -> int:
        return self.geom.in_transfers

    @property
    def out_transfers(self) -> int:
        return self.geom.out_pixels * self.geom.fold

    @classmethod
    def estimate(cls, height, width, channels, kernel, *, stride=None, pads=0, dilation=1,
                 elem_shape=unsigned(8), simd=1, pad_value=None, buffer_rows=None,
                 family="ecp5") -> Cost:
        """Cost without elaboration: the window generator plus the per-lane reducer.

        Same conventions as :meth:`SlidingWindow.estimate` (``lut`` = LUT4 + 6 per LUTRAM cell).
        """
        if family not in FAMILIES:
            raise ValueError(f"family must be one of {FAMILIES!r}, not {family!r}")
        stride = kernel if stride is None else stride
        shape = shape_of(elem_shape)
        win = SlidingWindow.estimate(height, width, channels, kernel, stride=stride, pads=pads,
                                     dilation=dilation, elem_shape=shape, simd=simd,
                                     depthwise=True, buffer_rows=buffer_rows, family=family)
        g = Geometry.make(height, width, channels, kernel, stride, pads, dilation, simd)
        count = g.kh * g.kw
        ow = shape.width if cls._op == "max" else sum_shape(shape, count).width
        # per lane: a compare (carry chain) or adder plus a select, acc and out registers
        lut = win.lut + g.simd * ow + 3
        ff = win.ff + 2 * g.simd * ow + clog2(count) + 1
        return Cost(cycles=win.cycles, latency=win.latency + count + 1, lut=lut, ff=ff, dsp=0,
                    ebr=win.ebr)

    def elaborate(self, platform):
        g = self.geom
        m = Module()
        m.submodules.window = win = self._window
        wiring.connect(m, wiring.flipped(self.i), win.i)
        count = g.kh * g.kw
        lanes = g.simd
        acc = Signal(data.ArrayLayout(self.out_elem_shape, lanes))
        out = Signal(data.ArrayLayout(self.out_elem_shape, lanes))
        out_valid = Signal()
        cnt = Counter(count, "cnt")         # registered last flag
        first = Signal(init=1)              # registered ``cnt == 0``
        m.d.comb += [
            win.o.ready.eq(~cnt.last | ~out_valid | self.o.ready),
            self.o.valid.eq(out_valid),
            self.o.payload.eq(out),
        ]
        with m.If(self.o.valid & self.o.ready):
            m.d.sync += out_valid.eq(0)
        x = win.o.payload
        comb = []
        for j in range(lanes):
            if self._op == "max":
                r = Mux(first | (x[j] > acc[j]), x[j], acc[j])
            else:
                r = Mux(first, x[j], acc[j] + x[j])
            comb.append(r)
        with m.If(win.o.valid & win.o.ready):
            m.d.sync += cnt.wrap() + [first.eq(cnt.last)]
            with m.If(cnt.last):
                m.d.sync += [out[j].eq(comb[j]) for j in range(lanes)]
                m.d.sync += out_valid.eq(1)
            with m.Else():
                m.d.sync += [acc[j].eq(comb[j]) for j in range(lanes)]
        return m


class MaxPoolUnit(_WindowPool):
    """k×k max pooling over an NHWC stream (``signed``/``unsigned`` elements).

    Built as a :class:`~onnx2hw.rtl.window.SlidingWindow` in depthwise order followed by a
    per-lane running maximum over the ``KH*KW`` transfers of each channel group.

    Parameters
    ----------
    height, width, channels, kernel, pads, dilation, elem_shape, simd, buffer_rows
        As for :class:`SlidingWindow`; every pad must be smaller than the kernel's extent
        ``(k - 1) * dilation + 1`` (the kernel itself without dilation, the ONNX rule).
    stride : int or (int, int), optional
        Default: the kernel. ``ceil_mode`` is expressed by extra bottom/right padding.
    pad_value : int, optional
        Default the most negative value of ``elem_shape`` (so padding never wins, as ONNX's
        -inf padding).

    Interface
    ---------
    i : In(ArrayLayout(elem_shape, simd)), ``H*W*C/simd`` transfers per image.
    o : Out(ArrayLayout(elem_shape, simd)), ``OH*OW*C/simd`` transfers per image, NHWC.

    Timing
    ------
    Initiation interval ``max(H*W, OH*OW*KH*KW) * C/simd`` cycles per image (plus the window
    generator's bubbles); latency = window latency + ``KH*KW`` cycles.
    Backpressure: ``o`` is a register held until taken; the window stream stalls behind it.
    """

    _op = "max"


class AvgPoolUnit(_WindowPool):
    """k×k window **sum** over an NHWC stream (average pooling before requantization).

    Output elements are ``sum_shape(elem_shape, KH*KW)`` wide (same signedness), so the sum
    never overflows. Divide/rescale with the ``Requantize`` block (see module docstring).
    Padding elements equal ``pad_value`` (default 0; use the input zero point) and are summed;
    a ceil-mode partial last window is extra bottom/right padding.

    Parameters, interface and timing as :class:`MaxPoolUnit` (stride defaults to the kernel).
    """

    _op = "sum"


class GlobalAvgPoolUnit(wiring.Component):
    """Per-channel **sum** over ``H×W`` (global average pooling before requantization).

    Parameters
    ----------
    height, width, channels : int
        Input image; a 1-D tensor is ``height=1``.
    elem_shape : Shape
        ``signed(w)``/``unsigned(w)`` input elements.
    simd : int
        Channels per transfer; must divide ``channels``.

    Interface
    ---------
    i : In(ArrayLayout(elem_shape, simd)), ``H*W*C/simd`` transfers per image.
    o : Out(ArrayLayout(sum_shape(elem_shape, H*W), simd)), ``C/simd`` transfers per image
        (one output pixel), emitted while the image's last pixel streams in.

    Timing
    ------
    Initiation interval ``H*W*C/simd`` cycles (one input transfer per cycle); latency from
    the last input transfer of a channel group to its output: 2 cycles (3 with the partial sums
    in block RAM). Per-channel partial sums live in a ``C/simd``-deep RAM (a register when
    ``C/simd`` is 1), read into a register as the transfer is taken and written back, with the
    sum, the cycle after: no path runs from the RAM through the adder (a read-modify-write in
    one cycle would be the block's longest path). In block RAM the read register is the RAM's
    own (late clock-to-out, :mod:`~.ram_outreg`), so the data lands in a fabric register first
    and the write is a cycle later again (the RAM's late data through the adder would be too
    long a path). Groups come
    back at least 2 cycles apart (more than 16 in block RAM), so a read never needs a write
    still in flight. Sums of the image's last pixel go to an output FIFO of one entry more
    than the sums in flight; the input stalls on the last pixel only while that FIFO (with
    them) is full.
    """

    #: its latency is the wait for its first input rows (the stage's ``fill``)
    LATENCY_IN_FILL = True

    def __init__(self, height, width, channels, *, elem_shape=unsigned(8), simd=1):
        self.geom = g = Geometry.make(height, width, channels, 1, 1, 0, 1, simd)
        self.elem_shape = shape_of(elem_shape)
        self.out_elem_shape = sum_shape(self.elem_shape, g.height * g.width)
        super().__init__({
            "i": In(stream.Signature(data.ArrayLayout(self.elem_shape, g.simd))),
            "o": Out(stream.Signature(data.ArrayLayout(self.out_elem_shape, g.simd))),
        })

    @property
    def in_transfers(self) -> int:
        return self.geom.in_transfers

    @property
    def out_transfers(self) -> int:
        return self.geom.fold

    def _lands(self, family: str) -> bool:
        """Whether the partial sums' read lands in a fabric register (they are in block RAM)."""
        g = self.geom
        return g.fold > 1 and lands(g.fold, self.out_elem_shape.width * g.simd, family)

    @staticmethod
    def estimate(height, width, channels, *, elem_shape=unsigned(8), simd=1,
                 family="ecp5") -> Cost:
        """Cost without elaboration, calibrated against Yosys ``synth_ecp5`` ``stat``
        (``lut`` = LUT4 + 6 per LUTRAM cell holding the partial sums)."""
        if family not in FAMILIES:
            raise ValueError(f"family must be one of {FAMILIES!r}, not {family!r}")
        g = Geometry.make(height, width, channels, 1, 1, 0, 1, simd)
        ow = sum_shape(elem_shape, g.height * g.width).width
        cf = g.fold
        word = ow * g.simd
        ctrl = clog2(cf) + clog2(g.height * g.width) + 1
        land = int(cf > 1 and lands(cf, word, family))
        out = StreamFIFO.estimate(unsigned(word), 1, 2, family)   # (a SyncFIFO of 2 or 3 entries alike)
        lut = 1.4 * word + out.lut + 4    # adders in carry chains, first-pixel select, credit
        ff = ctrl + 2 + out.ff
        ebr = 0
        if cf == 1:                       # the sum register
            ff += word
        else:                             # RAM, its read register (in a DP16KD), the input's
            ram = ram_cost(cf, word, family)
            lut += 6 * ram.lutram + (10 if ram.ebr else ram.lut)
            ff += shape_of(elem_shape).width * g.simd + clog2(cf) + 2 + (0 if ram.ebr else word)
            ebr = ram.ebr                 # block RAM: the landing stage (sum and input again)
            ff += land * (word + shape_of(elem_shape).width * g.simd + clog2(cf) + 3)
        return Cost(cycles=g.in_transfers, latency=g.in_transfers + 2 + land, lut=int(round(lut)),
                    ff=int(ff), dsp=0, ebr=ebr)

    def elaborate(self, platform):
        g = self.geom
        m = Module()
        CF, P = g.fold, g.height * g.width
        lanes = g.simd
        lay = data.ArrayLayout(self.out_elem_shape, lanes)
        cf = Signal(range(max(CF, 2)))
        pix = Signal(range(max(P, 2)))
        first = pix == 0
        last = pix == P - 1
        fire = Signal()
        x = self.i.payload
        m.d.comb += fire.eq(self.i.valid & self.i.ready)
        with m.If(fire):
            m.d.sync += cf.eq(Mux(cf == CF - 1, 0, cf + 1))
            with m.If(cf == CF - 1):
                m.d.sync += pix.eq(Mux(last, 0, pix + 1))
        push = Signal()                 # a finished sum (the image's last pixel) is in ``total``
        in_flight = push                # last-pixel sums not yet in the output FIFO
        if CF == 1:                     # one group: the sum in a register, updated as taken
            total = Signal(lay)
            m.d.sync += push.eq(fire & last)
            with m.If(fire):
                m.d.sync += [total[j].eq(Mux(first, x[j], total[j] + x[j])) for j in range(lanes)]
        else:
            # Stage 1 (as the transfer is taken): the group's partial sum, read from the RAM
            # (asynchronous port + register: the block RAM's own read register), and the input.
            # Stage 2: their sum, written back unless it is the last pixel's.
            # A group's write lands a cycle before its next read (CF >= 2), so no bypass.
            mem = memory.Memory(shape=lay, depth=CF, init=[], attrs={"no_rw_check": 1})
            m.submodules.mem = mem
            wp = mem.write_port()
            rp = mem.read_port(domain="comb")
            part, x1 = Signal(lay, reset_less=True), Signal.like(x)   # (no reset: see part2)
            a1, f1, l1, v1 = Signal.like(cf), Signal(), Signal(), Signal()
            m.d.comb += rp.addr.eq(cf)
            m.d.sync += v1.eq(fire)
            with m.If(fire):
                m.d.sync += [part.eq(rp.data), x1.eq(x), a1.eq(cf), f1.eq(first), l1.eq(last)]
            if self._lands(getattr(platform, "family", "ecp5")):
                # in block RAM (CF > 16): the read data (late after the clock) lands in a fabric
                # register first, and the sum is written a cycle later; a group's next read is
                # still at least 3 cycles after its read, after the write
                # (part and part2 without reset: the block's output register takes part2,
                # see ram_outreg)
                part2, x2 = Signal(lay, reset_less=True), Signal.like(x)
                a2, f2, l2, v2 = Signal.like(cf), Signal(), Signal(), Signal()
                m.d.sync += [part2.eq(part), x2.eq(x1), a2.eq(a1), f2.eq(f1), l2.eq(l1), v2.eq(v1)]
                in_flight = (v1 & l1) + (v2 & l2)
                part, x1, a1, f1, l1, v1 = part2, x2, a2, f2, l2, v2
            total = Signal(lay)
            m.d.comb += [total[j].eq(Mux(f1, x1[j], part[j] + x1[j])) for j in range(lanes)]
            m.d.comb += [wp.addr.eq(a1), wp.data.eq(total), wp.en.eq(v1 & ~l1), push.eq(v1 & l1)]
        room = 2 + self._lands(getattr(platform, "family", "ecp5"))
        m.submodules.out = q = fifo.SyncFIFO(width=lay.size, depth=room)
        taken = self.o.valid & self.o.ready
        m.d.comb += [
            q.w_data.eq(total.as_value()), q.w_en.eq(push),
            self.o.valid.eq(q.r_rdy), self.o.payload.as_value().eq(q.r_data), q.r_en.eq(self.o.ready),
            # a last-pixel transfer pushes a cycle (two when landing) later: room then for it
            self.i.ready.eq(~last | (q.level + in_flight < room + taken)),
        ]
        return m


def bench_config():
    """Configurations the size of small CNN layers: ``[(name, factory, feeds, expect)]`` (one
    image each; global average pools of small vision and keyword-spotting networks, a 2x2 max
    pool and a 3x3 stride-2 average pool of CNN-sized feature maps)."""
    rng = np.random.default_rng(2)
    cfgs = (
        ("maxpool_2x2_32x32x16_simd8", MaxPoolUnit, dict(height=32, width=32, channels=16,
                                                         kernel=2, elem_shape=unsigned(8), simd=8)),
        ("maxpool_3x3_s2_p1_48x48x8_simd8", MaxPoolUnit, dict(height=48, width=48, channels=8,
                                                              kernel=3, stride=2, pads=1,
                                                              elem_shape=signed(8), simd=8)),
        ("avgpool_3x3_s2_p1_16x16x32_simd8", AvgPoolUnit, dict(height=16, width=16, channels=32,
                                                               kernel=3, stride=2, pads=1,
                                                               elem_shape=signed(8), simd=8)),
        ("globalavgpool_8x8x64_simd8", GlobalAvgPoolUnit, dict(height=8, width=8, channels=64,
                                                              elem_shape=signed(8), simd=8)),
        ("globalavgpool_25x5x64_simd8", GlobalAvgPoolUnit, dict(height=25, width=5, channels=64,
                                                               elem_shape=signed(8), simd=8)),
    )
    out = []
    for name, cls, kw in cfgs:
        def factory(cls=cls, kw=kw):
            return cls(**kw)
        blk = factory()
        lo, hi = _elem_range(blk.elem_shape)
        x = rng.integers(lo, hi + 1, size=(blk.in_transfers, blk.geom.simd))
        out.append((name, factory, {"i": x}, {"o": blk.out_transfers}))
    return out
