"""Native simulation speed: simulated clock cycles per second of the Verilator loop.

Rows, each a child process in one fresh build cache (the Verilator runtime compiled first, once,
and reported; every design's own build is inside its row's whole-command time):

* ``onnx2hw sim MODEL --count N`` for every example (``--board ulx3s``; 2000 inferences of the
  digits MLP, :data:`EXAMPLE_COUNT` of the others);
* ``onnx2hw sim`` of the four MLPerf Tiny designs of ``synth --verify 16`` (``--board ulx3s-85f
  --target-fps max --clock-mhz 100``, 16 inferences): the designs :mod:`bench.mlperf` builds;
* ``onnx2hw run BUILD --port sim`` on the 450 digits test inputs: the board top of ``make demo``
  (``digits_mlp.onnx`` with its calibration, ULX3S clock and baud rate), UART included.

Columns: simulated cycles; the whole command's wall time and cycles per second (Python start,
compile, Verilog, Verilator build, golden executor, simulation); the simulation alone: the wall
and processor time inside the native simulator (``sim``: the bit-exactness runs, from the
command's ``simulator alone`` line; ``run``: the driver session, timed in a second process
with the build cached). The machine's load average is printed with the table: on a shared
machine the processor time is the steadier figure.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.dataflow import MODELS
from bench.mlperf import BOARD as MLPERF_BOARD, CLOCK_HZ as MLPERF_CLOCK_HZ, MODELS as MLPERF_DIR, SAMPLES
from bench.simbuild import _fresh_cache

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
#: inferences simulated per example (the digits MLP: the issue's 2000)
EXAMPLE_COUNT = 200
MLP_COUNT = 2000
DEMO_MODEL, DEMO_CALIB, DEMO_INPUTS = "digits_mlp.onnx", "digits_calib.npz", "digits_test.npz"

_SIM_LINE = re.compile(r"simulation: (\d+) cycles in")
_ALONE_LINE = re.compile(r"simulator alone: ([\d.]+) s wall .*?, ([\d.]+) s of processor time")


def _cli(args: list[str]) -> tuple[int, str, float]:
    """``onnx2hw ARGS`` in a child process: (exit status, output, wall seconds)."""
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "onnx2hw.cli", *args], capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": "200"})
    return proc.returncode, proc.stdout + proc.stderr, time.perf_counter() - t0


def _sim_row(label: str, args: list[str]) -> dict:
    rc, out, whole = _cli(["sim", *args])
    cycles, alone = _SIM_LINE.search(out), _ALONE_LINE.search(out)
    if rc != 0 or cycles is None or alone is None:
        return dict(label=label, error=(out.strip().splitlines() or ["no output"])[-1])
    return dict(label=label, cycles=int(cycles[1]), whole=whole, alone=float(alone[1]), cpu=float(alone[2]))


def _demo_build(folder: Path) -> Path:
    """``accelerator.json`` of the ``make demo`` design (no bitstream: ``run --port sim`` needs none)."""
    import onnx2hw
    from onnx2hw.driver import write_build_info

    model, calib = str(EXAMPLES / DEMO_MODEL), str(EXAMPLES / DEMO_CALIB)
    design = onnx2hw.compile(model, board="ulx3s", calib=calib)
    write_build_info(folder, design.pipeline, "ulx3s", design.clock_hz, design.baud, model=model, calib=calib)
    return folder


#: the driver session alone, with the build cached (run in a child: its simulator's processor time)
_SESSION = """
import resource, sys, time
import numpy as np
from onnx2hw.driver import Accelerator
x = np.load(sys.argv[2])["input"]
acc = Accelerator.open(sys.argv[1], "sim")
cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
t0 = time.perf_counter()
acc.run(x)
seconds = time.perf_counter() - t0
cycles = acc.transport.cycles
acc.close()
cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
print(cycles, seconds, cpu1.ru_utime + cpu1.ru_stime - cpu0.ru_utime - cpu0.ru_stime)
"""


def _run_row(folder: Path) -> dict:
    label = f"run --port sim ({DEMO_INPUTS}, 450)"
    inputs = str(EXAMPLES / DEMO_INPUTS)
    rc, out, whole = _cli(["run", str(_demo_build(folder)), "--port", "sim", "--inputs", inputs])
    if rc != 0:
        return dict(label=label, error=(out.strip().splitlines() or ["no output"])[-1])
    proc = subprocess.run([sys.executable, "-c", _SESSION, str(folder), inputs], capture_output=True, text=True)
    if proc.returncode != 0:
        return dict(label=label, error=(proc.stderr.strip().splitlines() or ["no output"])[-1])
    cycles, alone, cpu = proc.stdout.split()
    return dict(label=label, cycles=int(cycles), whole=whole, alone=float(alone), cpu=float(cpu))


def _print(row: dict) -> None:
    if "error" in row:
        print(f"{row['label']:44} failed: {row['error']}", flush=True)
        return
    c = row["cycles"]
    print(f"{row['label']:44}{c:>12,}{row['whole']:>9.1f}{c / row['whole']:>12,.0f}{row['alone']:>9.2f}"
          f"{c / row['alone']:>12,.0f}{row['cpu']:>8.2f}{c / row['cpu']:>12,.0f}", flush=True)


def bench_simspeed() -> list[dict]:
    from onnx2hw.sim.native_run import ensure_native_runtime, native_available

    reason = native_available()
    if reason:
        print(f"skipped: {reason}")
        return []
    rows = []
    with _fresh_cache(), tempfile.TemporaryDirectory(prefix="onnx2hw-simspeed-") as tmp:
        t0 = time.perf_counter()
        ensure_native_runtime()
        print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; fresh build cache; Verilator "
              f"runtime compiled once: {time.perf_counter() - t0:.1f} s", flush=True)
        print(f"{'command':44}{'cycles':>12}{'whole s':>9}{'cyc/s':>12}{'sim s':>9}{'cyc/s':>12}{'cpu s':>8}"
              f"{'cyc/s':>12}")
        for model, calib in MODELS.items():
            count = MLP_COUNT if model == "digits_mlp_int8.onnx" else EXAMPLE_COUNT
            args = [str(EXAMPLES / model), "--board", "ulx3s", "--count", str(count)]
            if calib:
                args += ["--calib", str(EXAMPLES / calib)]
            rows.append(_sim_row(f"sim {model} --count {count}", args))
            _print(rows[-1])
        manifest = json.loads((MLPERF_DIR / "manifest.json").read_text())
        for e in manifest["networks"]:
            args = [str(MLPERF_DIR / e["file"]), "--board", MLPERF_BOARD, "--calib", str(MLPERF_DIR / e["data"]),
                    "--target-fps", "max", "--clock-mhz", f"{MLPERF_CLOCK_HZ / 1e6:g}", "--count", str(SAMPLES)]
            rows.append(_sim_row(f"sim {e['task']} {e['name']} --count {SAMPLES}", args))
            _print(rows[-1])
        rows.append(_run_row(Path(tmp)))
        _print(rows[-1])
    print("whole: the command's wall time, build included; sim: wall time inside the native simulator; "
          f"cpu: its processor time (load average now {os.getloadavg()[0]:.1f})")
    return rows
