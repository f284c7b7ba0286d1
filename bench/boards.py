"""Boards benchmark: example × board through the whole `onnx2hw synth` flow, and end-to-end
inferences/s through the driver on the simulated link against the link bound.

Per build: compile time per step, Fmax vs target, LUT/DSP/EBR used vs estimated (the estimate
covers the pipeline plus the reserved host link). The link run simulates the board top (UART
included) with a faster UART than the board's (16 clocks per bit, so the run stays short).
"""
from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import numpy as np

CASES = [("digits_mlp_int8.onnx", "ulx3s-85f"), ("digits_mlp_int8.onnx", "ulx3s-12f"),
         ("digits_cnn_int8.onnx", "ulx3s-85f"), ("jet_mlp.onnx", "ulx3s-85f"),
         ("digits_mlp_int8.onnx", "icebreaker")]
CALIB = {"jet_mlp.onnx": "examples/jet_calib.npz"}


def _synth(model: str, board: str, out: Path) -> tuple[int, str]:
    from onnx2hw.cli import main

    argv = ["synth", f"examples/{model}", "--board", board, "-o", str(out)]
    if model in CALIB:
        argv += ["--calib", CALIB[model]]
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        rc = main(argv)
    return rc, err.getvalue().strip().splitlines()[-1] if err.getvalue().strip() else ""


def bench_link(build: Path, inferences: int = 32, clocks_per_bit: int = 16) -> tuple[float, float]:
    """(measured inferences/s, bound) through the driver on the simulated board top, the bound
    being the lower of the link's (bytes per inference / (baud / 10)) and the pipeline's
    (clock / II): the design is folded for the real baud rate, so a much faster simulated UART
    would only measure the pipeline."""
    from onnx2hw.driver import Accelerator
    from onnx2hw.driver import read_build_info

    info = read_build_info(build)
    fast = info["clock_hz"] / clocks_per_bit
    shape = info["quant"]["input"]["shape"]
    bits, signed = info["quant"]["input"]["bits"], info["quant"]["input"]["signed"]
    lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
    x = np.random.default_rng(0).integers(lo, hi + 1, (inferences, *shape))
    with Accelerator.open(build, "sim", baud=fast) as acc:
        acc.run(x, raw=True)
        compute = info["clock_hz"] / info["pipeline"]["ii_cycles"]
        return acc.stats.inferences_per_s, min(acc.link_bound, compute)


def bench_boards(root="build/bench") -> list[dict]:
    rows = []
    for model, board in CASES:
        out = Path(root) / f"{Path(model).stem}-{board}"
        rc, last = _synth(model, board, out)
        if rc != 0:
            print(f"{model} on {board}: exit {rc}: {last}")
            rows.append({"model": model, "board": board, "exit": rc, "message": last})
            continue
        r = json.loads((out / "report.json").read_text())
        c, res = r["clock"], r["resources"]
        times = ", ".join(f"{k} {v:.1f}s" for k, v in r["times_s"].items())
        print(f"{model} on {board}: Fmax {c['fmax_mhz']:.1f} MHz vs target {c['target_mhz']:.0f} "
              f"({'met' if c['met'] else 'NOT met'}); " + "; ".join(
                  f"{k.upper()} {v['used']} used / {v['estimated']} est / {v['available']}" for k, v in res.items()))
        print(f"    times: {times}")
        row = {"model": model, "board": board, "report": r}
        if board == "ulx3s-85f" and model == "digits_mlp_int8.onnx":
            rate, bound = bench_link(out)
            print(f"    driver on the simulated link: {rate:,.0f} inferences/s = {rate / bound:.1%} of the "
                  f"bound {bound:,.0f}/s (16 clocks per UART bit)")
            row["link"] = {"rate": rate, "bound": bound}
        rows.append(row)
    return rows
