"""DSP product Fmax: ``n`` signed 18x18 products on the LFE5U-85F-6 (CABGA381, out of context),
each between fabric operand registers and a fabric product register, for each product register
choice of :data:`onnx2hw.rtl._dsp.PRODUCT_REGISTER` (``None``: the behavioural registers, which
Yosys maps to fabric flip-flops around a combinational MULT18X18D), placer seeds 1, 2, 3.

The primitive's figures are nextpnr's timing model: it times fabric -> DSP input register and DSP
product register -> fabric, not the path inside the DSP.
"""
from __future__ import annotations

from amaranth.hdl import Module, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

import onnx2hw.rtl._dsp as dsp
from onnx2hw.rtl.synth_check import FAMILY, nextpnr_fmax

#: products per probe design: one alone, and a column's worth competing for routes
COUNTS = (1, 32)
VARIANTS = ("PIPELINE", "OUTPUT", None)
SEEDS = (1, 2, 3)


class FmaxProbe(wiring.Component):
    """``n`` signed 18x18 products, each between fabric operand registers and a fabric product
    register, with one clock enable."""

    def __init__(self, n=1):
        self.n = n
        super().__init__({"a": In(signed(18)), "b": In(signed(18)), "en": In(1),
                          "p": Out(signed(36)).array(n)})

    def elaborate(self, platform):
        m = Module()
        for k in range(self.n):
            ra, rb = Signal(signed(18), name=f"ra{k}"), Signal(signed(18), name=f"rb{k}")
            m.d.sync += [ra.eq(self.a + k), rb.eq(self.b)]
            m.d.sync += self.p[k].eq(dsp.dsp_product(m, ra, rb, platform=platform, en=self.en))
        return m


def bench_dsp() -> list[dict]:
    rows = []
    saved = dsp.PRODUCT_REGISTER
    print(f"{'products':>8}  {'product register':<18} Fmax MHz at seeds {', '.join(map(str, SEEDS))}")
    try:
        for n in COUNTS:
            for variant in VARIANTS:
                if variant is not None:
                    dsp.PRODUCT_REGISTER = variant
                plat = FAMILY if variant is not None else None
                fmax = [nextpnr_fmax(FmaxProbe(n), seed=s, platform=plat) for s in SEEDS]
                rows.append(dict(products=n, register=variant, fmax=fmax))
                label = variant or "fabric (behavioural)"
                print(f"{n:>8}  {label:<18} " + "  ".join(f"{f:.1f}" for f in fmax), flush=True)
    finally:
        dsp.PRODUCT_REGISTER = saved
    return rows
