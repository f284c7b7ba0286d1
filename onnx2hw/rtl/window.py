"""Sliding-window generator (im2col on a stream) with line buffers in block RAM."""
from __future__ import annotations

import numpy as np
from amaranth.hdl import C, Cat, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from ._linebuf import Counter, Geometry, RamCost, clog2, ebr_slices, lands, ram_cost, shape_of
from .replicate import banks_of, replicas
from .cost import FAMILIES, Cost

__all__ = ["SlidingWindow", "bench_config"]


def _signed_for(lo: int, hi: int):
    """``signed`` shape holding every integer in ``[lo, hi]``."""
    bits = 1
    while not (-(1 << (bits - 1)) <= lo and hi <= (1 << (bits - 1)) - 1):
        bits += 1
    return signed(bits)


class SlidingWindow(wiring.Component):
    """Turn an NHWC pixel stream into the stream of k×k windows a convolution consumes.

    For each output pixel ``(oh, ow)`` in raster order the block emits the window
    ``x_pad[oh*sh + kh, ow*sw + kw, c]`` for all ``kh < KH, kw < KW, c < C``, ``simd``
    channels per transfer:

    * ``depthwise=False`` (default): order ``(kh, kw, c-fold)``, channels fastest — exactly
      one im2col row, so an MVU with ``K = KH*KW*C`` and ``simd`` lanes consumes it directly.
    * ``depthwise=True``: order ``(c-fold, kh, kw)`` — the ``KH*KW`` transfers of one channel
      group are contiguous (for depthwise convolution and pooling).

    Padding elements are ``pad_value`` (the input zero point for a convolution). Images follow
    each other back to back with no gap and no state carried between them.

    Parameters
    ----------
    height, width, channels : int
        Input image ``H``, ``W``, ``C``. A 1-D convolution is ``height=1`` with ``kernel=(1, k)``.
    kernel, stride : int or (int, int)
        Kernel ``(KH, KW)`` and stride ``(SH, SW)``.
    pads : int, (h, w) or (top, left, bottom, right)
        Zero-or-more padding rows/columns on each side (ONNX ``pads`` order for 2-D).
    dilation : int or (int, int)
        Only 1 is supported (``ValueError`` otherwise).
    elem_shape : Shape
        ``signed(w)`` or ``unsigned(w)``; payloads are ``data.ArrayLayout(elem_shape, simd)``.
    simd : int
        Channels per transfer; must divide ``channels``. Lane ``j`` of transfer ``t`` of a
        pixel carries channel ``t*simd + j``.
    pad_value : int
        Value of padding elements; must fit ``elem_shape``.
    depthwise : bool
        Window element order, see above.
    buffer_rows : int, optional
        Input rows held in the circular line buffer (block RAM of ``buffer_rows*W*C/simd``
        words of ``simd*w`` bits). Default ``KH + SH``, which lets the writer fill the rows of
        the next output row while the current one is read; ``KH`` is the minimum (less RAM,
        input and output then alternate instead of overlapping).

    Interface
    ---------
    i : In(stream.Signature(ArrayLayout(elem_shape, simd)))
        ``H*W*C/simd`` transfers per image.
    o : Out(stream.Signature(ArrayLayout(elem_shape, simd)))
        ``OH*OW*KH*KW*C/simd`` transfers per image.

    Timing
    ------
    Initiation interval: about ``max(H*W*C/simd, OH*OW*KH*KW*C/simd + OH)`` cycles per image
    (the larger of input and output transfers, one of each per cycle at most, plus one bubble
    per output row) plus a small bubble per image when the first output row needs more than
    ``SH`` new rows (see ``estimate``).
    Latency: a window starts once the last input pixel it needs (clipped to the image) is
    complete; the first window is emitted 6 cycles after that pixel's last input transfer (7
    with the line buffer in block RAM), i.e.
    ``((min(max(0, KH-1-top), H-1) * W + min(max(0, KW-1-left), W-1) + 1) * C/simd + 6``
    (+ 1) cycles after the first input transfer when the input streams one transfer per cycle.

    Structure: the loop counters keep their ``== last`` tests in registers; whether the current
    window's pixels are written is a registered test (the next window's is computed beside it;
    cleared for the cycle after a move to another output row); the reader is a four-stage
    pipeline under the global enable ``en`` (the skid register is empty, below):
    read address and padding flag, the block RAM's read register, a data register (nothing
    after the RAM's slow clock-to-out; with block RAM a landing register beside the RAM comes
    first) and the output register (padding substituted).

    Backpressure: ``o.valid`` and ``o.payload`` are registers held while ``o.ready`` is low;
    a skid register beside them takes the element in flight, and the pipeline's enable is that
    register's empty flag (``o.ready`` fans out to the output register only); the data stages
    after the RAM, the skid and output registers are split into 64-bit banks, each with its own
    copies of the flags that enable and select them. ``i.ready`` (a function of registers only)
    is low only while the writer waits for a free line-buffer row; the line buffer is written a
    cycle after the input transfer, from registers. No data is lost or duplicated under any
    stall pattern.
    """

    #: its latency is the wait for its first input rows (the stage's ``fill``)
    LATENCY_IN_FILL = True

    def __init__(self, height, width, channels, kernel, *, stride=1, pads=0, dilation=1,
                 elem_shape=unsigned(8), simd=1, pad_value=0, depthwise=False, buffer_rows=None):
        self.geom = g = Geometry.make(height, width, channels, kernel, stride, pads, dilation, simd)
        self.elem_shape = shape_of(elem_shape)
        lo = -(1 << (self.elem_shape.width - 1)) if self.elem_shape.signed else 0
        hi = (1 << (self.elem_shape.width - (1 if self.elem_shape.signed else 0))) - 1
        if isinstance(pad_value, bool) or not isinstance(pad_value, (int, np.integer)):
            raise TypeError(f"pad_value must be an integer, not {pad_value!r}")
        if not lo <= int(pad_value) <= hi:
            raise ValueError(f"pad_value {pad_value!r} does not fit {self.elem_shape!r}")
        self.pad_value = int(pad_value)
        self.depthwise = bool(depthwise)
        rows = g.kh + g.sh if buffer_rows is None else buffer_rows
        if isinstance(rows, bool) or not isinstance(rows, int):
            raise TypeError(f"buffer_rows must be an integer, not {buffer_rows!r}")
        if rows < g.kh:
            raise ValueError(f"buffer_rows {buffer_rows!r} must be at least the kernel height {g.kh!r}")
        self.buffer_rows = rows
        self.layout = data.ArrayLayout(self.elem_shape, g.simd)
        super().__init__({
            "i": In(stream.Signature(self.layout)),
            "o": Out(stream.Signature(self.layout)),
        })

    # -- geometry helpers -------------------------------------------------------------
    @property
    def out_shape(self) -> tuple[int, int]:
        return self.geom.out_h, self.geom.out_w

    @property
    def in_transfers(self) -> int:
        """Input transfers per image."""
        return self.geom.in_transfers

    @property
    def out_transfers(self) -> int:
        """Output transfers per image."""
        g = self.geom
        return g.out_pixels * g.kh * g.kw * g.fold

    # -- cost model ---------------------------------------------------------------------
    @staticmethod
    def estimate(height, width, channels, kernel, *, stride=1, pads=0, dilation=1,
                 elem_shape=unsigned(8), simd=1, pad_value=0, depthwise=False, buffer_rows=None,
                 family="ecp5") -> Cost:
        """Cost without elaboration, calibrated against Yosys ``synth_ecp5`` ``stat``.

        ``lut`` counts LUT4s plus 6 per ``TRELLIS_DPR16X4`` (Yosys keeps line buffers of up to
        ~27 such cells in distributed RAM, larger ones in ``DP16KD`` blocks, counted in
        ``ebr``). ``cycles`` is the initiation interval per image without backpressure;
        ``latency`` is counted from the first input transfer to the first output transfer.
        The ``ice40`` figures reuse the ECP5 logic fit with SB_RAM40_4K block counts.
        """
        if family not in FAMILIES:
            raise ValueError(f"family must be one of {FAMILIES!r}, not {family!r}")
        g = Geometry.make(height, width, channels, kernel, stride, pads, dilation, simd)
        w = shape_of(elem_shape).width
        rows = g.kh + g.sh if buffer_rows is None else int(buffer_rows)
        cf = g.fold
        out_t = g.out_pixels * g.kh * g.kw * cf
        in_t = g.in_transfers
        # Per-image bubble: rows the first output row needs beyond those the writer may
        # pre-fill while the previous image's last output row is read.
        first_rows = max(0, min(g.kh - g.pads[0], g.height))
        bubble = max(0, first_rows - (rows - min(g.kh, g.height))) * g.width * cf
        # one bubble per output row (the registered data-ready test restarts)
        cycles = max(in_t, out_t + g.out_h) + (bubble if out_t >= in_t else 0) + 2
        word = w * g.simd
        latency = _first_transfers(g) + 6 + lands(rows * g.width * cf, word, family)
        lut, ff, ebr = _window_resources(g, rows, w, family)
        return Cost(cycles=cycles, latency=latency, lut=lut, ff=ff, dsp=0, ebr=ebr)

    # -- hardware -----------------------------------------------------------------------
    def elaborate(self, platform):
        g = self.geom
        m = Module()
        H, W, CF = g.height, g.width, g.fold
        KH, KW, SH, SW = g.kh, g.kw, g.sh, g.sw
        PT, PL, PB, PR = g.pads
        OH, OW = g.out_h, g.out_w
        R = self.buffer_rows
        WCF = W * CF
        D = R * WCF
        word = self.elem_shape.width * g.simd

        # Reads and writes never meet on one address (a row is read only once written and
        # rewritten only once released). The read port is asynchronous plus a register (r1)
        # that Yosys merges into the block RAM; with ``no_rw_check`` it then adds no
        # read-during-write bypass (a multiplexer after the RAM's slow clock-to-out).
        # On ECP5 the buffer is split by width (:func:`_buffer_slices`), each slice with its own
        # copies of the write address and enable, read address and read enable.
        family = getattr(platform, "family", "ecp5")
        land = lands(D, word, family)
        slices = _buffer_slices(D, word, family)[0]
        ports = []
        for k, (lo, hi) in enumerate(slices):
            mem = memory.Memory(shape=unsigned(hi - lo), depth=D, init=[], attrs={"no_rw_check": 1})
            m.submodules["mem" if len(slices) == 1 else f"mem{k}"] = mem
            ports.append((mem.write_port(), mem.read_port(domain="comb")))

        def wrap_add(x, c):
            """``(x + c) mod D`` for ``x`` in ``[0, D)`` and a constant: the compare and both
            sums are computed in parallel from ``x`` and one multiplexer picks."""
            c %= D
            if c == 0:
                return x
            return Mux(x >= D - c, x - (D - c), x + c)

        # ---------------- writer ----------------
        w_cf = Counter(CF, "w_cf")
        w_col = Counter(W, "w_col")
        w_row = Counter(H, "w_row")
        w_addr = Counter(D, "w_addr")
        credit = Signal(range(R + H + 2), init=R)
        row_start = Signal(init=1)              # next input transfer starts a row
        release = Signal(range(H + 1))          # rows freed by the reader (see rel0)
        w_fire = Signal()
        w_img_done = Signal()
        # The write is carried out a cycle late, from registers: the input handshake drives a
        # flip-flop, not the write enable of every distributed-RAM cell (4.9 ns routed in a KWS
        # DS-CNN). The reader reads an address only cycles after its write counted it written.
        w_ens = replicas(m, w_fire, len(slices), "w_en")
        w_as = replicas(m, w_addr.value, len(slices), "w_a", copy=True)
        w_d = Signal(word, name="w_d", reset_less=True)
        m.d.sync += w_d.eq(self.i.payload.as_value())
        for (wp, _), (lo, hi), a, e in zip(ports, slices, w_as, w_ens):
            m.d.comb += [wp.addr.eq(a), wp.data.eq(w_d[lo:hi]), wp.en.eq(e)]
        m.d.comb += [
            self.i.ready.eq(~row_start | (credit != 0)),
            w_fire.eq(self.i.valid & self.i.ready),
            w_img_done.eq(w_fire & w_cf.last & w_col.last & w_row.last),
        ]
        with m.If(w_fire):
            m.d.sync += w_addr.wrap() + w_cf.wrap() + [row_start.eq(w_cf.last & w_col.last)]
            with m.If(w_cf.last):
                m.d.sync += w_col.wrap()
                with m.If(w_col.last):
                    m.d.sync += w_row.wrap()
        # both sums from registers; the input handshake only selects
        m.d.sync += credit.eq(Mux(w_fire & row_start, credit + release - 1, credit + release))

        # ---------------- reader (window generator) ----------------
        # Four stages under the global enable ``en``: (0) loop counters -> read address,
        # padding flag; (1) line-buffer read; (2) data register; (3) output register with the
        # padding substituted.
        ushape = _signed_for(-PT - 1, (OH - 1) * SH + KH + 1)
        vshape = _signed_for(-PL - 1, (OW - 1) * SW + KW + 1)
        u = Signal(ushape, init=-PT)            # input row of window top
        v = Signal(vshape, init=-PL)            # input column of window left
        ih = Signal(ushape, init=-PT)           # input row of the next element
        iw = Signal(vshape, init=-PL)           # input column of the next element
        cshape = _signed_for(-PL * CF - CF, ((OW - 1) * SW + KW + 1) * CF)
        vcf = Signal(cshape, init=-PL * CF)     # v * CF
        coff = Signal(cshape, init=-PL * CF)    # iw * CF
        abits = max(1, clog2(D))
        top_init = (-PT % R) * WCF
        next_base = Signal(range(max(D, 2)), init=(H * WCF) % D)  # row 0 of the next image
        top_addr = Signal(range(max(D, 2)), init=top_init)      # row u
        row_addr = Signal(range(max(D, 2)), init=top_init)      # row ih
        r_kh = Counter(KH, "r_kh")
        r_kw = Counter(KW, "r_kw")
        r_cf = Counter(CF, "r_cf")
        r_ow = Counter(OW, "r_ow")
        r_oh = Counter(OH, "r_oh")
        ahead = Signal(_signed_for(-1, R + 2))  # images finished by writer minus reader

        # The current window's data is written once input pixel (``need``, ``ncol``) -- its
        # last row and column, clipped to the image -- is complete. ``ok`` is that test
        # registered: on a move to the next window of the output row it takes the same test
        # for that window (``ncol_n``, computed in parallel); after a move to another output
        # row it is cleared for one cycle (one bubble per output row).
        def clip(x, hi):
            return Mux(x > hi, hi, Mux(x < 0, 0, x))
        need = Signal(range(H), init=min(max(0, KH - 1 - PT), H - 1))
        ncol = Signal(range(W), init=min(max(0, KW - 1 - PL), W - 1))
        ncol_n = Signal(range(W), init=min(max(0, SW + KW - 1 - PL), W - 1))
        ok = Signal()
        en = Signal()
        s_v = Signal()      # the skid register holds a window element the output could not take
        issue = Signal()
        win_move = Signal()
        row_move = Signal()
        img_done = Signal()
        win_done = r_kh.last & r_kw.last & r_cf.last
        m.d.comb += [
            en.eq(~s_v),
            issue.eq(en & ok),
            win_move.eq(issue & win_done),
            row_move.eq(win_move & r_ow.last),
            img_done.eq(row_move & r_oh.last),
        ]
        w_row_s = Cat(w_row.value, C(0, 1)).as_signed()
        w_col_s = Cat(w_col.value, C(0, 1)).as_signed()

        def written(col):
            return (ahead > 0) | ((ahead == 0) & (
                (w_row_s > need) | ((w_row_s == need) & (w_col_s > col))))
        m.d.sync += ok.eq(~row_move & Mux(win_move, written(ncol_n), written(ncol)))

        # Row release: rows [lo(oh), lo(oh+1)) are no longer needed once output row oh is read.
        lo_shape = unsigned(clog2(H + 1) + 1)

        def clip_row(x):
            return Mux(x < 0, 0, Mux(x > H, H, x))
        # ``lo_now``/``lo_next`` (so the rows freed by the current output row) are registers of
        # ``u``: one cycle late after a row move, which the bubble after every row move covers.
        lo_now = Signal(lo_shape)
        lo_next = Signal(lo_shape)
        m.d.sync += [
            lo_now.eq(clip_row(u)),
            lo_next.eq(Mux(r_oh.last, H, clip_row(u + SH))),
        ]

        a0 = Signal(abits)
        p0, p1, p2, v0, v1, v2 = Signal(), Signal(), Signal(), Signal(), Signal(), Signal()
        rel0, rel1 = Signal.like(release), Signal.like(release)
        d2 = Signal(word)
        padded = (ih < 0) | (ih > H - 1) | (iw < 0) | (iw > W - 1)
        pad_raw = 0
        mask = (1 << self.elem_shape.width) - 1
        for j in range(g.simd):
            pad_raw |= (self.pad_value & mask) << (j * self.elem_shape.width)
        # Stage 1 (r1) is the line buffer's read register; its data goes straight into a
        # register (d2) and padding is substituted in the output stage. Rows released by an
        # output row travel with its last element (rel0, rel1): the writer may overwrite them
        # only after that element has been read.
        r1 = Signal(word, reset_less=True)   # no reset: a read-port reset would keep l1 out of
        #                                      the block RAM's output register (see ram_outreg)
        # A line buffer in block RAM: its read data (5.8 ns clock-to-out) lands in a register of
        # its own (l1), placed beside the RAM, before the data register (20 columns routed from
        # the RAM to d2 limited ResNet-8 to 90 MHz).
        l1, pl, vl = (Signal(word, reset_less=True), Signal(), Signal()) if land else (r1, p1, v1)
        # Output: a skid register (s_d, s_v) beside the output register, so that the reader
        # pipeline's enable is the register ~s_v and o.ready reaches only the output and skid
        # flags (not every pipeline register: 11 ns routed from a KWS DS-CNN MVU's ready).
        # With s_v low the pipeline advances and its element (v2, out_d) goes to the output
        # register when that is free or taken, else into the skid register; the skid drains
        # first. Same cycle behaviour as one output register while o.ready stays high.
        # The data registers after the RAM's read register, the skid register and the output
        # register are split into banks (``banks_of``), each with its own copies of s_v, p2 and
        # o.valid: one s_v driving every output bit's multiplexer was routed 11 ns across a
        # ResNet-8 (82 MHz).
        s_d = Signal(word)
        take = ~self.o.valid | self.o.ready
        s_v_next = Mux(take, 0, Mux(en & v2, 1, s_v))
        o_v_next = Mux(take, s_v | (en & v2), self.o.valid)
        p2_next = Mux(en, pl, p2)
        m.d.sync += [s_v.eq(s_v_next), self.o.valid.eq(o_v_next), p2.eq(p2_next)]
        a0_next = Mux(en, (row_addr + coff + r_cf.value)[:abits], a0)
        m.d.sync += a0.eq(a0_next)
        # the read address and r1's enable: a copy per slice (the one register itself when one)
        a0s = replicas(m, a0_next, len(slices), "a0") if len(slices) > 1 else [a0]
        r_ens = [~h for h in replicas(m, s_v_next, len(slices), "r1_hold")] if len(slices) > 1 else [en]
        for (_, rp), (lo, hi), a, e in zip(ports, slices, a0s, r_ens):
            m.d.comb += rp.addr.eq(a)
            with m.If(e):
                m.d.sync += r1[lo:hi].eq(rp.data)
        with m.If(en):
            m.d.sync += [
                p0.eq(padded), v0.eq(issue),
                rel0.eq(Mux(row_move, lo_next - lo_now, 0)),
                p1.eq(p0), v1.eq(v0), rel1.eq(rel0), v2.eq(vl),
            ]
        if land:
            with m.If(en):
                m.d.sync += [pl.eq(p1), vl.eq(v1)]
        banks = banks_of(word)
        svs, ovs, p2s = (replicas(m, nxt, len(banks), name)
                         for nxt, name in ((s_v_next, "s_v"), (o_v_next, "o_v"), (p2_next, "p2")))
        # The landing register of each RAM slice has a load enable of its own (so that nothing
        # but the RAM's data and the next stage pulls it in placement: 4.6 ns routed from a RAM,
        # ResNet-8), positive, no reset, one per slice: the block's own output register can
        # take it (:mod:`~.ram_outreg`).
        if land:
            for (lo, hi), load in zip(slices, replicas(m, ~s_v_next, len(slices), "l1_load", init=1)):
                with m.If(load):
                    m.d.sync += l1[lo:hi].eq(r1[lo:hi])
        payload = self.o.payload.as_value()
        for b, (lo, hi) in enumerate(banks):
            out_d = Mux(p2s[b], C(pad_raw, word)[lo:hi], d2[lo:hi])
            with m.If(~svs[b]):
                m.d.sync += [d2[lo:hi].eq(l1[lo:hi]), s_d[lo:hi].eq(out_d)]
            with m.If(~ovs[b] | self.o.ready):
                m.d.sync += payload[lo:hi].eq(Mux(svs[b], s_d[lo:hi], out_d))
        m.d.sync += release.eq(Mux(en, rel1, 0))

        # Loop state transitions on issue; every "last" test is a registered flag.
        def step_kw():
            m.d.sync += r_kw.inc() + [iw.eq(iw + 1), coff.eq(coff + CF)]

        def restart_kw():
            m.d.sync += r_kw.clear() + [iw.eq(v), coff.eq(vcf)]

        def step_kh():
            m.d.sync += r_kh.inc() + [ih.eq(ih + 1), row_addr.eq(wrap_add(row_addr, WCF))]

        def restart_kh():
            m.d.sync += r_kh.clear() + [ih.eq(u), row_addr.eq(top_addr)]

        def next_window():
            m.d.sync += r_kh.clear() + r_kw.clear() + r_cf.clear()
            with m.If(~r_ow.last):
                m.d.sync += r_ow.inc() + [v.eq(v + SW), iw.eq(v + SW), vcf.eq(vcf + SW * CF),
                                          coff.eq(vcf + SW * CF), ih.eq(u), row_addr.eq(top_addr),
                                          ncol.eq(ncol_n),
                                          ncol_n.eq(clip(v + (2 * SW + KW - 1), W - 1))]
            with m.Else():
                m.d.sync += r_ow.clear() + [v.eq(-PL), iw.eq(-PL), vcf.eq(-PL * CF),
                                            coff.eq(-PL * CF), ncol.eq(ncol.init),
                                            ncol_n.eq(ncol_n.init)]
                with m.If(~r_oh.last):
                    nt = wrap_add(top_addr, SH * WCF)
                    m.d.sync += r_oh.inc() + [u.eq(u + SH), ih.eq(u + SH), top_addr.eq(nt),
                                              row_addr.eq(nt),
                                              need.eq(clip(u + (SH + KH - 1), H - 1))]
                with m.Else():
                    nt = wrap_add(next_base, (-PT % R) * WCF)
                    m.d.sync += r_oh.clear() + [
                        u.eq(-PT), ih.eq(-PT), next_base.eq(wrap_add(next_base, H * WCF)),
                        top_addr.eq(nt), row_addr.eq(nt), need.eq(need.init)]

        with m.If(issue):
            if not self.depthwise:          # (kh, kw, cf), cf fastest
                with m.If(~r_cf.last):
                    m.d.sync += r_cf.inc()
                with m.Elif(~r_kw.last):
                    m.d.sync += r_cf.clear()
                    step_kw()
                with m.Elif(~r_kh.last):
                    m.d.sync += r_cf.clear()
                    restart_kw()
                    step_kh()
                with m.Else():
                    next_window()
            else:                           # (cf, kh, kw), kw fastest
                with m.If(~r_kw.last):
                    step_kw()
                with m.Elif(~r_kh.last):
                    restart_kw()
                    step_kh()
                with m.Elif(~r_cf.last):
                    m.d.sync += r_cf.inc()
                    restart_kw()
                    restart_kh()
                with m.Else():
                    next_window()

        m.d.sync += ahead.eq(ahead + w_img_done - img_done)
        return m


def _first_transfers(g: Geometry) -> int:
    """Input transfers up to the last pixel the first window needs (clipped to the image)."""
    rows = min(max(0, g.kh - 1 - g.pads[0]), g.height - 1)
    cols = min(max(0, g.kw - 1 - g.pads[1]), g.width - 1) + 1
    return (rows * g.width + cols) * g.fold


def _buffer_slices(depth: int, word: int, family: str) -> tuple[list[tuple[int, int]], RamCost]:
    """The bit ranges a ``depth`` x ``word`` line buffer is split into on ECP5 (in block RAM
    :func:`~._linebuf.ebr_slices`, else 64-bit :func:`~.replicate.banks_of`; one on iCE40) and
    their summed :func:`~._linebuf.ram_cost` (Yosys maps each slice on its own). One write address
    across a 12-block buffer was routed 12.8 ns (ResNet-8), across a 256-bit distributed RAM
    buffer 9.8 ns (KWS DS-CNN)."""
    if family != "ecp5":
        return [(0, word)], ram_cost(depth, word, family)
    whole = ram_cost(depth, word, family)
    slices = ebr_slices(depth, word) if whole.ebr else banks_of(word)
    costs = [ram_cost(depth, hi - lo, family) for lo, hi in slices]
    total = RamCost(*(sum(getattr(c, f) for c in costs) for f in ("ebr", "lutram", "lut", "ff")))
    # (the logic beside block RAM slices is the whole buffer's: 327 LUT4 measured for a 120 x 128
    # window in two slices, where summing ram_cost's per-memory logic overshoots by 33 %)
    return slices, RamCost(total.ebr, total.lutram, whole.lut if whole.ebr else total.lut, total.ff)


def _window_resources(g: Geometry, rows: int, w: int, family: str) -> tuple[int, int, int]:
    """(LUT4 equivalents, FF, EBR) of a SlidingWindow, fitted to Yosys ``synth_ecp5`` stat.

    LUT counts include six LUT4s per distributed-RAM cell (``TRELLIS_DPR16X4``) when the
    line buffer is small enough for Yosys to keep it out of block RAM.
    """
    depth = rows * g.width * g.fold
    word = w * g.simd
    slices, ram = _buffer_slices(depth, word, family)
    abits = clog2(depth)
    hb = clog2(g.height + g.pads[0] + g.pads[2] + 2) + 1
    wb = clog2(g.width + g.pads[1] + g.pads[3] + 2) + 1
    cw = clog2((g.width + g.pads[1] + g.kw) * g.fold) + 1
    counters = (2 * clog2(g.fold) + clog2(g.kh) + clog2(g.kw) + clog2(g.out_h) + clog2(g.out_w)
                + clog2(rows + g.height + 1) + clog2(g.width + 1) + clog2(g.height + 1))
    lut = 60.0 + 4.34 * (hb + wb + cw) + 0.51 * word + 65.6 * (g.kh > 1) + ram.lut_equiv
    # registered last flags, column bounds, row-release pipeline and the data register after
    # the RAM (the RAM's read register is inside a DP16KD, in flip-flops with distributed RAM)
    # (block RAM: the landing register beside it instead)
    land = lands(depth, word, family)
    pipe = 6 * clog2(g.height + 1) + 2 * clog2(g.width) + 9 + (word + 2 if land else word)
    lut += word            # the skid register's output mux
    n = len(slices)
    # the skid register; flags per bank; the landing register's load per slice
    pipe += word + 1 + 3 * len(banks_of(word)) + land * n
    # the registered write; in slices: per slice copies of the write address and enable, the
    # read address and r1's enable
    pipe += word + (abits + 1) * (2 * n - 1)
    ff = 5.0 * abits + 1.8 * (hb + wb + cw) + 0.96 * counters + ram.ff + pipe
    return int(round(lut)), int(round(ff)), ram.ebr


def bench_config():
    """MLPerf-Tiny-sized configurations: ``[(name, factory, feeds, expect)]`` (one image each;
    ResNet-8 3x3 convolutions, a stride-2 downsampling conv, DS-CNN's 25x5x64 depthwise layer
    and a 96x96x8 MobileNet depthwise layer)."""
    rng = np.random.default_rng(1)
    out = []
    for name, kw in (
        ("window_32x32x16_3x3_p1_simd8", dict(height=32, width=32, channels=16, kernel=3, pads=1,
                                              simd=8)),
        ("window_16x16x32_3x3_s2_p1_simd8", dict(height=16, width=16, channels=32, kernel=3,
                                                 stride=2, pads=(1, 1, 0, 0), simd=8)),
        ("window_25x5x64_3x3_p1_dw_simd8", dict(height=25, width=5, channels=64, kernel=3, pads=1,
                                                simd=8, depthwise=True)),
        ("window_96x96x8_3x3_p1_dw_simd8", dict(height=96, width=96, channels=8, kernel=3, pads=1,
                                                simd=8, depthwise=True)),
    ):
        def factory(kw=kw):
            return SlidingWindow(**kw, elem_shape=unsigned(8))
        blk = factory()
        x = rng.integers(0, 256, size=(blk.in_transfers, blk.geom.simd))
        out.append((name, factory, {"i": x}, {"o": blk.out_transfers}))
    return out
