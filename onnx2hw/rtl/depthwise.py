"""Depthwise multiply-accumulate unit: one MAC per channel lane over a depthwise window stream."""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
from amaranth.hdl import Const, Module, Mux, Shape, Signal, Value, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .. import arith
from ._arith_pipe import (OutputQueue, delay, pack_words, queue_depth, queued, register_operands, rom, rom_cost,
                          rom_latency, rom_register_cost)
from ._dsp import PRODUCT_LATENCY, registered_product
from ._mul import lut_product, lut_product_cost, lut_product_registers, n_dsp
from ._params import MUL_STYLES, acc_width, auto_style, bias_vector, check_bits, check_weight_range, int_array
from .cost import FAMILIES, Cost, unelaborated

__all__ = ["DepthwiseUnit", "bench_config"]


class _Issue(NamedTuple):
    """The issue stage's signals (:meth:`DepthwiseUnit._issue`)."""
    take: Signal          # an input transfer is taken (a beat issues)
    src_data: Value       # its payload
    tap: Signal           # its kernel tap
    grp: Signal           # its channel group
    addr: Signal          # the weight address
    addr_next: Value      # the weight address's next value


def _lanes(flat, width, sgn, count):
    """``count`` lanes of ``width`` bits of ``flat``, signed if ``sgn``."""
    out = []
    for j in range(count):
        v = flat[j * width:(j + 1) * width]
        out.append(v.as_signed() if sgn else v)
    return out


class DepthwiseUnit(wiring.Component):
    """Per-channel dot products ``y[o] = sum_t W[o, t] * x[o // M, t] + bias[o]`` (depthwise convolution).

    The input is the window stream of a :class:`~onnx2hw.rtl.window.SlidingWindow` built with
    ``depthwise=True`` and ``simd=pe``: per output pixel, for each channel group ``f`` of ``pe``
    channels, the ``taps`` (``KH*KW``) transfers of that group, kernel position fastest. With a
    channel ``multiplier`` ``M`` (ONNX Conv with ``group = C`` and ``M*C`` outputs), output
    channel ``o`` reads input channel ``o // M``. Each of the ``pe*M`` output lanes has its own
    multiplier and accumulator (output channel ``f*pe*M + q`` is lane ``q``, fed by input lane
    ``q // M``); after the last tap of a group the sums leave as one transfer, so the output is
    the NHWC pixel stream with ``pe*M`` channels per transfer (what ``Requantize`` takes).

    Parameters
    ----------
    weights : int ndarray, shape (C*M, taps)
        ``W[o, t]`` within ``int_range(weight_bits, weight_signed)``; ``t = kh*KW + kw``.
    bias : int ndarray, shape (C*M,), optional
    in_bits, in_signed, weight_bits, weight_signed : int, bool
        Operand widths (1..32 bits). Products with both operands of at least 3 bits and one of
        at least 5 bits use ``*`` (one ECP5 ``MULT18X18D`` per lane for operands that fit a
        signed 18-bit port); others are LUT and carry-chain logic (``_mul.lut_product``, a
        register inside when the narrower factor has more than 4 bits); ``mul_style`` forces
        one (the folder chooses per layer). Both register their operands first.
    pe : int
        Input channel lanes; must divide ``C``.
    multiplier : int
        Output channels per input channel ``M`` (default 1); must divide the weight rows.
    acc_bits : int, optional
        Accumulator / output width. Default: the exact bound of ``W``, ``bias`` and the input
        range (as the matrix-vector unit); a narrower value is rejected.
    mul_style : {"auto", "dsp", "lut"}

    Ports
    -----
    i : In(stream.Signature(ArrayLayout(in_shape, pe)))
        ``C/pe * taps`` transfers per pixel, order (channel group, tap).
    o : Out(stream.Signature(ArrayLayout(signed(acc_bits), pe*M)))
        ``C/pe`` transfers per pixel.

    Timing
    ------
    Initiation interval: one input transfer per cycle, ``C/pe * taps`` cycles per pixel (one
    kernel tap per cycle, as the window generator emits them; channels are the parallel axis).
    Latency (first input transfer to first output valid): ``taps - 1 + stages``
    (:meth:`pipeline_stages`), plus the output queue's 2. Backpressure: the datapath runs free
    (no enable); an input is taken while the output queue (``_arith_pipe.OutputQueue``) has a
    credit, so ``i.ready`` is a register; ``o`` comes from the queue's registers.
    """

    def __init__(self, weights, bias=None, *, in_bits, in_signed, weight_bits, weight_signed,
                 pe=1, multiplier=1, acc_bits=None, mul_style="auto"):
        w = int_array("weights (channels, taps)", weights, 2)
        if w.shape[0] < 1 or w.shape[1] < 1:
            raise ValueError(f"weights must be a non-empty (channels, taps) array, not shape {w.shape!r}")
        co, k = w.shape
        if not isinstance(multiplier, int) or isinstance(multiplier, bool) or multiplier < 1 or co % multiplier:
            raise ValueError(f"multiplier must be a positive divisor of the {co} weight rows, not {multiplier!r}")
        c = co // multiplier
        check_bits("in_bits", in_bits)
        check_bits("weight_bits", weight_bits)
        if mul_style not in MUL_STYLES:
            raise ValueError(f"mul_style must be one of {MUL_STYLES!r}, not {mul_style!r}")
        if not isinstance(pe, int) or isinstance(pe, bool) or pe < 1 or c % pe:
            raise ValueError(f"pe must be a positive divisor of {c}, not {pe!r}")
        check_weight_range(w, weight_bits, weight_signed)
        xlo, xhi = arith.int_range(in_bits, in_signed)
        b = bias_vector(bias, co)
        acc_bits = acc_width(w, b, xlo, xhi, acc_bits)
        self.weights, self.bias, self.has_bias = w, b, bias is not None
        self.channels, self.taps, self.pe, self.acc_bits = c, k, pe, acc_bits
        self.multiplier, self.lanes_out = multiplier, pe * multiplier
        self.in_bits, self.in_signed = in_bits, bool(in_signed)
        self.weight_bits, self.weight_signed = weight_bits, bool(weight_signed)
        self.style = mul_style if mul_style != "auto" else auto_style(in_bits, weight_bits)
        super().__init__({
            "i": In(stream.Signature(data.ArrayLayout(Shape(in_bits, self.in_signed), pe))),
            "o": Out(stream.Signature(data.ArrayLayout(signed(acc_bits), self.lanes_out))),
        })

    @staticmethod
    def product_style(in_bits: int, weight_bits: int, mul_style: str = "auto") -> str:
        """How products are built (``"dsp"`` or ``"lut"``) for ``mul_style`` (the matrix-vector
        unit's rule)."""
        if mul_style not in MUL_STYLES:
            raise ValueError(f"mul_style must be one of {MUL_STYLES!r}, not {mul_style!r}")
        return mul_style if mul_style != "auto" else auto_style(in_bits, weight_bits)

    @staticmethod
    def _stages(style, in_bits=1, weight_bits=1):
        # input register / weight ROM; DSP and LUT products: operand registers; LUT products of
        # a narrow factor wider than 4 bits: one register inside; product registers; accumulator
        # DSP products: + PRODUCT_LATENCY - 1 (the DSP's input registers after the fabric operand
        # registers, and the landing registers after its product register: rtl._dsp.registered_product)
        inner = lut_product_registers(in_bits, weight_bits) if style == "lut" else 0
        return 1 + 1 + inner + (PRODUCT_LATENCY - 1 if style == "dsp" else 0) + 1 + 1

    def pipeline_stages(self):
        """Register stages from the issue cycle to the output register (inclusive); block RAM
        weights: one more (:func:`~onnx2hw.rtl._arith_pipe.rom`'s ``ebr_register``)."""
        return self._stages(self.style, self.in_bits, self.weight_bits) + self._rom_latency() - 1

    def _rom_latency(self):
        return rom_latency(self.channels // self.pe * self.taps, ebr_register=True, replicated=True)

    @property
    def in_transfers(self) -> int:
        """Input transfers per pixel."""
        return self.channels // self.pe * self.taps

    @property
    def out_transfers(self) -> int:
        """Output transfers per pixel."""
        return self.channels // self.pe

    # -- hardware -------------------------------------------------------------------------

    def elaborate(self, platform):
        """The issue stage (:meth:`_issue`), the weight ROM (:meth:`_weight_rom`), the control
        word (:meth:`_control`), the operands (:meth:`_operands`), the products
        (:meth:`_products`) and the accumulators (:meth:`_accumulate`)."""
        m = Module()
        # Free-running datapath; an input issues while the output queue has a credit, the last
        # tap of a channel group reserving its place.
        oq = OutputQueue(m, self.o, queue_depth(self.pipeline_stages(), self.taps))
        en = Const(1)
        it = self._issue(m, oq)
        wdata = self._weight_rom(m, en, it)
        ctl = self._control(m, it)
        xs, ws = self._operands(m, en, it, wdata)
        stages = 1 + self._rom_latency()   # (LUT products too: off the weight memory's slow output)
        if self.style == "lut":
            stages += lut_product_registers(self.weight_bits, self.in_bits)
        prods = self._products(m, en, xs, ws, platform)
        stages += PRODUCT_LATENCY if self.style == "dsp" else 1
        self._accumulate(m, en, oq, delay(m, en, ctl, stages, name="ctl"), prods)
        assert stages + 1 == self.pipeline_stages()
        return m

    def _issue(self, m, oq) -> _Issue:
        """The issue stage: an input is taken while the output queue has a credit; the tap and
        channel-group counters and the weight address step with it."""
        k, nf = self.taps, self.channels // self.pe
        take = Signal()
        src_data = Value.cast(self.i.payload)
        tap = Signal(range(k), name="tap")
        grp = Signal(range(nf), name="grp")
        m.d.comb += [self.i.ready.eq(oq.ok), take.eq(self.i.valid & oq.ok), oq.reserve.eq(take & (tap == k - 1))]
        addr = Signal(range(nf * k), name="waddr")
        addr_next = Mux(take, Mux(addr == nf * k - 1, 0, addr + 1), addr)
        m.d.sync += addr.eq(addr_next)
        with m.If(take):
            m.d.sync += tap.eq(Mux(tap == k - 1, 0, tap + 1))
            with m.If(tap == k - 1):
                m.d.sync += grp.eq(Mux(grp == nf - 1, 0, grp + 1))
        return _Issue(take, src_data, tap, grp, addr, addr_next)

    def _weight_rom(self, m, en, it: _Issue):
        """The weight ROM, read at ``it.addr``: word (f, t) holds W[f*pe*M + q, t] at field q."""
        k, lo, nf = self.taps, self.lanes_out, self.channels // self.pe
        rows = [self.weights[f * lo:(f + 1) * lo, t] for f in range(nf) for t in range(k)]
        return rom(m, pack_words(rows, self.weight_bits), lo * self.weight_bits, it.addr, en, "weights",
                   addr_next=it.addr_next, ebr_register=True)

    def _control(self, m, it: _Issue):
        """The control word of a beat (valid, first and last tap, channel group), to be delayed
        along the pipeline to the accumulators."""
        k, nf = self.taps, self.channels // self.pe
        ctl = Signal(data.StructLayout({"v": 1, "first": 1, "last": 1, "grp": range(nf)}))
        m.d.comb += [ctl.v.eq(it.take), ctl.first.eq(it.tap == 0), ctl.last.eq(it.tap == k - 1),
                     ctl.grp.eq(it.grp)]
        return ctl

    def _operands(self, m, en, it: _Issue, wdata):
        """The input lanes (the input register, delayed beside the weight ROM) and the weight
        lanes, each registered (``_arith_pipe.register_operands``)."""
        xin = Signal(self.pe * self.in_bits, name="x_in")
        with m.If(en):
            m.d.sync += xin.eq(it.src_data)
        xs = _lanes(delay(m, en, xin, self._rom_latency() - 1, name="x_late")[-1], self.in_bits,
                    self.in_signed, self.pe)
        ws = _lanes(wdata, self.weight_bits, self.weight_signed, self.lanes_out)
        return register_operands(m, en, xs, ws)

    def _products(self, m, en, xs, ws, platform):
        """The registered product of each output lane ``q`` (weight lane ``q``, input lane
        ``q // M``): a DSP (``PRODUCT_LATENCY`` registers) or LUT logic (one register)."""
        prods = []
        for q in range(self.lanes_out):
            wq, xq = ws[q], xs[q // self.multiplier]
            if self.style == "dsp":
                prods.append(registered_product(m, wq, xq, platform=platform, name=f"prod{q}"))
                continue
            e = lut_product(wq, xq, m, en, name=f"lp{q}")
            r = Signal(e.shape(), name=f"prod{q}")
            with m.If(en):
                m.d.sync += r.eq(e)
            prods.append(r)
        return prods

    def _accumulate(self, m, en, oq, ctls, prods):
        """Accumulators (the output register), loaded with the bias (a ROM per channel group,
        read its latency ahead from ``ctls``) at a group's first tap and adding the products;
        ``ctls``: the control word at each stage (the last is the accumulator's)."""
        lo, ab, nf = self.lanes_out, self.acc_bits, self.channels // self.pe
        ctl_acc = ctls[-1]
        if self.has_bias:
            lat = rom_latency(nf, ebr_register=True)   # (read that far ahead of the accumulator)
            bdata = rom(m, pack_words(self.bias.reshape(nf, lo), ab), lo * ab, ctls[-1 - lat].grp, en, "bias",
                        ebr_register=True)
            biases = [bdata[q * ab:(q + 1) * ab].as_signed() for q in range(lo)]
        else:
            biases = [0] * lo
        accs = [Signal(signed(ab), name=f"acc{q}") for q in range(lo)]
        with m.If(en):
            m.d.sync += oq.valid.eq(ctl_acc.v & ctl_acc.last)
            with m.If(ctl_acc.v):
                for q in range(lo):
                    m.d.sync += accs[q].eq(Mux(ctl_acc.first, biases[q], accs[q]) + prods[q])
        for p in range(lo):
            m.d.comb += oq.data[p].eq(accs[p])

    # -- cost model -------------------------------------------------------------------------

    @classmethod
    def estimate(cls, weights, bias=None, *, in_bits, in_signed, weight_bits, weight_signed,
                 pe=1, multiplier=1, acc_bits=None, mul_style="auto", family="ecp5") -> Cost:
        """Cost without elaboration, fitted to Yosys ``synth_ecp5`` (YoWASP) ``stat``.

        ``lut`` counts LUT4 equivalents (LUT4, 2 per CCU2C carry cell, 6 per distributed-RAM
        cell), as the other arithmetic blocks. ``cycles`` is per pixel (``C/pe * taps``);
        ``family="ice40"`` scales the ECP5 figures (not calibrated separately).
        """
        if family not in FAMILIES:
            raise ValueError(f"family must be one of {FAMILIES!r}, not {family!r}")
        self = unelaborated(cls, weights, bias, in_bits=in_bits, in_signed=in_signed,
                            weight_bits=weight_bits, weight_signed=weight_signed, pe=pe,
                            multiplier=multiplier, acc_bits=acc_bits, mul_style=mul_style)
        return self._cost(family)

    def _cost(self, family):
        c, k, pe, lo = self.channels, self.taps, self.pe, self.lanes_out
        nf = c // pe
        ab, wb, ib = self.acc_bits, self.weight_bits, self.in_bits
        words = nf * k
        pw = wb + ib
        small, large = min(wb, ib), max(wb, ib)
        # LUT4 equivalents, least-squares fit to Yosys synth_ecp5 stat (9 instances, 1..16 lanes,
        # 1..8-bit operands, within 30 %): accumulators with their first/bias mux (~2 per bit),
        # the constant ROMs (partly absorbed), shift-and-add products, control
        per, per_ff = lut_product_cost(wb, ib) if self.style == "lut" else (0, 0)
        prod = lo * per
        rom_ebr, rom_lut = rom_cost(words, lo * wb)
        bias_ebr, bias_lut = rom_cost(nf, lo * ab) if self.has_bias else (0, 0)
        late_lut, late_ff = rom_register_cost(words, lo * wb, addr_next=True)   # block rows' registers, the late input
        late_ff += pe * ib * (self._rom_latency() - 1)   # the input, delayed beside the ROM
        bias_lut, bias_ff = rom_register_cost(nf, lo * ab) if self.has_bias else (0, 0)
        late_lut, late_ff = late_lut + bias_lut, late_ff + bias_ff
        lut = 2 * lo * ab + 0.45 * (rom_lut + bias_lut) + late_lut + prod + 74
        ff = (pe * ib + lo * ab + lo * (2 * pw + wb if self.style == "dsp" else per_ff) + late_ff
              + 4 * self.pipeline_stages()
              + 2 * (k.bit_length() + nf.bit_length()) + 10)
        if family == "ice40":
            lut *= 1.1
        dsp = lo * n_dsp(wb, self.weight_signed, ib, self.in_signed) if self.style == "dsp" else 0
        return queued(Cost(cycles=nf * k, latency=k - 1 + self.pipeline_stages(), lut=int(round(lut)),
                           ff=int(ff), dsp=dsp, ebr=rom_ebr + bias_ebr),
                      signed(ab), lo, self.pipeline_stages(), beats=k, family=family)


def bench_config():
    """Bench entries ``[(name, factory, feeds, expect)]``: a 3x3 depthwise layer of 32 channels
    (DSP and LUT products)."""
    rng = np.random.default_rng(3)
    c, k, pe = 32, 9, 8
    w = rng.integers(-128, 128, size=(c, k))
    b = rng.integers(-1000, 1000, size=c)
    pixels = 16
    x = rng.integers(0, 256, size=(pixels * c // pe * k, pe))

    def factory(style="auto"):
        return DepthwiseUnit(w, b, in_bits=8, in_signed=False, weight_bits=8, weight_signed=True, pe=pe,
                             mul_style=style)
    return [("depthwise_3x3_c32_pe8", factory, {"i": x}, {"o": pixels * c // pe}),
            ("depthwise_3x3_c32_pe8_lut", lambda: factory("lut"), {"i": x}, {"o": pixels * c // pe})]
