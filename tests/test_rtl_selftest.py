"""The self-test in the board top (onnx2hw.rtl.selftest), driven over the UART pins of a
simulated board with stand-in accelerators: replay counts, cycle counts, the per-pass CRC check
against expectations computed here from the stand-in's definition (int64 NumPy), data frames
around a self-test, stalls, frame checks, and the cost estimate against Yosys."""
from __future__ import annotations

import zlib

import numpy as np
import pytest
from amaranth.hdl import Module, Signal, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from onnx2hw import protocol as P
from onnx2hw.driver.sim_transport import SimTransport
from onnx2hw.rtl.board_top import BoardTop
from onnx2hw.rtl.selftest import SelfTest, sample_words, selftest_cost
from onnx2hw.rtl.synth_check import yosys_stat

pytestmark = pytest.mark.filterwarnings("ignore::amaranth.hdl._ir.UnusedElaboratable")

DESC = {"input": {"shape": [6], "bits": 8, "signed": True, "lanes": 3},
        "output": {"shape": [2], "bits": 10, "signed": True, "lanes": 1}}
LINK = P.link_format(DESC)


class StallSum(wiring.Component):
    """Stand-in accelerator: 6 int8 inputs (3 per transfer) -> 2 int10 outputs, y[k] = sum of
    transfer k, one output per input transfer. With ``stall``, its input is ready only on the
    cycles a free-running 5-bit LFSR says (about 1 in 2) and each output waits ``delay`` cycles:
    the replay must hold its transfers through the stalls."""

    def __init__(self, stall=False, delay=0):
        self.stall, self.delay = stall, delay
        super().__init__({"i": In(stream.Signature(data.ArrayLayout(signed(8), 3))),
                          "o": Out(stream.Signature(data.ArrayLayout(signed(10), 1)))})

    def elaborate(self, platform):
        m = Module()
        lfsr = Signal(5, init=0b10101)
        m.d.sync += lfsr.eq((lfsr >> 1) | ((lfsr[0] ^ lfsr[2]) << 4))
        wait = Signal(range(self.delay + 2))
        gate = lfsr[0] if self.stall else 1
        m.d.comb += self.i.ready.eq((~self.o.valid | self.o.ready) & (wait == 0) & gate)
        with m.If(wait != 0):
            m.d.sync += wait.eq(wait - 1)
        with m.If(self.o.valid & self.o.ready):
            m.d.sync += self.o.valid.eq(0)
        with m.If(self.i.valid & self.i.ready):
            m.d.sync += [self.o.valid.eq(1), wait.eq(self.delay),
                         self.o.payload[0].eq(self.i.payload[0] + self.i.payload[1] + self.i.payload[2])]
        return m


def _want(x):
    """The stand-in's outputs, from its definition (int64)."""
    return np.asarray(x, np.int64).reshape(len(x), 2, 3).sum(axis=2)


def _crc(y):
    """CRC-32 of one pass of outputs as the link codes them: int10 in two little-endian bytes."""
    b = b"".join(int(v).to_bytes(2, "little", signed=True) for v in np.asarray(y).ravel())
    return zlib.crc32(b)


def _plen(ft, c):
    return {P.T_RESULT: c * LINK.out_bytes, P.T_ERROR: 0,
            P.T_SELFTEST_RESULT: P.SELFTEST_RESULT_BYTES}.get(ft)


def _exchange(t, frames, wait=4e-3):
    for f in frames:
        t.write(f)
    parser, got = P.FrameParser(_plen), []
    while True:
        chunk = t.read(4096, wait)
        if not chunk:
            return got
        got += parser.feed(chunk)


def _cmd(seq, passes, crc, session=0x1234):
    return P.encode_frame(P.T_SELFTEST, session, seq, 1, P.encode_selftest_command(passes, crc))


SAMPLES = np.random.default_rng(0).integers(-128, 128, (3, 6))


@pytest.mark.parametrize("stall, delay", [(False, 0), (True, 0), (True, 3)], ids=["full-speed", "stalls", "slow"])
def test_selftest_counts_and_checks(stall, delay):
    top = BoardTop(StallSum(stall, delay), LINK, 1e6, 250e3, selftest=LINK.encode_inputs(SAMPLES))
    t = SimTransport(top)
    good = _crc(_want(SAMPLES))
    x1 = np.random.default_rng(1).integers(-128, 128, (2, 6))
    frames = _exchange(t, [_cmd(3, 5, good),
                           P.encode_frame(P.T_DATA, 0x1234, 4, 2, LINK.encode_inputs(x1)),
                           _cmd(5, 2, good ^ 1)])
    assert [(f.type, f.seq, f.count, f.ok) for f in frames] == [
        (P.T_SELFTEST_RESULT, 3, 1, True), (P.T_RESULT, 4, 2, True), (P.T_SELFTEST_RESULT, 5, 1, True)]
    r0, r1 = (P.SelfTestCounts.decode(frames[k].payload) for k in (0, 2))
    # 5 passes of 3 inferences, every pass's outputs as the definition gives them
    assert (r0.inferences, r0.failed_passes, r0.first_crc) == (15, 0, good)
    # the data frame after the self-test is answered from the accelerator as usual
    np.testing.assert_array_equal(LINK.decode_outputs(frames[1].payload, 2), _want(x1))
    # a wrong expectation: every pass counted as failed, the real CRC reported
    assert (r1.inferences, r1.failed_passes, r1.first_crc) == (6, 2, good)
    # cycles: 2 transfers per inference, at most one per cycle (and fewer under stalls)
    for r, n in ((r0, 15), (r1, 6)):
        if not stall:
            assert r.cycles == 2 * n + 1 and r.latency_cycles == 3      # one cycle per transfer, +1 to leave
        else:
            # every transfer waits `delay` cycles after the one before, and the LFSR stalls more
            assert r.cycles > 2 * n + 1 + delay * (2 * n - 1) and r.latency_cycles >= 3 + delay
        assert r.cycles < 40 * n


def test_selftest_frame_checks():
    top = BoardTop(StallSum(), LINK, 1e6, 250e3, selftest=LINK.encode_inputs(SAMPLES))
    t = SimTransport(top)
    good = _crc(_want(SAMPLES))
    bad_count = P.encode_frame(P.T_SELFTEST, 0x1234, 1, 2, P.encode_selftest_command(1, good))
    bad_crc = bytearray(_cmd(2, 1, good))
    bad_crc[8] ^= 0x01
    frames = _exchange(t, [bad_count, bytes(bad_crc), _cmd(3, 1, good)])
    assert [(f.type, f.seq, f.count) for f in frames] == [
        (P.T_ERROR, 1, P.E_COUNT), (P.T_ERROR, 2, P.E_CRC), (P.T_SELFTEST_RESULT, 3, 1)]
    assert P.SelfTestCounts.decode(frames[2].payload).failed_passes == 0


def test_plain_board_refuses_selftest_frames():
    t = SimTransport(BoardTop(StallSum(), LINK, 1e6, 250e3))
    frames = _exchange(t, [_cmd(7, 1, 0)])
    assert [(f.type, f.count) for f in frames] == [(P.T_ERROR, P.E_TYPE)]


def test_sample_words_pack_lanes_in_stream_order():
    fmt = P.link_format({"input": {"shape": [4], "bits": 4, "signed": True, "lanes": 2},
                         "output": {"shape": [1], "bits": 8, "signed": False, "lanes": 1}})
    words = sample_words(fmt, fmt.encode_inputs(np.array([[1, -1, -8, 7]])))
    assert words == [0x1 | 0xF << 4, 0x8 | 0x7 << 4]
    with pytest.raises(ValueError, match="whole number of inputs"):
        sample_words(fmt, b"\x01")
    with pytest.raises(TypeError, match="LinkFormat"):
        SelfTest(DESC, b"")


def test_output_coding_round_trip():
    y = np.array([[-512, 511], [0, -1]])
    b = LINK.encode_outputs(y)
    assert len(b) == 2 * LINK.out_bytes
    np.testing.assert_array_equal(LINK.decode_outputs(b, 2), y)
    assert P.SelfTestCounts.decode(P.SelfTestCounts(1 << 39, 5, 6, 7, 0xDEADBEEF).encode()).cycles == 1 << 39
    with pytest.raises(ValueError, match="at least 1"):
        P.encode_selftest_command(0, 0)


@pytest.mark.synth
def test_selftest_cost_is_what_yosys_measures():
    """The estimate (reserved in the resource check of a self-test build) against Yosys: block
    RAM exact or over, logic within a third."""
    fmt = P.link_format({"input": {"shape": [8, 8, 3], "bits": 8, "signed": True, "lanes": 3},
                         "output": {"shape": [10], "bits": 16, "signed": True, "lanes": 2}})
    x = np.random.default_rng(2).integers(-128, 128, (16,) + fmt.in_shape)
    got = yosys_stat(SelfTest(fmt, fmt.encode_inputs(x)), "ecp5")
    est = selftest_cost(fmt, 16)
    assert got["ebr"] >= 1 and got["ebr"] <= est.ebr <= got["ebr"] + 1, (est, got)
    assert abs(est.lut - got["lut"]) <= got["lut"] / 3, (est, got)
    assert est.ff >= 0.8 * got["ff"], (est, got)
