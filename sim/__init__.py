"""Simulation harnesses: Amaranth simulator (:mod:`onnx2hw.sim.pysim`) and cocotb (:mod:`onnx2hw.sim.cocotb_run`).

Both drive :class:`amaranth.lib.stream` ports with whole NumPy arrays, random valid/ready
pauses, and check the stream rules on every output. The cocotb runner's Verilog comes from
:mod:`~onnx2hw.sim.convert`, its builds from :mod:`~onnx2hw.sim.build_cache` (with
:mod:`~onnx2hw.sim.verilator_runtime` and :mod:`~onnx2hw.sim.cache_folder`), its tools from
:mod:`~onnx2hw.sim.toolchain`.
"""
from .cocotb_run import run_cocotb
from .pysim import run_stream

__all__ = ["run_stream", "run_cocotb"]
