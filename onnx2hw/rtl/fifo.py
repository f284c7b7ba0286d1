"""Stream FIFO between dataflow stages."""
from __future__ import annotations

from amaranth.hdl import Elaboratable, Module, Mux, Signal, unsigned
from amaranth.lib import fifo, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from . import _blockparams as _p
from ._linebuf import bram_blocks, ebr_slices, ebr_tiling, row_mux
from .replicate import BANK_BITS, COLLISION_X_ATTR, banks_of, replicas
from .cost import Cost

__all__ = ["StreamFIFO"]

#: landing registers after a block-RAM FIFO's read data on ECP5
FIFO_LANDING = 2
#: entries of the distributed-RAM FIFO after them (a slot's round trip, :meth:`StreamFIFO._landed_bram`)
OUT_DEPTH = FIFO_LANDING + 3


class StreamFIFO(wiring.Component):
    """First-in first-out buffer on a ``data.ArrayLayout(elem_shape, lanes)`` stream.

    Parameters
    ----------
    elem_shape : ShapeLike
        Shape of one lane.
    lanes : int
        Lanes per transfer (>= 1).
    depth : int
        Entries (>= 0). ``0``: wires, no storage. ``1``: one register
        (``amaranth.lib.fifo.SyncFIFO``). ``2``: ``SyncFIFO``'s behaviour, ``>= 3``:
        ``SyncFIFOBuffered``'s; on ECP5 in distributed RAM with registered flags
        (:class:`_OffsetFIFO`; wider than :data:`BANK_BITS`: in banks with their own control,
        :meth:`banks`), in block RAM when deep and wide enough (:meth:`_landed_bram`); on iCE40
        Amaranth's classes, whose synchronous-read ``Memory`` Yosys maps to block RAM.

    Latency: 0 (depth 0), 1 cycle (depth 1-2), 2 cycles (depth >= 3), 5 in block RAM on ECP5
    (depth >= 5: a block-RAM FIFO of ``depth - 5`` words, two landing registers, then a 5-entry
    distributed-RAM FIFO, so that the RAM's slow read data only meets a register; 3 on iCE40, a
    2-entry ``SyncFIFO`` after the RAM) from input to output transfer on an empty FIFO.
    Initiation interval: 1, except depth 1 which alternates full and empty (one transfer every
    2 cycles). Backpressure: ``i.ready`` is low only while full;
    ``o.valid`` and ``o.payload`` come from registers / memory that change only on a read, so
    the output honours the stream rules whatever the input does (at depth 0 it passes the input
    through, so the input must honour them).

    Ports: ``i`` (in), ``o`` (out).
    """

    def __init__(self, elem_shape, lanes: int = 1, depth: int = 2):
        self.elem_shape = _p.elem_shape(elem_shape)
        self.lanes = _p.positive_int(lanes, "lanes")
        self.depth = _p.positive_int(depth, "depth", minimum=0)
        layout = _p.lanes_layout(self.elem_shape, self.lanes)
        super().__init__({"i": In(stream.Signature(layout)), "o": Out(stream.Signature(layout))})

    def elaborate(self, platform):
        m = Module()
        if self.depth == 0:
            wiring.connect(m, wiring.flipped(self.i), wiring.flipped(self.o))
            return m
        width = self.elem_shape.width * self.lanes
        # banked on ECP5, and in simulation (platform None) so that it runs what ECP5 builds
        ecp5 = platform is None or getattr(platform, "family", None) == "ecp5"
        banks = self.banks(width, self.depth) if ecp5 else 1
        if banks > 1:
            return self._banked(m, width, banks)
        family = getattr(platform, "family", "ecp5")
        if self.depth >= 5 and _uses_bram(self.depth - 1, width, family):
            if family == "ecp5":
                q, r = self._landed_bram(m, width)
            else:       # iCE40: the 2-entry FIFO takes the RAM's data
                m.submodules.fifo = q = fifo.SyncFIFOBuffered(width=width, depth=self.depth - 2)
                m.submodules.out = r = fifo.SyncFIFO(width=width, depth=2)
                m.d.comb += [r.w_data.eq(q.r_data), r.w_en.eq(q.r_rdy), q.r_en.eq(r.w_rdy)]
        elif ecp5 and self.depth >= 2:
            m.submodules.fifo = q = r = _OffsetFIFO(width, self.depth, 0, buffered=self.depth > 2)
        else:
            cls = fifo.SyncFIFO if self.depth <= 2 else fifo.SyncFIFOBuffered
            m.submodules.fifo = q = r = cls(width=width, depth=self.depth)
        m.d.comb += [
            q.w_data.eq(self.i.payload), q.w_en.eq(self.i.valid), self.i.ready.eq(q.w_rdy),
            self.o.payload.eq(r.r_data), self.o.valid.eq(r.r_rdy), r.r_en.eq(self.o.ready),
        ]
        return m

    def _landed_bram(self, m, width):
        """ECP5 block-RAM FIFO (:class:`_RowFIFO`, ``depth - OUT_DEPTH`` words): each block
        row's read data (late after the clock, no output register inferred) is copied every
        cycle, with no enable or logic in front, into a landing register of its own; the read
        word's row is selected from those into the next landing register, then an
        :data:`OUT_DEPTH`-entry distributed-RAM FIFO. Anything between a RAM and its first
        register (a load-enable LUT, Yosys's multiplexer of a deep FIFO's block rows, a LUT
        between the RAM's data and the output FIFO's RAM) is a long path once the placer puts
        the register away from the block. A word is read only
        against a free slot of the output FIFO (``room``, counting the words in flight), so
        nothing after the RAM ever stalls; the read's enable ``ok`` is a register. A slot
        returns 5 cycles after its word is read (read, RAM output, two landings, output FIFO),
        so 5 entries keep one transfer per cycle. Returns ``(q, r)``: the RAM FIFO and the
        output FIFO."""
        m.submodules.fifo = q = _RowFIFO(width, self.depth - OUT_DEPTH)
        m.submodules.out = r = _OffsetFIFO(width, OUT_DEPTH, 0, buffered=False)
        room = Signal(range(OUT_DEPTH + 1), init=OUT_DEPTH)
        ok = Signal(init=1)
        drain = Signal()
        m.d.comb += [q.r_en.eq(ok), drain.eq(r.r_rdy & r.r_en)]
        nxt = room - q.pop + drain
        m.d.sync += [room.eq(nxt), ok.eq(nxt != 0)]
        rows = [Signal(width, name=f"land0_{k}", reset_less=True) for k in range(len(q.r_rows))]
        sel, valid = Signal.like(q.r_row, name="land0_row"), Signal(name="land0_v")
        m.d.sync += [d.eq(rd) for d, rd in zip(rows, q.r_rows)] + [sel.eq(q.r_row), valid.eq(q.r_valid)]
        data = row_mux(rows, sel)
        for k in range(1, FIFO_LANDING):
            d, v = Signal(width, name=f"land{k}", reset_less=True), Signal(name=f"land{k}_v")
            m.d.sync += [d.eq(data), v.eq(valid)]
            data, valid = d, v
        m.d.comb += [r.w_data.eq(data), r.w_en.eq(valid)]
        return q, r

    @staticmethod
    def banks(width: int, depth: int, family: str = "ecp5") -> int:
        """Independent banks of a wide distributed-RAM FIFO (depth >= 2, at most
        :data:`BANK_BITS` bits each): a read or write address or write enable shared by hundreds
        of RAM cells is a net across the chip (even a 2-entry FIFO's write enable, when it is
        wide); one per bank stays local."""
        if depth < 2 or family != "ecp5" or _uses_bram(depth - 1, min(width, BANK_BITS), family):
            return 1
        return len(banks_of(width))

    def _banked(self, m, width, banks):
        flat_i, flat_o = self.i.payload.as_value(), self.o.payload.as_value()
        qs = []
        for b, (lo, hi) in enumerate(banks_of(width)):
            m.submodules[f"bank{b}"] = q = _OffsetFIFO(hi - lo, self.depth, b, buffered=self.depth > 2)
            m.d.comb += [q.w_data.eq(flat_i[lo:hi]), flat_o[lo:hi].eq(q.r_data)]
            qs.append(q)
        # The banks move in lockstep (same enables from the same state, offsets aside), each with
        # its own pointers, level and output register, and each gates the enables with its own
        # w_rdy / r_rdy; so bank 0's flags are every bank's, and no AND of flags spread over the
        # chip feeds the consumer's handshake and back into every bank's enables.
        m.d.comb += [self.i.ready.eq(qs[0].w_rdy), self.o.valid.eq(qs[0].r_rdy)]
        m.d.comb += [q.w_en.eq(self.i.valid) for q in qs]
        m.d.comb += [q.r_en.eq(self.o.ready) for q in qs]
        return m

    @staticmethod
    def estimate(elem_shape, lanes: int = 1, depth: int = 2, family: str = "ecp5") -> Cost:
        """Cost without elaboration (calibrated against Yosys 0.70 ``synth_ecp5``)."""
        w = _p.elem_shape(elem_shape).width * _p.positive_int(lanes, "lanes")
        depth = _p.positive_int(depth, "depth", minimum=0)
        _p.family(family)
        if depth == 0:
            return Cost(1, 0, 0, 0, 0, 0)
        if depth == 1:        # one register, half rate
            return Cost(2, 1, lut=3, ff=w + 1, dsp=0, ebr=0)
        if depth == 2:        # SyncFIFO: distributed RAM on ECP5 (banked when wide), flip-flops on iCE40
            if family == "ecp5":
                banks = StreamFIFO.banks(w, depth, family)
                return Cost(1, 1, lut=9 * banks + 6 * -(-w // 4), ff=6 * banks + 2, dsp=0, ebr=0)
            return Cost(1, 1, lut=w + 12, ff=2 * w + 4, dsp=0, ebr=0)
        inner = depth - 1     # SyncFIFOBuffered: memory of depth-1 plus an output register
        abits = max(1, (inner - 1).bit_length())
        banks = StreamFIFO.banks(w, depth, family)
        if banks == 1 and depth >= 5 and _uses_bram(inner, w, family):
            tail = StreamFIFO.estimate(elem_shape, lanes, 2, family)   # (16-word RAM cells alike)
            if family == "ice40":   # block RAM of depth - 3 words, its output register, a 2-entry FIFO
                inner = depth - 3
                abits = max(1, (inner - 1).bit_length())
                return Cost(1, 3, lut=w + 8 * abits + tail.lut + 24, ff=2 * w + 4 * abits + 3 + tail.ff,
                            dsp=0, ebr=bram_blocks(inner, w, family))
            # ECP5: a _RowFIFO, a landing register per block row, the row select, the second
            # landing register and the credit counter, then the OUT_DEPTH-entry FIFO
            words = depth - OUT_DEPTH
            abits = max(1, (words - 1).bit_length())
            _, n, slices = row_layout(words, w)
            return Cost(1, 3 + FIFO_LANDING, lut=6 * abits + 8 + tail.lut + (n - 1) * w,
                        ff=(n + 1) * w + (3 + 2 * n * len(slices)) * abits + 12 + tail.ff, dsp=0,
                        ebr=bram_blocks(words, w, family))
        ff = w + 3 * abits + 3
        if family == "ecp5":  # TRELLIS_DPR16X4 (16x4), 6 LUT4-equivalents each, plus a mux
            rows = -(-inner // 16)
            dpr = rows * -(-w // 4)
            return Cost(1, 2, lut=(6 * abits + 8) * banks + 6 * dpr + w * (rows - 1),   # control per bank
                        ff=ff + (3 * abits + 3) * (banks - 1), dsp=0, ebr=0)
        return Cost(1, 2, lut=6 * abits + 8 + inner * w // 2, ff=ff + inner * w, dsp=0, ebr=0)


class _OffsetFIFO(Elaboratable):
    """A synchronous FIFO whose pointers and level counter start at ``offset``: the banks of a
    wide FIFO then have no identical registers, so Yosys cannot merge their control back into
    one high-fanout copy. ``buffered``: ``SyncFIFOBuffered``'s behaviour (``depth - 1`` entries of
    distributed RAM read asynchronously into an output register, latency 2), else
    ``SyncFIFO``'s (``depth`` entries, the output read straight from the RAM, latency 1).
    ``w_rdy``/``r_rdy`` are registers (the level's compares made a cycle ahead: a compare
    after the level register, ANDed with the neighbour's valid into the level's update, would be
    a path of four LUTs across two blocks); write when
    ``w_en & w_rdy``, read when ``r_en & r_rdy``. ``offset`` 0 serves an unbanked FIFO."""

    def __init__(self, width: int, depth: int, offset: int, buffered: bool = True):
        self.width, self.depth, self.offset, self.buffered = width, depth, offset, buffered
        self.w_data, self.w_en, self.w_rdy = Signal(width), Signal(), Signal(init=1)
        self.r_data, self.r_en, self.r_rdy = Signal(width), Signal(), Signal()

    def elaborate(self, platform):
        m = Module()
        inner, off = self.depth - int(self.buffered), self.offset
        mem = memory.Memory(shape=unsigned(self.width), depth=inner, init=[])
        m.submodules.storage = mem
        wp = mem.write_port()
        rp = mem.read_port(domain="comb")
        w_ptr = Signal(range(inner), init=off % inner)
        r_ptr = Signal(range(inner), init=off % inner)
        level = Signal(range(off + inner + 1), init=off)     # entries in the RAM, plus off
        filled = Signal()           # level != off
        do_w = Signal()
        do_load = Signal()          # a word leaves the RAM (into the output register, or read)
        m.d.comb += [
            do_w.eq(self.w_en & self.w_rdy),
            wp.addr.eq(w_ptr), wp.data.eq(self.w_data), wp.en.eq(do_w),
            rp.addr.eq(r_ptr),
        ]
        m.d.sync += [w_ptr.eq(_step(w_ptr, do_w, inner)), r_ptr.eq(_step(r_ptr, do_load, inner))]
        if self.buffered:
            m.d.comb += do_load.eq(filled & (~self.r_rdy | self.r_en))
            with m.If(do_load):
                m.d.sync += [self.r_data.eq(rp.data), self.r_rdy.eq(1)]
            with m.Elif(self.r_en):
                m.d.sync += self.r_rdy.eq(0)
        else:
            m.d.comb += [self.r_rdy.eq(filled), self.r_data.eq(rp.data), do_load.eq(self.r_en & filled)]
        _count(m, level, do_w, do_load, self.w_rdy, filled, off, off + inner)
        return m


class _RowFIFO(Elaboratable):
    """A FIFO of ``depth`` words in block RAM, one memory per block row and
    :func:`~._linebuf.ebr_slices` slice (:func:`row_layout`), each addressed by copies of its
    own of the write and read pointers: no multiplexer of Yosys's follows the RAMs, and no
    enable or address reaches them from logic or from one register across the chip (such as a
    read enable computed from the level and routed to RAMs tens of rows away). The RAMs read
    every cycle at the read pointer: a read (``pop``: ``r_en`` and a word present) advances
    it, and the cycle after, ``r_valid`` is high with
    ``r_rows`` (every row's data at that offset) and ``r_row`` (the row that holds the word).
    ``w_rdy`` is a register; write when ``w_en & w_rdy``. Latency: a word written is read from
    the cycle after."""

    def __init__(self, width: int, depth: int):
        self.depth = depth
        self.per_row, n, self.slices = row_layout(depth, width)
        self.w_data, self.w_en, self.w_rdy = Signal(width), Signal(), Signal(init=1)
        self.r_en, self.pop, self.r_valid = Signal(), Signal(), Signal()
        self.r_rows = [Signal(width, name=f"r_row{k}") for k in range(n)]
        self.r_row = Signal(range(n))

    def elaborate(self, platform):
        m = Module()
        depth, n = self.depth, len(self.r_rows)
        lo = (self.per_row - 1).bit_length() if n > 1 else max(1, (depth - 1).bit_length())
        produce, consume = Signal(range(depth)), Signal(range(depth))
        level, filled = Signal(range(depth + 1)), Signal()
        do_w = Signal()
        m.d.comb += [do_w.eq(self.w_en & self.w_rdy), self.pop.eq(self.r_en & filled)]
        produce_next, consume_next = _step(produce, do_w, depth), _step(consume, self.pop, depth)
        _count(m, level, do_w, self.pop, self.w_rdy, filled, 0, depth)
        m.d.sync += [produce.eq(produce_next), consume.eq(consume_next), self.r_valid.eq(self.pop)]
        if n > 1:
            m.d.sync += self.r_row.eq(consume[lo:])
        for k, rd in enumerate(self.r_rows):
            here = (produce[lo:] == k) if n > 1 else 1
            for j, (b, e) in enumerate(self.slices):
                # (a word is read only from the cycle after it was written: a read of the
                # address written, with the FIFO empty, is never used)
                mem = memory.Memory(shape=unsigned(e - b), depth=min(self.per_row, depth - k * self.per_row),
                                    init=[], attrs={COLLISION_X_ATTR: 1})
                m.submodules[f"row{k}_{j}"] = mem
                wp, rp = mem.write_port(), mem.read_port()
                wa = replicas(m, produce_next, 1, f"wa{k}_{j}")[0]
                ra = replicas(m, consume_next, 1, f"ra{k}_{j}")[0]
                m.d.comb += [wp.addr.eq(wa[:lo]), wp.data.eq(self.w_data[b:e]), wp.en.eq(do_w & here),
                             rp.addr.eq(ra[:lo]), rd[b:e].eq(rp.data)]
        return m


def _step(ptr, en, depth: int):
    """``ptr`` advanced by one modulo ``depth`` when ``en``."""
    return Mux(en, Mux(ptr == depth - 1, 0, ptr + 1), ptr)


def _count(m, level, up, down, w_rdy, filled, empty: int, full: int):
    """A FIFO's level (``empty`` .. ``full``) counted up on ``up`` and down on ``down``, and its
    flags ``w_rdy`` (level != full) and ``filled`` (level != empty) as registers. The flags'
    next values compare the level register with constants beside the count, not its next value
    (a compare after the count's carry chain would make the flags' path 4 LUTs and a carry from
    a neighbour's handshake)."""
    inc, dec = up & ~down, down & ~up
    m.d.sync += [level.eq(Mux(inc, level + 1, Mux(dec, level - 1, level))),
                 w_rdy.eq(Mux(inc, level != full - 1, Mux(dec, 1, w_rdy))),
                 filled.eq(Mux(inc, 1, Mux(dec, level != empty + 1, filled)))]


def row_layout(depth: int, width: int):
    """``(words per block row, block rows, slices)`` of a :class:`_RowFIFO` of ``depth`` x
    ``width``."""
    per_row = ebr_tiling(depth, width)[1]
    return per_row, -(-depth // per_row), ebr_slices(depth, width)


def _uses_bram(entries: int, width: int, family: str) -> bool:
    if family == "ice40":
        return entries * width > 32
    return entries * width > 1024 or entries > 64


def bench_config():
    """Representative configurations for ``bench.rtl`` (name, factory, feeds, expect)."""
    import numpy as np
    from amaranth.hdl import signed
    x = np.random.default_rng(0).integers(-128, 128, size=(2000, 8))
    return [("StreamFIFO s8x8 depth 512 (BRAM)", lambda: StreamFIFO(signed(8), 8, 512),
             {"i": x}, {"o": len(x)}),
            ("StreamFIFO s8x8 depth 16 (LUT RAM)", lambda: StreamFIFO(signed(8), 8, 16),
             {"i": x}, {"o": len(x)})]
