"""Simulation harnesses: Amaranth simulator (:mod:`sim.pysim`) and cocotb (:mod:`sim.cocotb_run`).

Both drive :class:`amaranth.lib.stream` ports with whole NumPy arrays, random valid/ready
pauses, and check the stream rules on every output.
"""
from .pysim import run_stream

__all__ = ["run_stream"]
