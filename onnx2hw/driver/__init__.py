"""Host side of a built accelerator: transports and the :class:`Accelerator` driver (the
frame format is :mod:`onnx2hw.protocol`, the build description :mod:`onnx2hw.build_info`)."""
from __future__ import annotations

from ..build_info import read_build_info, write_build_info
from .accelerator import Accelerator, RunStats, SelfTestReport
from .transport import LinkError, Transport

__all__ = ["Accelerator", "RunStats", "SelfTestReport", "LinkError", "Transport", "read_build_info", "write_build_info"]
