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

from onnx2hw.rtl._mul import lut_product
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
