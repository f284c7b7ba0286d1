"""UART receiver/transmitter vs a bit-banged 8N1 line model in the Amaranth simulator."""
from __future__ import annotations

import numpy as np
import pytest
from amaranth.hdl import Module
from amaranth.sim import Simulator

from onnx2hw.rtl.uart import UARTRx, UARTTx, uart_divisor


def _line_bits(byte: int) -> list[int]:
    return [0] + [(byte >> k) & 1 for k in range(8)] + [1]


@pytest.mark.parametrize("divisor", [4, 5, 16, 33])
def test_rx_decodes_bitbanged_bytes_with_stalls(divisor):
    rng = np.random.default_rng(divisor)
    data = [int(b) for b in rng.integers(0, 256, 24)] + [0x00, 0xFF, 0x55, 0xAA]
    dut = UARTRx(divisor)
    got, errors = [], []

    async def drive(ctx):
        ctx.set(dut.rx, 1)
        await ctx.tick().repeat(5)
        for k, byte in enumerate(data):
            # a 3 % slower sender for some bytes; random idle gaps
            bit_cycles = divisor + (1 if k % 3 == 1 and divisor >= 33 else 0)
            for bit in _line_bits(byte):
                ctx.set(dut.rx, bit)
                await ctx.tick().repeat(bit_cycles)
            await ctx.tick().repeat(int(rng.integers(1, 4)))
        await ctx.tick().repeat(4 * divisor)

    async def sink(ctx):
        k = 0
        while True:
            # take within a byte time, but not always at once (ready stalls)
            ctx.set(dut.o.ready, int(k % 3 != 0))
            await ctx.tick()
            k += 1

    sim = Simulator(dut)
    sim.add_clock(1e-8)

    async def monitor(ctx):
        async for clk_edge, rst, valid, ready, payload, err in ctx.tick().sample(
                dut.o.valid, dut.o.ready, dut.o.payload, dut.error):
            if valid and ready:
                got.append(payload)
            if err:
                errors.append(1)

    sim.add_testbench(drive)
    sim.add_process(sink)
    sim.add_process(monitor)
    sim.run_until(1e-8 * (len(data) * 12 * (divisor + 1) + 200))
    assert got == data
    assert errors == []


def test_rx_framing_error_drops_byte_and_recovers():
    divisor = 8
    dut = UARTRx(divisor)
    got, errors = [], []

    async def drive(ctx):
        ctx.set(dut.o.ready, 1)
        ctx.set(dut.rx, 1)
        await ctx.tick().repeat(4)
        bad = _line_bits(0x3C)
        bad[-1] = 0                                 # stop bit low
        for bits in (_line_bits(0x11), bad, [0] * 4 + [1] * 2, _line_bits(0x22)):
            for bit in bits:
                ctx.set(dut.rx, bit)
                await ctx.tick().repeat(divisor)
        await ctx.tick().repeat(4 * divisor)

    async def monitor(ctx):
        async for _clk, _rst, valid, ready, payload, err in ctx.tick().sample(
                dut.o.valid, dut.o.ready, dut.o.payload, dut.error):
            if valid and ready:
                got.append(payload)
            errors.extend([1] if err else [])

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(drive)
    sim.add_process(monitor)
    sim.run()
    assert got == [0x11, 0x22]
    assert len(errors) == 1


def test_rx_overrun_reports_error_and_keeps_first_byte():
    divisor = 6
    dut = UARTRx(divisor)
    errors = []

    async def drive(ctx):
        ctx.set(dut.rx, 1)
        await ctx.tick().repeat(3)
        for byte in (0x81, 0x42):                   # nobody takes the first byte
            for bit in _line_bits(byte):
                ctx.set(dut.rx, bit)
                await ctx.tick().repeat(divisor)
        await ctx.tick().repeat(2 * divisor)
        assert ctx.get(dut.o.valid) and ctx.get(dut.o.payload) == 0x81

    async def monitor(ctx):
        async for _clk, _rst, err in ctx.tick().sample(dut.error):
            errors.extend([1] if err else [])

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(drive)
    sim.add_process(monitor)
    sim.run()
    assert len(errors) == 1


@pytest.mark.parametrize("divisor", [4, 7, 16])
def test_tx_waveform_matches_8n1(divisor):
    rng = np.random.default_rng(divisor)
    data = [int(b) for b in rng.integers(0, 256, 12)]
    dut = UARTTx(divisor)
    line = []

    async def feed(ctx):
        for k, byte in enumerate(data):
            ctx.set(dut.i.payload, byte)
            ctx.set(dut.i.valid, 1)
            await ctx.tick().until(dut.i.ready)
            ctx.set(dut.i.valid, 0)
            if k % 4 == 3:                               # source stalls now and then
                await ctx.tick().repeat(int(rng.integers(1, 3 * divisor)))
        await ctx.tick().until(~dut.busy)
        await ctx.tick().repeat(2 * divisor)

    async def monitor(ctx):
        async for _clk, _rst, tx in ctx.tick().sample(dut.tx):
            line.append(tx)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(feed)
    sim.add_process(monitor)
    sim.run()
    # decode the recorded line independently: find start edges, sample mid-bit
    line = np.array(line)
    decoded, t = [], 0
    while t < len(line):
        if line[t] == 0:
            bits = [line[t + divisor // 2 + divisor * k] for k in range(10)]
            assert bits[0] == 0 and bits[9] == 1, f"bad frame at {t}"
            decoded.append(sum(b << k for k, b in enumerate(bits[1:9])))
            # every bit lasts exactly `divisor` cycles
            for k in range(9):
                seg = line[t + k * divisor:t + (k + 1) * divisor]
                assert len(set(seg.tolist())) == 1, f"bit {k} of frame at {t} not stable"
            t += 9 * divisor + divisor // 2
        else:
            t += 1
    assert decoded == data


def test_tx_to_rx_loopback():
    divisor = 5
    m = Module()
    m.submodules.tx = tx = UARTTx(divisor)
    m.submodules.rx = rx = UARTRx(divisor)
    m.d.comb += rx.rx.eq(tx.tx)
    data = list(range(0, 256, 7))
    got = []

    async def feed(ctx):
        ctx.set(rx.o.ready, 1)
        for byte in data:
            ctx.set(tx.i.payload, byte)
            ctx.set(tx.i.valid, 1)
            await ctx.tick().until(tx.i.ready)
        ctx.set(tx.i.valid, 0)
        await ctx.tick().repeat(30 * divisor)

    async def monitor(ctx):
        async for _clk, _rst, valid, payload in ctx.tick().sample(rx.o.valid, rx.o.payload):
            if valid:
                got.append(payload)

    sim = Simulator(m)
    sim.add_clock(1e-8)
    sim.add_testbench(feed)
    sim.add_process(monitor)
    sim.run()
    assert got == data


@pytest.mark.parametrize("clk,baud,div", [(25e6, 115200, 217), (100e6, 3e6, 33), (48e6, 3e6, 16),
                                          (12e6, 3e6, 4)])
def test_uart_divisor(clk, baud, div):
    assert uart_divisor(clk, baud) == div


@pytest.mark.parametrize("clk,baud,match", [(25e6, 3e6, "off"), (10e6, 3e6, "at least 4"),
                                            (0, 9600, "positive"), (1e6, -1, "positive")])
def test_uart_divisor_rejects(clk, baud, match):
    with pytest.raises(ValueError, match=match):
        uart_divisor(clk, baud)


@pytest.mark.filterwarnings("ignore::amaranth.hdl._ir.UnusedElaboratable")
def test_bad_divisor():
    with pytest.raises(ValueError, match="divisor"):
        UARTRx(3)
    with pytest.raises(ValueError, match="divisor"):
        UARTTx(2.5)
