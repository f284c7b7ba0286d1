"""Verilator build benchmark: the cold build of every example's ULX3S design.

Per model: the design ``onnx2hw sim --board ulx3s`` simulates (and ``synth --board ulx3s``
builds), converted to Verilog and compiled by Verilator in a fresh, empty build cache. The
design-independent Verilator runtime (shared by all designs of a cache) is compiled first and
reported once; each model's time is its own cold build (verilation + its C++ + link).
"""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from pathlib import Path

from bench.dataflow import MODELS

ROOT = Path(__file__).resolve().parent.parent


@contextlib.contextmanager
def _fresh_cache():
    saved = os.environ.get("ONNX2HW_SIM_CACHE")
    tmp = tempfile.mkdtemp(prefix="onnx2hw-simbuild-")
    os.environ["ONNX2HW_SIM_CACHE"] = tmp
    try:
        yield Path(tmp)
    finally:
        if saved is None:
            os.environ.pop("ONNX2HW_SIM_CACHE", None)
        else:
            os.environ["ONNX2HW_SIM_CACHE"] = saved
        shutil.rmtree(tmp, ignore_errors=True)


def bench_simbuild(board="ulx3s") -> list[dict]:
    import onnx2hw
    from onnx2hw.rtl.accelerator import AcceleratorCore
    from onnx2hw.sim.build_cache import ensure_build, flags_for, runtime_ready
    from onnx2hw.sim.cocotb_run import harness_for
    from onnx2hw.sim.convert import strip_src, verilog_for
    from onnx2hw.sim.toolchain import simulator_available

    reason = simulator_available("verilator")
    if reason:
        print(f"skipped: {reason}")
        return []
    rows = []
    with _fresh_cache():
        t0 = time.perf_counter()
        shared = runtime_ready()
        print(f"board {board}; Verilator runtime compiled once per cache: {time.perf_counter() - t0:.1f} s"
              + ("" if shared else " (unavailable: every design is built completely)"), flush=True)
        print(f"{'model':30} {'II':>7} {'Verilog KB':>11} {'cold build s':>13}  flags")
        for model, calib in MODELS.items():
            p = onnx2hw.compile(str(ROOT / "examples" / model), board=board,
                                calib=str(ROOT / "examples" / calib) if calib else None).pipeline
            core = AcceleratorCore(p)
            text = verilog_for(core)
            t0 = time.perf_counter()
            bdir = ensure_build(text, harness_for(core, text), "verilator", False)
            seconds = time.perf_counter() - t0
            flags = flags_for(strip_src(text))
            rows.append(dict(model=model, ii=p.ii, verilog_kb=len(text) / 1024, build_s=seconds,
                             opt_fast=flags.opt_fast, build_dir=bdir.name))
            print(f"{model:30} {p.ii:>7} {len(text) / 1024:>11.0f} {seconds:>13.1f}  OPT_FAST={flags.opt_fast}",
                  flush=True)
    return rows
