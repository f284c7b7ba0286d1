"""rtl.replicate: replica registers survive Yosys, banks cover the width, banked memories read
and write as one memory."""
import numpy as np
import pytest
from amaranth.hdl import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from amaranth.sim import Simulator

from onnx2hw.rtl.replicate import BANK_BITS, banked_memory, banks_of, replicas


@pytest.mark.parametrize("width", [1, 4, 63, 64, 65, 128, 160, 640, 644])
def test_banks_cover_the_width(width):
    b = banks_of(width)
    assert b[0][0] == 0 and b[-1][1] == width
    assert all(hi0 == lo1 for (_, hi0), (lo1, _) in zip(b, b[1:]))
    assert all(0 < hi - lo <= BANK_BITS for lo, hi in b)
    assert len(b) == -(-width // BANK_BITS)
    assert all(lo % 4 == 0 for lo, _ in b)


class _Fan(wiring.Component):
    """A 4-bit counter whose replicas each drive some outputs (every bit of every replica used)."""

    def __init__(self, n):
        self.n = n
        super().__init__({"a": In(1), "y": Out(64)})

    def elaborate(self, platform):
        m = Module()
        cnt = Signal(4)
        nxt = cnt + self.a
        m.d.sync += cnt.eq(nxt)
        reps = replicas(m, nxt, self.n, "cnt")
        for j in range(64):
            m.d.comb += self.y[j].eq(reps[j % self.n][(j // self.n) % 4])
        return m


@pytest.mark.synth
def test_replicas_are_not_merged_by_yosys():
    from onnx2hw.rtl.synth_check import yosys_stat
    assert yosys_stat(_Fan(8))["ff"] == 4 + 8 * 4     # the counter and 8 replicas (merged: 4)


class _Mem(wiring.Component):
    def __init__(self, width, depth, rom):
        self.width, self.depth, self.rom = width, depth, rom
        super().__init__({"addr_next": In(range(depth)), "wdata": In(width), "we": In(1),
                          "q": Out(width)})

    def elaborate(self, platform):
        m = Module()
        addr = Signal(range(self.depth))
        m.d.sync += addr.eq(self.addr_next)
        init = [(k * 0x9E3779B97F4A7C15) % (1 << self.width) for k in range(self.depth)] if self.rom else None
        q = banked_memory(m, self.width, self.depth, addr_next=self.addr_next, init=init,
                          write=None if self.rom else (self.wdata, self.we), name="t")
        m.d.comb += self.q.eq(q)
        return m


@pytest.mark.parametrize("rom", [True, False])
def test_banked_memory_behaves_as_one_memory(rom):
    """Against a Python model: the read data is mem[addr] one cycle after addr (addr being the
    register loaded from addr_next), a write stores wdata at addr (read before write)."""
    width, depth = 150, 12
    dut = _Mem(width, depth, rom)
    rng = np.random.default_rng(5)
    model = [(k * 0x9E3779B97F4A7C15) % (1 << width) for k in range(depth)] if rom else [0] * depth
    seen = []

    async def tb(ctx):
        addr = 0
        expect = None
        for _ in range(300):
            nxt = int(rng.integers(depth))
            wd = int(rng.integers(1 << 62)) | (int(rng.integers(1 << 62)) << 62)
            we = int(rng.integers(2)) and not rom
            ctx.set(dut.addr_next, nxt)
            ctx.set(dut.wdata, wd)
            ctx.set(dut.we, we)
            if expect is not None:
                seen.append((ctx.get(dut.q), expect))
            expect = model[addr]
            if we:
                model[addr] = wd % (1 << width)
            await ctx.tick()
            addr = nxt

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()
    assert len(seen) == 299 and all(got == want for got, want in seen)
    assert len({w for _, w in seen}) > 5
