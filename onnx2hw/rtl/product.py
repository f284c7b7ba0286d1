"""ProductUnit: the exact elementwise product of two quantized streams, offsets removed."""
from __future__ import annotations

from amaranth.hdl import Const, Module, Mux, Signal, signed
from amaranth.lib import memory, stream, wiring
from amaranth.lib.wiring import In, Out

from ..arith import acc_bits
from . import _blockparams as _p
from ._arith_pipe import OutputQueue, delay, queue_depth, queued, rom_cost
from ._dsp import PRODUCT_LATENCY, product_dsps, registered_product
from ._mul import lut_product, lut_product_cost, lut_product_registers
from ._params import MUL_STYLES, auto_style
from ._scaled_term import offset_shape, shape_range
from .cost import Cost

__all__ = ["ProductUnit", "product_range"]

#: a lone registered LUT product's size as a share of ``lut_product_cost`` (fitted to Yosys
#: synth_ecp5 of this block: 8x8-bit products, 1 and 4 lanes, within 20 %)
LUT_PRODUCT_SHARE = 0.4


def product_range(a_shape, a_zero: int, b_shape, b_zero: int) -> tuple[int, int]:
    """The exact range of ``(a - a_zero) * (b - b_zero)`` over the values of both shapes."""
    (alo, ahi), (blo, bhi) = shape_range(a_shape), shape_range(b_shape)
    ends = [(x - a_zero) * (y - b_zero) for x in (alo, ahi) for y in (blo, bhi)]
    return min(ends), max(ends)


class ProductUnit(wiring.Component):
    """``o = (a - a_zero) * (b - b_zero)`` lane by lane, exact (a Requantize follows it).

    Three ways to pair the operands:

    * lockstep (neither gate): ``a`` and ``b`` stream the same tensor layout;
      transfer ``t`` of ``a`` is multiplied by transfer ``t`` of ``b``. They transfer together
      (``a.ready = ok & b.valid``, ``b.ready = ok & a.valid``).
    * broadcast gate (``gate_channels=C``): per image, ``b`` first carries the ``C`` gate values
      (``C / lanes`` transfers, channels in order), which are stored, ``b - b_zero``, in one
      memory per lane; then ``a`` carries ``pixels`` pixels of ``C`` channels (channel ``c`` in
      lane ``c % lanes`` of transfer ``c // lanes`` of its pixel), each multiplied by its
      channel's gate. ``b.ready`` is high only while the gate is being loaded and ``a.ready``
      only after, so the block reads the whole gate of an image before any of its ``a``; the
      producer of ``a`` must be able to run ahead meanwhile (a fork's branch holds its whole
      tensor). A scalar per image is ``gate_channels=1`` with ``lanes=1``.
    * pixel gate (``pixel_channels=C``): ``b`` has one lane and carries one value per pixel
      (a ``(H, W, 1)`` map); ``a`` carries the pixels' ``C`` channels in ``C / lanes``
      transfers, each lane multiplied by its pixel's ``b``. ``a.ready = ok & b.valid``; ``b``
      is held across the pixel's transfers and ``b.ready = ok & a.valid`` only with the last
      transfer of the pixel, so the two streams advance together with no storage.

    Parameters
    ----------
    a_shape, b_shape : ShapeLike
        Lane shapes of ``a`` and ``b``.
    lanes : int
        Lanes per transfer on ``a`` and ``o``, and on ``b`` but of a pixel gate (one lane).
    a_zero, b_zero : int
        Zero points subtracted before the product.
    gate_channels : int or None
        A broadcast gate's channel count (divisible by ``lanes``).
    pixel_channels : int or None
        A pixel gate's channel count of ``a`` (divisible by ``lanes``); excludes ``gate_channels``.
    pixels : int
        Broadcast: pixels of ``a`` per gate (``H * W``); ignored in lockstep.
    mul_style : {"auto", "dsp", "lut"}
        Products in ``MULT18X18D`` blocks or in LUT/carry logic (``lut_product``: no ``*``);
        ``"auto"``: a DSP when both inputs are at least 3 bits wide and one at least 5.

    Output lanes are ``signed`` of the narrowest width holding :func:`product_range`.

    Timing: initiation interval 1 (one ``a`` transfer per cycle; a broadcast gate costs
    ``C / lanes`` load cycles per image, a pixel gate none: its ``b`` streams beside ``a``).
    Latency :meth:`stages` cycles (input register with the gate memory's read, for a broadcast
    gate a second register that is the only load of the memory's read data (a block RAM's
    output register, ``rtl.ram_outreg``), the product, the output register) plus the output
    queue's 2; a pixel gate has the lockstep latency.
    The datapath runs free: an ``a`` transfer is taken only while the output queue has a credit
    (``_arith_pipe.OutputQueue``), ``o`` comes from the queue's registers, so ``valid`` never
    depends on ``ready`` and a payload holds until it is taken.

    Ports: ``a``, ``b`` (in), ``o`` (out).
    """

    @staticmethod
    def waits_for(params, port: int) -> int | None:
        """``b`` (1) for ``a`` (0) of a broadcast gate: an image of ``a`` is read only after its
        whole gate (``rtl.stage.Block.waits_for``)."""
        return 1 if port == 0 and params.get("gate_channels") is not None else None

    def __init__(self, a_shape, b_shape, lanes: int = 1, *, a_zero: int = 0, b_zero: int = 0,
                 gate_channels: int | None = None, pixels: int = 1, mul_style: str = "auto",
                 pixel_channels: int | None = None):
        p = _params(a_shape, b_shape, lanes, a_zero, b_zero, gate_channels, pixels, mul_style, pixel_channels)
        (self.a_shape, self.b_shape, self.lanes, self.a_zero, self.b_zero, self.gate_channels,
         self.pixels, self.mul_style, self.pixel_channels) = p
        self.out_shape = signed(acc_bits(*product_range(self.a_shape, self.a_zero, self.b_shape, self.b_zero)))
        super().__init__({
            "a": In(stream.Signature(_p.lanes_layout(self.a_shape, self.lanes))),
            "b": In(stream.Signature(_p.lanes_layout(self.b_shape, 1 if self.pixel_channels else self.lanes))),
            "o": Out(stream.Signature(_p.lanes_layout(self.out_shape, self.lanes))),
        })

    @staticmethod
    def style(a_shape, b_shape, mul_style: str = "auto") -> str:
        """``"dsp"`` or ``"lut"``: how the products are built for ``mul_style``."""
        return mul_style if mul_style != "auto" else auto_style(a_shape.width, b_shape.width)

    @staticmethod
    def stages(a_shape, a_zero, b_shape, b_zero, mul_style: str = "auto", gate: bool = False) -> int:
        """Pipeline registers: the input register (and with a ``gate`` the gate memory's landing
        register), the product (``PRODUCT_LATENCY`` in a DSP; a LUT product's inner register
        when it has one), the output register."""
        front = 2 if gate else 1
        if ProductUnit.style(a_shape, b_shape, mul_style) == "dsp":
            return front + 1 + PRODUCT_LATENCY
        return front + 1 + lut_product_registers(offset_shape(a_shape, a_zero).width,
                                                 offset_shape(b_shape, b_zero).width)

    def elaborate(self, platform):
        m = Module()
        gated = self.gate_channels is not None
        n_st = self.stages(self.a_shape, self.a_zero, self.b_shape, self.b_zero, self.mul_style, gated)
        oq = OutputQueue(m, self.o, queue_depth(n_st))
        take = Signal()
        m.d.comb += oq.reserve.eq(take)
        ra_shape, rb_shape = offset_shape(self.a_shape, self.a_zero), offset_shape(self.b_shape, self.b_zero)
        if self.pixel_channels is not None:
            gates = self._pixel_gate(m, oq, take, rb_shape)
        elif self.gate_channels is None:
            m.d.comb += [
                self.a.ready.eq(oq.ok & self.b.valid),
                self.b.ready.eq(oq.ok & self.a.valid),
                take.eq(oq.ok & self.a.valid & self.b.valid),
            ]
            gates = []
            for j in range(self.lanes):
                r = Signal(rb_shape, name=f"rb{j}")
                m.d.sync += r.eq(self.b.payload[j] - self.b_zero)
                gates.append(r)
        else:
            gates = self._gate_memory(m, oq, take, rb_shape)
        style = self.style(self.a_shape, self.b_shape, self.mul_style)
        for j in range(self.lanes):
            ra = Signal(ra_shape, name=f"ra{j}")
            m.d.sync += ra.eq(self.a.payload[j] - self.a_zero)
            if gated:   # the gate's landing register, the one load of the memory's read data
                ra = delay(m, Const(1), ra, 1, name=f"ra{j}_")[-1]
                gates[j] = delay(m, Const(1), gates[j], 1, name=f"gate{j}_", reset_less=True)[-1]
            if style == "dsp":
                p = registered_product(m, ra, gates[j], platform=platform, name=f"p{j}")
            else:
                p = lut_product(ra, gates[j], m, Const(1), name=f"lp{j}")
            m.d.sync += oq.data[j].eq(p)
        m.d.sync += oq.valid.eq(delay(m, Const(1), take, n_st - 1, name="v")[-1])
        return m

    def _pixel_gate(self, m, oq, take, rb_shape):
        """The pixel gate: ``b`` pairs with every ``a`` transfer of its pixel and is taken with
        the pixel's last one (a fold counter over ``C / lanes``); one register feeds all lanes."""
        nf = self.pixel_channels // self.lanes
        fold = Signal(range(nf), name="fold")
        last = Signal()
        m.d.comb += [
            last.eq(fold == nf - 1),
            self.a.ready.eq(oq.ok & self.b.valid),
            self.b.ready.eq(oq.ok & self.a.valid & last),
            take.eq(oq.ok & self.a.valid & self.b.valid),
        ]
        with m.If(take):
            m.d.sync += fold.eq(Mux(last, 0, fold + 1))
        r = Signal(rb_shape, name="rb")
        m.d.sync += r.eq(self.b.payload[0] - self.b_zero)
        return [r] * self.lanes

    def _gate_memory(self, m, oq, take, rb_shape):
        """The broadcast gate: its load phase, the ``a`` phase, and one memory per lane read at
        the channel fold of the ``a`` transfer taken (sync read: beside the input register)."""
        nf = self.gate_channels // self.lanes
        loading = Signal(init=1)
        load_at = Signal(range(nf), name="load_at")
        fold = Signal(range(nf), name="fold")
        pixel = Signal(range(self.pixels), name="pixel")
        load = Signal()
        m.d.comb += [
            self.b.ready.eq(loading), load.eq(loading & self.b.valid),
            self.a.ready.eq(~loading & oq.ok), take.eq(~loading & oq.ok & self.a.valid),
        ]
        with m.If(load):
            m.d.sync += load_at.eq(Mux(load_at == nf - 1, 0, load_at + 1))
            with m.If(load_at == nf - 1):
                m.d.sync += loading.eq(0)
        with m.If(take):
            m.d.sync += fold.eq(Mux(fold == nf - 1, 0, fold + 1))
            with m.If(fold == nf - 1):
                m.d.sync += pixel.eq(Mux(pixel == self.pixels - 1, 0, pixel + 1))
                with m.If(pixel == self.pixels - 1):
                    m.d.sync += loading.eq(1)
        gates = []
        for j in range(self.lanes):
            if nf == 1:
                g = Signal(rb_shape, name=f"gate{j}")
                with m.If(load):
                    m.d.sync += g.eq(self.b.payload[j] - self.b_zero)
                gates.append(g)
                continue
            mem = memory.Memory(shape=rb_shape, depth=nf, init=[])
            m.submodules[f"gate{j}"] = mem
            wp, rp = mem.write_port(), mem.read_port()
            m.d.comb += [wp.addr.eq(load_at), wp.data.eq(self.b.payload[j] - self.b_zero), wp.en.eq(load),
                         rp.addr.eq(fold), rp.en.eq(1)]
            gates.append(rp.data)
        return gates

    @staticmethod
    def estimate(a_shape, b_shape, lanes: int = 1, *, a_zero: int = 0, b_zero: int = 0,
                 gate_channels: int | None = None, pixels: int = 1, mul_style: str = "auto",
                 pixel_channels: int | None = None, family: str = "ecp5") -> Cost:
        """Cost without elaboration: per lane the operand registers, the product (one DSP, or
        :data:`LUT_PRODUCT_SHARE` of :func:`~onnx2hw.rtl._mul.lut_product_cost`), the output
        register, and for a broadcast gate its memory (LUT RAM or block RAM, as a ROM of that
        size maps), for a pixel gate its fold counter and one gate register; ``cycles`` counts
        the gate load of an image and its ``a`` transfers."""
        (a_shape, b_shape, lanes, a_zero, b_zero, gate_channels, pixels, mul_style,
         pixel_channels) = _params(a_shape, b_shape, lanes, a_zero, b_zero, gate_channels, pixels, mul_style,
                                   pixel_channels)
        family = _p.family(family)
        ra, rb = offset_shape(a_shape, a_zero), offset_shape(b_shape, b_zero)
        out_w = acc_bits(*product_range(a_shape, a_zero, b_shape, b_zero))
        lut = ff = dsp = ebr = 0
        if ProductUnit.style(a_shape, b_shape, mul_style) == "dsp":
            dsp = product_dsps(ra, rb)
            lut += (a_shape.width + 2 if a_zero else 2) + (b_shape.width + 2 if b_zero else 2)
            ff += 2 * out_w                                   # landing registers
        else:   # lut_product_cost is fitted to whole MVUs: a lone product is smaller
            pl, pf = lut_product_cost(ra.width, rb.width)
            lut += int(LUT_PRODUCT_SHARE * pl)
            lut += (a_shape.width + 1 if a_zero else 0) + (b_shape.width + 1 if b_zero else 0)
            ff += int(LUT_PRODUCT_SHARE * pf)
        ff += ra.width + out_w + (0 if pixel_channels else rb.width)
        cycles = 1
        ctrl_lut, ctrl_ff = 3, 4
        if pixel_channels is not None:   # one shared gate register, the fold counter
            ctrl_bits = max(pixel_channels // lanes - 1, 1).bit_length()
            ctrl_lut, ctrl_ff = ctrl_lut + 2 * ctrl_bits, ctrl_ff + ctrl_bits + rb.width
        if gate_channels is not None:
            nf = gate_channels // lanes
            ebr, words_lut = rom_cost(nf, rb.width) if nf > 1 else (0, 0)   # per lane
            lut += words_lut
            ff += ra.width + rb.width + (rb.width if nf == 1 else 0)   # landing registers
            ctrl_bits = 2 * max(nf - 1, 1).bit_length() + max(pixels - 1, 1).bit_length() + 1
            ctrl_lut, ctrl_ff = ctrl_lut + 2 * ctrl_bits, ctrl_ff + ctrl_bits
            cycles = nf * (pixels + 1)
        st = ProductUnit.stages(a_shape, a_zero, b_shape, b_zero, mul_style, gate_channels is not None)
        base = Cost(cycles, st, lut * lanes + ctrl_lut, ff * lanes + ctrl_ff, dsp * lanes, ebr * lanes)
        return queued(base, signed(out_w), lanes, st, family=family)


def _params(a_shape, b_shape, lanes, a_zero, b_zero, gate_channels, pixels, mul_style, pixel_channels=None):
    a_shape = _p.elem_shape(a_shape, "a_shape")
    b_shape = _p.elem_shape(b_shape, "b_shape")
    lanes = _p.positive_int(lanes, "lanes")
    a_zero, b_zero = _p.integer(a_zero, "a_zero"), _p.integer(b_zero, "b_zero")
    for name, shape, z in (("a_zero", a_shape, a_zero), ("b_zero", b_shape, b_zero)):
        lo, hi = shape_range(shape)
        if not lo <= z <= hi:
            raise ValueError(f"{name} must lie in [{lo}, {hi}] of its shape {shape!r}, not {z!r}")
    if gate_channels is not None:
        gate_channels = _p.positive_int(gate_channels, "gate_channels")
        if gate_channels % lanes:
            raise ValueError(f"lanes {lanes!r} must divide gate_channels {gate_channels!r}")
    if pixel_channels is not None:
        pixel_channels = _p.positive_int(pixel_channels, "pixel_channels")
        if gate_channels is not None:
            raise ValueError("gate_channels and pixel_channels exclude each other")
        if pixel_channels % lanes:
            raise ValueError(f"lanes {lanes!r} must divide pixel_channels {pixel_channels!r}")
    pixels = _p.positive_int(pixels, "pixels")
    if mul_style not in MUL_STYLES:
        raise ValueError(f"mul_style must be one of {MUL_STYLES!r}, not {mul_style!r}")
    return a_shape, b_shape, lanes, a_zero, b_zero, gate_channels, pixels, mul_style, pixel_channels
