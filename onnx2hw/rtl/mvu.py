"""Matrix-vector unit: ``y = W @ x (+ bias)`` over a stream of input vectors (FINN-style folding)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
from amaranth.hdl import Cat, Const, Module, Mux, Shape, Signal, Value, signed, unsigned
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from .. import arith
from ._arith_pipe import (OutputQueue, delay, pack_words, queue_depth, queued, register_operands, rom, rom_cost,
                          rom_latency, rom_register_cost)
from ._dsp import PRODUCT_LATENCY, registered_product
from ._linebuf import RamCost, lands, ram_cost
from ._mul import (adder_tree, lut_product, lut_product_cost, lut_product_registers, n_dsp, pack_pair,
                   pair_field, pair_width, tree_registers, unpack_pair)
from ._params import MUL_STYLES, acc_width, auto_style, bias_vector, check_bits, check_weight_range, int_array
from .replicate import BANK_BITS, COLLISION_X_ATTR, banked_memory, banks_of, replicas
from .cost import FAMILIES, Cost, unelaborated

__all__ = ["MatrixVectorUnit", "CostConstants", "COST", "bench_config"]

#: buffers of at most this many words are banked distributed RAM (two 16-word cells deep)
LUT_RAM_WORDS = 32
#: output rows whose products read one copy of the input operand registers, by product style
#: (a LUT product is a few hundred LUTs: the products of several rows spread too far for one
#: register to reach them all within a clock period)
X_ROWS_PER_COPY = {"dsp": 8, "lut": 1}


@dataclass(frozen=True)
class CostConstants:
    """The fitted constants of :meth:`MatrixVectorUnit.estimate`, in LUT4 equivalents (a CCU2C
    carry cell counts 2) and flip-flops, fitted to Yosys ``synth_ecp5`` stat. ``python -m bench
    mvu-cost`` synthesizes a grid of small MVUs and refits them by least squares; the terms it
    does not fit (memories, LUT products, registers the structure fixes) come from the shared
    cost functions of ``_arith_pipe``, ``_linebuf`` and ``_mul``."""

    #: LUTs per DSP product, beside the DSP
    lut_dsp_product: float = 12
    #: LUTs per product bit of a ±1-weight product (the inversion and the wider tree inputs)
    lut_sign_product_bit: float = 2
    #: LUTs per product bit of a ±1-input product (the negation's carry chain and the select)
    lut_negate_product_bit: float = 3.4
    #: LUTs per product bit of splitting a paired DSP product into its two rows (a borrow add)
    lut_pair_split_bit: float = 0.5
    #: LUTs per adder bit of a row's adder tree
    lut_tree_bit: float = 1
    #: LUTs per accumulator bit (the adder and the first-fold bias select)
    lut_acc_bit: float = 2
    #: LUTs of the unit not counted per bit
    lut_fixed: float = 40
    #: flip-flops per pipeline stage (the control word's delay)
    ff_stage: float = 4
    #: flip-flops of the unit not counted per bit
    ff_fixed: float = 30
    #: flip-flops per counted register bit of a unit whose products are not in DSPs
    ff_fabric_scale: float = 1.25


#: the constants :meth:`MatrixVectorUnit.estimate` uses
COST = CostConstants()


class _Issue(NamedTuple):
    """The issue stage's signals (:meth:`MatrixVectorUnit._issue`)."""

    issue: Value       # a beat issues this cycle
    take: Value        # ... and takes an input transfer
    need_in: Value     # the beat reads the input (first output fold of a group), not the buffer
    src_data: Value    # the input payload
    sf_i: Value        # input fold
    sf_next: Value     # its next value
    nf_i: Value        # output fold
    addr: Value        # weight address
    addr_next: Value   # its next value


def _lanes(flat, width, count, sgn):
    """``count`` lanes of ``width`` bits of ``flat``, signed when ``sgn``."""
    return [flat[j * width:(j + 1) * width].as_signed() if sgn else flat[j * width:(j + 1) * width]
            for j in range(count)]


class MatrixVectorUnit(wiring.Component):
    """Folded matrix-vector product ``y = W @ x + bias`` for a stream of vectors.

    ``PE`` outputs are computed in parallel, each from ``SIMD`` inputs per cycle, so one vector
    takes ``(K/SIMD) * (N/PE)`` cycles. The first output fold reads the input stream and stores
    the vector; the other folds re-read it from a buffer. Consecutive vectors follow without a
    bubble. With ``groups = G`` (a grouped convolution) the rows form ``G`` consecutive groups of
    ``N/G`` outputs and each group reads its own input vector of ``K``: one output vector of ``N``
    takes ``G`` input vectors.

    Parameters
    ----------
    weights : int ndarray, shape (N, K)
        Within ``int_range(weight_bits, weight_signed)``; with ``bipolar``, values in {-1, +1}.
    bias : int ndarray, shape (N,), optional
    in_bits, in_signed, weight_bits, weight_signed : int, bool
        Operand widths (1..32 bits). By default (``mul_style="auto"``) products with both
        operands of at least 3 bits and one of at least 5 bits use ``*``: one ECP5 ``MULT18X18D``
        each for operands that fit a signed 18-bit port, several (combinational, lower Fmax)
        beyond that; two per DSP when ``pe >= 2`` and the packed weights of two rows fit a port
        (:attr:`pair_field`: e.g. 4-bit weights with up to 9-bit inputs). Other products are LUT
        and carry-chain logic (``_mul.lut_product``: ~136 LUT4 equivalents for 8x8, a register
        inside when the narrower factor has more than 4 bits).
    bipolar : bool
        1-bit bipolar mode: weights and inputs are ±1, inputs encoded on the stream as bit 1 = +1,
        0 = -1 (``unsigned(1)`` lanes); products are XNOR, sums a popcount.
    weight_bipolar : bool
        ±1 weights stored as one bit each (1 = +1, 0 = -1) with integer inputs: a product is
        ``x`` or ``~x = -x - 1`` (a conditional inversion in LUTs, no multiplier), and the ``-1``
        of every inverted lane is folded into the row's bias. Needs ``weight_bits=1``; implied by
        ``bipolar``. The accumulator wraps modulo ``2**acc_bits`` on the way, which is exact since
        the final value fits.
    input_bipolar : bool
        ±1 inputs (1-bit lanes, 1 = +1) with integer weights: a product is ``w`` or ``-w`` (a
        negation and a select in LUTs). Needs ``in_bits=1``; implied by ``bipolar``.
    pe, simd : int
        Output / input parallelism; must divide N / K (``pe`` must divide ``N/G``).
    groups : int
        Row groups ``G`` (default 1), each computed from its own input vector; must divide N.
    acc_bits : int, optional
        Accumulator / output width. Default: the smallest width that holds every possible result
        given the actual weights, bias and input range (``arith.acc_bits`` of exact per-row bounds).
        A narrower value is rejected.
    mul_style : {"auto", "dsp", "lut"}
        Force products to DSP (``*``) or LUT logic (the folder chooses per layer).

    Ports
    -----
    i : In(stream.Signature(ArrayLayout(in_shape, simd)))
        ``K/simd`` transfers per vector (``G`` vectors per output vector); lane ``j`` of transfer
        ``t`` is ``x[t*simd + j]``.
    o : Out(stream.Signature(ArrayLayout(signed(acc_bits), pe)))
        ``N/pe`` transfers per vector; lane ``j`` of transfer ``t`` is ``y[t*pe + j]``.

    Timing
    ------
    Initiation interval: 1 cycle per (input fold × output fold) beat, i.e. ``(K/simd)*(N/pe)``
    cycles per vector. Latency (first input transfer to first output valid) is
    ``K/simd - 1 + stages`` where ``stages`` is :meth:`pipeline_stages`, plus the output queue's 2.
    Backpressure: the datapath runs free (no enable); a beat issues while the output queue
    (``_arith_pipe.OutputQueue``, :func:`queue_depth` entries of ``pe`` accumulators) has a
    credit. ``i.ready`` is a function of registers; ``o`` comes from the queue's registers.
    """

    #: it reads its whole input vector during its first output fold and none during the others
    INPUT_BURST = True

    def __init__(self, weights, bias=None, *, in_bits, in_signed, weight_bits, weight_signed,
                 bipolar=False, weight_bipolar=False, input_bipolar=False, pe=1, simd=1, groups=1, acc_bits=None,
                 mul_style="auto"):
        w = int_array("weights", weights, 2)
        n, k = w.shape
        if n < 1 or k < 1:
            raise ValueError(f"weights must be non-empty, not shape {w.shape!r}")
        check_bits("in_bits", in_bits)
        check_bits("weight_bits", weight_bits)
        if mul_style not in MUL_STYLES:
            raise ValueError(f"mul_style must be one of {MUL_STYLES!r}, not {mul_style!r}")
        if not isinstance(groups, int) or isinstance(groups, bool) or groups < 1 or n % groups:
            raise ValueError(f"groups must be a positive divisor of {n}, not {groups!r}")
        for name, v, full in (("pe", pe, n // groups), ("simd", simd, k)):
            if not isinstance(v, int) or isinstance(v, bool) or v < 1 or full % v:
                raise ValueError(f"{name} must be a positive divisor of {full}, not {v!r}")
        self.groups = groups
        self.bipolar = bool(bipolar)
        self.weight_bipolar = bool(weight_bipolar) or self.bipolar
        self.input_bipolar = bool(input_bipolar) or self.bipolar
        self.bipolar = self.weight_bipolar and self.input_bipolar
        if self.bipolar and (in_bits != 1 or weight_bits != 1):
            raise ValueError(f"bipolar mode needs 1-bit weights and inputs, not "
                             f"weight_bits={weight_bits!r}, in_bits={in_bits!r}")
        if self.input_bipolar and in_bits != 1:
            raise ValueError(f"bipolar inputs are 1-bit lanes, not in_bits={in_bits!r}")
        if self.weight_bipolar:
            if weight_bits != 1:
                raise ValueError(f"bipolar weights are stored as 1 bit, not weight_bits={weight_bits!r}")
            if not np.all(np.abs(w) == 1):
                bad = w[np.abs(w) != 1][0]
                raise ValueError(f"bipolar weights must be -1 or +1, not {int(bad)!r}")
        if self.input_bipolar:
            xlo, xhi = -1, 1
            if not self.weight_bipolar:
                check_weight_range(w, weight_bits, weight_signed)
        elif self.weight_bipolar:
            xlo, xhi = arith.int_range(in_bits, in_signed)
        else:
            check_weight_range(w, weight_bits, weight_signed)
            xlo, xhi = arith.int_range(in_bits, in_signed)
        b = bias_vector(bias, n)
        acc_bits = acc_width(w, b, xlo, xhi, acc_bits)
        self.weights, self.bias = w, b
        self.has_bias = bias is not None
        self.out_features, self.in_features = n, k
        self.in_bits, self.in_signed = in_bits, bool(in_signed) and not self.input_bipolar
        self.weight_bits, self.weight_signed = weight_bits, bool(weight_signed) and not self.weight_bipolar
        self.pe, self.simd, self.acc_bits = pe, simd, acc_bits
        self.style = self._style(in_bits, in_signed, weight_bits, weight_signed, bipolar, mul_style,
                                 self.weight_bipolar, self.input_bipolar)
        in_shape = Shape(in_bits, self.in_signed)
        super().__init__({
            "i": In(stream.Signature(data.ArrayLayout(in_shape, simd))),
            "o": Out(stream.Signature(data.ArrayLayout(signed(acc_bits), pe))),
        })

    # -- structure shared by elaborate() and estimate() -------------------------------------

    @staticmethod
    def product_style(in_bits: int, weight_bits: int, mul_style: str = "auto") -> str:
        """How integer products are built (``"dsp"`` or ``"lut"``) for ``mul_style``: ``"auto"``
        takes a DSP when both factors are at least 3 bits and one at least 5. (Bipolar operands
        never multiply: see ``bipolar``.) The depthwise unit follows the same rule."""
        if mul_style not in MUL_STYLES:
            raise ValueError(f"mul_style must be one of {MUL_STYLES!r}, not {mul_style!r}")
        return mul_style if mul_style != "auto" else auto_style(in_bits, weight_bits)

    @staticmethod
    def _style(in_bits, in_signed, weight_bits, weight_signed, bipolar, mul_style, weight_bipolar=False,
               input_bipolar=False):
        if bipolar or (weight_bipolar and input_bipolar):
            return "xnor"
        if weight_bipolar:
            return "sign"
        if input_bipolar:
            return "negate"
        if mul_style != "auto":
            return mul_style
        return auto_style(in_bits, weight_bits)

    @property
    def pair_field(self) -> int | None:
        """With DSP products, the offset ``F`` at which two output rows share one MULT18X18D
        (``x * (w0 + w1 * 2**F)``, the packed weights stored in the memory); ``None`` when the
        products do not fit two to a DSP or ``pe == 1``."""
        if self.style != "dsp" or self.pe < 2:
            return None
        return pair_field(self.in_bits, self.in_signed, self.weight_bits, self.weight_signed)

    def pipeline_stages(self):
        """Register stages from the issue cycle to the output register (inclusive)."""
        # 1: memory read / input register (block RAM weights: +1, registered beside each block);
        # DSP and LUT products: +1 operand registers, LUT
        # products of a narrow factor wider than 4 bits: +1 inside; +1 product registers;
        # paired DSP products: +1 after the split; adder tree boundaries; +1 accumulator
        # (= output register).
        # DSP products: + PRODUCT_LATENCY - 1 for the DSP's input registers and the fabric landing
        # registers (fabric operand register -> DSP input register -> DSP product register ->
        # two landing registers: no fabric path through the multiplier, a long route from the DSP
        # column split in two).
        style = self.style
        inner = lut_product_registers(self.in_bits, self.weight_bits) if style == "lut" else 0
        paired = 1 if self.pair_field is not None else 0
        dsp_in = PRODUCT_LATENCY - 1 if style == "dsp" else 0
        return (self._rom_latency() + (1 if style in ("dsp", "lut") else 0) + inner + dsp_in + 1 + paired
                + tree_registers(self.simd, 2) + 1)

    def _hw_bias(self):
        """The per-row bias the hardware adds (with "sign" products: plus the row's count of -1
        weights, see :meth:`_accumulate`)."""
        return self.bias + (np.sum(self.weights < 0, axis=1) if self.style == "sign" else 0)

    def _buffer_kind(self, family: str) -> str | None:
        """The input buffer that serves the ``nfg`` passes over one input: ``None`` (one pass, no
        buffer), ``"banked"`` (a wide buffer of few words: distributed RAM banks with their own
        address and select registers), ``"landed"`` (block RAM read into a register of its own
        before the select) or ``"ram"`` (one memory, its read data selected directly)."""
        nfg = self.out_features // self.pe // self.groups
        sf, width = self.in_features // self.simd, self.simd * self.in_bits
        if nfg == 1:
            return None
        if sf <= LUT_RAM_WORDS and width > BANK_BITS:
            return "banked"
        return "landed" if self._rom_latency() > 1 and lands(sf, width, family) else "ram"

    def _rom_latency(self):
        return rom_latency(self.out_features // self.pe * (self.in_features // self.simd), ebr_register=True,
                           replicated=True)

    # -- hardware -------------------------------------------------------------------------

    def elaborate(self, platform):
        """The issue stage (:meth:`_issue`), the weight ROM (:meth:`_weight_rom`), the input or
        its buffer beside it (:meth:`_input`), the operand registers (:meth:`_operands`), the
        products, the adder trees and the accumulators (:meth:`_accumulate`)."""
        m = Module()
        sf = self.in_features // self.simd
        # Free-running datapath (no enable); a beat issues only while the output queue has a
        # credit, and the beat that ends an output reserves its place.
        q = OutputQueue(m, self.o, queue_depth(self.pipeline_stages(), sf))
        en = Const(1)
        it = self._issue(m, q)
        wdata = self._weight_rom(m, en, it)
        ctl = self._control(m, it)
        x1 = self._input(m, en, it, getattr(platform, "family", "ecp5"))
        xs, ws, x_rows, stages = self._operands(m, en, x1, wdata)
        if self.pair_field is not None:
            prods = self._paired_products(m, en, x_rows, ws, platform)
            stages += PRODUCT_LATENCY + 1
        else:
            prods = self._products(m, en, x_rows or [xs] * self.pe, ws, platform)
            stages += PRODUCT_LATENCY if self.style == "dsp" else 1
        sums = [adder_tree(m, en, row, 2, extra_levels=1, name=f"sum{p}")
                for p, row in enumerate(prods)]
        stages += tree_registers(self.simd, 2)
        ctls = delay(m, en, ctl, stages, name="ctl")
        self._accumulate(m, en, q, ctls, sums)
        assert stages + 1 == self.pipeline_stages()
        return m

    def _issue(self, m, q) -> _Issue:
        """The issue stage: a beat issues while the queue has a credit and the input is there
        (first output fold of a group) or buffered (the others); the fold counters and the
        weight address step with it."""
        n, k, pe, simd = self.out_features, self.in_features, self.pe, self.simd
        nf, sf = n // pe, k // simd
        nfg = nf // self.groups          # output folds per input vector
        sf_i = Signal(range(sf), name="sf_i")
        nf_i = Signal(range(nf), name="nf_i")
        addr = Signal(range(nf * sf), name="waddr")
        take = Signal()
        src_valid, src_data = self.i.valid, Value.cast(self.i.payload)
        issue = Signal()
        if self.groups > 1:
            gf_i = Signal(range(nfg), name="gf_i")     # output fold within the group
            with m.If(issue & (sf_i == sf - 1)):
                m.d.sync += gf_i.eq(Mux(gf_i == nfg - 1, 0, gf_i + 1))
        else:
            gf_i = nf_i
        # ``need_in`` (gf_i == 0) and ``i.ready`` (ok & need_in) are registers of their own,
        # loaded with their next values: the producer's ready is a wire from one flip-flop, not
        # a fold counter's compare through LUTs fanning out to the producer's output enables
        need_in = Signal(init=1, name="need_in")
        ready = Signal(init=1, name="in_ready")
        need_next = Mux(issue & (sf_i == sf - 1), gf_i == nfg - 1, need_in)
        m.d.sync += [need_in.eq(need_next), ready.eq(q.ok_next & need_next)]
        m.d.comb += [
            issue.eq(q.ok & (~need_in | src_valid)),
            take.eq(issue & need_in),
            self.i.ready.eq(ready),
            q.reserve.eq(issue & (sf_i == sf - 1)),
        ]
        # next values of the address counters (their replicas address banked memories)
        addr_next = Mux(issue, Mux(addr == nf * sf - 1, 0, addr + 1), addr)
        sf_next = Mux(issue, Mux(sf_i == sf - 1, 0, sf_i + 1), sf_i)
        m.d.sync += [addr.eq(addr_next), sf_i.eq(sf_next)]
        with m.If(issue):
            with m.If(sf_i == sf - 1):
                m.d.sync += nf_i.eq(Mux(nf_i == nf - 1, 0, nf_i + 1))
        return _Issue(issue, take, need_in, src_data, sf_i, sf_next, nf_i, addr, addr_next)

    def _weight_fields(self):
        """(rows of each weight-memory field, field width): one row per field, or with paired
        DSP products two rows packed (:func:`_row_groups`)."""
        pf = self.pair_field
        if pf is None:
            return [(p,) for p in range(self.pe)], self.weight_bits
        return _row_groups(self.pe), pair_width(pf, self.weight_bits)

    def _weight_rom(self, m, en, it: _Issue):
        """The weight ROM, read at ``it.addr``: word (nf, sf) holds W[nf*pe + p, sf*simd + s] at
        field p*simd + s; with paired DSP products, field g*simd + s holds rows 2g and 2g+1
        packed (an odd last row alone), each field signed of ``fw`` bits."""
        pe, simd = self.pe, self.simd
        nf, sf = self.out_features // pe, self.in_features // simd
        fields = np.where(self.weights > 0, 1, 0) if self.weight_bipolar else self.weights
        pf = self.pair_field
        groups, fw = self._weight_fields()
        rows = []
        for a in range(nf):
            for s in range(sf):
                blk = fields[a * pe:(a + 1) * pe, s * simd:(s + 1) * simd]
                if pf is None:
                    rows.append(blk.reshape(-1))
                else:
                    rows.append([pack_pair(blk[g[0], j], blk[g[1], j], pf) if len(g) == 2 else blk[g[0], j]
                                 for g in groups for j in range(simd)])
        return rom(m, pack_words(rows, fw), len(groups) * simd * fw, it.addr, en, "weights",
                   addr_next=it.addr_next, ebr_register=True)

    def _control(self, m, it: _Issue):
        """The control word of a beat (valid, first and last input fold, output fold), delayed
        along the pipeline to the accumulators."""
        nf = self.out_features // self.pe
        sf = self.in_features // self.simd
        ctl = Signal(data.StructLayout({"v": 1, "first": 1, "last": 1, "nf": range(nf)}))
        m.d.comb += [ctl.v.eq(it.issue), ctl.first.eq(it.sf_i == 0), ctl.last.eq(it.sf_i == sf - 1),
                     ctl.nf.eq(it.nf_i)]
        return ctl

    def _input(self, m, en, it: _Issue, family: str):
        """The input lanes of a beat, delayed to meet the weights: the input register during the
        first output fold of a group, the buffer (:meth:`_buffer_kind`) during the others."""
        simd, ib = self.simd, self.in_bits
        sf = self.in_features // simd
        xin = Signal(simd * ib, name="x_in", reset_less=True)   # (one register with a banked buffer's write data)
        buf_kind = self._buffer_kind(family)
        buf_land = buf_kind == "landed"
        xsel = Signal(name="x_sel")
        with m.If(en):
            m.d.sync += [xin.eq(it.src_data), xsel.eq(it.need_in)]
        if buf_kind == "banked":
            # a wide buffer in distributed RAM: banks with their own address and select registers
            rdata = banked_memory(m, simd * ib, sf, addr_next=it.sf_next, write=(it.src_data, it.take),
                                  name="xbuf")
            slices = banks_of(simd * ib)
            sels = replicas(m, it.need_in, len(slices), "x_sel")
            x1 = Cat(*[Mux(sel, xin[lo:hi], rdata[lo:hi]) for sel, (lo, hi) in zip(sels, slices)])
        elif buf_kind:
            # collided reads are unused: the buffer is written only while the input is taken
            # (``need_in``), and the input itself is selected then, not the read
            buf = memory.Memory(shape=unsigned(simd * ib), depth=sf, init=[], attrs={COLLISION_X_ATTR: 1})
            m.submodules.xbuf = buf
            wr = buf.write_port()
            rd = buf.read_port()
            m.d.comb += [wr.addr.eq(it.sf_i), wr.data.eq(it.src_data), wr.en.eq(it.take),
                         rd.addr.eq(it.sf_i), rd.en.eq(en)]
            rdata = rd.data
            if buf_land:
                # in block RAM the read lands in a plain register first (the block's output
                # register, see ram_outreg), the input and its select beside it: one of the
                # input's delay stages, taken before the select
                xin, rdata, xsel = (delay(m, en, v, 1, name=f"x_land_{n}", reset_less=True)[-1]
                                    for v, n in ((xin, "in"), (rd.data, "buf"), (xsel, "sel")))
            x1 = Mux(xsel, xin, rdata)
        else:
            x1 = xin
        return delay(m, en, x1, self._rom_latency() - 1 - buf_land, name="x_late")[-1]   # beside the weights

    def _operands(self, m, en, x1, wdata):
        """``(xs, ws, x_rows, stages)``: the input and weight lanes, registered for DSP and LUT
        products (off the weight memory's slow output), the input lanes each row reads
        (:meth:`_input_copies`; ``None`` for the other styles) and the register stages so far."""
        groups, fw = self._weight_fields()
        xs = _lanes(x1, self.in_bits, self.simd, self.in_signed)
        ws = _lanes(wdata, fw, len(groups) * self.simd, self.weight_signed or self.pair_field is not None)
        stages = self._rom_latency()
        x_rows = None
        if self.style in ("dsp", "lut"):
            x_src = xs
            xs, ws = register_operands(m, en, xs, ws)
            stages += 1
            x_rows = self._input_copies(m, x_src, xs)
        if self.style == "lut":
            stages += lut_product_registers(self.weight_bits, self.in_bits)
        return xs, ws, x_rows, stages

    def _input_copies(self, m, x_src, xs):
        """The input lanes each output row reads (``[row][lane]``): the operand registers ``xs``
        when :data:`X_ROWS_PER_COPY` rows (of the style) cover all, else a kept-apart replica
        (:func:`~onnx2hw.rtl.replicate.replicas`, loaded from ``x_src``) for each group of
        them. One register driving the products of every row would be routed across the whole
        unit into the products' carry chains; every group reads a replica (none reads ``xs``),
        since Yosys merges a plain register into an identical replica however far apart their
        loads are."""
        per = X_ROWS_PER_COPY[self.style]
        copies = -(-self.pe // per)
        if copies == 1:
            return [xs] * self.pe
        reps = [replicas(m, v, copies, f"x_r{j}") for j, v in enumerate(x_src)]
        return [[reps[j][p // per] for j in range(len(xs))] for p in range(self.pe)]

    def _paired_products(self, m, en, x_rows, ws, platform):
        """The products ``[row][lane]`` of one beat with two rows to a DSP (:attr:`pair_field`):
        each DSP product registered (``PRODUCT_LATENCY``), split into its two rows and registered
        again."""
        pe, simd, pf = self.pe, self.simd, self.pair_field
        groups, _ = self._weight_fields()
        prods = [[None] * simd for _ in range(pe)]
        sgn = self.in_signed or self.weight_signed
        for gi, g in enumerate(groups):
            for s in range(simd):
                r = registered_product(m, ws[gi * simd + s], x_rows[g[0]][s], platform=platform,
                                       name=f"pprod_{gi}_{s}")
                parts = unpack_pair(r, pf, sgn) if len(g) == 2 else (r,)
                for row, e in zip(g, parts):
                    rr = Signal(e.shape(), name=f"prod_{row}_{s}")
                    with m.If(en):
                        m.d.sync += rr.eq(e)
                    prods[row][s] = rr
        return prods

    def _products(self, m, en, x_rows, ws, platform):
        """The registered products ``[row][lane]`` of one (unpaired) beat, row ``p`` reading the
        input lanes ``x_rows[p]`` (DSP products: ``PRODUCT_LATENCY`` registers,
        :func:`~onnx2hw.rtl._dsp.registered_product`; the others one)."""
        pe, simd = self.pe, self.simd
        prods = []
        for p in range(pe):
            row = []
            for s in range(simd):
                wv, xv = ws[p * simd + s], x_rows[p][s]
                if self.style == "xnor":
                    e = ~(wv ^ xv)
                elif self.style == "sign":   # w = +1: x; w = -1: ~x = -x - 1 (the -1 is in the bias)
                    sx = xv if self.in_signed else Cat(xv, Const(0, 1)).as_signed()
                    e = Mux(wv, sx, ~sx)
                elif self.style == "negate":  # x = +1: w; x = -1: -w
                    e = Mux(xv, wv, -wv)
                elif self.style == "dsp":
                    row.append(registered_product(m, wv, xv, platform=platform, name=f"prod_{p}_{s}"))
                    continue
                else:
                    e = lut_product(wv, xv, m, en, name=f"lp_{p}_{s}")
                r = Signal(e.shape(), name=f"prod_{p}_{s}")
                with m.If(en):
                    m.d.sync += r.eq(e)
                row.append(r)
            prods.append(row)
        return prods

    def _accumulate(self, m, en, q, ctls, sums):
        """Accumulators (the output register) fed by the row sums, with the bias
        (:meth:`_biases`); ``ctls``: the control word at each stage (the last is the
        accumulator's)."""
        pe, simd, ab = self.pe, self.simd, self.acc_bits
        biases = self._biases(m, en, ctls)
        accs = [Signal(signed(ab), name=f"acc{p}") for p in range(pe)]
        ctl_acc = ctls[-1]
        with m.If(en):
            m.d.sync += q.valid.eq(ctl_acc.v & ctl_acc.last)
            with m.If(ctl_acc.v):
                for p in range(pe):
                    contrib = sums[p]
                    if self.style == "xnor":
                        contrib = (sums[p] << 1) - simd
                    m.d.sync += accs[p].eq(Mux(ctl_acc.first, biases[p], accs[p]) + contrib)
        for p in range(pe):
            m.d.comb += q.data[p].eq(accs[p])

    def _biases(self, m, en, ctls):
        """Each lane's bias at the accumulator's first fold (:meth:`_hw_bias`: with "sign"
        products plus the number of -1 weights of the row, stored modulo 2**acc_bits), read its
        ROM's latency ahead from the output fold of ``ctls``; ``0`` without a bias."""
        pe, ab = self.pe, self.acc_bits
        nf = self.out_features // pe
        hw_bias = self._hw_bias()
        if not (self.has_bias or np.any(hw_bias)):
            return [0] * pe
        lat = rom_latency(nf, ebr_register=True)
        rows = hw_bias.reshape(nf, pe)
        if rom_cost(nf, pe * ab)[0] != 0:
            bdata = rom(m, pack_words(rows, ab), pe * ab, ctls[-1 - lat].nf, en, "bias", ebr_register=True)
            return _lanes(bdata, ab, pe, True)
        # in logic: a ROM per lane, beside its accumulator (one register of all lanes' biases
        # would be a long route to the far lanes), read into a landing register a cycle early
        # when it has more than one word (the ROM's read register is packed with its last LUT,
        # which need not be placed near the lane)
        land = 1 if nf > 1 else 0
        biases = []
        for p in range(pe):
            b = rom(m, pack_words(rows[:, p:p + 1], ab), ab, ctls[-1 - lat - land].nf, en, f"bias{p}",
                    ebr_register=True)
            biases.append(delay(m, en, b, land, name=f"bias{p}_land")[-1].as_signed())
        return biases

    # -- cost model -------------------------------------------------------------------------

    @classmethod
    def estimate(cls, *args, family="ecp5", **kwargs) -> Cost:
        """Cost of ``MatrixVectorUnit(*args, **kwargs)`` without elaboration: the constructor's
        arguments, checked by it. Calibrated against Yosys ``synth_ecp5`` (YoWASP 0.70), the
        fitted constants being :data:`COST`.

        ``lut`` counts LUT4 equivalents: ``yosys_stat()["lut"] + 2 * yosys_stat()["ccu2c"]``
        (LUT4, 6 per distributed-RAM cell, 2 per CCU2C carry cell). ``family="ice40"`` scales
        the ECP5 figures (not calibrated separately).
        """
        if family not in FAMILIES:
            raise ValueError(f"family must be one of {FAMILIES!r}, not {family!r}")
        return unelaborated(cls, *args, **kwargs)._cost(family)

    def _cost(self, family):
        """:meth:`estimate` of this unit: :meth:`resources` rounded, plus the output queue."""
        nf, sf = self.out_features // self.pe, self.in_features // self.simd
        stages = self.pipeline_stages()
        lut, ff, dsps, ebr = self.resources(family)
        if family == "ice40":
            lut *= 1.1
        return queued(Cost(cycles=nf * sf, latency=sf - 1 + stages, lut=int(round(lut)), ff=int(ff),
                           dsp=dsps, ebr=ebr),
                      signed(self.acc_bits), self.pe, stages, beats=sf, family=family)

    def resources(self, family: str = "ecp5", consts: CostConstants = COST):
        """``(lut, ff, dsp, ebr)`` of the unit without its output queue, ``lut`` and ``ff``
        unrounded, with the constants ``consts`` (for ``bench.mvu_cost``, which refits them)."""
        pe, simd, ab, ib = self.pe, self.simd, self.acc_bits, self.in_bits
        mults = pe * simd
        pw = self._product_width()
        prod, prod_ff, pair_ff, dsps = self._product_cost(consts)
        tree = consts.lut_tree_bit * pe * _tree_bits(simd, pw, ab)
        acc = pe * ab * consts.lut_acc_bit
        rom_lut, buf_lut, io, rom_ff, bias_land, ebr = self._memory_cost(family)
        lut = prod + tree + acc + rom_lut + buf_lut + io + consts.lut_fixed
        copies = -(-pe // X_ROWS_PER_COPY[self.style]) if self.style in X_ROWS_PER_COPY else 1
        ff = (copies * simd * ib + pe * ab
              + mults * (2 * pw if self.style == "dsp" else pw if self.style != "lut" else 0)
              + (mults * self.weight_bits if self.style == "dsp" else 0)
              + tree_registers(simd, 2) * pe * min(ab, pw + simd.bit_length())
              + consts.ff_stage * self.pipeline_stages() + consts.ff_fixed + rom_ff)
        if self.style != "dsp":
            ff = ff * consts.ff_fabric_scale + prod_ff
        return lut, ff + pair_ff + bias_land, dsps, ebr

    def _product_width(self) -> int:
        """Bits of one product (before the adder tree) in this unit's style."""
        wb, ib = self.weight_bits, self.in_bits
        return {"xnor": 1, "sign": ib + (0 if self.in_signed else 1), "negate": wb + 1}.get(self.style, wb + ib)

    def _product_cost(self, consts: CostConstants):
        """``(lut, lut_ff, pair_ff, dsp)`` of one beat's products: LUTs, the flip-flops inside
        LUT products, the paired products' split registers and the DSP count."""
        pe, simd, wb, ib = self.pe, self.simd, self.weight_bits, self.in_bits
        nf, sf = self.out_features // pe, self.in_features // simd
        mults = pe * simd
        pw = self._product_width()
        lut_ff = 0
        if self.style == "lut":
            per, per_ff = lut_product_cost(wb, ib, constant=nf * sf == 1)
            prod, lut_ff = mults * per, mults * per_ff
        elif self.style == "dsp":
            prod = consts.lut_dsp_product * mults
        elif self.style == "sign":
            prod = mults * pw * consts.lut_sign_product_bit
        elif self.style == "negate":
            prod = mults * pw * consts.lut_negate_product_bit
        else:
            prod = 0
        pf = self.pair_field
        dsps = (len(_row_groups(pe)) * simd if pf is not None
                else mults * n_dsp(wb, self.weight_signed, ib, self.in_signed) if self.style == "dsp" else 0)
        pair_ff = 0
        if pf is not None:   # half the DSPs, the split of each pair, a second register
            prod = consts.lut_dsp_product * dsps + (pe // 2) * simd * pw * consts.lut_pair_split_bit
            pair_ff = mults * pw
        return prod, lut_ff, pair_ff, dsps

    def _memory_cost(self, family):
        """``(rom_lut, buf_lut, io, rom_ff, bias_ff, ebr)``: the weight and bias ROMs' LUTs (with
        their read registers'), the input buffer's LUTs and its select, the flip-flops beside the
        ROMs (the input delayed to meet the weights), the bias landing registers and the block
        RAMs."""
        pe, simd, ab, ib = self.pe, self.simd, self.acc_bits, self.in_bits
        nf, sf = self.out_features // pe, self.in_features // simd
        pf = self.pair_field
        wbits = pe * simd * self.weight_bits if pf is None else len(_row_groups(pe)) * simd * pair_width(pf, self.weight_bits)
        rom_ebr, rom_lut = rom_cost(nf * sf, wbits)
        buf_kind = self._buffer_kind(family)
        buf = ram_cost(sf, simd * ib) if buf_kind else RamCost(0, 0, 0, 0)
        io = simd * ib if buf_kind else 0                       # buffer mux
        if buf_kind == "banked":
            io += simd * ib                                     # banked buffer: the late write's bypass
        late_lut, rom_ff = rom_register_cost(nf * sf, wbits, addr_next=True)   # block rows' registers, the late input
        rom_ff += simd * ib * (self._rom_latency() - 1)   # the input, delayed beside the ROM
        if buf_kind == "landed":
            rom_ff += simd * ib + 1                             # the buffer's read landing beside it
        bias_lut, bias_ff = rom_register_cost(nf, pe * ab)    # the bias ROM's
        bias_land = 0                                           # (in logic: the lanes' landing registers,
        hw_bias = self._hw_bias()
        if (self.has_bias or np.any(hw_bias)) and rom_cost(nf, pe * ab)[0] == 0 and nf > 1:
            bias_land = pe * min(ab, int(np.abs(hw_bias).max()).bit_length() + 1)   # as wide as the biases)
        rom_lut += late_lut + bias_lut
        rom_ff += bias_ff
        return rom_lut, buf.lut_equiv, io, rom_ff, bias_land, rom_ebr + buf.ebr


def _row_groups(pe):
    """Output rows sharing a DSP when products are paired: (0, 1), (2, 3), ... and an odd last row alone."""
    return [(p, p + 1) for p in range(0, pe - 1, 2)] + ([(pe - 1,)] if pe % 2 else [])


def _tree_bits(items, width, cap):
    """Total adder width of a pairwise tree over ``items`` operands of ``width`` bits."""
    total, level = 0, 0
    while items > 1:
        level += 1
        total += (items // 2) * min(cap, width + level)
        items = items - items // 2
    return total


def bench_config():
    """Bench entries ``[(name, factory, feeds, expect)]``: MVUs of 16 multipliers: 8-bit in DSPs
    or LUTs, 4-bit weights two to a DSP."""
    rng = np.random.default_rng(1)
    out = []
    for name, n, k, pe, simd, style in (("mvu_8b_64x64_pe4_simd4", 64, 64, 4, 4, "auto"),
                                        ("mvu_8b_32x128_pe2_simd8", 32, 128, 2, 8, "auto"),
                                        ("mvu_8b_64x64_pe4_simd4_lut", 64, 64, 4, 4, "lut")):
        w = rng.integers(-128, 128, size=(n, k))
        b = rng.integers(-1000, 1000, size=n)
        vectors = 4
        x = rng.integers(-128, 128, size=(vectors, k))

        def factory(w=w, b=b, pe=pe, simd=simd, style=style):
            return MatrixVectorUnit(w, b, in_bits=8, in_signed=True, weight_bits=8,
                                    weight_signed=True, pe=pe, simd=simd, mul_style=style)

        out.append((name, factory, {"i": x.reshape(-1, simd)}, {"o": vectors * n // pe}))
    # 4-bit weights x 8-bit activations, two products per DSP (8 MULT18X18D for 16 products)
    w4 = rng.integers(-8, 8, size=(64, 64))
    x8 = rng.integers(0, 256, size=(4, 64))

    def paired():
        return MatrixVectorUnit(w4, None, in_bits=8, in_signed=False, weight_bits=4, weight_signed=True,
                                pe=4, simd=4, mul_style="dsp")
    out.append(("mvu_w4a8_64x64_pe4_simd4_paired", paired, {"i": x8.reshape(-1, 4)}, {"o": 4 * 64 // 4}))
    return out
