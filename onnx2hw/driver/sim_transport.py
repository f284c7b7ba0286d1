"""A host link to the board top running in a simulator (UART included).

:class:`SimulatedLink` holds what every simulated link shares (fault injection, the host's byte
queue, simulated time); :class:`SimTransport` runs the board top in Amaranth's simulator (the
fallback where the native simulator, :mod:`onnx2hw.driver.native_transport`, cannot be built,
and the transport for tests that watch internal signals). The transport serializes the host's bytes onto ``uart_rx`` bit by bit at the simulated baud
rate and decodes ``uart_tx`` by mid-bit sampling, exactly as a USB-UART bridge would. Time is
simulated time: ``read(..., timeout)`` advances the simulation by at most ``timeout`` seconds.

Fault injection (per byte, independently seeded; ``direction`` selects "to_board", "to_host" or
"both"): ``corrupt`` flips one random bit, ``drop`` loses the byte, ``duplicate`` sends it twice,
``delay`` holds the line for ``delay_s`` seconds before it (the bytes behind it wait too, as in
a USB-serial bridge that stalls). ``babble`` makes the host side receive noise: on each byte
time a random byte arrives with that probability, mixed into the board's bytes. ``inject`` may
instead be a callable ``(direction, data) -> data`` for deterministic faults; it may return
``bytes`` or a list of ``bytes`` and ``float`` items, a float being a pause of that many
seconds at that point of the stream.
"""
from __future__ import annotations

from collections import deque

import numpy as np
from amaranth.sim import Simulator

from .transport import Transport

__all__ = ["SimulatedLink", "SimTransport"]

_DIRECTIONS = ("to_board", "to_host", "both")


class SimulatedLink(Transport):
    """The host side of a simulated :class:`onnx2hw.rtl.board_top.BoardTop` (``platform=None``):
    fault injection, bytes on their way to the host, simulated time (in clock cycles).
    A simulator subclass implements :meth:`_send` and :meth:`read`.

    Parameters
    ----------
    top : BoardTop
    corrupt, drop, duplicate, delay : float
        Per-byte probabilities of a flipped bit / a lost byte / a byte sent twice / a pause
        of ``delay_s`` seconds before the byte.
    delay_s : float
        Length of an injected pause (default: 100 byte times).
    babble : float
        Probability per byte time that a random byte reaches the host (noise on the line).
    direction : {"to_board", "to_host", "both"}
    seed : int
    inject : callable, optional
        ``inject(direction, data) -> data`` applied to every chunk (instead of the rates); the
        result is ``bytes`` or a list of ``bytes`` and ``float`` (pause in seconds).
    skew : float
        Relative baud rate error of the simulated host bridge (both directions): its bit time is
        ``(1 + skew)`` times the board's.
    """

    name = "sim"

    def __init__(self, top, *, corrupt=0.0, drop=0.0, duplicate=0.0, delay=0.0, delay_s=None, babble=0.0,
                 direction="both", seed=0, inject=None, skew=0.0):
        if direction not in _DIRECTIONS:
            raise ValueError(f"direction must be one of {_DIRECTIONS!r}, not {direction!r}")
        for name, p in (("corrupt", corrupt), ("drop", drop), ("duplicate", duplicate), ("delay", delay)):
            if not (isinstance(p, (int, float)) and 0 <= p < 1):
                raise ValueError(f"{name} must be a probability in [0, 1), not {p!r}")
        if not (isinstance(babble, (int, float)) and 0 <= babble <= 1):
            raise ValueError(f"babble must be a probability in [0, 1], not {babble!r}")
        if not (isinstance(skew, (int, float)) and abs(skew) < 0.1):
            raise ValueError(f"skew must be a relative baud error below 0.1, not {skew!r}")
        self.top = top
        self.baud = top.clk_hz / top.divisor
        self.margin_s = 0.0
        self._period = 1.0 / top.clk_hz
        self._bit = top.divisor * self._period * (1 + skew)
        if delay_s is None:
            delay_s = 100 * 10 * self._bit
        if not (isinstance(delay_s, (int, float)) and delay_s >= 0):
            raise ValueError(f"delay_s must be a non-negative number of seconds, not {delay_s!r}")
        self._rates = (corrupt, drop, duplicate, delay)
        self._delay_s = float(delay_s)
        self._babble = float(babble)
        self._direction = direction
        self._inject = inject
        self._rng = np.random.default_rng(seed)
        self._noise = np.random.default_rng([seed, 1])
        self._to_host: deque = deque()           # byte values and pauses (float seconds)
        self._hold_until = None                  # end of the to-host pause in progress (cycles)
        self.bytes_to_board = 0
        self.bytes_to_host = 0
        self.faults = 0
        self._cycles = 0

    # --- fault injection
    def _mangle(self, which: str, data: bytes) -> list:
        """The bytes (ints) and pauses (floats) that ``data`` becomes on its way."""
        if self._direction not in (which, "both"):
            return list(data)
        if self._inject is not None:
            out = self._inject(which, bytes(data))
            items = list(out) if isinstance(out, (bytes, bytearray)) else \
                [x for seg in out for x in ((seg,) if isinstance(seg, float) else bytes(seg))]
            self.faults += items != list(data)
            return items
        corrupt, drop, duplicate, delay = self._rates
        if not any(self._rates):
            return list(data)
        out = []
        for b in data:
            r = self._rng.random()
            if r < drop:
                self.faults += 1
                continue
            r -= drop
            if r < corrupt:
                b ^= 1 << int(self._rng.integers(0, 8))
                self.faults += 1
            elif r - corrupt < duplicate:
                out.append(b)
                self.faults += 1
            elif r - corrupt - duplicate < delay:
                out.append(self._delay_s)
                self.faults += 1
            out.append(b)
        return out

    # --- Transport
    def write(self, data: bytes) -> None:
        self.bytes_to_board += len(data)
        self._send(self._mangle("to_board", bytes(data)))

    def _send(self, items: list) -> None:
        """Put bytes (ints) and pauses (float seconds) on the line to the board, in order."""
        raise NotImplementedError

    def _arrived(self, byte: int) -> None:
        """A byte the host bridge decoded from ``uart_tx``, on its way to the host."""
        self._to_host.extend(self._mangle("to_host", bytes((byte,))))
        self.bytes_to_host += 1

    def _babble_slot(self) -> None:
        """One byte time of the noisy line: a random byte reaches the host with the babble probability."""
        if self._noise.random() < self._babble:
            self._to_host.append(int(self._noise.integers(0, 256)))
            self.faults += 1

    def _take(self, max_bytes: int) -> bytes:
        """The bytes that have reached the host by now, up to a pause still running."""
        out = bytearray()
        q = self._to_host
        while q and len(out) < max_bytes:
            item = q[0]
            if isinstance(item, float):
                if self._hold_until is None:
                    self._hold_until = self._cycles + int(item / self._period)
                if self._cycles < self._hold_until:
                    break
                self._hold_until = None
                q.popleft()
                continue
            out.append(q.popleft())
        return bytes(out)

    def flush_input(self) -> None:
        self._to_host.clear()
        self._hold_until = None

    def now(self) -> float:
        return self._cycles * self._period

    @property
    def cycles(self) -> int:
        """Clock cycles simulated so far."""
        return self._cycles


class SimTransport(SimulatedLink):
    """Drive a :class:`onnx2hw.rtl.board_top.BoardTop` (``platform=None``) in Amaranth's simulator.

    Parameters: those of :class:`SimulatedLink`, and

    vcd : str, optional
        Write a waveform.
    monitors : iterable of ``async def f(ctx)``
        Extra background processes (e.g. to observe internal signals in tests).
    """

    def __init__(self, top, *, vcd=None, monitors=(), **options):
        super().__init__(top, **options)
        self._to_board: deque = deque()          # byte values and pauses (float seconds)
        self._sim = Simulator(top)
        self._sim.add_clock(self._period)
        self._sim.add_testbench(self._drive_rx, background=True)
        self._sim.add_testbench(self._sample_tx, background=True)
        if self._babble:
            self._sim.add_testbench(self._make_noise, background=True)
        for mon in monitors:
            self._sim.add_process(mon)
        self._vcd = None
        if vcd:
            self._vcd = self._sim.write_vcd(vcd)
            self._vcd.__enter__()

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
            if isinstance(byte, float):
                if byte > 0:
                    await ctx.delay(byte)
                continue
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
                self._arrived(byte)
            # else: framing error, byte lost (as a UART bridge would)
            if not ctx.get(top.uart_tx):
                await ctx.changed(top.uart_tx)

    async def _make_noise(self, ctx):
        while True:
            await ctx.delay(10 * self._bit)
            self._babble_slot()

    # --- Transport
    def _send(self, items: list) -> None:
        self._to_board.extend(items)

    def read(self, max_bytes: int, timeout: float) -> bytes:
        deadline = self._cycles + max(1, int(timeout / self._period))
        step = 10 * self.top.divisor
        out = self._take(max_bytes)
        while not out and self._cycles < deadline:
            self._cycles = min(self._cycles + step, deadline)
            try:
                self._sim.run_until(self._cycles * self._period)
            except AssertionError:
                pass    # the simulator already stepped past this time (it stops on event times)
            out = self._take(max_bytes)
        return out

    def close(self) -> None:
        if self._cycles == 0:  # never run: start its processes once, so none is left un-awaited
            self._cycles = 1
            self._sim.run_until(self._period)
        if self._vcd is not None:
            self._vcd.__exit__(None, None, None)
            self._vcd = None
