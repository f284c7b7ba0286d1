"""The board's self-test: inputs held in on-chip memory replayed through the accelerator at full
speed, with a cycle counter and an on-chip check of the outputs (``onnx2hw synth --selftest``).

:class:`SelfTest` sits between the host link and the accelerator in
:class:`~onnx2hw.rtl.board_top.BoardTop`. Normally it passes both streams through unchanged.
On a SELFTEST command (:mod:`onnx2hw.protocol`) it waits until the accelerator is idle, then
streams the ``N`` stored inputs ``R`` times back to back into the accelerator (one transfer per
cycle whenever the accelerator takes one), takes every output at once (the UART is not in the
loop) and reports the cycles from the first input transfer to the last output transfer, the
latency of the first inference, the inferences counted and the check of the outputs.

The outputs are checked with a CRC-32 per pass rather than against expected outputs held in
memory: the expected CRC comes in the command, computed by the host from the golden executor's
outputs for the stored inputs, so the check costs no block RAM (an expected-output memory would
cost as much as the input memory for an autoencoder), it always checks against the golden of the
host's model rather than a value frozen into the bitstream, and every pass is checked (a
failure that shows only under sustained load is counted). CRC-32 catches every error of up to
three bits and every burst of up to 32 bits in a pass, and misses any other error with
probability 2**-32.
"""
from __future__ import annotations

from typing import NamedTuple

from amaranth.hdl import Cat, Const, Module, Mux, Shape, Signal, unsigned
from amaranth.lib import crc, data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from .. import protocol as P
from .cost import Cost

__all__ = ["SelfTest", "CMD_LAYOUT", "RES_LAYOUT", "selftest_cost", "sample_words", "CYCLE_BITS"]

#: a SELFTEST command: the frame's session and seq, the passes and the expected CRC of one pass
CMD_LAYOUT = data.StructLayout({"session": 16, "seq": 8, "passes": 32, "crc": 32})
#: a self-test result: session and seq of its command, the SELFTEST_RESULT payload (little-endian)
RES_LAYOUT = data.StructLayout({"session": 16, "seq": 8, "data": 8 * P.SELFTEST_RESULT_BYTES})
#: width of the cycle counter (2**40 cycles: 3 hours at 100 MHz)
CYCLE_BITS = 40


def _layouts(fmt: P.LinkFormat):
    return (data.ArrayLayout(Shape(fmt.in_bits, fmt.in_signed), fmt.in_lanes),
            data.ArrayLayout(Shape(fmt.out_bits, fmt.out_signed), fmt.out_lanes))


def sample_words(fmt: P.LinkFormat, samples: bytes) -> list[int]:
    """The memory words (one accelerator input transfer each: lane ``j`` in bits
    ``[j * in_bits, (j + 1) * in_bits)``) holding ``samples``, the link coding of ``N`` inputs
    (:meth:`~onnx2hw.protocol.LinkFormat.encode_inputs`), in stream order."""
    if not isinstance(samples, (bytes, bytearray)) or not samples or len(samples) % fmt.in_bytes:
        raise ValueError(f"self-test samples must be a whole number of inputs of {fmt.in_bytes} bytes, "
                         f"not {type(samples).__name__} of {len(samples) if hasattr(samples, '__len__') else '?'}")
    eb, bits, lanes = fmt.in_elem_bytes, fmt.in_bits, fmt.in_lanes
    mask = (1 << bits) - 1
    elems = [int.from_bytes(samples[k:k + eb], "little") & mask for k in range(0, len(samples), eb)]
    return [sum(e << (bits * j) for j, e in enumerate(elems[w:w + lanes])) for w in range(0, len(elems), lanes)]


def _rom_blocks(depth: int, width: int, family: str) -> tuple[int, int]:
    """(block RAMs, LUT4) of a ``depth`` x ``width`` synchronous-read ROM as Yosys maps it (the
    LUTs: small ROMs as logic, or the read multiplexer of blocks stacked in depth)."""
    if family == "ice40":   # SB_RAM40_4K: 256x16, 512x8, 1024x4, 2048x2
        configs = ((256, 16), (512, 8), (1024, 4), (2048, 2))
    elif depth <= 16:       # small: logic
        return 0, width * depth // 8 + width
    else:                   # DP16KD
        configs = ((512, 36), (1024, 18), (2048, 9), (4096, 4), (8192, 2), (16384, 1))
    blocks, d = min((-(-width // w) * -(-depth // d), d) for d, w in configs)
    return blocks, width * (-(-depth // d) - 1)


def selftest_cost(fmt: P.LinkFormat, samples: int, family: str = "ecp5") -> Cost:
    """Resources of a :class:`SelfTest` holding ``samples`` inputs of ``fmt``: its sample memory
    (block RAM), counters, CRC and the stream multiplexers (checked against Yosys by
    ``tests/test_rtl_selftest.py``)."""
    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 1:
        raise ValueError(f"samples must be a positive int, not {samples!r}")
    words = samples * fmt.in_elems // fmt.in_lanes
    width = fmt.in_bits * fmt.in_lanes
    ebr, rom_lut = _rom_blocks(words, width, family)
    crc_bits = 8 * fmt.out_elem_bytes * fmt.out_lanes
    out_width = fmt.out_bits * fmt.out_lanes
    # CRC: 32 XOR trees over the CRC and a data word; counters: cycles, latency, inferences,
    # failures, two pass counters, addresses; multiplexers on both streams
    lut = rom_lut + 32 * (32 + crc_bits) // 4 + 400 + 2 * (width + out_width)
    ff = 200 + CYCLE_BITS + 5 * 32 + crc_bits + width
    return Cost(0, 0, lut, ff, 0, ebr)


class SelfTest(wiring.Component):
    """Self-test replay, cycle counter and output check between a host link and an accelerator.

    Parameters
    ----------
    fmt : LinkFormat
        The accelerator's link layout (element widths, lanes, tensor sizes).
    samples : bytes
        ``N`` inputs in link coding (``fmt.encode_inputs``), held in a ROM of
        ``N * in_elems / in_lanes`` words of ``in_bits * in_lanes`` bits (block RAM).

    Ports
    -----
    i : In(stream in)  /  o : Out(stream in)
        Input transfers from the host link / to the accelerator.
    ai : In(stream out)  /  ao : Out(stream out)
        Output transfers from the accelerator / to the host link.
    cmd : In(stream.Signature(CMD_LAYOUT))
        SELFTEST commands (session, seq, passes ``R``, expected CRC-32 of one pass).
    res : Out(stream.Signature(RES_LAYOUT))
        One result per command: session, seq and the SELFTEST_RESULT payload
        (:class:`onnx2hw.protocol.SelfTestCounts`).
    link_idle : In(1)
        The host link holds no input not yet given to ``i`` (no frame's bytes in flight).
    running : Out(1)
        A self-test is running (the link's streams are held).

    Behaviour: while idle, ``i -> o`` and ``ai -> ao`` are wires, and the inferences in flight
    are counted (first input transfer in, last output transfer out). A command is taken when
    no inference is in flight, no input is pending on the link and no result is waiting; then
    ``i`` and ``ao`` are held (valid/ready low), the ROM streams into ``o`` for ``R`` passes
    (1-cycle read latency, held while ``o`` is stalled: one transfer per cycle at full speed)
    and ``ai`` is always ready. Each output transfer's lanes, sign- or zero-extended to whole
    bytes, enter a CRC-32 (``zlib.crc32`` of the link's result bytes) that restarts every pass;
    a pass whose CRC differs from the command's counts as failed. ``cycles`` counts from the
    first input transfer to the last output transfer, both included (``CYCLE_BITS`` bits);
    ``latency_cycles`` the same for the first inference. Passes of 0 run once.
    """

    def __init__(self, fmt: P.LinkFormat, samples: bytes):
        if not isinstance(fmt, P.LinkFormat):
            raise TypeError(f"fmt must be a protocol.LinkFormat, not {fmt!r}")
        if fmt.in_elems % fmt.in_lanes or fmt.out_elems % fmt.out_lanes:
            raise ValueError(f"the tensors of {fmt!r} are not whole numbers of transfers")
        self.fmt = fmt
        self.words = sample_words(fmt, samples)
        self.samples = len(samples) // fmt.in_bytes
        self.in_layout, self.out_layout = _layouts(fmt)
        super().__init__({"i": In(stream.Signature(self.in_layout)), "o": Out(stream.Signature(self.in_layout)),
                          "ai": In(stream.Signature(self.out_layout)), "ao": Out(stream.Signature(self.out_layout)),
                          "cmd": In(stream.Signature(CMD_LAYOUT)), "res": Out(stream.Signature(RES_LAYOUT)),
                          "link_idle": In(1), "running": Out(1)})

    def elaborate(self, platform):
        """The sample ROM and the CRC generator, the inferences in flight (:meth:`_in_flight`),
        the run's registers (:class:`_Run`), the output lanes as CRC bytes (:meth:`_out_lanes`),
        the CRC check (:meth:`_check`), the result port (:meth:`_result_port`) and the state
        machine: IDLE passes the link through and takes a command (:meth:`_idle_state`), RUN
        replays the samples (:meth:`_run_state`), FINISH lets the last CRC settle
        (:meth:`_finish_state`)."""
        m = Module()
        fmt = self.fmt
        width = fmt.in_bits * fmt.in_lanes
        m.submodules.rom = rom = memory.Memory(shape=unsigned(width), depth=len(self.words), init=self.words)
        rd = rom.read_port()
        crc_width = 8 * fmt.out_elem_bytes * fmt.out_lanes
        m.submodules.crc = gen = crc.catalog.CRC32_ETHERNET(crc_width).create()
        f = self._in_flight(m)
        r = _Run(self, crc_width)
        lanes = self._out_lanes(m)
        self._check(m, r, gen)
        self._result_port(m, r)
        with m.FSM() as fsm:
            with m.State("IDLE"):
                self._idle_state(m, f, r)
            with m.State("RUN"):
                self._run_state(m, f, r, rd, lanes)
            with m.State("FINISH"):
                self._finish_state(m, r)
        m.d.comb += self.running.eq(~fsm.ongoing("IDLE"))
        return m

    def _in_flight(self, m) -> _Flight:
        """The inferences in flight (both modes): counted up at an inference's first input
        transfer into the accelerator, down at its last output transfer out of it."""
        fmt = self.fmt
        t_in, t_out = fmt.in_elems // fmt.in_lanes, fmt.out_elems // fmt.out_lanes
        in_pos, out_pos = Signal(range(max(2, t_in))), Signal(range(max(2, t_out)))
        inflight = Signal(16)
        took_in = self.o.valid & self.o.ready
        took_out = self.ai.valid & self.ai.ready
        first_in = took_in & (in_pos == 0)
        last_out = took_out & (out_pos == t_out - 1)
        with m.If(took_in):
            m.d.sync += in_pos.eq(Mux(in_pos == t_in - 1, 0, in_pos + 1))
        with m.If(took_out):
            m.d.sync += out_pos.eq(Mux(out_pos == t_out - 1, 0, out_pos + 1))
        with m.If(first_in & ~last_out):
            m.d.sync += inflight.eq(inflight + 1)
        with m.Elif(last_out & ~first_in):
            m.d.sync += inflight.eq(inflight - 1)
        return _Flight(in_pos, out_pos, inflight, took_in, took_out, last_out)

    def _out_lanes(self, m):
        """The lanes of an output transfer, each sign- or zero-extended to whole bytes (as the
        link codes them)."""
        lanes = []
        for j in range(self.fmt.out_lanes):
            s = Signal(unsigned(8 * self.fmt.out_elem_bytes), name=f"out_lane{j}")
            m.d.comb += s.eq(self.ai.payload[j])          # sign-extends a signed element
            lanes.append(s)
        return lanes

    def _check(self, m, r: _Run, gen):
        """The CRC of a pass from its registered input stage (``d_*``); at the pass's end
        (``e_valid``) compared with the command's, and the first pass's kept."""
        m.d.comb += [gen.data.eq(r.d_data), gen.valid.eq(r.d_valid), gen.start.eq(r.d_start & r.d_valid)]
        m.d.sync += r.e_valid.eq(r.d_valid & r.d_end)
        with m.If(r.e_valid):
            with m.If(gen.crc != r.expect):
                m.d.sync += r.failed.eq(r.failed + 1)
            with m.If(~r.have_first):
                m.d.sync += [r.first_crc.eq(gen.crc), r.have_first.eq(1)]

    def _result_port(self, m, r: _Run):
        """The result: a register, its payload the run's counts (SELFTEST_RESULT, little-endian)."""
        with m.If(self.res.valid & self.res.ready):
            m.d.sync += self.res.valid.eq(0)
        m.d.comb += [self.res.payload.session.eq(r.session), self.res.payload.seq.eq(r.seq),
                     self.res.payload.data.eq(Cat(r.cycles, Const(0, 64 - CYCLE_BITS), r.latency, r.count,
                                                  r.failed, r.first_crc))]

    def _idle_state(self, m, f: _Flight, r: _Run):
        """IDLE: both streams are wires; a command is taken when nothing is in flight, nothing
        is pending on the link and no result is waiting, and the run's registers start."""
        m.d.comb += [self.o.valid.eq(self.i.valid), self.o.payload.eq(self.i.payload),
                     self.i.ready.eq(self.o.ready),
                     self.ao.valid.eq(self.ai.valid), self.ao.payload.eq(self.ai.payload),
                     self.ai.ready.eq(self.ao.ready)]
        with m.If(self.cmd.valid & self.link_idle & ~self.i.valid & (f.inflight == 0) & (f.in_pos == 0)
                  & ~self.res.valid):
            c = self.cmd.payload
            first = Mux(c.passes == 0, 0, c.passes - 1)
            m.d.comb += self.cmd.ready.eq(1)
            m.d.sync += [r.session.eq(c.session), r.seq.eq(c.seq), r.expect.eq(c.crc),
                         r.in_left.eq(first), r.out_left.eq(first), r.addr.eq(0), r.feeding.eq(1),
                         r.started.eq(0), r.out_inf.eq(0), r.count.eq(0), r.failed.eq(0),
                         r.have_latency.eq(0), r.have_first.eq(0), r.pass_start.eq(1)]
            m.next = "RUN"

    def _run_state(self, m, f: _Flight, r: _Run, rd, lanes):
        """RUN: the ROM streams into ``o`` (:meth:`_replay`), the cycle counter runs from the
        first input transfer, and every output is taken (:meth:`_take_outputs`)."""
        self._replay(m, r, rd)
        with m.If(f.took_in & ~r.started):
            m.d.sync += [r.started.eq(1), r.cyc.eq(2)]
        with m.Elif(r.started):
            m.d.sync += r.cyc.eq(r.cyc + 1)
        self._take_outputs(m, f, r, lanes)

    def _replay(self, m, r: _Run, rd):
        """The samples out of the ROM into ``o``, ``R`` passes (1-cycle read latency, the read
        held while ``o`` is stalled)."""
        nwords = len(self.words)
        load = ~r.ovalid | self.o.ready
        m.d.comb += [self.o.valid.eq(r.ovalid), self.o.payload.as_value().eq(rd.data),
                     rd.addr.eq(r.addr), rd.en.eq(load), self.ai.ready.eq(1)]
        with m.If(load):
            m.d.sync += r.ovalid.eq(r.feeding)
            with m.If(r.feeding):
                with m.If(r.addr == nwords - 1):
                    m.d.sync += r.addr.eq(0)
                    with m.If(r.in_left == 0):
                        m.d.sync += r.feeding.eq(0)
                    with m.Else():
                        m.d.sync += r.in_left.eq(r.in_left - 1)
                with m.Else():
                    m.d.sync += r.addr.eq(r.addr + 1)

    def _take_outputs(self, m, f: _Flight, r: _Run, lanes):
        """Each output transfer into the CRC's input stage; at each inference's end the count
        and the first latency, at each pass's end the next pass or, after the last, FINISH."""
        n, t_out = self.samples, self.fmt.out_elems // self.fmt.out_lanes
        m.d.sync += r.d_valid.eq(f.took_out)
        with m.If(f.took_out):
            m.d.sync += [r.d_data.eq(Cat(*lanes)), r.d_start.eq(r.pass_start), r.pass_start.eq(0),
                         r.d_end.eq((f.out_pos == t_out - 1) & (r.out_inf == n - 1))]
        with m.If(f.last_out):
            m.d.sync += [r.count.eq(r.count + 1), r.out_inf.eq(Mux(r.out_inf == n - 1, 0, r.out_inf + 1))]
            with m.If(~r.have_latency):
                m.d.sync += [r.latency.eq(r.cyc), r.have_latency.eq(1)]
            with m.If(r.out_inf == n - 1):
                m.d.sync += r.pass_start.eq(1)
                with m.If(r.out_left == 0):
                    m.d.sync += r.cycles.eq(r.cyc)
                    m.next = "FINISH"
                with m.Else():
                    m.d.sync += r.out_left.eq(r.out_left - 1)

    def _finish_state(self, m, r: _Run):
        """FINISH: the last pass's CRC through its two pipeline stages, then the result."""
        m.d.sync += r.d_valid.eq(0)
        with m.If(~r.d_valid & ~r.e_valid):
            m.d.sync += self.res.valid.eq(1)
            m.next = "IDLE"


class _Flight(NamedTuple):
    """The accelerator's transfers and the inferences in flight (:meth:`SelfTest._in_flight`)."""
    in_pos: Signal        # input transfer within an inference
    out_pos: Signal       # output transfer within an inference
    inflight: Signal
    took_in: object       # an input transfer into the accelerator
    took_out: object      # an output transfer out of it
    last_out: object      # the last output transfer of an inference


class _Run:
    """The self-test's registers, shared by its parts: the command (``session``, ``seq``,
    ``expect``), the passes still to issue and to check after the current one (``in_left``,
    ``out_left``), the replay's ROM address and output register (``feeding``, ``ovalid``), the
    cycle counter (``started``, ``cyc``), the counts reported (``cycles``, ``latency``, ``count``,
    ``failed``, ``first_crc``), the inference within a pass (``out_inf``), and the CRC's input
    stage (``d_*``) and check stage (``e_valid``). (Amaranth names a signal after the local
    variable it is assigned to, in a tuple assignment only the last of two or three; an attribute
    gets no name in a tuple assignment: the names given keep the Verilog's.)"""

    def __init__(self, st: SelfTest, crc_width: int):
        self.session, self.seq, self.expect = Signal(16), Signal(8), Signal(32, name="expect")
        self.in_left, self.out_left = Signal(32), Signal(32, name="out_left")
        self.addr = Signal(range(max(2, len(st.words))))
        self.feeding, self.ovalid, self.started = Signal(), Signal(), Signal(name="started")
        self.out_inf = Signal(range(max(2, st.samples)))
        self.cyc = Signal(CYCLE_BITS)
        self.cycles, self.latency, self.count, self.failed, self.first_crc = (
            Signal(CYCLE_BITS), Signal(32), Signal(32), Signal(32), Signal(32))
        self.have_latency, self.have_first = Signal(), Signal(name="have_first")
        self.pass_start = Signal()
        self.d_valid, self.d_start, self.d_end = Signal(), Signal(), Signal(name="d_end")
        self.d_data = Signal(crc_width)
        self.e_valid = Signal()
