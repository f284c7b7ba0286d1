"""BoardTop with a small stand-in accelerator (same port convention) driven over its UART pins:
what reaches the accelerator, status LEDs, parameter checks."""
from __future__ import annotations

import numpy as np
import pytest
from amaranth.hdl import Module, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from onnx2hw import protocol as P
from onnx2hw.driver.sim_transport import SimTransport
from onnx2hw.rtl.board_top import LINK_COST, BoardTop
from onnx2hw.rtl.synth_check import yosys_stat

pytestmark = pytest.mark.filterwarnings("ignore::amaranth.hdl._ir.UnusedElaboratable")

DESC = {"input": {"shape": [6], "bits": 8, "signed": True, "lanes": 3},
        "output": {"shape": [2], "bits": 10, "signed": True, "lanes": 1}}
LINK = P.link_format(DESC)


class PairSum(wiring.Component):
    """Stand-in accelerator: 6 int8 inputs (3 per transfer) -> 2 outputs, y[k] = sum of transfer k.

    Counts the transfers it accepts (``taken``) so a test can check what reached it."""

    def __init__(self):
        super().__init__({"i": In(stream.Signature(data.ArrayLayout(signed(8), 3))),
                          "o": Out(stream.Signature(data.ArrayLayout(signed(10), 1))),
                          "taken": Out(16)})

    def elaborate(self, platform):
        m = Module()
        m.d.comb += self.i.ready.eq(~self.o.valid | self.o.ready)
        with m.If(self.o.valid & self.o.ready):
            m.d.sync += self.o.valid.eq(0)
        with m.If(self.i.valid & self.i.ready):
            m.d.sync += [self.o.valid.eq(1), self.taken.eq(self.taken + 1),
                         self.o.payload[0].eq(self.i.payload[0] + self.i.payload[1] + self.i.payload[2])]
        return m


def _exchange(t: SimTransport, frames, fmt, wait=4e-3):
    for f in frames:
        t.write(f)
    parser = P.FrameParser(lambda ft, c: c * fmt.out_bytes if ft == P.T_RESULT else 0 if ft == P.T_ERROR else None)
    got = []
    while True:
        chunk = t.read(4096, wait)
        if not chunk:
            return got
        got += parser.feed(chunk)


def test_only_good_frames_reach_the_accelerator():
    acc = PairSum()
    top = BoardTop(acc, LINK, 1e6, 250e3)
    last = {}

    async def peek(ctx):
        async for _clk, _rst, taken, idle, busy, err in ctx.tick().sample(
                acc.taken, top.led_idle, top.led_busy, top.led_error):
            last.update(taken=taken, leds=(idle, busy, err))

    t = SimTransport(top, monitors=[peek])
    fmt = top.fmt
    rng = np.random.default_rng(0)
    x = rng.integers(-128, 128, (3, 6))
    good0 = P.encode_frame(P.T_DATA, 0x4321, 1, 2, fmt.encode_inputs(x[:2]))
    bad = bytearray(P.encode_frame(P.T_DATA, 0x4321, 2, 1, fmt.encode_inputs(x[2:])))
    bad[9] ^= 0x40
    good1 = P.encode_frame(P.T_DATA, 0x4321, 3, 1, fmt.encode_inputs(x[2:]))
    frames = _exchange(t, [good0, bytes(bad), good1], fmt)
    assert [(f.type, f.session, f.seq, f.count, f.ok) for f in frames] == [
        (P.T_RESULT, 0x4321, 1, 2, True), (P.T_ERROR, 0x4321, 2, P.E_CRC, True),
        (P.T_RESULT, 0x4321, 3, 1, True)]
    want = x.reshape(3, 2, 3).sum(axis=2)
    got = np.concatenate([fmt.decode_outputs(f.payload, f.count) for f in frames if f.type == P.T_RESULT])
    np.testing.assert_array_equal(got, want)

    # the accelerator took exactly the transfers of the two good frames (3 inferences x 2)
    assert last["taken"] == 6
    # idle again, and the error LED still lit (1/4 s stretch) after the bad frame
    assert last["leds"] == (1, 0, 1)


def test_busy_led_while_receiving():
    top = BoardTop(PairSum(), LINK, 1e6, 250e3)
    seen = []

    async def watch(ctx):
        async for _clk, _rst, busy, idle in ctx.tick().sample(top.led_busy, top.led_idle):
            seen.append((busy, idle))
    t = SimTransport(top, monitors=[watch])
    t.write(P.encode_frame(P.T_DATA, 1, 0, 1, bytes(6))[:10])   # a frame that stops half-way
    t.read(1, 1e-3)
    assert (1, 0) in seen and all(b != i for b, i in seen)
    assert seen[0] == (0, 1)


def test_rejects_mismatched_description():
    bad = dict(DESC, input=dict(DESC["input"], lanes=2))
    with pytest.raises(ValueError, match=r"input port carries \(bits, lanes\) = \(8, 3\)"):
        BoardTop(PairSum(), P.link_format(bad), 1e6, 250e3)
    with pytest.raises(TypeError, match="LinkFormat"):
        BoardTop(PairSum(), DESC, 1e6, 250e3)
    with pytest.raises(TypeError, match="wiring.Component"):
        BoardTop(object(), LINK, 1e6, 250e3)
    with pytest.raises(ValueError, match="baud rate"):
        BoardTop(PairSum(), LINK, 1e6, 400e3)


@pytest.mark.synth
@pytest.mark.parametrize("family, clk, baud", [("ecp5", 75e6, 3e6), ("ice40", 12e6, 1e6)])
def test_link_cost_is_what_yosys_measures(family, clk, baud):
    """LINK_COST (reserved from the board's budget before folding) against Yosys: the board top
    minus the accelerator inside it."""
    # platform=None: BoardTop takes pins and clocks from a real platform; here it is measured
    # out of board (its accelerator wires stay ports), as the stand-in platform has no pins
    top = yosys_stat(BoardTop(PairSum(), LINK, clk, baud), family, platform=None)
    acc = yosys_stat(PairSum(), family)
    est = LINK_COST[family]
    lut = top["lut"] - acc["lut"]
    assert abs(est.lut - lut) <= 0.1 * lut, (est, lut)
    assert est.ff >= top["ff"] - acc["ff"] and est.ebr >= top["ebr"] - acc["ebr"], (est, top, acc)
