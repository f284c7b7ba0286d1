"""Host side of a built accelerator: framing, transports and the :class:`Accelerator` driver."""
from __future__ import annotations

from .accelerator import Accelerator, RunStats
from .build_info import read_build_info, write_build_info
from .transport import LinkError, Transport

__all__ = ["Accelerator", "RunStats", "LinkError", "Transport", "read_build_info", "write_build_info"]
