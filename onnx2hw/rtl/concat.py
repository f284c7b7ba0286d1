"""ConcatUnit: channel concatenation of several streams, each requantized onto the output grid."""
from __future__ import annotations

from amaranth.hdl import Module, Mux, Signal, signed
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ..arith import TIES, acc_bits
from . import _blockparams as _p
from ._scaled_term import input_register, shape_range, term_kind, term_of_register, term_range
from .cost import Cost

__all__ = ["ConcatUnit", "bench_config"]




class ConcatUnit(wiring.Component):
    """Per pixel, the channels of input 0, then of input 1, ...; input ``k`` requantized as
    ``y = clamp(zero_point + (((x - zeros[k]) * mults[k] + 2**(shifts[k]-1)) >> shifts[k]), lo, hi)``
    (:func:`onnx2hw.arith.requantize` of ``x - zeros[k]``; round half up, or half to even with
    ``ties="even"``: the rounding term ``2**(s-1) - 1`` plus bit ``s`` of the product; no rounding
    term when the shift is 0). An input already on the output grid (``mults[k] = 1``, ``shifts[k] = 0``,
    ``zeros[k] = zero_point``) is copied.

    Parameters
    ----------
    in_shapes : sequence of ShapeLike
        Lane shape of every input (two or more).
    channels : sequence of int
        Channels per pixel of every input; ``lanes`` divides each.
    out_shape : ShapeLike
        Output lane shape.
    pixels : int
        Pixels per inference (``H * W``); only used by :meth:`estimate` for the cycle count.
    lanes : int
        Lanes per transfer on every port.
    zeros, mults, shifts : sequence of int
        Per input: zero point, multiplier (``|m| < 2**32``), shift (0..62).
    zero_point, lo, hi : int
        Output zero point and clamp (default: the range of ``out_shape``; must lie inside it).
    ties : str
        ``"up"`` (round half up, default) or ``"even"`` (round half to even).

    Shifts are equalised to the largest (``m << (S - s)``, exact for both rules:
    :class:`~onnx2hw.rtl.requant.Requantize`), so the
    shift is a wire shift. A term ``(x - z) * m`` is a shift for power-of-two ``m``, a constant
    table for inputs of at most 4 bits, otherwise one ``*`` (an 18x18 DSP per lane and input).
    Latency 3 cycles (input ``x - zero`` registers, term register, clamped-output register: a
    DSP's factors and product are registers), one output transfer per cycle.
    ``ik.ready = en & (sel == k)`` with the global enable ``en = ~o.valid | o.ready``;
    ``o.valid``/``o.payload`` are registers (stream rules hold: ``o.valid`` never depends on
    ``o.ready``).

    Ports: ``i0`` ... ``i{n-1}`` (in), ``o`` (out); :attr:`in_ports` lists the inputs in order.
    """

    def __init__(self, in_shapes, channels, out_shape, lanes: int = 1, *, pixels: int = 1, zeros, mults,
                 shifts, zero_point: int = 0, lo: int | None = None, hi: int | None = None, ties: str = "up"):
        p = _params(in_shapes, channels, out_shape, lanes, pixels, zeros, mults, shifts, zero_point, lo, hi, ties)
        (self.in_shapes, self.channels, self.out_shape, self.lanes, self.pixels, self.zeros, self.mults,
         self.shifts, self.zero_point, self.lo, self.hi, self.ties) = p
        self.max_shift = max(self.shifts)
        self.m_norm = tuple(m << (self.max_shift - s) for m, s in zip(self.mults, self.shifts))
        ports = {f"i{k}": In(stream.Signature(_p.lanes_layout(s, self.lanes))) for k, s in enumerate(self.in_shapes)}
        ports["o"] = Out(stream.Signature(_p.lanes_layout(self.out_shape, self.lanes)))
        super().__init__(ports)

    @property
    def in_ports(self):
        return [getattr(self, f"i{k}") for k in range(len(self.in_shapes))]

    def elaborate(self, platform):
        m = Module()
        n, lanes = len(self.in_shapes), self.lanes
        beats = [c // lanes for c in self.channels]
        ins = self.in_ports
        en = Signal()
        m.d.comb += en.eq(~self.o.valid | self.o.ready)
        sel = Signal(range(n), name="sel")
        beat = Signal(range(max(beats)), name="beat")
        valid = Signal()
        for k, port in enumerate(ins):
            m.d.comb += port.ready.eq(en & (sel == k))
            with m.If(sel == k):
                m.d.comb += valid.eq(port.valid)
        take = en & valid
        with m.If(take):
            for k in range(n):
                with m.If(sel == k):
                    with m.If(beat == beats[k] - 1):
                        m.d.sync += [beat.eq(0), sel.eq(0 if k == n - 1 else k + 1)]
                    with m.Else():
                        m.d.sync += beat.eq(beat + 1)
        ranges = [term_range(s, z, mm) for s, z, mm in zip(self.in_shapes, self.zeros, self.m_norm)]
        t_shape = signed(acc_bits(min(r[0] for r in ranges), max(r[1] for r in ranges)))
        half = (1 << (self.max_shift - 1)) if self.max_shift else 0
        low_half = half - (self.ties == "even" and self.max_shift > 0)   # the least rounding term
        y_lo = ((min(r[0] for r in ranges) + low_half) >> self.max_shift) + self.zero_point
        y_hi = ((max(r[1] for r in ranges) + half) >> self.max_shift) + self.zero_point
        y_shape = signed(acc_bits(min(y_lo, 0), max(y_hi, 0)))
        v0, v1 = Signal(), Signal()
        sel0 = Signal.like(sel)
        for j in range(lanes):
            t1 = Signal(t_shape, name=f"t{j}")
            regs = [input_register(m, en, port.payload[j], s, z, mm, f"x{k}_{j}")
                    for k, (port, s, z, mm) in enumerate(zip(ins, self.in_shapes, self.zeros, self.m_norm))]
            terms = [term_of_register(m, r, s, z, mm, f"term{k}_{j}")
                     for k, (r, s, z, mm) in enumerate(zip(regs, self.in_shapes, self.zeros, self.m_norm))]
            chosen = terms[-1]
            for k in range(n - 2, -1, -1):
                chosen = Mux(sel0 == k, terms[k], chosen)
            y = Signal(y_shape, name=f"y{j}")
            if self.ties == "even" and self.max_shift:   # a tie rounds up from an odd quotient only
                rounded = (t1 + (half - 1) + (t1 >> self.max_shift)[0]) >> self.max_shift
            else:
                rounded = (t1 + half) >> self.max_shift
            m.d.comb += y.eq(rounded + self.zero_point)
            with m.If(en):
                m.d.sync += [t1.eq(chosen),
                             self.o.payload[j].eq(Mux(y < self.lo, self.lo, Mux(y > self.hi, self.hi, y)))]
        with m.If(en):
            m.d.sync += [sel0.eq(sel), v0.eq(valid), v1.eq(v0), self.o.valid.eq(v1)]
        return m

    @staticmethod
    def estimate(in_shapes, channels, out_shape, lanes: int = 1, *, pixels: int = 1, zeros, mults, shifts,
                 zero_point: int = 0, lo: int | None = None, hi: int | None = None, ties: str = "up",
                 family: str = "ecp5") -> Cost:
        """Cost without elaboration (fitted to Yosys ``synth_ecp5``): per lane, the rounding add and
        clamp (about ``out_width + 2`` LUTs) and 4 LUTs of glue per product; a product of an
        ``m``-bit multiplier (its trailing zeros are free) takes ``ceil(m / 18)`` 18x18 DSPs per 18
        input bits; cycles = output transfers per inference."""
        (in_shapes, channels, out_shape, lanes, pixels, zeros, mults, shifts, zero_point, lo,
         hi, ties) = _params(in_shapes, channels, out_shape, lanes, pixels, zeros, mults, shifts, zero_point, lo, hi,
                             ties)
        _p.family(family)
        s_max = max(shifts)
        norm = [mm << (s_max - s) for mm, s in zip(mults, shifts)]
        ranges = [term_range(s, z, mm) for s, z, mm in zip(in_shapes, zeros, norm)]
        t_w = acc_bits(min(r[0] for r in ranges), max(r[1] for r in ranges))
        dsp = products = table = 0
        for s, mm in zip(in_shapes, norm):
            kind = term_kind(s, mm)
            if kind == "dsp":
                m_bits = (abs(mm) >> ((abs(mm) & -abs(mm)).bit_length() - 1)).bit_length() + 1
                dsp += -(-m_bits // 18) * -(-(s.width + 1) // 18)
                products += 1
            elif kind == "table":
                table += t_w
        even = ties == "even" and s_max > 0       # bit S of the term into the rounding add
        lut = lanes * (out_shape.width + 2 + 4 * products + table + even * t_w) + 4 * len(in_shapes)
        ff = lanes * (out_shape.width + (4 if products else t_w) + sum(s.width + 1 for s in in_shapes)) + 6
        cycles = pixels * sum(channels) // lanes
        return Cost(cycles, 3, lut, ff, dsp * lanes, 0)


def _params(in_shapes, channels, out_shape, lanes, pixels, zeros, mults, shifts, zero_point, lo, hi, ties):
    in_shapes = tuple(_p.elem_shape(s, "in_shapes entry") for s in in_shapes)
    if len(in_shapes) < 2:
        raise ValueError(f"in_shapes must name two or more inputs, not {len(in_shapes)!r}")
    n = len(in_shapes)
    channels = tuple(_p.positive_int(c, "channels entry") for c in channels)
    out_shape = _p.elem_shape(out_shape, "out_shape")
    lanes = _p.positive_int(lanes, "lanes")
    pixels = _p.positive_int(pixels, "pixels")
    zeros = tuple(_p.integer(v, "zeros entry") for v in zeros)
    mults = tuple(_p.integer(v, "mults entry") for v in mults)
    shifts = tuple(_p.integer(v, "shifts entry") for v in shifts)
    for what, v in (("channels", channels), ("zeros", zeros), ("mults", mults), ("shifts", shifts)):
        if len(v) != n:
            raise ValueError(f"{what} must have one entry per input ({n}), not {len(v)}")
    bad = [c for c in channels if c % lanes]
    if bad:
        raise ValueError(f"lanes {lanes!r} must divide every input's channels {channels!r}")
    if any(abs(v) >= 1 << 32 for v in mults):
        raise ValueError(f"mults must satisfy |m| < 2**32, not {mults!r}")
    if any(not 0 <= s <= 62 for s in shifts):
        raise ValueError(f"shifts must be in 0..62, not {shifts!r}")
    zero_point = _p.integer(zero_point, "zero_point")
    olo, ohi = shape_range(out_shape)
    lo = olo if lo is None else _p.integer(lo, "lo")
    hi = ohi if hi is None else _p.integer(hi, "hi")
    if not olo <= lo <= hi <= ohi:
        raise ValueError(f"clamp range [{lo!r}, {hi!r}] must be non-empty and inside [{olo}, {ohi}] of "
                         f"out_shape {out_shape!r}")
    if ties not in TIES:
        raise ValueError(f"ties must be one of {TIES!r}, not {ties!r}")
    return in_shapes, channels, out_shape, lanes, pixels, zeros, mults, shifts, zero_point, lo, hi, ties


def bench_config():
    """Representative configuration for ``bench.rtl`` (name, factory, feeds, expect): two 8-bit
    inputs of 16 channels, 8 lanes; input 0 requantized through DSP products, input 1 copied."""
    import numpy as np
    from amaranth.hdl import signed
    rng = np.random.default_rng(0)
    pixels = 128
    a, b = (rng.integers(-128, 128, size=(pixels * 2, 8)) for _ in range(2))
    q = dict(zeros=(-3, 7), mults=(23170, 1), shifts=(15, 0), zero_point=7)
    return [("Concat s8,s8->s8 16+16ch x8", lambda: ConcatUnit((signed(8), signed(8)), (16, 16),
                                                                 signed(8), 8, **q),
             {"i0": a, "i1": b}, {"o": 4 * pixels})]
