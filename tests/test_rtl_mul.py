"""Product builders of onnx2hw.rtl._mul: the LUT product exhaustively against Python's integer
product (the definition) for every operand pair of the widths it is used at; its logic on
ECP5 (carry-chain adders, no DSP) against Yosys."""
import itertools

import numpy as np
import pytest
from amaranth.hdl import Const, Module, Shape, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from amaranth.sim import Simulator

from onnx2hw.rtl._mul import lut_product, pack_pair, pair_field, pair_width, unpack_pair
from onnx2hw.rtl.synth_check import yosys_stat


def _values(shape):
    lo = -(1 << (shape.width - 1)) if shape.signed else 0
    return range(lo, lo + (1 << shape.width))


def _check_exhaustive(sa: Shape, sb: Shape):
    """Every ``a`` of ``sa`` (driven) times every constant ``b`` of ``sb`` (one product each)."""
    a = Signal(sa)
    bs = list(_values(sb))
    m = Module()
    outs = []
    for y in bs:
        e = lut_product(a, Const(y, sb))
        o = Signal(e.shape(), name=f"o{len(outs)}")
        m.d.comb += o.eq(e)
        outs.append(o)
    # the operand order must not matter either: the driven operand as the wider or the narrower
    for y in bs[:3]:
        e = lut_product(Const(y, sb), a)
        o = Signal(e.shape(), name=f"r{len(outs)}")
        m.d.comb += o.eq(e)
        outs.append(o)
    want_b = bs + bs[:3]
    bad = []
    sim = Simulator(m)

    async def tb(ctx):
        for x in _values(sa):
            ctx.set(a, x)
            got = [ctx.get(o) for o in outs]
            exp = [x * y for y in want_b]
            if got != exp:
                k = next(i for i in range(len(got)) if got[i] != exp[i])
                bad.append((x, want_b[k], got[k]))
                return

    sim.add_testbench(tb)
    sim.run()
    assert not bad, f"{sa} x {sb}: a={bad[0][0]} b={bad[0][1]} gave {bad[0][2]}"


SMALL = [Shape(w, s) for w in (1, 2, 3, 4, 5) for s in (False, True)]


@pytest.mark.parametrize("sa,sb", list(itertools.product(SMALL, SMALL)), ids=str)
def test_lut_product_small_widths_exhaustive(sa, sb):
    _check_exhaustive(sa, sb)


@pytest.mark.parametrize("sa,sb", [(Shape(8, True), Shape(8, True)), (Shape(8, False), Shape(8, True)),
                                   (Shape(8, True), Shape(8, False)), (Shape(8, False), Shape(8, False)),
                                   (Shape(4, True), Shape(8, True)), (Shape(8, False), Shape(3, True))], ids=str)
def test_lut_product_8bit_exhaustive(sa, sb):
    _check_exhaustive(sa, sb)


class _Products(wiring.Component):
    """``n`` registered products of registered operands."""

    def __init__(self, sa: Shape, sb: Shape, n: int):
        self.sa, self.sb, self.n = sa, sb, n
        super().__init__({"a": In(sa.width * n), "b": In(sb.width * n), "o": Out(32 * n)})

    def elaborate(self, platform):
        m = Module()
        for i in range(self.n):
            ra, rb, r = Signal(self.sa), Signal(self.sb), Signal(32)
            m.d.sync += [ra.eq(self.a[i * self.sa.width:(i + 1) * self.sa.width]),
                         rb.eq(self.b[i * self.sb.width:(i + 1) * self.sb.width]),
                         r.eq(lut_product(ra, rb))]
            m.d.comb += self.o[32 * i:32 * (i + 1)].eq(r)
        return m


@pytest.mark.synth
def test_lut_product_8x8_is_carry_chain_logic():
    """Four 8x8 signed products: no DSP, and each addition a carry chain (a merged ``$macc``
    would be ~300 LUT4 equivalents per product in LUT full adders; measured 136)."""
    st = yosys_stat(_Products(Shape(8, True), Shape(8, True), 4))
    assert st["dsp"] == 0
    per = (st["lut"] + 2 * st["ccu2c"]) / 4
    assert st["ccu2c"] >= 4 * 28
    assert per <= 160, per


# -- two products per MULT18X18D ------------------------------------------------------------

def _pair_widths():
    """(a, b) operand shapes of 1..4, 7 and 8-bit a and 1..4-bit b (all of which pack)."""
    out = []
    for aw, asg, bw, bsg in itertools.product((1, 2, 3, 4, 7, 8), (False, True), range(1, 5), (False, True)):
        out.append((Shape(aw, asg), Shape(bw, bsg)))
    return out


def test_pair_field_accepts_what_fits_an_18x18_port():
    assert pair_field(4, True, 4, True) == 8                  # packed factor 13 bits
    assert pair_field(8, False, 4, True) == 12                # u8 x s4: 17 bits
    assert pair_field(9, True, 4, True) == 13                 # 13 + 4 + 1 = 18 bits: just fits
    assert pair_field(8, True, 5, True) is None               # 19 bits
    assert pair_field(17, False, 1, True) is None             # packed factor 18 + 1 + 1 bits
    assert pair_field(18, False, 1, True) is None             # u18 does not fit a signed port
    assert pair_field(8, True, 8, True) is None               # 8-bit pairs do not fit
    assert pair_field(18, True, 1, True) is None
    for sa, sb in _pair_widths():
        f = pair_field(sa.width, sa.signed, sb.width, sb.signed)
        assert f is not None, (sa, sb)                        # every a<=8, b<=4 pair fits


@pytest.mark.parametrize("sa,sb", _pair_widths(), ids=str)
def test_pair_products_exhaustive(sa, sb):
    """Every a, b0, b1 of the shapes: the packed product (one ``*``) split into a*b0 and a*b1."""
    field = pair_field(sa.width, sa.signed, sb.width, sb.signed)
    signed = sa.signed or sb.signed
    a = Signal(sa)
    m = Module()
    bs = list(_values(sb))
    pairs = [(b0, b1) for b0 in bs for b1 in bs]
    outs = []
    for b0, b1 in pairs:
        packed = pack_pair(b0, b1, field)
        width = pair_width(field, sb.width)
        assert -(1 << (width - 1)) <= packed < 1 << (width - 1) and width <= 18, (b0, b1, width)
        lo, hi = unpack_pair(a * Const(packed, Shape(pair_width(field, sb.width), True)), field, signed)
        o0, o1 = Signal(lo.shape()), Signal(hi.shape())
        m.d.comb += [o0.eq(lo), o1.eq(hi)]
        outs.append((o0, o1))
    bad = []
    sim = Simulator(m)

    async def tb(ctx):
        for x in _values(sa):
            ctx.set(a, x)
            for (b0, b1), (o0, o1) in zip(pairs, outs):
                if (ctx.get(o0), ctx.get(o1)) != (x * b0, x * b1):
                    bad.append((x, b0, b1, ctx.get(o0), ctx.get(o1)))
                    return

    sim.add_testbench(tb)
    sim.run()
    assert not bad, bad[0]
