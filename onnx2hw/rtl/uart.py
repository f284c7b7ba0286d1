"""Asynchronous serial (UART, 8N1) receiver and transmitter with byte streams.

Both blocks time bits with an integer divider of ``divisor`` clock cycles per bit
(see :func:`uart_divisor`). Bytes go least significant bit first, framed by one start bit (0)
and one stop bit (1); the idle line is high.
"""
from __future__ import annotations

from amaranth.hdl import Cat, Module, Signal
from amaranth.lib import cdc, stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["UARTRx", "UARTTx", "uart_divisor", "MAX_BAUD_ERROR"]

#: largest relative error between the requested baud rate and ``clk_hz / divisor`` accepted
#: by :func:`uart_divisor` (the receiver samples mid-bit, so a 10-bit frame tolerates about 5 %
#: for both ends together).
MAX_BAUD_ERROR = 0.025


def uart_divisor(clk_hz: float, baud: float) -> int:
    """Clock cycles per bit for ``baud`` at ``clk_hz``: ``round(clk_hz / baud)``.

    Raises ``ValueError`` if that is below 4 cycles per bit or the baud rate it gives is off
    by more than :data:`MAX_BAUD_ERROR`.
    """
    if not (isinstance(clk_hz, (int, float)) and clk_hz > 0):
        raise ValueError(f"clock frequency must be a positive number of Hz, not {clk_hz!r}")
    if not (isinstance(baud, (int, float)) and baud > 0):
        raise ValueError(f"baud rate must be a positive number, not {baud!r}")
    div = round(clk_hz / baud)
    if div < 4:
        raise ValueError(f"baud rate {baud!r} is too high for a {clk_hz / 1e6:g} MHz clock "
                         f"(needs at least 4 clock cycles per bit)")
    err = abs(clk_hz / div - baud) / baud
    if err > MAX_BAUD_ERROR:
        raise ValueError(f"baud rate {baud!r} cannot be made from a {clk_hz / 1e6:g} MHz clock: "
                         f"the nearest divisor {div} gives {clk_hz / div:.0f} baud "
                         f"({100 * err:.1f} % off, at most {100 * MAX_BAUD_ERROR:g} % allowed)")
    return div


def _check_divisor(divisor):
    if not isinstance(divisor, int) or divisor < 4:
        raise ValueError(f"divisor must be an int of at least 4 clock cycles per bit, not {divisor!r}")


class UARTRx(wiring.Component):
    """UART receiver, 8N1.

    Parameters
    ----------
    divisor : int
        Clock cycles per bit (at least 4).

    Ports
    -----
    rx : In(1), idle high
        Serial line (asynchronous; synchronized by two flip-flops inside).
    o : Out(stream.Signature(8))
        Received bytes. ``o.valid`` rises one cycle after the middle of the stop bit and holds
        until taken; the consumer must take each byte within about one byte time.
    error : Out(1)
        One-cycle pulse per lost byte: a stop bit sampled low (framing error; the byte is
        dropped and the receiver waits for the line to go idle) or a byte completed while the
        previous one was still not taken (overrun; the new byte is dropped).

    The start bit is confirmed at its middle (a glitch shorter than half a bit is ignored);
    every data bit is sampled one ``divisor`` later. ``o.valid`` does not depend on ``o.ready``.
    """

    def __init__(self, divisor: int):
        _check_divisor(divisor)
        self.divisor = divisor
        super().__init__({"rx": In(1, init=1), "o": Out(stream.Signature(8)), "error": Out(1)})

    def elaborate(self, platform):
        m = Module()
        rx = Signal(init=1)
        m.submodules.sync_rx = cdc.FFSynchronizer(self.rx, rx, init=1)
        timer = Signal(range(self.divisor * 3 // 2 + 1))
        bits = Signal(4)
        shreg = Signal(8)
        m.d.sync += self.error.eq(0)
        with m.If(self.o.valid & self.o.ready):
            m.d.sync += self.o.valid.eq(0)
        with m.FSM():
            with m.State("IDLE"):
                with m.If(~rx):
                    m.d.sync += timer.eq(self.divisor // 2 - 1)
                    m.next = "START"
            with m.State("START"):
                with m.If(timer != 0):
                    m.d.sync += timer.eq(timer - 1)
                with m.Elif(rx):            # glitch, not a start bit
                    m.next = "IDLE"
                with m.Else():
                    m.d.sync += [timer.eq(self.divisor - 1), bits.eq(0)]
                    m.next = "DATA"
            with m.State("DATA"):
                with m.If(timer != 0):
                    m.d.sync += timer.eq(timer - 1)
                with m.Else():
                    m.d.sync += [shreg.eq(Cat(shreg[1:], rx)),
                                 timer.eq(self.divisor - 1), bits.eq(bits + 1)]
                    with m.If(bits == 7):
                        m.next = "STOP"
            with m.State("STOP"):
                with m.If(timer != 0):
                    m.d.sync += timer.eq(timer - 1)
                with m.Elif(~rx):
                    m.d.sync += self.error.eq(1)
                    m.next = "BREAK"
                with m.Else():
                    with m.If(self.o.valid & ~self.o.ready):
                        m.d.sync += self.error.eq(1)          # overrun: keep the old byte
                    with m.Else():
                        m.d.sync += [self.o.payload.eq(shreg), self.o.valid.eq(1)]
                    m.next = "IDLE"
            with m.State("BREAK"):
                with m.If(rx):
                    m.next = "IDLE"
        return m


class UARTTx(wiring.Component):
    """UART transmitter, 8N1.

    Parameters
    ----------
    divisor : int
        Clock cycles per bit (at least 4).

    Ports
    -----
    i : In(stream.Signature(8))
        Bytes to send; ``i.ready`` is high while the transmitter is idle, so a byte is taken in
        the cycle it is offered and back-to-back bytes leave with no idle time between frames
        (one byte per ``10 * divisor`` cycles).
    tx : Out(1), idle high
        Serial line (registered).
    busy : Out(1)
        High while a byte is being shifted out.
    """

    def __init__(self, divisor: int):
        _check_divisor(divisor)
        self.divisor = divisor
        super().__init__({"i": In(stream.Signature(8)), "tx": Out(1, init=1), "busy": Out(1)})

    def elaborate(self, platform):
        m = Module()
        timer = Signal(range(self.divisor))
        shreg = Signal(10, init=(1 << 10) - 1)
        left = Signal(range(11))
        m.d.comb += [self.busy.eq(left != 0), self.i.ready.eq(left == 0)]
        with m.If(left == 0):
            with m.If(self.i.valid):
                frame = (1 << 9) | (self.i.payload << 1)    # stop, data LSB first, start
                m.d.sync += [shreg.eq(frame), self.tx.eq(0), left.eq(10), timer.eq(self.divisor - 1)]
        with m.Elif(timer != 0):
            m.d.sync += timer.eq(timer - 1)
        with m.Else():
            m.d.sync += [left.eq(left - 1), timer.eq(self.divisor - 1)]
            with m.If(left != 1):
                m.d.sync += [self.tx.eq(shreg[1]), shreg.eq(shreg >> 1)]
            with m.Else():
                m.d.sync += self.tx.eq(1)
        return m
