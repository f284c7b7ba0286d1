"""Sliding-window generator (im2col on a stream) with line buffers in block RAM."""
from __future__ import annotations

from typing import NamedTuple

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
    ``x_pad[oh*sh + kh*dh, ow*sw + kw*dw, c]`` for all ``kh < KH, kw < KW, c < C``, ``simd``
    channels per transfer (``dh``, ``dw``: the dilation; a window spans ``EH = (KH-1)*dh + 1``
    rows and ``EW = (KW-1)*dw + 1`` columns, which set the output size and the rows it needs):

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
        Dilation ``(dh, dw)``: the distance between kernel taps, in input rows and columns.
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
        words of ``simd*w`` bits). Default ``EH + SH``, which lets the writer fill the rows of
        the next output row while the current one is read; ``EH`` is the minimum (less RAM,
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
    ``SH`` new rows (see ``estimate``). Dilation changes only the geometry (extent, addresses),
    not the work per tap.
    Latency: a window starts once the last input pixel it needs (clipped to the image) is
    complete; the first window is emitted 6 cycles after that pixel's last input transfer (7
    with the line buffer in block RAM), i.e.
    ``((min(max(0, EH-1-top), H-1) * W + min(max(0, EW-1-left), W-1) + 1) * C/simd + 6``
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
        rows = g.eh + g.sh if buffer_rows is None else buffer_rows
        if isinstance(rows, bool) or not isinstance(rows, int):
            raise TypeError(f"buffer_rows must be an integer, not {buffer_rows!r}")
        if rows < g.eh:
            raise ValueError(f"buffer_rows {buffer_rows!r} must be at least the kernel's extent in rows {g.eh!r}")
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
        rows = g.eh + g.sh if buffer_rows is None else int(buffer_rows)
        cf = g.fold
        out_t = g.out_pixels * g.kh * g.kw * cf
        in_t = g.in_transfers
        # Per-image bubble: rows the first output row needs beyond those the writer may
        # pre-fill while the previous image's last output row is read.
        first_rows = max(0, min(g.eh - g.pads[0], g.height))
        bubble = max(0, first_rows - (rows - min(g.eh, g.height))) * g.width * cf
        # one bubble per output row (the registered data-ready test restarts)
        cycles = max(in_t, out_t + g.out_h) + (bubble if out_t >= in_t else 0) + 2
        word = w * g.simd
        latency = _first_transfers(g) + 6 + lands(rows * g.width * cf, word, family)
        lut, ff, ebr = _window_resources(g, rows, w, family)
        return Cost(cycles=cycles, latency=latency, lut=lut, ff=ff, dsp=0, ebr=ebr)

    # -- hardware -----------------------------------------------------------------------
    def elaborate(self, platform):
        """The line buffer, its writer, the reader's control, pipeline and loop state."""
        m = Module()
        g = self.geom
        word = self.elem_shape.width * g.simd
        buf = _line_buffer(m, self.buffer_rows * g.width * g.fold, word, getattr(platform, "family", "ecp5"))
        w_row, w_col, w_img_done, release = self._writer(m, buf)
        loops = _Loops(g, self.buffer_rows)
        ctl = _control(m, loops, w_row, w_col)
        freed = _freed_rows(m, loops)
        self._reader(m, buf, loops, ctl, freed, release)
        loops.advance(m, ctl.issue, self.depthwise)
        m.d.sync += loops.ahead.eq(loops.ahead + w_img_done - ctl.img_done)
        return m

    def _writer(self, m, buf: _LineBuffer):
        """Write the input into the line buffer, a row only while it has a free row (``credit``;
        ``release`` returns the rows the reader freed). Returns the write position's row and
        column counters, the pulse that ends an image, and ``release``.

        The write is carried out a cycle late, from registers: the input handshake drives a
        flip-flop, not the write enable of every distributed-RAM cell. The reader reads an
        address only cycles after its write counted it written."""
        g = self.geom
        R, H = self.buffer_rows, g.height
        w_cf = Counter(g.fold, "w_cf")
        w_col = Counter(g.width, "w_col")
        w_row = Counter(H, "w_row")
        w_addr = Counter(buf.depth, "w_addr")
        credit = Signal(range(R + H + 2), init=R)
        row_start = Signal(init=1)              # next input transfer starts a row
        release = Signal(range(H + 1))          # rows freed by the reader (see rel0)
        w_fire = Signal()
        w_img_done = Signal()
        w_ens = replicas(m, w_fire, len(buf.slices), "w_en")
        w_as = replicas(m, w_addr.value, len(buf.slices), "w_a", copy=True)
        w_d = Signal(self.elem_shape.width * g.simd, name="w_d", reset_less=True)
        m.d.sync += w_d.eq(self.i.payload.as_value())
        for (wp, _), (lo, hi), a, e in zip(buf.ports, buf.slices, w_as, w_ens):
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
        return w_row, w_col, w_img_done, release

    def _reader(self, m, buf: _LineBuffer, loops: _Loops, ctl: _Control, freed, release):
        """The reader's four stages under ``ctl.en``: (0) read address ``a0`` and padding flag,
        (1) the line buffer's read register ``r1``, (2) the data register ``d2`` (with block
        RAM after a landing register ``l1`` beside the RAM: its read data comes late, so the
        route to ``d2`` starts from a flip-flop), (3) the output register with the padding
        substituted. The rows ``freed`` by an output row travel with its last element
        (``rel0``, ``rel1``) into ``release``: the writer may overwrite them only after that
        element has been read."""
        g = self.geom
        word = self.elem_shape.width * g.simd
        en = ctl.en
        abits = max(1, clog2(buf.depth))
        a0 = Signal(abits)
        p0, p1, p2, v0, v1, v2 = Signal(), Signal(), Signal(), Signal(), Signal(), Signal()
        rel0, rel1 = Signal.like(release), Signal.like(release)
        d2 = Signal(word)
        padded = (loops.ih < 0) | (loops.ih > g.height - 1) | (loops.iw < 0) | (loops.iw > g.width - 1)
        r1 = Signal(word, reset_less=True)   # no reset: a read-port reset would keep l1 out of
        #                                      the block RAM's output register (see ram_outreg)
        l1, pl, vl = (Signal(word, reset_less=True), Signal(), Signal()) if buf.land else (r1, p1, v1)
        # The skid register (s_d, ctl.s_v) beside the output register: with s_v low the pipeline
        # advances and its element (v2, out_d) goes to the output register when that is free or
        # taken, else into the skid register; the skid drains first. Same cycle behaviour as one
        # output register while o.ready stays high.
        s_d = Signal(word)
        take = ~self.o.valid | self.o.ready
        s_v_next = Mux(take, 0, Mux(en & v2, 1, ctl.s_v))
        o_v_next = Mux(take, ctl.s_v | (en & v2), self.o.valid)
        p2_next = Mux(en, pl, p2)
        m.d.sync += [ctl.s_v.eq(s_v_next), self.o.valid.eq(o_v_next), p2.eq(p2_next)]
        a0_next = Mux(en, (loops.row_addr + loops.coff + loops.r_cf.value)[:abits], a0)
        m.d.sync += a0.eq(a0_next)
        _read_slices(m, buf, (a0, a0_next), r1, en, s_v_next)
        with m.If(en):
            m.d.sync += [
                p0.eq(padded), v0.eq(ctl.issue),
                rel0.eq(Mux(ctl.row_move, freed, 0)),
                p1.eq(p0), v1.eq(v0), rel1.eq(rel0), v2.eq(vl),
            ]
        if buf.land:
            with m.If(en):
                m.d.sync += [pl.eq(p1), vl.eq(v1)]
        self._output(m, buf, (s_v_next, o_v_next, p2_next), r1, l1, (d2, s_d))
        m.d.sync += release.eq(Mux(en, rel1, 0))

    def _output(self, m, buf: _LineBuffer, nexts, r1, l1, data_regs):
        """The landing, data, skid and output registers after the RAM's read register ``r1``,
        split into banks (``banks_of``), each with its own copies of the flags that enable and
        select it (``nexts``: the next values of s_v, o.valid and p2): one flag driving every
        output bit's multiplexer is a long route; per-bank copies keep it local. The landing
        register ``l1`` of each RAM slice has a load enable of its own (so that nothing but the
        RAM's data and the next stage pulls it in placement), positive, no reset, one per slice:
        the block's own output register can take it (:mod:`~.ram_outreg`)."""
        word = self.elem_shape.width * self.geom.simd
        s_v_next, o_v_next, p2_next = nexts
        d2, s_d = data_regs
        banks = banks_of(word)
        svs, ovs, p2s = (replicas(m, nxt, len(banks), name)
                         for nxt, name in ((s_v_next, "s_v"), (o_v_next, "o_v"), (p2_next, "p2")))
        if buf.land:
            for (lo, hi), load in zip(buf.slices, replicas(m, ~s_v_next, len(buf.slices), "l1_load", init=1)):
                with m.If(load):
                    m.d.sync += l1[lo:hi].eq(r1[lo:hi])
        pad_raw = 0
        mask = (1 << self.elem_shape.width) - 1
        for j in range(self.geom.simd):
            pad_raw |= (self.pad_value & mask) << (j * self.elem_shape.width)
        payload = self.o.payload.as_value()
        for b, (lo, hi) in enumerate(banks):
            out_d = Mux(p2s[b], C(pad_raw, word)[lo:hi], d2[lo:hi])
            with m.If(~svs[b]):
                m.d.sync += [d2[lo:hi].eq(l1[lo:hi]), s_d[lo:hi].eq(out_d)]
            with m.If(~ovs[b] | self.o.ready):
                m.d.sync += payload[lo:hi].eq(Mux(svs[b], s_d[lo:hi], out_d))


class _LineBuffer(NamedTuple):
    """The line buffer: ``depth`` words, split by width into ``slices`` (bit ranges), one
    memory each with its (write, read) ``ports``; ``land``: its read data lands in a fabric
    register before any logic (block RAM)."""
    depth: int
    slices: list
    ports: list
    land: bool


def _line_buffer(m, depth: int, word: int, family: str) -> _LineBuffer:
    """The line buffer's memories.

    Reads and writes never meet on one address (a row is read only once written and rewritten
    only once released). The read port is asynchronous plus a register (r1) that Yosys merges
    into the block RAM; with ``no_rw_check`` it then adds no read-during-write bypass (a
    multiplexer after the RAM's slow clock-to-out). On ECP5 the buffer is split by width
    (:func:`_buffer_slices`), each slice with its own copies of the write address and enable,
    read address and read enable."""
    land = lands(depth, word, family)
    slices = _buffer_slices(depth, word, family)[0]
    ports = []
    for k, (lo, hi) in enumerate(slices):
        mem = memory.Memory(shape=unsigned(hi - lo), depth=depth, init=[], attrs={"no_rw_check": 1})
        m.submodules["mem" if len(slices) == 1 else f"mem{k}"] = mem
        ports.append((mem.write_port(), mem.read_port(domain="comb")))
    return _LineBuffer(depth, slices, ports, land)


def _read_slices(m, buf: _LineBuffer, addr, r1, en, s_v_next):
    """Read every slice of the line buffer into its bits of ``r1``; ``addr``: the read address
    register and its next value. With several slices, each has its own copy of the address and
    of r1's enable (the next value of ``~s_v``); with one, the register and ``en`` themselves."""
    a0, a0_next = addr
    a0s = replicas(m, a0_next, len(buf.slices), "a0") if len(buf.slices) > 1 else [a0]
    r_ens = [~h for h in replicas(m, s_v_next, len(buf.slices), "r1_hold")] if len(buf.slices) > 1 else [en]
    for (_, rp), (lo, hi), a, e in zip(buf.ports, buf.slices, a0s, r_ens):
        m.d.comb += rp.addr.eq(a)
        with m.If(e):
            m.d.sync += r1[lo:hi].eq(rp.data)


def _wrap_add(x, c: int, depth: int):
    """``(x + c) mod depth`` for ``x`` in ``[0, depth)`` and a constant: the compare and both sums
    are computed in parallel from ``x`` and one multiplexer picks."""
    c %= depth
    if c == 0:
        return x
    return Mux(x >= depth - c, x - (depth - c), x + c)


def _clip(x, hi: int):
    """``x`` clipped to ``[0, hi]``."""
    return Mux(x > hi, hi, Mux(x < 0, 0, x))


class _Loops:
    """The reader's loop state: the window's top-left input pixel (``u``, ``v``), the next
    element's input row and column (``ih``, ``iw``; ``vcf = v*CF``, ``coff = iw*CF``), the
    line-buffer addresses of row 0 of the next image, of row ``u`` and of row ``ih``, the loop
    counters (each ``last`` test a registered flag), the last input pixel the current window
    needs (``need``, ``ncol``; ``ncol_n`` for the next window of the output row) and ``ahead``
    (images finished by the writer minus the reader). :meth:`advance` steps it on ``issue``."""

    def __init__(self, g: Geometry, rows: int):
        self.g, self.rows = g, rows
        PT, PL = g.pads[0], g.pads[1]
        CF = g.fold
        self.wcf = g.width * CF
        self.depth = D = rows * self.wcf
        ushape = _signed_for(-PT - 1, (g.out_h - 1) * g.sh + g.eh + 1)
        vshape = _signed_for(-PL - 1, (g.out_w - 1) * g.sw + g.ew + 1)
        self.u = Signal(ushape, init=-PT)            # input row of window top
        self.v = Signal(vshape, init=-PL)            # input column of window left
        self.ih = Signal(ushape, init=-PT)           # input row of the next element
        self.iw = Signal(vshape, init=-PL)           # input column of the next element
        cshape = _signed_for(-PL * CF - CF, ((g.out_w - 1) * g.sw + g.ew + 1) * CF)
        self.vcf = Signal(cshape, init=-PL * CF)     # v * CF
        self.coff = Signal(cshape, init=-PL * CF)    # iw * CF
        top_init = (-PT % rows) * self.wcf
        self.next_base = Signal(range(max(D, 2)), init=(g.height * self.wcf) % D)  # row 0 of the next image
        self.top_addr = Signal(range(max(D, 2)), init=top_init)      # row u
        self.row_addr = Signal(range(max(D, 2)), init=top_init)      # row ih
        self.r_kh = Counter(g.kh, "r_kh")
        self.r_kw = Counter(g.kw, "r_kw")
        self.r_cf = Counter(CF, "r_cf")
        self.r_ow = Counter(g.out_w, "r_ow")
        self.r_oh = Counter(g.out_h, "r_oh")
        self.ahead = Signal(_signed_for(-1, rows + 2))  # images finished by writer minus reader
        self.need = Signal(range(g.height), init=min(max(0, g.eh - 1 - PT), g.height - 1))
        self.ncol = Signal(range(g.width), init=min(max(0, g.ew - 1 - PL), g.width - 1))
        self.ncol_n = Signal(range(g.width), init=min(max(0, g.sw + g.ew - 1 - PL), g.width - 1))

    def advance(self, m, issue, depthwise: bool):
        """Step to the next window element on ``issue``: order ``(kh, kw, cf)``, channels
        fastest, or with ``depthwise`` ``(cf, kh, kw)``, columns fastest."""
        with m.If(issue):
            if not depthwise:               # (kh, kw, cf), cf fastest
                with m.If(~self.r_cf.last):
                    m.d.sync += self.r_cf.inc()
                with m.Elif(~self.r_kw.last):
                    m.d.sync += self.r_cf.clear()
                    self._step_kw(m)
                with m.Elif(~self.r_kh.last):
                    m.d.sync += self.r_cf.clear()
                    self._restart_kw(m)
                    self._step_kh(m)
                with m.Else():
                    self._next_window(m)
            else:                           # (cf, kh, kw), kw fastest
                with m.If(~self.r_kw.last):
                    self._step_kw(m)
                with m.Elif(~self.r_kh.last):
                    self._restart_kw(m)
                    self._step_kh(m)
                with m.Elif(~self.r_cf.last):
                    m.d.sync += self.r_cf.inc()
                    self._restart_kw(m)
                    self._restart_kh(m)
                with m.Else():
                    self._next_window(m)

    def _step_kw(self, m):
        """Next kernel column (``dw`` input columns on)."""
        g = self.g
        m.d.sync += self.r_kw.inc() + [self.iw.eq(self.iw + g.dw), self.coff.eq(self.coff + g.dw * g.fold)]

    def _restart_kw(self, m):
        """Back to the window's first column."""
        m.d.sync += self.r_kw.clear() + [self.iw.eq(self.v), self.coff.eq(self.vcf)]

    def _step_kh(self, m):
        """Next kernel row (``dh`` input rows on)."""
        dh = self.g.dh
        m.d.sync += self.r_kh.inc() + [self.ih.eq(self.ih + dh),
                                       self.row_addr.eq(_wrap_add(self.row_addr, dh * self.wcf, self.depth))]

    def _restart_kh(self, m):
        """Back to the window's top row."""
        m.d.sync += self.r_kh.clear() + [self.ih.eq(self.u), self.row_addr.eq(self.top_addr)]

    def _next_window(self, m):
        """The next window of the output row, else the first of the next output row, else the
        first of the next image (whose row 0 follows this image's last row in the buffer)."""
        g, D, WCF = self.g, self.depth, self.wcf
        PT, PL, SH, SW, CF = g.pads[0], g.pads[1], g.sh, g.sw, g.fold
        u, v, top_addr, next_base = self.u, self.v, self.top_addr, self.next_base
        m.d.sync += self.r_kh.clear() + self.r_kw.clear() + self.r_cf.clear()
        with m.If(~self.r_ow.last):
            m.d.sync += self.r_ow.inc() + [
                v.eq(v + SW), self.iw.eq(v + SW), self.vcf.eq(self.vcf + SW * CF),
                self.coff.eq(self.vcf + SW * CF), self.ih.eq(u), self.row_addr.eq(top_addr),
                self.ncol.eq(self.ncol_n), self.ncol_n.eq(_clip(v + (2 * SW + g.ew - 1), g.width - 1))]
        with m.Else():
            m.d.sync += self.r_ow.clear() + [
                v.eq(-PL), self.iw.eq(-PL), self.vcf.eq(-PL * CF), self.coff.eq(-PL * CF),
                self.ncol.eq(self.ncol.init), self.ncol_n.eq(self.ncol_n.init)]
            with m.If(~self.r_oh.last):
                nt = _wrap_add(top_addr, SH * WCF, D)
                m.d.sync += self.r_oh.inc() + [
                    u.eq(u + SH), self.ih.eq(u + SH), top_addr.eq(nt), self.row_addr.eq(nt),
                    self.need.eq(_clip(u + (SH + g.eh - 1), g.height - 1))]
            with m.Else():
                nt = _wrap_add(next_base, (-PT % self.rows) * WCF, D)
                m.d.sync += self.r_oh.clear() + [
                    u.eq(-PT), self.ih.eq(-PT), next_base.eq(_wrap_add(next_base, g.height * WCF, D)),
                    top_addr.eq(nt), self.row_addr.eq(nt), self.need.eq(self.need.init)]


class _Control(NamedTuple):
    """The reader's control: pipeline enable, skid flag, element issued, last element of an
    output row, last element of an image."""
    en: Signal
    s_v: Signal
    issue: Signal
    row_move: Signal
    img_done: Signal


def _control(m, loops: _Loops, w_row: Counter, w_col: Counter) -> _Control:
    """Issue an element while the pipeline is enabled (``en``: the skid register ``s_v`` is
    empty, so ``o.ready`` reaches only the output and skid flags) and the window's data is
    written (``ok``).

    The current window's data is written once input pixel (``need``, ``ncol``) -- its last row
    and column, clipped to the image -- is complete. ``ok`` is that test registered: on a move
    to the next window of the output row it takes the same test for that window (``ncol_n``,
    computed in parallel); after a move to another output row it is cleared for one cycle (one
    bubble per output row)."""
    ok = Signal()
    en = Signal()
    s_v = Signal()      # the skid register holds a window element the output could not take
    issue = Signal()
    win_move = Signal()
    row_move = Signal()
    img_done = Signal()
    win_done = loops.r_kh.last & loops.r_kw.last & loops.r_cf.last
    m.d.comb += [
        en.eq(~s_v),
        issue.eq(en & ok),
        win_move.eq(issue & win_done),
        row_move.eq(win_move & loops.r_ow.last),
        img_done.eq(row_move & loops.r_oh.last),
    ]
    w_row_s = Cat(w_row.value, C(0, 1)).as_signed()
    w_col_s = Cat(w_col.value, C(0, 1)).as_signed()

    def written(col):
        return (loops.ahead > 0) | ((loops.ahead == 0) & (
            (w_row_s > loops.need) | ((w_row_s == loops.need) & (w_col_s > col))))
    m.d.sync += ok.eq(~row_move & Mux(win_move, written(loops.ncol_n), written(loops.ncol)))
    return _Control(en, s_v, issue, row_move, img_done)


def _freed_rows(m, loops: _Loops):
    """The number of input rows output row ``oh`` releases once read: rows
    ``[lo(oh), lo(oh+1))``, from registers of ``u`` (one cycle late after a row move, which the
    bubble after every row move covers)."""
    H = loops.g.height
    lo_shape = unsigned(clog2(H + 1) + 1)
    lo_now = Signal(lo_shape)
    lo_next = Signal(lo_shape)
    m.d.sync += [
        lo_now.eq(_clip_row(loops.u, H)),
        lo_next.eq(Mux(loops.r_oh.last, H, _clip_row(loops.u + loops.g.sh, H))),
    ]
    return lo_next - lo_now


def _clip_row(x, height: int):
    """``x`` clipped to ``[0, height]`` (the low bound tested first)."""
    return Mux(x < 0, 0, Mux(x > height, height, x))


def _first_transfers(g: Geometry) -> int:
    """Input transfers up to the last pixel the first window needs (clipped to the image)."""
    rows = min(max(0, g.eh - 1 - g.pads[0]), g.height - 1)
    cols = min(max(0, g.ew - 1 - g.pads[1]), g.width - 1) + 1
    return (rows * g.width + cols) * g.fold


def _buffer_slices(depth: int, word: int, family: str) -> tuple[list[tuple[int, int]], RamCost]:
    """The bit ranges a ``depth`` x ``word`` line buffer is split into on ECP5 (in block RAM
    :func:`~._linebuf.ebr_slices`, else 64-bit :func:`~.replicate.banks_of`; one on iCE40) and
    their summed :func:`~._linebuf.ram_cost` (Yosys maps each slice on its own). One write address
    driving every block or distributed-RAM cell of a wide buffer is a net across the chip; each
    slice has its own copies."""
    if family != "ecp5":
        return [(0, word)], ram_cost(depth, word, family)
    whole = ram_cost(depth, word, family)
    slices = ebr_slices(depth, word) if whole.ebr else banks_of(word)
    costs = [ram_cost(depth, hi - lo, family) for lo, hi in slices]
    total = RamCost(*(sum(getattr(c, f) for c in costs) for f in ("ebr", "lutram", "lut", "ff")))
    # (the logic beside block RAM slices is the whole buffer's: Yosys shares it between the
    # slices, so summing ram_cost's per-memory logic would overshoot)
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
    cw = clog2((g.width + g.pads[1] + g.ew) * g.fold) + 1
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
    """Configurations the size of small vision and keyword-spotting layers:
    ``[(name, factory, feeds, expect)]`` (one image each; a 32x32x16 3x3 convolution, a stride-2
    downsampling convolution, a 25x5x64 and a 96x96x8 depthwise layer)."""
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
