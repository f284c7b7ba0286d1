"""The byte transport interface every host link implements."""
from __future__ import annotations

__all__ = ["Transport", "LinkError"]


class LinkError(RuntimeError):
    """The host link failed: the port could not be opened, there was no valid answer before the
    deadline, or frames kept failing after all retries. The message names the port."""


class Transport:
    """A full-duplex byte pipe to the board.

    ``read(max_bytes, timeout)`` returns as soon as at least one byte is there (at most
    ``max_bytes``), or ``b""`` after ``timeout`` seconds of the transport's own time (wall time
    for a serial port, simulated time for a simulation). ``margin_s`` is the transport's own
    latency to add to time-outs computed from the baud rate. ``name`` names the port in error
    messages.
    """

    name: str = "link"
    baud: float = 0.0
    margin_s: float = 0.0

    def write(self, data: bytes) -> None:
        raise NotImplementedError

    def read(self, max_bytes: int, timeout: float) -> bytes:
        raise NotImplementedError

    def flush_input(self) -> None:
        """Discard every byte received and not yet read."""
        raise NotImplementedError

    def now(self) -> float:
        """The transport's clock in seconds (for throughput measurements)."""
        raise NotImplementedError

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
