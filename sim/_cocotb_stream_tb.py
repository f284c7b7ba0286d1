"""cocotb testbench run by :func:`onnx2hw.sim.cocotb_run.run_cocotb` inside the HDL simulator.

The toplevel is the Verilog wrapper of :mod:`onnx2hw.sim._harness` around the design: it makes
the reset, drives and checks the stream ports itself, cycle by cycle, reading the input
transfers from ``in_<port>.hex`` and writing the collected output transfers to
``out_<port>.hex`` in ``$ONNX2HW_TB_DIR`` (the simulator's working directory). This testbench
only reads ``spec.json`` there, sets the wrapper's configuration ports (``spec["cfg"]``), starts
a clock implemented in the simulator's C layer (no Python per cycle), awaits ``done`` and writes
the values of the result ports (``spec["read"]``) to ``result.json``;
:mod:`~onnx2hw.sim.cocotb_run` makes the harness's messages of them.

It runs as a top-level module copied into the run directory and imports nothing of onnx2hw
(each simulator run starts a fresh Python: those imports would cost more than a short run).
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import RisingEdge, Timer


def _int(handle) -> int:
    v = handle.value
    return v.to_unsigned() if hasattr(v, "to_unsigned") else int(v)


@cocotb.test()
async def stream_test(dut):
    rundir = Path(os.environ["ONNX2HW_TB_DIR"])
    spec = json.loads((rundir / "spec.json").read_text())
    for name, value in spec["cfg"].items():
        getattr(dut, name).value = value
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns", impl="gpi").start())   # the wrapper makes the reset
    await RisingEdge(dut.done)
    await Timer(1, unit="ns")
    result = {name: _int(getattr(dut, name)) for name in spec["read"]}
    (rundir / "result.json").write_text(json.dumps(result))
