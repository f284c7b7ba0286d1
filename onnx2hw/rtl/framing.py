"""Host-link framing in hardware: frames of bytes <-> the accelerator's element streams.

The frame format and element coding are defined once in :mod:`onnx2hw.protocol`.
:class:`Deframer` checks and buffers whole DATA frames and releases only committed payloads,
:class:`BytesToLanes` / :class:`LanesToBytes` convert between bytes and lanes of elements, and
:class:`Framer` sends RESULT and ERROR frames (and drops the results of an earlier session).
"""
from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Shape, Signal, unsigned
from amaranth.lib import crc, data, fifo, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from .. import protocol as P
from ._linebuf import ebr_tiling, row_mux
from .replicate import COLLISION_X_ATTR, banks_of, replicas
from .selftest import CMD_LAYOUT, RES_LAYOUT

__all__ = ["Deframer", "Framer", "BytesToLanes", "LanesToBytes", "TAG_LAYOUT", "ERR_LAYOUT"]

#: one committed frame: its session, sequence number and inference count
TAG_LAYOUT = data.StructLayout({"session": 16, "seq": 8, "count": 8})
#: one error report: protocol error code and the offending frame's sequence number and session
ERR_LAYOUT = data.StructLayout({"code": 8, "seq": 8, "session": 16})


def _crc32():
    return crc.catalog.CRC32_ETHERNET(8).create()


class _WritePort:
    """The deframer buffer's write side (``addr``, ``data``, ``en``), driven by its FSM."""

    def __init__(self, abits: int):
        self.addr, self.data, self.en = Signal(abits, name="wr_addr"), Signal(8, name="wr_data"), Signal(name="wr_en")


def _row_buffer(m, depth: int, wr: _WritePort, addr_next, en):
    """A ``depth`` x 8 buffer in block RAM split by depth into one memory per block row
    (:func:`~._linebuf.ebr_tiling`), each read into a register of its own beside it (the
    block's output register, :mod:`~.ram_outreg`); the rows' registers are multiplexed after
    them. Returns the data at the read address, 2 cycles after it (held while ``en`` is low);
    the read address is a register whose next value is ``addr_next``. A block RAM's read data
    comes late after the clock: it lands in a register beside its block before it meets the
    depth multiplexer, whose inputs come from across the chip.

    Each row has its own copies of the read address and of the write (address, data, enable),
    registered: a write lands a cycle after ``wr`` names it. The buffer's pointers and the
    state machine that moves them then drive a few registers, not every row across the chip."""
    words = min(depth, ebr_tiling(depth, 8)[1])
    lo = (words - 1).bit_length()
    rows = depth // words
    regs = []
    r_addrs = replicas(m, addr_next[:lo], rows, "rd_addr")
    w_addrs = replicas(m, wr.addr[:lo], rows, "wr_addr", copy=True)
    w_ens = [replicas(m, wr.en & (wr.addr[lo:] == k), 1, f"wr_en{k}")[0] for k in range(rows)]   # (one row: no row bits)
    w_data = Signal(8, name="wr_data_q", reset_less=True)
    m.d.sync += w_data.eq(wr.data)
    for k in range(rows):
        # collided reads are unused: a read address is committed (``rp != cp``), a write address
        # uncommitted, so the two meet only when ``rp == cp``, whose read is dropped
        mem = memory.Memory(shape=8, depth=words, init=[], attrs={COLLISION_X_ATTR: 1})
        m.submodules[f"mem{k}"] = mem
        wp, rp = mem.write_port(), mem.read_port()
        m.d.comb += [wp.addr.eq(w_addrs[k]), wp.data.eq(w_data), wp.en.eq(w_ens[k]),
                     rp.addr.eq(r_addrs[k]), rp.en.eq(en)]
        r = Signal(8, name=f"row{k}_q", reset_less=True)
        with m.If(en):
            m.d.sync += r.eq(rp.data)
        regs.append(r)
    if rows == 1:
        return regs[0]
    row = replicas(m, addr_next[lo:], 1, "rd_row")[0]     # the read address's row
    sel, sel_late = Signal.like(row, name="row_sel"), Signal.like(row, name="row_sel_late")
    with m.If(en):
        m.d.sync += [sel.eq(row), sel_late.eq(sel)]
    return row_mux(regs, sel_late)


def _check_pos(name, v):
    if not isinstance(v, int) or v < 1:
        raise ValueError(f"{name} must be a positive int, not {v!r}")


class Deframer(wiring.Component):
    """Receive DATA frames, check them, and release the payload of good ones only.

    Parameters
    ----------
    in_bytes : int
        Payload bytes per inference.
    buffer_bytes : int
        Input buffer size (a power of two; block RAM). A frame is written to the buffer as it
        arrives and *committed* (made visible on ``o``) only after its CRC matched; a frame
        that fails any check is rolled back, so the accelerator never sees it.
    timeout : int
        Clock cycles without a byte after which a frame in progress is abandoned (``E_TIMEOUT``),
        rounded up to a power of two (the counter stops on its top bit: no wide comparator).
    tag_depth : int
        Committed frames whose (session, seq, count) can be queued on ``tag``.
    max_count : int
        Most inferences a frame may carry (1..255); a header with a larger count is not a
        frame of this link (``E_COUNT``), so noise cannot make the deframer swallow a long
        stretch of bytes as one frame.
    selftest : bool
        Also accept SELFTEST frames (count 1, :data:`~onnx2hw.protocol.SELFTEST_CMD_BYTES`
        payload bytes, not buffered) and release each good one on ``cmd``; without it (the
        default) the hardware is exactly that of a link without a self-test.

    Ports
    -----
    i : In(stream.Signature(8))
        Received bytes, taken into a register with their comparisons (the state machine decides
        on registers only: byte compares after its state would add LUT levels to every next-state
        decision). ``i.ready`` is low only while a byte waits in that register during the
        two cycles that check a frame's CRC (its compare registered, then decided on).
    o : Out(stream.Signature(8))
        Committed payload bytes, in order (one per cycle when ``o.ready``; 2-cycle read latency:
        block RAM rows, each read into a register beside it, then their multiplexer).
    tag : Out(stream.Signature(TAG_LAYOUT))
        One entry per committed frame.
    err : Out(stream.Signature(ERR_LAYOUT))
        One entry per dropped frame. A report that is not taken before the next error is lost
        (``err_lost`` pulses) — error reports never stall reception.
    session : Out(16)
        Session of the latest committed frame (0 before the first).
    in_frame : Out(1)
        A frame is being received.
    err_lost : Out(1)
        Pulse: an error report was dropped because the previous one was still pending.
    cmd : Out(stream.Signature(CMD_LAYOUT)), only with ``selftest``
        One entry per good SELFTEST frame (a register: a frame arriving while one is still
        waiting is dropped with ``E_OVERFLOW``).
    pending : Out(1), only with ``selftest``
        Committed payload bytes not yet taken from ``o``.

    Checks: type must be DATA (``E_TYPE``), count in 1..``max_count`` (``E_COUNT``), the buffer
    and the tag queue must have room (``E_OVERFLOW``), the CRC must match (``E_CRC``), and bytes
    must keep coming (``E_TIMEOUT``). After a failed frame the deframer hunts for the next magic,
    starting with the byte that failed (it may be the first magic byte of a real frame that
    follows noise). An error report carries the offending frame's session and seq, or
    :data:`~onnx2hw.protocol.NO_SESSION` / :data:`~onnx2hw.protocol.NO_SEQ` where that part of
    the header was not read.
    """

    def __init__(self, *, in_bytes: int, buffer_bytes: int, timeout: int, tag_depth: int = P.TAG_DEPTH,
                 max_count: int = 255, selftest: bool = False):
        _check_pos("in_bytes", in_bytes)
        _check_pos("timeout", timeout)
        _check_pos("tag_depth", tag_depth)
        if not isinstance(buffer_bytes, int) or buffer_bytes < 2 or buffer_bytes & (buffer_bytes - 1):
            raise ValueError(f"buffer_bytes must be a power of two of at least 2, not {buffer_bytes!r}")
        if not isinstance(max_count, int) or not 1 <= max_count <= 255:
            raise ValueError(f"max_count must be an int in 1..255, not {max_count!r}")
        self.in_bytes, self.buffer_bytes, self.timeout, self.tag_depth = in_bytes, buffer_bytes, timeout, tag_depth
        self.max_count = max_count
        self.selftest = bool(selftest)
        ports = {
            "i": In(stream.Signature(8)), "o": Out(stream.Signature(8)),
            "tag": Out(stream.Signature(TAG_LAYOUT)), "err": Out(stream.Signature(ERR_LAYOUT)),
            "session": Out(16), "in_frame": Out(1), "err_lost": Out(1),
        }
        if self.selftest:
            ports.update(cmd=Out(stream.Signature(CMD_LAYOUT)), pending=Out(1))
        super().__init__(ports)

    def elaborate(self, platform):
        m = Module()
        abits = (self.buffer_bytes - 1).bit_length()
        wr = _WritePort(abits)
        m.submodules.crc = chk = _crc32()
        m.submodules.tags = tags = fifo.SyncFIFOBuffered(width=TAG_LAYOUT.size, depth=self.tag_depth)
        r = _Rx(self, abits)
        self._committed_out(m, r, wr)
        m.d.comb += [self.tag.valid.eq(tags.r_rdy), self.tag.payload.as_value().eq(tags.r_data),
                     tags.r_en.eq(self.tag.ready)]
        self._error_port(m, r)
        self._receive(m, r)
        m.d.comb += [chk.data.eq(r.byte), wr.data.eq(r.byte), wr.addr.eq(r.wp)]
        if self.selftest:
            self._selftest_ports(m, r)
        with m.FSM() as fsm:
            self._hunt_states(m, r, chk)
            self._header_states(m, r, chk)
            self._body_states(m, r, chk, wr)
            self._check_states(m, r, tags)
        m.d.sync += r.crc_ok.eq(chk.match_detected)
        m.d.comb += [r.checking.eq(fsm.ongoing("SETTLE") | fsm.ongoing("CHECK")),
                     self.in_frame.eq(~fsm.ongoing("MAGIC0") & ~fsm.ongoing("MAGIC1"))]
        with m.If(fsm.ongoing("MAGIC0") | r.got):
            m.d.sync += r.idle.eq(0)
        with m.Elif(~r.timed_out):
            m.d.sync += r.idle.eq(r.idle + 1)
        return m

    def _committed_out(self, m, r: _Rx, wr: _WritePort):
        """Committed bytes out of the buffer, from ``rp`` up to ``cp`` (2-cycle read latency,
        registers held while ``o`` stalls)."""
        load = ~self.o.valid | self.o.ready
        rp_next = Mux(load & (r.rp != r.cp), r.rp + 1, r.rp)
        m.d.sync += r.rp.eq(rp_next)
        m.d.comb += self.o.payload.eq(_row_buffer(m, self.buffer_bytes, wr, rp_next, load))
        with m.If(load):
            m.d.sync += [r.read_valid.eq(r.rp != r.cp), self.o.valid.eq(r.read_valid)]

    def _error_port(self, m, r: _Rx):
        """The error report: a register; a new error while one is pending is lost (:meth:`_fail`)."""
        m.d.comb += [self.err.payload.code.eq(r.err_code), self.err.payload.seq.eq(r.err_seq),
                     self.err.payload.session.eq(r.err_session)]
        m.d.sync += self.err_lost.eq(0)
        with m.If(self.err.valid & self.err.ready):
            m.d.sync += self.err.valid.eq(0)

    def _receive(self, m, r: _Rx):
        """Take the received byte and its comparisons into registers; ``got``: the state
        machine takes it (not while it checks a CRC)."""
        rx = self.i.payload
        m.d.comb += [r.got.eq(r.rx_valid & ~r.checking), self.i.ready.eq(~r.rx_valid | r.got)]
        with m.If(self.i.ready):
            m.d.sync += [r.rx_valid.eq(self.i.valid), r.byte.eq(rx), r.is_magic0.eq(rx == P.MAGIC[0]),
                         r.is_magic1.eq(rx == P.MAGIC[1]), r.is_data.eq(rx == P.T_DATA), r.is_one.eq(rx == 1),
                         r.count_bad.eq((rx == 0) | (rx > self.max_count))]

    def _selftest_ports(self, m, r: _Rx):
        """With ``selftest``: the SELFTEST type compare, the ``cmd`` register's handshake and
        ``pending``."""
        with m.If(self.i.ready):
            m.d.sync += r.is_selftest.eq(self.i.payload == P.T_SELFTEST)
        with m.If(self.cmd.valid & self.cmd.ready):
            m.d.sync += self.cmd.valid.eq(0)
        m.d.comb += self.pending.eq((r.rp != r.cp) | r.read_valid | self.o.valid)

    def _fail(self, m, r: _Rx, code, ses, s, on_byte=True):
        """Drop the frame, report it, and hunt for the next magic (from this byte on, if
        ``on_byte``: it may start a real frame)."""
        with m.If(self.err.valid & ~self.err.ready):
            m.d.sync += self.err_lost.eq(1)
        with m.Else():
            m.d.sync += [self.err.valid.eq(1), r.err_code.eq(code), r.err_seq.eq(s), r.err_session.eq(ses)]
        m.d.sync += [r.wp.eq(r.cp), r.wp_inc.eq(r.cp + 1)]
        if on_byte:
            with m.If(r.is_magic0):
                m.next = "MAGIC1"
            with m.Else():
                m.next = "MAGIC0"
        else:
            m.next = "MAGIC0"

    def _hunt_states(self, m, r: _Rx, chk):
        """MAGIC0, MAGIC1: hunt for the magic (a first magic byte where the second is expected
        may start the frame); TYPE: DATA, or with ``selftest`` SELFTEST (``is_cmd``)."""
        with m.State("MAGIC0"):
            with m.If(r.got & r.is_magic0):
                m.next = "MAGIC1"
        with m.State("MAGIC1"):
            with m.If(r.got):
                with m.If(r.is_magic1):
                    m.d.comb += chk.start.eq(1)
                    m.next = "TYPE"
                with m.Elif(~r.is_magic0):
                    m.next = "MAGIC0"
            with m.Elif(r.timed_out):
                m.next = "MAGIC0"
        with m.State("TYPE"):
            with m.If(r.got):
                m.d.comb += chk.valid.eq(1)
                with m.If(r.is_data):
                    if self.selftest:
                        m.d.sync += r.is_cmd.eq(0)
                    m.next = "SESSION0"
                if self.selftest:
                    with m.Elif(r.is_selftest):
                        m.d.sync += r.is_cmd.eq(1)
                        m.next = "SESSION0"
                with m.Else():
                    self._fail(m, r, P.E_TYPE, P.NO_SESSION, P.NO_SEQ)
            with m.Elif(r.timed_out):
                self._fail(m, r, P.E_TIMEOUT, P.NO_SESSION, P.NO_SEQ, on_byte=False)

    def _header_states(self, m, r: _Rx, chk):
        """SESSION0, SESSION1, SEQ: the header bytes stored as they come; COUNT: the count
        checked (a SELFTEST frame has count 1 and a payload of its own, CMD)."""
        # (state, where the byte goes, next state, the session an error frame names when the
        # frame times out here)
        for state, dest, after, known in (("SESSION0", r.session[:8], "SESSION1", P.NO_SESSION),
                                          ("SESSION1", r.session[8:], "SEQ", P.NO_SESSION),
                                          ("SEQ", r.seq, "COUNT", r.session)):
            with m.State(state):
                with m.If(r.got):
                    m.d.comb += chk.valid.eq(1)
                    m.d.sync += dest.eq(r.byte)
                    m.next = after
                with m.Elif(r.timed_out):
                    self._fail(m, r, P.E_TIMEOUT, known, P.NO_SEQ, on_byte=False)
        with m.State("COUNT"):
            with m.If(r.got):
                m.d.comb += chk.valid.eq(1)
                m.d.sync += [r.count.eq(r.byte), r.inf_left.eq(r.byte - 1), r.inf_last.eq(r.is_one),
                             r.byte_left.eq(self.in_bytes - 1), r.byte_last.eq(self.in_bytes == 1)]
                bad_count = r.count_bad
                if self.selftest:
                    m.d.sync += [r.cmd_left.eq(P.SELFTEST_CMD_BYTES - 1),
                                 r.cmd_last.eq(P.SELFTEST_CMD_BYTES == 1)]
                    bad_count = Mux(r.is_cmd, ~r.is_one, r.count_bad)
                with m.If(bad_count):
                    self._fail(m, r, P.E_COUNT, r.session, r.seq)
                if self.selftest:
                    with m.Elif(r.is_cmd):
                        m.next = "CMD"
                with m.Else():
                    m.next = "PAYLOAD"
            with m.Elif(r.timed_out):
                self._fail(m, r, P.E_TIMEOUT, r.session, r.seq, on_byte=False)

    def _body_states(self, m, r: _Rx, chk, wr: _WritePort):
        """PAYLOAD: ``count`` inferences of ``in_bytes`` written to the buffer (``E_OVERFLOW``
        when it is full); CRC: its four bytes; with ``selftest`` CMD: a SELFTEST payload
        shifted into ``cmd_buf``."""
        with m.State("PAYLOAD"):
            with m.If(r.got):
                m.d.comb += chk.valid.eq(1)
                with m.If(r.wp_inc == r.rp):
                    self._fail(m, r, P.E_OVERFLOW, r.session, r.seq)
                with m.Else():
                    m.d.comb += wr.en.eq(1)
                    m.d.sync += [r.wp.eq(r.wp_inc), r.wp_inc.eq(r.wp_inc + 1),
                                 r.byte_left.eq(r.byte_left - 1), r.byte_last.eq(r.byte_left == 1)]
                    with m.If(r.byte_last):
                        m.d.sync += [r.byte_left.eq(self.in_bytes - 1), r.byte_last.eq(self.in_bytes == 1),
                                     r.inf_left.eq(r.inf_left - 1), r.inf_last.eq(r.inf_left == 1)]
                        with m.If(r.inf_last):
                            m.d.sync += r.crc_left.eq(3)
                            m.next = "CRC"
            with m.Elif(r.timed_out):
                self._fail(m, r, P.E_TIMEOUT, r.session, r.seq, on_byte=False)
        with m.State("CRC"):
            with m.If(r.got):
                m.d.comb += chk.valid.eq(1)
                m.d.sync += r.crc_left.eq(r.crc_left - 1)
                with m.If(r.crc_left == 0):
                    m.next = "SETTLE"
            with m.Elif(r.timed_out):
                self._fail(m, r, P.E_TIMEOUT, r.session, r.seq, on_byte=False)
        if self.selftest:
            with m.State("CMD"):
                with m.If(r.got):
                    m.d.comb += chk.valid.eq(1)
                    m.d.sync += [r.cmd_buf.eq(Cat(r.cmd_buf[8:], r.byte)), r.cmd_left.eq(r.cmd_left - 1),
                                 r.cmd_last.eq(r.cmd_left == 1)]
                    with m.If(r.cmd_last):
                        m.d.sync += r.crc_left.eq(3)
                        m.next = "CRC"
                with m.Elif(r.timed_out):
                    self._fail(m, r, P.E_TIMEOUT, r.session, r.seq, on_byte=False)

    def _check_states(self, m, r: _Rx, tags):
        """SETTLE, CHECK: the CRC's compare (three LUT levels from its register) is registered
        in SETTLE and decided on in CHECK, so that it does not run on into the error and
        buffer-pointer logic. A good frame is committed (``cp``) with its tag, or a SELFTEST
        frame's command released on ``cmd``."""
        with m.State("SETTLE"):
            m.next = "CHECK"
        with m.State("CHECK"):
            with m.If(~r.crc_ok):
                self._fail(m, r, P.E_CRC, r.session, r.seq, on_byte=False)
            if self.selftest:
                with m.Elif(r.is_cmd & self.cmd.valid):
                    self._fail(m, r, P.E_OVERFLOW, r.session, r.seq, on_byte=False)
                with m.Elif(r.is_cmd):
                    m.d.sync += [self.cmd.valid.eq(1),
                                 self.cmd.payload.as_value().eq(Cat(r.session, r.seq, r.cmd_buf)),
                                 self.session.eq(r.session)]
                    m.next = "MAGIC0"
            with m.Elif(~tags.w_rdy):
                self._fail(m, r, P.E_OVERFLOW, r.session, r.seq, on_byte=False)
            with m.Else():
                m.d.comb += [tags.w_en.eq(1), tags.w_data.eq(Cat(r.session, r.seq, r.count))]
                m.d.sync += [r.cp.eq(r.wp), self.session.eq(r.session)]
                m.next = "MAGIC0"


class _Rx:
    """The deframer's registers, shared by its parts: the buffer's write, committed and read
    pointers (``wp_inc``, wp + 1, is kept beside ``wp`` so that the overflow test compares
    registers), the frame's header fields and counters (``inf_last``, ``byte_last``: their
    ``== 0`` tests as registers), the idle counter (``timed_out``: its top bit), the error
    report, the received byte with its comparisons, registered, and with ``selftest`` the
    SELFTEST command's state. (A signal in a tuple assignment gets no name of its own from
    Amaranth; the names given keep the Verilog's.)"""

    def __init__(self, d: Deframer, abits: int):
        self.wp, self.cp, self.rp = Signal(abits), Signal(abits), Signal(abits)
        self.wp_inc = Signal(abits, init=1)
        self.session, self.seq, self.count = Signal(16), Signal(8), Signal(8, name="count")
        self.inf_left = Signal(8)
        self.byte_left = Signal(range(d.in_bytes))
        self.inf_last, self.byte_last = Signal(), Signal(name="byte_last")
        self.crc_left = Signal(2)
        tbits = max(1, (d.timeout - 1).bit_length())
        self.idle = Signal(tbits + 1)
        self.timed_out = self.idle[tbits]
        self.read_valid = Signal()
        self.err_code, self.err_seq, self.err_session = Signal(8), Signal(8), Signal(16)
        self.byte = Signal(8, name="rx_byte")
        self.rx_valid, self.got, self.checking, self.crc_ok = Signal(name="rx_valid"), Signal(), Signal(), Signal()
        self.is_magic0, self.is_magic1, self.is_data, self.is_one, self.count_bad = (Signal(name=n) for n in (
            "is_magic0", "is_magic1", "is_data", "is_one", "count_bad"))
        if d.selftest:
            self.is_cmd = Signal()
            self.cmd_left = Signal(range(P.SELFTEST_CMD_BYTES))
            self.cmd_last = Signal()
            self.is_selftest = Signal()
            self.cmd_buf = Signal(8 * P.SELFTEST_CMD_BYTES)


class BytesToLanes(wiring.Component):
    """Bytes -> transfers of ``lanes`` elements, each element ``elem_bytes`` little-endian bytes
    of which the low ``width`` bits are kept.

    A byte is taken into a register, and two cycles later shifted into the transfer's buffer
    under copies of a registered enable, one per 64-bit bank (:func:`~.replicate.banks_of`):
    a shift enable computed from the input FIFO's level would be a LUT's output routed to every
    buffer bit across the chip. One byte per 3 cycles at most (the UART
    delivers one per hundreds); ``o.valid`` rises 3 cycles after the transfer's last byte is
    taken, and no byte is taken while it is high. ``busy`` (not a port): a byte taken is not yet
    in the buffer, or a transfer waits on ``o``.
    """

    def __init__(self, *, elem_shape, lanes: int):
        self.elem_shape = Shape.cast(elem_shape)
        _check_pos("lanes", lanes)
        self.lanes = lanes
        self.elem_bytes = (self.elem_shape.width + 7) // 8
        super().__init__({"i": In(stream.Signature(8)),
                          "o": Out(stream.Signature(data.ArrayLayout(self.elem_shape, lanes)))})
        self.busy = Signal()

    def elaborate(self, platform):
        m = Module()
        nbytes = self.lanes * self.elem_bytes
        buf = Signal(8 * nbytes)
        n = Signal(range(nbytes))
        w = self.elem_shape.width
        byte = Signal(8)
        held, shift = Signal(), Signal()        # the byte taken a cycle ago / two cycles ago
        m.d.comb += [self.i.ready.eq(~self.o.valid & ~held & ~shift),
                     self.busy.eq(self.o.valid | held | shift)]
        for j in range(self.lanes):
            m.d.comb += self.o.payload[j].eq(buf[8 * self.elem_bytes * j:][:w])
        with m.If(self.i.valid & self.i.ready):
            m.d.sync += byte.eq(self.i.payload)
        m.d.sync += [held.eq(self.i.valid & self.i.ready), shift.eq(held)]
        banks = banks_of(8 * nbytes)
        shifted = Cat(buf[8:], byte)
        for (lo, hi), en in zip(banks, replicas(m, held, len(banks), "shift", copy=True)):
            with m.If(en):
                m.d.sync += buf[lo:hi].eq(shifted[lo:hi])
        with m.If(self.o.valid & self.o.ready):
            m.d.sync += self.o.valid.eq(0)
        with m.If(shift):
            m.d.sync += n.eq(n + 1)
            with m.If(n == nbytes - 1):
                m.d.sync += [n.eq(0), self.o.valid.eq(1)]
        return m


class LanesToBytes(wiring.Component):
    """Transfers of ``lanes`` elements -> bytes, each element sign- or zero-extended to
    ``ceil(width / 8)`` little-endian bytes, lane 0 first.

    One byte per cycle; a transfer is taken when its last byte is loaded (``i.ready`` then).
    ``o`` is a register (latency 1): the byte select after the accelerator's output FIFO
    never runs on into the framer's CRC.
    """

    def __init__(self, *, elem_shape, lanes: int):
        self.elem_shape = Shape.cast(elem_shape)
        _check_pos("lanes", lanes)
        self.lanes = lanes
        self.elem_bytes = (self.elem_shape.width + 7) // 8
        super().__init__({"i": In(stream.Signature(data.ArrayLayout(self.elem_shape, lanes))),
                          "o": Out(stream.Signature(8))})

    def elaborate(self, platform):
        m = Module()
        nbytes = self.lanes * self.elem_bytes
        lanes = []
        for j in range(self.lanes):
            s = Signal(unsigned(8 * self.elem_bytes), name=f"lane{j}")
            m.d.comb += s.eq(self.i.payload[j])        # sign-extends a signed element
            lanes.append(s)
        flat = Cat(*lanes)
        n = Signal(range(nbytes))
        load = ~self.o.valid | self.o.ready
        m.d.comb += self.i.ready.eq(load & (n == nbytes - 1))
        with m.If(load):
            m.d.sync += [self.o.valid.eq(self.i.valid), self.o.payload.eq(flat.word_select(n, 8))]
            with m.If(self.i.valid):
                m.d.sync += n.eq(Mux(n == nbytes - 1, 0, n + 1))
        return m


class Framer(wiring.Component):
    """Send one RESULT frame per tag (``count * out_bytes`` payload bytes from ``i``) and one
    ERROR frame per error report; error reports go first when both are waiting. Every frame
    carries the session and seq of the frame it answers.

    The results of a tag whose session is not ``live`` (the session of the latest frame the
    deframer committed: a new host run has started) are stale: their payload bytes are taken
    from ``i`` and dropped instead of sent, so a new run does not wait behind the backlog of an
    interrupted one.

    A RESULT frame starts only when its first payload byte is already valid, so the header is
    never followed by a gap longer than the accelerator's inter-byte stalls.

    Ports
    -----
    i : In(stream.Signature(8))     result payload bytes
    tag : In(stream.Signature(TAG_LAYOUT))
    err : In(stream.Signature(ERR_LAYOUT))
    live : In(16)                   the current session
    o : Out(stream.Signature(8))    frame bytes
    busy : Out(1)                   a frame is being sent (or a stale one dropped)
    st : In(stream.Signature(RES_LAYOUT)), only with ``selftest``
        Self-test results, each sent as a SELFTEST_RESULT frame (after a waiting error report,
        before waiting results); taken when its frame's last payload byte is sent.
    """

    def __init__(self, *, out_bytes: int, selftest: bool = False):
        _check_pos("out_bytes", out_bytes)
        self.out_bytes = out_bytes
        self.selftest = bool(selftest)
        ports = {"i": In(stream.Signature(8)), "tag": In(stream.Signature(TAG_LAYOUT)),
                 "err": In(stream.Signature(ERR_LAYOUT)), "live": In(16),
                 "o": Out(stream.Signature(8)), "busy": Out(1)}
        if self.selftest:
            ports["st"] = In(stream.Signature(RES_LAYOUT))
        super().__init__(ports)

    def elaborate(self, platform):
        """The CRC generator, the frame's registers (:class:`_Tx`) and the state machine: IDLE
        picks the next frame (:meth:`_idle_state`), HEADER sends its header
        (:meth:`_header_state`), PAYLOAD its results or DROP drops them
        (:meth:`_payload_states`), FIXED a self-test result (:meth:`_fixed_state`), CRC the
        CRC (:meth:`_crc_state`)."""
        m = Module()
        m.submodules.crc = gen = _crc32()
        t = _Tx(self)
        with m.FSM() as fsm:
            self._idle_state(m, t)
            self._header_state(m, t, gen)
            self._payload_states(m, t, gen)
            if self.selftest:
                self._fixed_state(m, t, gen)
            self._crc_state(m, t, gen)
        m.d.comb += self.busy.eq(~fsm.ongoing("IDLE"))
        return m

    def _idle_state(self, m, t: _Tx):
        """IDLE: an error report first, then a self-test result, then a tag whose first payload
        byte is valid (sent if its session is live, else dropped); the header fields loaded."""
        with m.State("IDLE"):
            with m.If(self.err.valid):
                m.d.comb += self.err.ready.eq(1)
                m.d.sync += [t.ftype.eq(P.T_ERROR), t.session.eq(self.err.payload.session),
                             t.seq.eq(self.err.payload.seq), t.count.eq(self.err.payload.code), t.idx.eq(0)]
                m.next = "HEADER"
            if self.selftest:
                with m.Elif(self.st.valid):
                    m.d.sync += [t.ftype.eq(P.T_SELFTEST_RESULT), t.session.eq(self.st.payload.session),
                                 t.seq.eq(self.st.payload.seq), t.count.eq(1), t.idx.eq(0), t.st_idx.eq(0)]
                    m.next = "HEADER"
            with m.Elif(self.tag.valid & self.i.valid):
                m.d.comb += self.tag.ready.eq(1)
                m.d.sync += [t.ftype.eq(P.T_RESULT), t.session.eq(self.tag.payload.session),
                             t.seq.eq(self.tag.payload.seq), t.count.eq(self.tag.payload.count), t.idx.eq(0),
                             t.inf_left.eq(self.tag.payload.count - 1),
                             t.byte_left.eq(self.out_bytes - 1)]
                with m.If(self.tag.payload.session == self.live):
                    m.next = "HEADER"
                with m.Else():
                    m.next = "DROP"

    def _header_state(self, m, t: _Tx, gen):
        """HEADER: the header bytes, all but the magic into the CRC; then the payload, the
        self-test result's (FIXED) or, for an error, none (CRC)."""
        header = Cat(Const(P.MAGIC[0], 8), Const(P.MAGIC[1], 8), t.ftype, t.session, t.seq, t.count)
        assert len(header) == 8 * P.HEADER_BYTES
        with m.State("HEADER"):
            m.d.comb += [self.o.valid.eq(1), self.o.payload.eq(header.word_select(t.idx, 8)),
                         gen.data.eq(self.o.payload), gen.start.eq(t.idx == 0),
                         gen.valid.eq(t.sent & (t.idx >= 2))]
            with m.If(t.sent):
                m.d.sync += t.idx.eq(t.idx + 1)
                with m.If(t.idx == P.HEADER_BYTES - 1):
                    with m.If(t.ftype == P.T_ERROR):
                        m.d.sync += t.k.eq(0)
                        m.next = "CRC"
                    if self.selftest:
                        with m.Elif(t.ftype == P.T_SELFTEST_RESULT):
                            m.next = "FIXED"
                    with m.Else():
                        m.next = "PAYLOAD"

    def _payload_states(self, m, t: _Tx, gen):
        """PAYLOAD: ``count * out_bytes`` bytes from ``i`` sent and into the CRC; DROP: as many
        taken and dropped (a stale session's results)."""
        with m.State("PAYLOAD"):
            m.d.comb += [self.o.valid.eq(self.i.valid), self.o.payload.eq(self.i.payload),
                         self.i.ready.eq(self.o.ready), gen.data.eq(self.i.payload),
                         gen.valid.eq(t.sent)]
            with m.If(t.sent):
                m.d.sync += t.byte_left.eq(t.byte_left - 1)
                with m.If(t.byte_left == 0):
                    m.d.sync += [t.byte_left.eq(self.out_bytes - 1), t.inf_left.eq(t.inf_left - 1)]
                    with m.If(t.inf_left == 0):
                        m.d.sync += t.k.eq(0)
                        m.next = "CRC"
        with m.State("DROP"):
            m.d.comb += self.i.ready.eq(1)
            with m.If(self.i.valid):
                m.d.sync += t.byte_left.eq(t.byte_left - 1)
                with m.If(t.byte_left == 0):
                    m.d.sync += [t.byte_left.eq(self.out_bytes - 1), t.inf_left.eq(t.inf_left - 1)]
                    with m.If(t.inf_left == 0):
                        m.next = "IDLE"

    def _fixed_state(self, m, t: _Tx, gen):
        """FIXED (with ``selftest``): the self-test result's payload, then it is taken."""
        with m.State("FIXED"):
            m.d.comb += [self.o.valid.eq(1), self.o.payload.eq(self.st.payload.data.word_select(t.st_idx, 8)),
                         gen.data.eq(self.o.payload), gen.valid.eq(t.sent)]
            with m.If(t.sent):
                m.d.sync += t.st_idx.eq(t.st_idx + 1)
                with m.If(t.st_idx == P.SELFTEST_RESULT_BYTES - 1):
                    m.d.comb += self.st.ready.eq(1)
                    m.d.sync += t.k.eq(0)
                    m.next = "CRC"

    def _crc_state(self, m, t: _Tx, gen):
        """CRC: the frame's CRC-32, low byte first; then IDLE."""
        with m.State("CRC"):
            m.d.comb += [self.o.valid.eq(1), self.o.payload.eq(gen.crc.word_select(t.k, 8))]
            with m.If(t.sent):
                m.d.sync += t.k.eq(t.k + 1)
                with m.If(t.k == 3):
                    m.next = "IDLE"


class _Tx:
    """The framer's registers, shared by its parts: the header fields of the frame being sent,
    the header byte (``idx``), the inferences and bytes of the payload still to send
    (``inf_left``, ``byte_left``), the CRC byte (``k``) and with ``selftest`` the self-test
    result's byte (``st_idx``); ``sent``: a byte goes out this cycle."""

    def __init__(self, f: Framer):
        self.ftype, self.session, self.seq, self.count = Signal(8), Signal(16), Signal(8), Signal(8)
        self.idx = Signal(range(P.HEADER_BYTES))
        self.inf_left = Signal(8)
        self.byte_left = Signal(range(f.out_bytes))
        self.k = Signal(2)
        self.sent = f.o.valid & f.o.ready
        if f.selftest:
            self.st_idx = Signal(range(P.SELFTEST_RESULT_BYTES))
