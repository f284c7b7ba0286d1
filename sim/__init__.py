"""Simulation harnesses: Amaranth simulator (:mod:`onnx2hw.sim.pysim`) and cocotb (:mod:`onnx2hw.sim.cocotb_run`).

Both drive :class:`amaranth.lib.stream` ports with whole NumPy arrays, random valid/ready
pauses, and check the stream rules on every output.
"""
from .cocotb_run import run_cocotb
from .pysim import run_stream

__all__ = ["run_stream", "run_cocotb"]
