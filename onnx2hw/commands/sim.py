"""``onnx2hw sim MODEL``: simulate the accelerator bit for bit against the golden executor."""
from __future__ import annotations

import numpy as np

from ._options import add_folding_options, folding_note, folding_request, prepare_for_args, require_simulator

HELP = "simulate the generated hardware (cocotb + Verilator) and compare it bit for bit with the golden model"


def configure(parser):
    parser.add_argument("model", help="ONNX model (quantized, or float with --calib)")
    src = parser.add_mutually_exclusive_group()
    src.add_argument("--inputs", metavar="X.npz", help="float inputs keyed by the model's input names (batch first)")
    src.add_argument("--count", type=int, default=20, metavar="N", help="random integer inputs to simulate (default 20)")
    parser.add_argument("--output", "-o", metavar="Y.npz", help="write what the hardware computed, keyed by output name")
    parser.add_argument("--simulator", choices=("verilator", "icarus"), default="verilator")
    parser.add_argument("--seed", type=int, default=0, help="seed for inputs and backpressure patterns")
    parser.add_argument("--waves", metavar="DIR", help="write a waveform (VCD) of each simulator run into DIR")
    parser.add_argument("--calib", metavar="C.npz", help="calibration data to quantize a float model")
    add_folding_options(parser)


def _inputs(args, prepared):
    from ..flow import load_npz
    from ..layers import quantize_inputs
    from onnx2hw.sim.model_sim import random_inputs

    g = prepared.integer
    spec = g.input_specs[0]
    if args.inputs:
        feeds = load_npz(args.inputs, prepared.graph)
        return quantize_inputs(g, feeds)[spec.name]
    return random_inputs(g, args.count, seed=args.seed)


def run(args) -> int:
    from rich.console import Console

    from . import UsageError
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from ..layers import dequantize_outputs
    from onnx2hw.sim.cocotb_run import cache_root
    from onnx2hw.sim.model_sim import simulate

    con = Console(stderr=True, highlight=False)
    require_simulator(args.simulator, "sim")
    if not args.inputs and args.count < 1:
        raise UsageError(f"--count must be at least 1, not {args.count!r}")
    req = folding_request(args)
    prepared = prepare_for_args(args, req)
    con.print(folding_note(prepared, req))
    p = prepared.pipeline
    x = _inputs(args, prepared)
    con.print(f"{len(p.stages)} stages, estimated II {p.ii} cycles, latency {p.latency} cycles, "
              f"{p.multipliers} multipliers; simulating {len(x)} inferences with {args.simulator}")
    with Progress(TextColumn("simulating"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=con, transient=True) as bar:
        task = bar.add_task("sim", total=len(x))
        report = simulate(p, x, simulator=args.simulator, seed=args.seed, waves=args.waves or False,
                          progress=lambda done, total: bar.update(task, completed=done))
    print("folding: " + ", ".join(f"{k} pe={v[0]} simd={v[1]}" for k, v in p.folding.items()))
    print(f"bit-exact: {report.exact}/{report.total} inferences")
    print(f"II: measured {report.ii:.1f} cycles, estimated {p.ii}; latency: measured {report.latency}, "
          f"estimated {p.latency} cycles")
    print(f"simulation: {report.cycles} cycles in {report.seconds:.1f} s wall, Verilog build included "
          f"(cached in {cache_root()})")
    if args.waves:
        print(f"waveforms: {args.waves}")
    if args.output:
        g = prepared.integer
        outs = dequantize_outputs(g, {g.output_specs[0].name: report.hw})
        np.savez(args.output, **outs)
        print(f"wrote {args.output}")
    if not report.ok:
        i, idx, want, got = report.first_mismatch
        where = f"; first diverging stage: {report.diverged_stage}" if report.diverged_stage else ""
        print(f"MISMATCH: inference {i}, output element {idx}: expected {want}, got {got}{where}")
        return 1
    return 0
