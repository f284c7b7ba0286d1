"""Matrix-vector unit: ``y = W @ x (+ bias)`` over a stream of input vectors (FINN-style folding)."""
from __future__ import annotations

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

__all__ = ["MatrixVectorUnit", "bench_config"]

#: buffers of at most this many words are banked distributed RAM (two 16-word cells deep)
LUT_RAM_WORDS = 32
#: output rows whose products read one copy of the input operand registers, by product style
#: (a LUT product is a few hundred LUTs: 8 of them spread too far for one copy, 7.7 ns routed in
#: the KWS DS-CNN's first MVU)
X_ROWS_PER_COPY = {"dsp": 8, "lut": 1}







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
        m = Module()
        n, k, pe, simd = self.out_features, self.in_features, self.pe, self.simd
        nf, sf = n // pe, k // simd
        nfg = nf // self.groups          # output folds per input vector
        wb, ib, ab = self.weight_bits, self.in_bits, self.acc_bits
        # Free-running datapath (no enable); a beat issues only while the output queue has a
        # credit, and the beat that ends an output reserves its place.
        q = OutputQueue(m, self.o, queue_depth(self.pipeline_stages(), sf))
        en = Const(1)

        # Issue stage: fold counters, weight address, input or buffer.
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
        # loaded with their next values: the producer's ready is a wire from one flip-flop (a
        # fold counter through three LUTs to a sliding window's output enables, 29 columns away,
        # limited the KWS DS-CNN to 77 MHz)
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

        # Weight ROM: word (nf, sf) holds W[nf*pe + p, sf*simd + s] at field p*simd + s; with
        # paired DSP products, field g*simd + s holds rows 2g and 2g+1 packed (an odd last row
        # alone), each field signed of ``fw`` bits.
        fields = np.where(self.weights > 0, 1, 0) if self.weight_bipolar else self.weights
        pf = self.pair_field
        groups = _row_groups(pe) if pf is not None else [(p,) for p in range(pe)]
        fw = wb if pf is None else pair_width(pf, wb)
        rows = []
        for a in range(nf):
            for s in range(sf):
                blk = fields[a * pe:(a + 1) * pe, s * simd:(s + 1) * simd]
                if pf is None:
                    rows.append(blk.reshape(-1))
                else:
                    rows.append([pack_pair(blk[g[0], j], blk[g[1], j], pf) if len(g) == 2 else blk[g[0], j]
                                 for g in groups for j in range(simd)])
        wdata = rom(m, pack_words(rows, fw), len(groups) * simd * fw, addr, en, "weights", addr_next=addr_next,
                    ebr_register=True)

        # Stage 1 registers.
        ctl = Signal(data.StructLayout({"v": 1, "first": 1, "last": 1, "nf": range(nf)}))
        m.d.comb += [ctl.v.eq(issue), ctl.first.eq(sf_i == 0), ctl.last.eq(sf_i == sf - 1),
                     ctl.nf.eq(nf_i)]
        xin = Signal(simd * ib, name="x_in", reset_less=True)   # (one register with a banked buffer's write data)
        buf_kind = self._buffer_kind(getattr(platform, "family", "ecp5"))
        buf_land = buf_kind == "landed"
        xsel = Signal(name="x_sel")
        with m.If(en):
            m.d.sync += [xin.eq(src_data), xsel.eq(need_in)]
        if buf_kind == "banked":
            # a wide buffer in distributed RAM: banks with their own address and select registers
            rdata = banked_memory(m, simd * ib, sf, addr_next=sf_next, write=(src_data, take), name="xbuf")
            slices = banks_of(simd * ib)
            sels = replicas(m, need_in, len(slices), "x_sel")
            x1 = Cat(*[Mux(sel, xin[lo:hi], rdata[lo:hi]) for sel, (lo, hi) in zip(sels, slices)])
        elif buf_kind:
            # collided reads are unused: the buffer is written only while the input is taken
            # (``need_in``), and the input itself is selected then, not the read
            buf = memory.Memory(shape=unsigned(simd * ib), depth=sf, init=[], attrs={COLLISION_X_ATTR: 1})
            m.submodules.xbuf = buf
            wr = buf.write_port()
            rd = buf.read_port()
            m.d.comb += [wr.addr.eq(sf_i), wr.data.eq(src_data), wr.en.eq(take),
                         rd.addr.eq(sf_i), rd.en.eq(en)]
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
        x1 = delay(m, en, x1, self._rom_latency() - 1 - buf_land, name="x_late")[-1]   # beside the weights

        def lanes(flat, width, count, sgn):
            out = []
            for j in range(count):
                v = flat[j * width:(j + 1) * width]
                out.append(v.as_signed() if sgn else v)
            return out

        xs = lanes(x1, ib, simd, self.in_signed)
        ws = lanes(wdata, fw, len(groups) * simd, self.weight_signed or pf is not None)
        stages = self._rom_latency()
        x_rows = None
        if self.style in ("dsp", "lut"):  # (LUT products: off the weight memory's slow output)
            x_src = xs
            xs, ws = register_operands(m, en, xs, ws)
            stages += 1
            x_rows = self._input_copies(m, x_src, xs)
        if self.style == "lut":
            stages += lut_product_registers(wb, ib)

        # Products, registered.
        if pf is not None:   # paired DSP products: registered, split, registered again
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
            stages += PRODUCT_LATENCY + 1
        else:
            prods = self._products(m, en, x_rows or [xs] * pe, ws, platform)
            stages += PRODUCT_LATENCY if self.style == "dsp" else 1
        sums = [adder_tree(m, en, row, 2, extra_levels=1, name=f"sum{p}")
                for p, row in enumerate(prods)]
        stages += tree_registers(simd, 2)
        ctls = delay(m, en, ctl, stages, name="ctl")
        self._accumulate(m, en, q, ctls, sums)
        assert stages + 1 == self.pipeline_stages()
        return m

    def _input_copies(self, m, x_src, xs):
        """The input lanes each output row reads (``[row][lane]``): the operand registers ``xs``
        when :data:`X_ROWS_PER_COPY` rows (of the style) cover all, else a kept-apart replica
        (:func:`~onnx2hw.rtl.replicate.replicas`, loaded from ``x_src``) for each group of
        them. One register driving the products of every row crossed the KWS DS-CNN's first
        MVU (5.8 ns routed into a LUT product's carry chain); with ``xs`` for the first group,
        Yosys merged it into the last group's identical replica (rows 0 and 31, 4.8 ns)."""
        per = X_ROWS_PER_COPY[self.style]
        copies = -(-self.pe // per)
        if copies == 1:
            return [xs] * self.pe
        reps = [replicas(m, v, copies, f"x_r{j}") for j, v in enumerate(x_src)]
        return [[reps[j][p // per] for j in range(len(xs))] for p in range(self.pe)]

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
        """Accumulators (the output register) fed by the row sums, with the bias; ``ctls``: the
        control word at each stage (the last is the accumulator's)."""
        pe, simd, ab = self.pe, self.simd, self.acc_bits
        nf = self.out_features // pe

        def lanes(flat, width, count, sgn):
            return [flat[j * width:(j + 1) * width].as_signed() if sgn else flat[j * width:(j + 1) * width]
                    for j in range(count)]

        # Bias, read its ROM's latency ahead of the accumulator (with "sign" products: plus the
        # number of -1 weights of the row, stored modulo 2**acc_bits).
        hw_bias = self._hw_bias()
        if self.has_bias or np.any(hw_bias):
            lat = rom_latency(nf, ebr_register=True)
            rows = hw_bias.reshape(nf, pe)
            if rom_cost(nf, pe * ab)[0] == 0:   # in logic: a ROM per lane, beside its accumulator
                # (one register of all lanes' biases was routed 10.6 ns to a far lane, KWS), read
                # into a landing register a cycle early when it has more than one word (its read
                # register, packed with the ROM's last LUT, was placed 50 columns from its lane, KWS)
                land = 1 if nf > 1 else 0
                biases = []
                for p in range(pe):
                    b = rom(m, pack_words(rows[:, p:p + 1], ab), ab, ctls[-1 - lat - land].nf, en, f"bias{p}",
                            ebr_register=True)
                    biases.append(delay(m, en, b, land, name=f"bias{p}_land")[-1].as_signed())
            else:
                bdata = rom(m, pack_words(rows, ab), pe * ab, ctls[-1 - lat].nf, en, "bias", ebr_register=True)
                biases = lanes(bdata, ab, pe, True)
        else:
            biases = [0] * pe

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

    # -- cost model -------------------------------------------------------------------------

    @classmethod
    def estimate(cls, weights, bias=None, *, in_bits, in_signed, weight_bits, weight_signed,
                 bipolar=False, weight_bipolar=False, input_bipolar=False, pe=1, simd=1, groups=1, acc_bits=None,
                 mul_style="auto", family="ecp5"):
        """Cost without elaboration, calibrated against Yosys ``synth_ecp5`` (YoWASP 0.70).

        ``lut`` counts LUT4 equivalents: ``yosys_stat()["lut"] + 2 * yosys_stat()["ccu2c"]``
        (LUT4, 6 per distributed-RAM cell, 2 per CCU2C carry cell). ``family="ice40"`` scales
        the ECP5 figures (not calibrated separately).
        """
        if family not in FAMILIES:
            raise ValueError(f"family must be one of {FAMILIES!r}, not {family!r}")
        self = unelaborated(cls, weights, bias, in_bits=in_bits, in_signed=in_signed,
                     weight_bits=weight_bits, weight_signed=weight_signed, bipolar=bipolar,
                     weight_bipolar=weight_bipolar, input_bipolar=input_bipolar,
                     pe=pe, simd=simd, groups=groups, acc_bits=acc_bits, mul_style=mul_style)
        return self._cost(family)

    def _cost(self, family):
        n, k, pe, simd = self.out_features, self.in_features, self.pe, self.simd
        nf, sf = n // pe, k // simd
        nfg = nf // self.groups
        ab, wb, ib = self.acc_bits, self.weight_bits, self.in_bits
        stages = self.pipeline_stages()
        mults = pe * simd
        pw = {"xnor": 1, "sign": ib + (0 if self.in_signed else 1),
              "negate": wb + 1}.get(self.style, wb + ib)  # product width
        small, large = min(wb, ib), max(wb, ib)
        # LUT4 equivalents (a CCU2C carry cell counts 2): fitted to Yosys synth_ecp5 stat
        lut_ff = 0
        if self.style == "lut":
            per, per_ff = lut_product_cost(wb, ib, constant=nf * sf == 1)
            prod, lut_ff = mults * per, mults * per_ff
        elif self.style == "dsp":
            prod = 12 * mults
        elif self.style == "sign":
            prod = mults * pw * 2                              # inversion and the wider tree inputs
        elif self.style == "negate":
            prod = mults * pw * 3.4                            # negation (carry chain) and select
        else:
            prod = 0
        pf = self.pair_field
        dsps = (len(_row_groups(pe)) * simd if pf is not None
                else mults * n_dsp(wb, self.weight_signed, ib, self.in_signed) if self.style == "dsp" else 0)
        pair_ff = 0
        if pf is not None:   # half the DSPs, the split of each pair (a borrow add), a second register
            prod = 12 * dsps + (pe // 2) * simd * pw / 2
            pair_ff = mults * pw
        tree = pe * _tree_bits(simd, pw, ab)
        acc = pe * ab * 2                                      # adder + first/bias mux
        wbits = mults * wb if pf is None else len(_row_groups(pe)) * simd * pair_width(pf, wb)
        rom_ebr, rom_lut = rom_cost(nf * sf, wbits)
        buf_kind = self._buffer_kind(family)
        buf = ram_cost(sf, simd * ib) if buf_kind else RamCost(0, 0, 0, 0)
        buf_ebr, buf_lut = buf.ebr, buf.lut_equiv
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
        lut = prod + tree + acc + rom_lut + buf_lut + io + 40
        copies = -(-pe // X_ROWS_PER_COPY[self.style]) if self.style in X_ROWS_PER_COPY else 1
        ff = (copies * simd * ib + pe * ab + mults * (2 * pw if self.style == "dsp" else pw if self.style != "lut" else 0)
              + (mults * wb if self.style == "dsp" else 0)
              + tree_registers(simd, 2) * pe * min(ab, pw + simd.bit_length())
              + 4 * stages + 30 + rom_ff)
        if self.style != "dsp":
            ff = ff * 1.25 + lut_ff
        if family == "ice40":
            lut *= 1.1
        return queued(Cost(cycles=nf * sf, latency=sf - 1 + stages, lut=int(round(lut)), ff=int(ff + pair_ff + bias_land),
                           dsp=dsps, ebr=rom_ebr + buf_ebr),
                      signed(ab), pe, stages, beats=sf, family=family)


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
