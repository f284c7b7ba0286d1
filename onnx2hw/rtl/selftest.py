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
        m = Module()
        fmt = self.fmt
        t_in, t_out = fmt.in_elems // fmt.in_lanes, fmt.out_elems // fmt.out_lanes
        n, nwords = self.samples, len(self.words)
        width = fmt.in_bits * fmt.in_lanes
        m.submodules.rom = rom = memory.Memory(shape=unsigned(width), depth=nwords, init=self.words)
        rd = rom.read_port()
        crc_width = 8 * fmt.out_elem_bytes * fmt.out_lanes
        m.submodules.crc = gen = crc.catalog.CRC32_ETHERNET(crc_width).create()

        # --- inferences in flight (both modes): first input transfer in, last output transfer out
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

        # --- run state
        session, seq, expect = Signal(16), Signal(8), Signal(32)
        in_left, out_left = Signal(32), Signal(32)       # passes still to issue / to check, after this one
        addr = Signal(range(max(2, nwords)))
        feeding, ovalid, started = Signal(), Signal(), Signal()
        out_inf = Signal(range(max(2, n)))
        cyc = Signal(CYCLE_BITS)
        cycles, latency, count, failed, first_crc = Signal(CYCLE_BITS), Signal(32), Signal(32), Signal(32), Signal(32)
        have_latency, have_first = Signal(), Signal()
        pass_start = Signal()
        # CRC input stage (registered) and check stage
        d_valid, d_start, d_end = Signal(), Signal(), Signal()
        d_data = Signal(crc_width)
        e_valid = Signal()

        lanes = []
        for j in range(fmt.out_lanes):
            s = Signal(unsigned(8 * fmt.out_elem_bytes), name=f"out_lane{j}")
            m.d.comb += s.eq(self.ai.payload[j])          # sign-extends a signed element
            lanes.append(s)

        m.d.comb += [gen.data.eq(d_data), gen.valid.eq(d_valid), gen.start.eq(d_start & d_valid)]
        m.d.sync += e_valid.eq(d_valid & d_end)
        with m.If(e_valid):
            with m.If(gen.crc != expect):
                m.d.sync += failed.eq(failed + 1)
            with m.If(~have_first):
                m.d.sync += [first_crc.eq(gen.crc), have_first.eq(1)]

        with m.If(self.res.valid & self.res.ready):
            m.d.sync += self.res.valid.eq(0)
        m.d.comb += [self.res.payload.session.eq(session), self.res.payload.seq.eq(seq),
                     self.res.payload.data.eq(Cat(cycles, Const(0, 64 - CYCLE_BITS), latency, count, failed,
                                                  first_crc))]

        with m.FSM() as fsm:
            with m.State("IDLE"):
                m.d.comb += [self.o.valid.eq(self.i.valid), self.o.payload.eq(self.i.payload),
                             self.i.ready.eq(self.o.ready),
                             self.ao.valid.eq(self.ai.valid), self.ao.payload.eq(self.ai.payload),
                             self.ai.ready.eq(self.ao.ready)]
                with m.If(self.cmd.valid & self.link_idle & ~self.i.valid & (inflight == 0) & (in_pos == 0)
                          & ~self.res.valid):
                    c = self.cmd.payload
                    first = Mux(c.passes == 0, 0, c.passes - 1)
                    m.d.comb += self.cmd.ready.eq(1)
                    m.d.sync += [session.eq(c.session), seq.eq(c.seq), expect.eq(c.crc),
                                 in_left.eq(first), out_left.eq(first), addr.eq(0), feeding.eq(1),
                                 started.eq(0), out_inf.eq(0), count.eq(0), failed.eq(0),
                                 have_latency.eq(0), have_first.eq(0), pass_start.eq(1)]
                    m.next = "RUN"
            with m.State("RUN"):
                load = ~ovalid | self.o.ready
                m.d.comb += [self.o.valid.eq(ovalid), self.o.payload.as_value().eq(rd.data),
                             rd.addr.eq(addr), rd.en.eq(load), self.ai.ready.eq(1)]
                with m.If(load):
                    m.d.sync += ovalid.eq(feeding)
                    with m.If(feeding):
                        with m.If(addr == nwords - 1):
                            m.d.sync += addr.eq(0)
                            with m.If(in_left == 0):
                                m.d.sync += feeding.eq(0)
                            with m.Else():
                                m.d.sync += in_left.eq(in_left - 1)
                        with m.Else():
                            m.d.sync += addr.eq(addr + 1)
                with m.If(took_in & ~started):
                    m.d.sync += [started.eq(1), cyc.eq(2)]
                with m.Elif(started):
                    m.d.sync += cyc.eq(cyc + 1)
                m.d.sync += d_valid.eq(took_out)
                with m.If(took_out):
                    m.d.sync += [d_data.eq(Cat(*lanes)), d_start.eq(pass_start), pass_start.eq(0),
                                 d_end.eq((out_pos == t_out - 1) & (out_inf == n - 1))]
                with m.If(last_out):
                    m.d.sync += [count.eq(count + 1), out_inf.eq(Mux(out_inf == n - 1, 0, out_inf + 1))]
                    with m.If(~have_latency):
                        m.d.sync += [latency.eq(cyc), have_latency.eq(1)]
                    with m.If(out_inf == n - 1):
                        m.d.sync += pass_start.eq(1)
                        with m.If(out_left == 0):
                            m.d.sync += cycles.eq(cyc)
                            m.next = "FINISH"
                        with m.Else():
                            m.d.sync += out_left.eq(out_left - 1)
            with m.State("FINISH"):           # the last pass's CRC through its two pipeline stages
                m.d.sync += d_valid.eq(0)
                with m.If(~d_valid & ~e_valid):
                    m.d.sync += self.res.valid.eq(1)
                    m.next = "IDLE"
        m.d.comb += self.running.eq(~fsm.ongoing("IDLE"))
        return m
