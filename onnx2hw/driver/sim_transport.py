"""A host link to the board top running in Amaranth's simulator (UART included).

The transport serializes the host's bytes onto ``uart_rx`` bit by bit at the simulated baud
rate and decodes ``uart_tx`` by mid-bit sampling, exactly as a USB-UART bridge would. Time is
simulated time: ``read(..., timeout)`` advances the simulation by at most ``timeout`` seconds.

Fault injection (per byte, independently seeded): ``corrupt`` flips one random bit, ``drop``
loses the byte; ``direction`` selects "to_board", "to_host" or "both". ``inject`` may instead
be a callable ``(direction, data) -> data`` for deterministic faults.
"""
from __future__ import annotations

from collections import deque

import numpy as np
from amaranth.sim import Simulator

from .transport import Transport

__all__ = ["SimTransport"]

_DIRECTIONS = ("to_board", "to_host", "both")


class SimTransport(Transport):
    """Drive a :class:`onnx2hw.rtl.board_top.BoardTop` (``platform=None``) in simulation.

    Parameters
    ----------
    top : BoardTop
    corrupt, drop : float
        Per-byte probabilities of a flipped bit / a lost byte.
    direction : {"to_board", "to_host", "both"}
    seed : int
    inject : callable, optional
        ``inject(direction, data) -> data`` applied to every chunk (instead of the rates).
    vcd : str, optional
        Write a waveform.
    monitors : iterable of ``async def f(ctx)``
        Extra background processes (e.g. to observe internal signals in tests).
    skew : float
        Relative baud rate error of the simulated host bridge (both directions): its bit time is
        ``(1 + skew)`` times the board's.
    """

    def __init__(self, top, *, corrupt=0.0, drop=0.0, direction="both", seed=0, inject=None, vcd=None,
                 monitors=(), skew=0.0):
        if direction not in _DIRECTIONS:
            raise ValueError(f"direction must be one of {_DIRECTIONS!r}, not {direction!r}")
        for name, p in (("corrupt", corrupt), ("drop", drop)):
            if not (isinstance(p, (int, float)) and 0 <= p < 1):
                raise ValueError(f"{name} must be a probability in [0, 1), not {p!r}")
        self.top = top
        self.baud = top.clk_hz / top.divisor
        self.margin_s = 0.0
        self._period = 1.0 / top.clk_hz
        if not (isinstance(skew, (int, float)) and abs(skew) < 0.1):
            raise ValueError(f"skew must be a relative baud error below 0.1, not {skew!r}")
        self._bit = top.divisor * self._period * (1 + skew)
        self._rates = (corrupt, drop)
        self._direction = direction
        self._inject = inject
        self._rng = np.random.default_rng(seed)
        self._to_board: deque[int] = deque()
        self._to_host = bytearray()
        self.bytes_to_board = 0
        self.bytes_to_host = 0
        self.faults = 0
        self._sim = Simulator(top)
        self._sim.add_clock(self._period)
        self._sim.add_testbench(self._drive_rx, background=True)
        self._sim.add_testbench(self._sample_tx, background=True)
        for mon in monitors:
            self._sim.add_process(mon)
        self._vcd = None
        if vcd:
            self._vcd = self._sim.write_vcd(vcd)
            self._vcd.__enter__()
        self._cycles = 0

    # --- fault injection
    def _mangle(self, which: str, data: bytes) -> bytes:
        if self._direction not in (which, "both"):
            return data
        if self._inject is not None:
            out = bytes(self._inject(which, bytes(data)))
            self.faults += out != data
            return out
        corrupt, drop = self._rates
        if not corrupt and not drop:
            return data
        out = bytearray()
        for b in data:
            r = self._rng.random()
            if r < drop:
                self.faults += 1
                continue
            if r < drop + corrupt:
                b ^= 1 << int(self._rng.integers(0, 8))
                self.faults += 1
            out.append(b)
        return bytes(out)

    # --- simulation processes
    async def _drive_rx(self, ctx):
        top, bit = self.top, self._bit
        ctx.set(top.uart_rx, 1)
        await ctx.delay(self._period * 0.5)
        while True:
            if not self._to_board:
                await ctx.delay(bit)
                continue
            byte = self._to_board.popleft()
            for level in [0] + [(byte >> k) & 1 for k in range(8)] + [1]:
                ctx.set(top.uart_rx, level)
                await ctx.delay(bit)

    async def _sample_tx(self, ctx):
        top, bit = self.top, self._bit
        while True:
            await ctx.changed(top.uart_tx)
            if ctx.get(top.uart_tx):
                continue
            await ctx.delay(bit * 1.5)
            byte = 0
            for k in range(8):
                byte |= ctx.get(top.uart_tx) << k
                await ctx.delay(bit)
            if ctx.get(top.uart_tx):                 # stop bit
                self._to_host += self._mangle("to_host", bytes((byte,)))
                self.bytes_to_host += 1
            # else: framing error, byte lost (as a UART bridge would)
            if not ctx.get(top.uart_tx):
                await ctx.changed(top.uart_tx)

    # --- Transport
    def write(self, data: bytes) -> None:
        self.bytes_to_board += len(data)
        self._to_board.extend(self._mangle("to_board", bytes(data)))

    def read(self, max_bytes: int, timeout: float) -> bytes:
        deadline = self._cycles + max(1, int(timeout / self._period))
        step = 10 * self.top.divisor
        while not self._to_host and self._cycles < deadline:
            self._cycles = min(self._cycles + step, deadline)
            try:
                self._sim.run_until(self._cycles * self._period)
            except AssertionError:
                pass    # the simulator already stepped past this time (it stops on event times)
        out = bytes(self._to_host[:max_bytes])
        del self._to_host[:max_bytes]
        return out

    def flush_input(self) -> None:
        self._to_host.clear()

    def now(self) -> float:
        return self._cycles * self._period

    def close(self) -> None:
        if self._vcd is not None:
            self._vcd.__exit__(None, None, None)
            self._vcd = None
