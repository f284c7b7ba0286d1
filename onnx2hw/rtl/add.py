"""Quantized elementwise AddUnit of two streams (residual connections)."""
from __future__ import annotations

from amaranth.hdl import Const, Module, Mux, Signal, signed
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ..arith import TIES, acc_bits
from . import _blockparams as _p
from ._arith_pipe import OutputQueue, delay, queue_depth, queued
from ._dsp import PRODUCT_LATENCY, product_dsps
from ._scaled_term import input_register, offset_shape, registered_term, shape_range, term_kind, term_range, term_shape
from .cost import Cost

__all__ = ["AddUnit"]




class AddUnit(wiring.Component):
    """``y = clamp(zp + round((a - za)*Ma + (b - zb)*Mb, shift))`` lane by lane.

    Semantics are exactly :func:`onnx2hw.arith.add_requantized` (round half up, or half to even
    with ``ties="even"``: the rounding term ``2**(shift-1) - 1`` plus bit ``shift`` of the sum;
    one shared shift). ``a`` and ``b`` stream the same tensor layout; transfer ``t`` of ``a``
    is added to transfer ``t`` of ``b``.

    Parameters
    ----------
    a_shape, b_shape, out_shape : ShapeLike
        Lane shapes of ``a``, ``b`` and ``o``.
    lanes : int
        Lanes per transfer, the same on all three ports.
    a_zero, b_zero, zero_point : int
        Zero points of ``a``, ``b`` and the output.
    a_mult, b_mult : int
        Integer multipliers, ``|m| < 2**31``.
    shift : int
        Shared right shift, 0..62.
    lo, hi : int, optional
        Output clamp (default: the range of ``out_shape``; must lie inside it).
    ties : str
        ``"up"`` (round half up, default) or ``"even"`` (round half to even).

    Each term ``(x - zx) * Mx`` is a 2**w-entry constant table (LUTs) for inputs of at most
    4 bits, a shift for power-of-two multipliers, and otherwise one ``*`` (an 18x18 DSP per
    lane and input). Latency 4 cycles (input ``x - zero`` register, term, sum and
    clamped-output registers), ``3 + PRODUCT_LATENCY`` when a term is a DSP product (the DSP's
    own input and product registers and two landing registers: :meth:`stages`), plus the output queue's 2; initiation interval 1.
    The two inputs transfer together (``a.ready = ok & b.valid``, ``b.ready = ok & a.valid``
    with ``ok`` the output queue's credit register, ``_arith_pipe.OutputQueue``); the datapath
    runs free. ``o`` comes from the queue's registers (stream rules hold).

    Ports: ``a``, ``b`` (in), ``o`` (out).
    """


    def __init__(self, a_shape, b_shape, out_shape, lanes: int = 1, *, a_zero: int = 0,
                 a_mult: int = 1, b_zero: int = 0, b_mult: int = 1, shift: int = 0,
                 zero_point: int = 0, lo: int | None = None, hi: int | None = None, ties: str = "up"):
        p = _params(a_shape, b_shape, out_shape, lanes, a_zero, a_mult, b_zero, b_mult, shift,
                    zero_point, lo, hi, ties)
        (self.a_shape, self.b_shape, self.out_shape, self.lanes, self.a_zero, self.a_mult,
         self.b_zero, self.b_mult, self.shift, self.zero_point, self.lo, self.hi, self.ties) = p
        super().__init__({
            "a": In(stream.Signature(_p.lanes_layout(self.a_shape, self.lanes))),
            "b": In(stream.Signature(_p.lanes_layout(self.b_shape, self.lanes))),
            "o": Out(stream.Signature(_p.lanes_layout(self.out_shape, self.lanes))),
        })

    @staticmethod
    def stages(a_shape, a_mult, b_shape, b_mult) -> int:
        """Pipeline registers: 4, or ``3 + PRODUCT_LATENCY`` when a term is a DSP product (its
        input and landing registers: ``rtl._dsp.registered_product``)."""
        dsp = "dsp" in (term_kind(a_shape, a_mult), term_kind(b_shape, b_mult))
        return 4 + (PRODUCT_LATENCY - 1 if dsp else 0)

    def elaborate(self, platform):
        m = Module()
        n_st = self.stages(self.a_shape, self.a_mult, self.b_shape, self.b_mult)
        oq = OutputQueue(m, self.o, queue_depth(n_st))
        en = Const(1)     # free-running datapath: a pair enters while the output queue has a credit
        m.d.comb += [
            self.a.ready.eq(oq.ok & self.b.valid),
            self.b.ready.eq(oq.ok & self.a.valid),
            oq.reserve.eq(oq.ok & self.a.valid & self.b.valid),
        ]
        half = (1 << (self.shift - 1)) if self.shift else 0
        ta_lo, ta_hi = term_range(self.a_shape, self.a_zero, self.a_mult)
        tb_lo, tb_hi = term_range(self.b_shape, self.b_zero, self.b_mult)
        low_half = half - (self.ties == "even" and self.shift > 0)   # the least rounding term
        y_shape = signed(acc_bits(((ta_lo + tb_lo + low_half) >> self.shift) + self.zero_point,
                                  ((ta_hi + tb_hi + half) >> self.shift) + self.zero_point))
        tst = n_st - 3      # term registers: 1, or PRODUCT_LATENCY beside a DSP product
        for j in range(self.lanes):
            ra = input_register(m, en, self.a.payload[j], self.a_shape, self.a_zero, self.a_mult,
                                f"a{j}")
            rb = input_register(m, en, self.b.payload[j], self.b_shape, self.b_zero, self.b_mult,
                                f"b{j}")
            ta = registered_term(m, ra, self.a_shape, self.a_zero, self.a_mult, tst, platform, f"ta{j}")
            tb = registered_term(m, rb, self.b_shape, self.b_zero, self.b_mult, tst, platform, f"tb{j}")
            y = Signal(y_shape, name=f"y{j}")
            total = ta + tb
            if self.ties == "even" and self.shift:   # a tie rounds up from an odd quotient only
                rounded = (total + (half - 1) + (total >> self.shift)[0]) >> self.shift
            else:
                rounded = (total + half) >> self.shift
            m.d.sync += [
                y.eq(rounded + self.zero_point),
                oq.data[j].eq(Mux(y < self.lo, self.lo, Mux(y > self.hi, self.hi, y))),
            ]
        # valid: the input register, the term registers, the sum
        m.d.sync += oq.valid.eq(delay(m, en, oq.reserve, n_st - 1, name="v")[-1])
        return m

    @staticmethod
    def estimate(a_shape, b_shape, out_shape, lanes: int = 1, *, a_zero: int = 0,
                 a_mult: int = 1, b_zero: int = 0, b_mult: int = 1, shift: int = 0,
                 zero_point: int = 0, lo: int | None = None, hi: int | None = None,
                 ties: str = "up", family: str = "ecp5") -> Cost:
        """Cost without elaboration (calibrated against Yosys ``synth_ecp5``)."""
        (a_shape, b_shape, out_shape, lanes, a_zero, a_mult, b_zero, b_mult, shift, zero_point,
         lo, hi, ties) = _params(a_shape, b_shape, out_shape, lanes, a_zero, a_mult, b_zero, b_mult,
                                 shift, zero_point, lo, hi, ties)
        family = _p.family(family)
        half = (1 << (shift - 1)) if shift else 0
        lut = ff = dsp = 0
        ranges = []
        for shape, z, mult in ((a_shape, a_zero, a_mult), (b_shape, b_zero, b_mult)):
            ranges.append(term_range(shape, z, mult))
            t = term_shape(shape, z, mult).width
            tz = (abs(mult) & -abs(mult)).bit_length() - 1 if mult else t   # constant LSBs
            kind = term_kind(shape, mult)
            ff += max(0, t - tz) + shape.width + (1 if kind != "table" else 0)  # input register
            if kind == "table":
                lut += max(0, t - tz)            # one LUT4 per non-constant table bit
            elif kind == "dsp":
                dsp += product_dsps(offset_shape(shape, z), mult)
                lut += shape.width + 2 if z else 2
                if family == "ice40":            # adder bits take an SB_LUT4 beside SB_CARRY
                    lut += 3 * t // 4
            elif z:
                lut += shape.width + 1           # zero-point subtraction
        (alo, ahi), (blo, bhi) = ranges
        y_w = acc_bits(((alo + blo + half) >> shift) + zero_point,
                       ((ahi + bhi + half) >> shift) + zero_point)
        lut += 3 * y_w + 2                       # rounding/zero-point adds (plus CCU2C), clamp
        if ties == "even" and shift:
            lut += y_w + shift                   # bit `shift` of the sum into the rounding add
        ff += y_w + out_shape.width
        st = AddUnit.stages(a_shape, a_mult, b_shape, b_mult)
        return queued(Cost(1, st, lut * lanes + 3, ff * lanes + 4, dsp * lanes, 0),
                      out_shape, lanes, st, family=family)


def _params(a_shape, b_shape, out_shape, lanes, a_zero, a_mult, b_zero, b_mult, shift,
            zero_point, lo, hi, ties):
    a_shape = _p.elem_shape(a_shape, "a_shape")
    b_shape = _p.elem_shape(b_shape, "b_shape")
    out_shape = _p.elem_shape(out_shape, "out_shape")
    lanes = _p.positive_int(lanes, "lanes")
    a_zero, b_zero = _p.integer(a_zero, "a_zero"), _p.integer(b_zero, "b_zero")
    zero_point = _p.integer(zero_point, "zero_point")
    a_mult, b_mult = _p.integer(a_mult, "a_mult"), _p.integer(b_mult, "b_mult")
    for name, v in (("a_mult", a_mult), ("b_mult", b_mult)):
        if abs(v) >= 1 << 31:
            raise ValueError(f"{name} must satisfy |{name}| < 2**31, not {v!r}")
    shift = _p.integer(shift, "shift")
    if not 0 <= shift <= 62:
        raise ValueError(f"shift must be in 0..62, not {shift!r}")
    olo, ohi = shape_range(out_shape)
    lo = olo if lo is None else _p.integer(lo, "lo")
    hi = ohi if hi is None else _p.integer(hi, "hi")
    if not olo <= lo <= hi <= ohi:
        raise ValueError(f"clamp range [{lo!r}, {hi!r}] must be non-empty and inside "
                         f"[{olo}, {ohi}] of out_shape {out_shape!r}")
    if ties not in TIES:
        raise ValueError(f"ties must be one of {TIES!r}, not {ties!r}")
    return (a_shape, b_shape, out_shape, lanes, a_zero, a_mult, b_zero, b_mult, shift,
            zero_point, lo, hi, ties)


def bench_config():
    """Representative configurations for ``bench.rtl`` (name, factory, feeds, expect): a
    ResNet-style residual add of 8-bit lanes, with DSP terms and with power-of-two terms."""
    import numpy as np
    from amaranth.hdl import signed
    rng = np.random.default_rng(0)
    a, b = (rng.integers(-128, 128, size=(2000, 8)) for _ in range(2))
    q = dict(a_zero=-3, a_mult=23170, b_zero=5, b_mult=-9000, shift=15, zero_point=7)
    qs = dict(a_zero=-3, a_mult=1, b_zero=5, b_mult=2, shift=1, zero_point=7)
    return [("Add s8+s8->s8 x8 (DSP)", lambda: AddUnit(signed(8), signed(8), signed(8), 8, **q),
             {"a": a, "b": b}, {"o": len(a)}),
            ("Add s8+s8->s8 x8 (shift)", lambda: AddUnit(signed(8), signed(8), signed(8), 8, **qs),
             {"a": a, "b": b}, {"o": len(a)})]
