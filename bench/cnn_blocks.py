"""The bench networks of the CNN building blocks (issue #36) on a ULX3S-85F.

``python -m bench cnn-builds`` runs, for each network of benchmarks/cnn_blocks/ (a
MobileNetV3-small-style CNN with SE gates and hard-swish, a TCN keyword spotter with dilated causal
convolutions; float ONNX from PyTorch, see that folder's README.md), ``onnx2hw synth MODEL --board
ulx3s-85f --calib DATA --target-fps max --clock-mhz 100 --verify 16`` (the whole flow: PTQ,
folding for the highest rate that fits, 16 inferences simulated and compared bit for bit with the
golden executor before place and route, Yosys, nextpnr), two builds at a time, and prints one table
from the builds' report.json: resources, Fmax and whether the clock was met, inferences/s; beside
it the top-1 accuracy of the integer model (the golden executor, which the hardware equals) and of
the float model on the 128 labelled test inputs.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from .mlperf import BOARD, CLOCK_HZ, ROOT, build_figures, pnr_cell, synth_network

MODELS = ROOT / "benchmarks" / "cnn_blocks"
BUILD_ROOT = ROOT / "build" / "bench" / "cnn_blocks"


def integer_accuracy(entry: dict) -> float:
    """Top-1 accuracy of the integer model (quantized with the network's calibration data) on its
    labelled test inputs."""
    import onnx2hw

    with np.load(MODELS / entry["data"]) as d:
        calib = {"input": d["input"].astype(np.float32)}
    with np.load(MODELS / entry["test"]) as d:
        x, labels = d["input"].astype(np.float32), d["labels"]
    design = onnx2hw.compile(str(MODELS / entry["file"]), board=BOARD, calib=calib)
    logits = design.golden({"input": x})["output"]
    return float(np.mean(logits.reshape(len(x), -1).argmax(1) == labels))


def bench_cnn_builds(clock_mhz: float = CLOCK_HZ / 1e6, jobs: int = 2) -> list[dict]:
    """Build both networks, ``jobs`` at a time, and print the table (module docstring)."""
    from concurrent.futures import ThreadPoolExecutor

    manifest = json.loads((MODELS / "manifest.json").read_text())

    def build(e):
        print(f"building {e['name']} for {BOARD} at {clock_mhz:g} MHz ...", flush=True)
        rc, last, seconds, out = synth_network(e, clock_mhz, MODELS, BUILD_ROOT)
        print(f"    {e['name']}: exit {rc} in {seconds:.0f} s{': ' + last if rc else ''}", flush=True)
        row = {"name": e["name"], "macs": e["macs"], "params": e["params"], "exit": rc, "message": last,
               "build_s": seconds, "float_acc": e["float_test_accuracy"]}
        return {**row, **build_figures(out, rc)}

    with ThreadPoolExecutor(max_workers=jobs) as pool:   # each build is its own child process
        rows = list(pool.map(build, manifest["networks"]))
    for row, e in zip(rows, manifest["networks"]):
        row["int_acc"] = integer_accuracy(e)
    _print_table(rows, clock_mhz)
    return rows


def _print_table(rows: list[dict], clock_mhz: float) -> None:
    print(f"\n{'network':22}{'MACs':>9}{'params':>8}{'LUT':>8}{'DSP':>5}{'EBR':>5}{'Fmax':>7}{'clock':>7}"
          f"{'II cyc':>9}{'sim II':>9}{'inf/s':>9}{'lat us':>8}{'build':>7}{'P&R':>6}{'top-1 int':>11}{'float':>7}")
    for r in rows:
        acc = f"{r['int_acc']:>11.1%}{r['float_acc']:>7.1%}"
        if "ii" not in r:
            print(f"{r['name']:22}{r['macs']:>9,}{r['params']:>8,}  build failed (exit {r['exit']}): "
                  f"{r['message']}"[:140] + acc)
            continue
        met = "" if r["met"] else "!"
        print(f"{r['name']:22}{r['macs']:>9,}{r['params']:>8,}{r['lut']:>8,}{r['dsp']:>5}{r['ebr']:>5}"
              f"{r['fmax']:>6.1f}{met:1}{r['clock']:>7.0f}{r['ii']:>9,}{r['sim_ii'] or 0:>9,.0f}{r['compute']:>9,.0f}"
              f"{r['latency_us']:>8.0f}{r['build_s']:>6.0f}s{pnr_cell(r):>6}{acc}")
    print(f"clock: the clock the design runs at (the {clock_mhz:g} MHz target when met, else the achieved Fmax; "
          f"'!' after Fmax: missed); inf/s: compute-bound at that clock (clock / the slower of II cyc and sim II); sim II: cycles per inference "
          f"measured in the simulation that proved the design bit-exact; top-1: on the 128 labelled test inputs, "
          f"integer model (= hardware) and float model")
