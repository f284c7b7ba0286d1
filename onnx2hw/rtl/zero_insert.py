"""ZeroInsert: ``s - 1`` fill elements between the pixels of an NHWC stream (the input of a
transposed convolution lowered onto a stride-1 convolution)."""
from __future__ import annotations

import numpy as np
from amaranth.hdl import C, Module, Mux, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ._linebuf import Counter, clog2, pair, shape_of
from .cost import FAMILIES, Cost

__all__ = ["ZeroInsert", "bench_config"]


def _positive(name, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an integer, not {value!r}")
    if value < 1:
        raise ValueError(f"{name} must be >= 1, not {value!r}")
    return value


class ZeroInsert(wiring.Component):
    """``y[r, q, c] = x[r / sh, q / sw, c]`` where ``sh`` divides ``r`` and ``sw`` divides
    ``q``, else ``fill``: an ``H x W x C`` image becomes ``((H-1)*sh + 1) x ((W-1)*sw + 1) x C``.

    Parameters
    ----------
    height, width, channels : int
        Input image ``H``, ``W``, ``C`` (a 1-D signal is ``height=1``).
    stride : int or (int, int)
        ``(sh, sw)``: output rows/columns per input row/column (``sh - 1`` fill rows between
        two input rows, ``sw - 1`` fill pixels between two input pixels).
    elem_shape : Shape
        ``signed(w)`` or ``unsigned(w)``; payloads are ``data.ArrayLayout(elem_shape, simd)``.
    simd : int
        Channels per transfer; divides ``channels``.
    fill : int
        The inserted elements' value (a convolution's input zero point); fits ``elem_shape``.

    Interface
    ---------
    i : In(stream.Signature(ArrayLayout(elem_shape, simd))), ``H*W*C/simd`` transfers per image.
    o : Out(stream.Signature(ArrayLayout(elem_shape, simd))), ``Hu*Wu*C/simd`` transfers per
        image, ``Hu = (H-1)*sh + 1``, ``Wu = (W-1)*sw + 1``.

    Timing
    ------
    No buffer: loop counters say whether the next output element is an input element (taken
    from ``i``) or a fill element. One output transfer per cycle: initiation interval
    ``Hu*Wu*C/simd`` cycles per image, latency 1 cycle (the output register).

    Stream rules: ``o.valid`` and ``o.payload`` are registers, loaded only when the register is
    empty or being taken (``~o.valid | o.ready``), so the payload holds until its transfer and
    ``o.valid`` does not depend on ``o.ready``. ``i.ready`` is that same condition while the
    next element is an input element (a registered flag); images follow each other without a
    gap.
    """

    def __init__(self, height, width, channels, stride, *, elem_shape, simd=1, fill=0):
        self.height = _positive("height", height)
        self.width = _positive("width", width)
        self.channels = _positive("channels", channels)
        self.simd = _positive("simd", simd)
        self.stride = pair("stride", stride)
        if self.channels % self.simd:
            raise ValueError(f"simd {simd!r} must divide channels {channels!r}")
        self.elem_shape = shape_of(elem_shape)
        w = self.elem_shape.width
        lo, hi = (-(1 << (w - 1)), (1 << (w - 1)) - 1) if self.elem_shape.signed else (0, (1 << w) - 1)
        if isinstance(fill, bool) or not isinstance(fill, (int, np.integer)):
            raise TypeError(f"fill must be an integer, not {fill!r}")
        if not lo <= int(fill) <= hi:
            raise ValueError(f"fill {fill!r} does not fit {self.elem_shape!r}")
        self.fill = int(fill)
        layout = data.ArrayLayout(self.elem_shape, self.simd)
        super().__init__({"i": In(stream.Signature(layout)), "o": Out(stream.Signature(layout))})

    @property
    def out_shape(self) -> tuple[int, int]:
        """``(Hu, Wu)``."""
        return (self.height - 1) * self.stride[0] + 1, (self.width - 1) * self.stride[1] + 1

    @property
    def in_transfers(self) -> int:
        return self.height * self.width * self.channels // self.simd

    @property
    def out_transfers(self) -> int:
        hu, wu = self.out_shape
        return hu * wu * self.channels // self.simd

    @staticmethod
    def estimate(height, width, channels, stride, *, elem_shape, simd=1, fill=0, family="ecp5") -> Cost:
        """Counters, the fill/input multiplexer and the output register (no RAM, no DSP); fitted to
        Yosys ``synth_ecp5`` ``stat`` (LUT4, flip-flops)."""
        if family not in FAMILIES:
            raise ValueError(f"family must be one of {FAMILIES!r}, not {family!r}")
        sh, sw = pair("stride", stride)
        word = shape_of(elem_shape).width * simd
        cf = channels // simd
        counters = clog2(cf) + clog2(sw) + clog2(width) + clog2(sh) + clog2(height)
        hu, wu = (height - 1) * sh + 1, (width - 1) * sw + 1
        return Cost(cycles=hu * wu * cf, latency=1, lut=word + 2 * counters + 4,
                    ff=word + counters + 8, dsp=0, ebr=0)

    def elaborate(self, platform):
        m = Module()
        sh, sw = self.stride
        f = Counter(self.channels // self.simd, "f")     # transfer of the pixel
        qph = Counter(sw, "qph")                           # fill pixels after input column qi
        qi = Counter(self.width, "qi")
        rph = Counter(sh, "rph")                           # fill rows after input row ri
        ri = Counter(self.height, "ri")
        col0 = Signal(init=1)                              # registered qph == 0
        row0 = Signal(init=1)                              # registered rph == 0
        real = col0 & row0                                 # the next element is an input element
        take = ~self.o.valid | self.o.ready
        load = take & (~real | self.i.valid)
        word = self.elem_shape.width * self.simd
        mask = (1 << self.elem_shape.width) - 1
        fill_raw = sum((self.fill & mask) << (j * self.elem_shape.width) for j in range(self.simd))
        m.d.comb += self.i.ready.eq(take & real)
        with m.If(load):
            m.d.sync += [self.o.valid.eq(1),
                         self.o.payload.as_value().eq(Mux(real, self.i.payload.as_value(), C(fill_raw, unsigned(word))))]
            self._advance(m, f, (qph, qi, col0), (rph, ri, row0))
        with m.Elif(self.o.ready):
            m.d.sync += self.o.valid.eq(0)
        return m

    @staticmethod
    def _advance(m, f, cols, rows):
        """Next output element: transfers of a pixel, then the fill pixels after an input column
        (none after the last), then the next column; the same for rows after the last column."""
        qph, qi, col0 = cols
        rph, ri, row0 = rows
        with m.If(~f.last):
            m.d.sync += f.inc()
        with m.Else():
            m.d.sync += f.clear()
            with m.If(~qph.last & ~qi.last):
                m.d.sync += qph.inc() + [col0.eq(0)]
            with m.Elif(~qi.last):
                m.d.sync += qph.clear() + qi.inc() + [col0.eq(1)]
            with m.Else():
                m.d.sync += qph.clear() + qi.clear() + [col0.eq(1)]
                with m.If(~rph.last & ~ri.last):
                    m.d.sync += rph.inc() + [row0.eq(0)]
                with m.Elif(~ri.last):
                    m.d.sync += rph.clear() + ri.inc() + [row0.eq(1)]
                with m.Else():
                    m.d.sync += rph.clear() + ri.clear() + [row0.eq(1)]


def bench_config():
    """A decoder's 2x upsampling of a 16x16x16 map, 8 lanes: ``[(name, factory, feeds, expect)]``."""
    from amaranth.hdl import signed
    rng = np.random.default_rng(2)
    kw = dict(height=16, width=16, channels=16, stride=2, elem_shape=signed(8), simd=8, fill=-3)

    def factory():
        return ZeroInsert(**kw)
    blk = factory()
    x = rng.integers(-128, 128, size=(blk.in_transfers, 8))
    return [("zero_insert_16x16x16_s2_simd8", factory, {"i": x}, {"o": blk.out_transfers})]
