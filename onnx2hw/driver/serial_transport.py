"""A host link over a serial port (pyserial), e.g. the ULX3S's FT231X at ``/dev/ttyUSB0``."""
from __future__ import annotations

import time

import serial

from .transport import LinkError, Transport

__all__ = ["SerialTransport"]


class SerialTransport(Transport):
    """8N1 serial port at ``baud``, no flow control. ``margin_s`` covers USB latency."""

    margin_s = 0.05

    def __init__(self, port: str, baud: float):
        self.baud = float(baud)
        self.name = str(port)
        try:
            self._ser = serial.Serial(port, baudrate=int(baud), bytesize=8, parity="N", stopbits=1,
                                      timeout=0.1, write_timeout=5.0)
        except (serial.SerialException, ValueError) as e:
            raise LinkError(f"cannot open serial port {port!r}: {e}") from None
        self._ser.reset_input_buffer()

    def write(self, data: bytes) -> None:
        try:
            self._ser.write(data)
        except serial.SerialException as e:
            raise LinkError(f"{self.name}: serial write failed: {e}") from None

    def read(self, max_bytes: int, timeout: float) -> bytes:
        try:
            self._ser.timeout = max(timeout, 0.0)
            first = self._ser.read(1)
            if not first:
                return b""
            more = min(self._ser.in_waiting, max_bytes - 1)
            return first + (self._ser.read(more) if more > 0 else b"")
        except serial.SerialException as e:
            raise LinkError(f"{self.name}: serial read failed: {e}") from None

    def flush_input(self) -> None:
        self._ser.reset_input_buffer()

    def now(self) -> float:
        return time.monotonic()

    def close(self) -> None:
        self._ser.close()
