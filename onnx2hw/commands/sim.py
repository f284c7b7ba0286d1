"""``onnx2hw sim MODEL``: simulate the accelerator bit for bit against the golden executor
(:meth:`onnx2hw.Design.simulate_raw`)."""
from __future__ import annotations

import os

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ..children import activity
from ..files import check_output_file, save_npz
from ..flow import load_graph, load_npz
from ..sim.cache_folder import cache_root
from . import UsageError
from ._options import add_folding_options, design_of, folding_note, host_note, require_simulator, target_of

HELP = "simulate the generated hardware (Verilator with a native C++ harness, or Icarus through cocotb) and compare it bit for bit with the golden model"


def configure(parser):
    parser.add_argument("model", help="ONNX model (quantized, or float with --calib)")
    src = parser.add_mutually_exclusive_group()
    src.add_argument("--inputs", metavar="X.npz", help="float inputs keyed by the model's input names (batch first)")
    src.add_argument("--count", type=int, default=20, metavar="N", help="random integer inputs to simulate (default 20)")
    parser.add_argument("--output", "-o", metavar="Y.npz",
                        help="write what the hardware computed (through the host's part), keyed by model output name")
    parser.add_argument("--simulator", choices=("verilator", "icarus"), default="verilator")
    parser.add_argument("--seed", type=int, default=0, help="seed for inputs and backpressure patterns")
    parser.add_argument("--waves", metavar="DIR", help="write a waveform (VCD) of each simulator run into DIR")
    parser.add_argument("--calib", metavar="C.npz", help="calibration data to quantize a float model")
    add_folding_options(parser)


def run(args) -> int:
    con = Console(stderr=True, highlight=False)
    require_simulator(args.simulator, "sim")
    if not args.inputs and args.count < 1:
        raise UsageError(f"--count must be at least 1, not {args.count!r}")
    if args.output is not None:
        check_output_file(args.output, "--output")
    if args.seed < 0:
        raise UsageError(f"--seed must be a non-negative integer, not {args.seed!r}")
    if args.waves and os.path.exists(args.waves) and not os.path.isdir(args.waves):
        raise UsageError(f"--waves {args.waves!r} exists and is not a directory")
    target = target_of(args)
    graph = load_graph(args.model)
    feeds = load_npz(args.inputs, graph) if args.inputs else None  # checked before the compile
    design = design_of(args, target, graph)
    con.print(folding_note(design))
    if host_note(design):
        con.print(host_note(design))
    p = design.pipeline
    if feeds is not None:
        x = design.quantize(feeds)
    else:
        x = design.random_inputs(args.count, seed=args.seed)
    con.print(f"{len(p.stages)} stages, estimated II {p.ii} cycles, latency {p.latency} cycles, "
              f"{p.multipliers} multipliers; simulating {len(x)} inferences with {args.simulator}")
    with Progress(TextColumn("simulating"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=con, transient=True) as bar, activity(f"the simulation with {args.simulator}"):
        task = bar.add_task("sim", total=len(x))
        try:
            report = design.simulate_raw(x, simulator=args.simulator, seed=args.seed, waves=args.waves or False,
                                         progress=lambda done, total: bar.update(task, completed=done))
        except AssertionError as e:  # the harness gave up: a time-out or a stalled stream, with what came out
            raise UsageError(f"simulation failed: {' '.join(str(e).split())}") from None
    print("folding: " + ", ".join(f"{k} pe={v[0]} simd={v[1]}" + (f" mul={v[2]}" if len(v) > 2 else "")
                                  for k, v in p.folding.items()))
    print(f"bit-exact: {report.exact}/{report.total} inferences")
    print(f"II: measured {report.ii:.1f} cycles, estimated {p.ii}; latency: measured {report.latency}, "
          f"estimated {p.latency} cycles")
    print(f"simulation: {report.cycles} cycles in {report.seconds:.1f} s wall, Verilog build included "
          f"(cached in {cache_root()})")
    if report.sim_seconds:
        print(f"simulator alone: {report.sim_seconds:.2f} s wall ({report.cycles / report.sim_seconds:,.0f} cycles/s), "
              f"{report.sim_cpu_seconds:.2f} s of processor time")
    if args.waves:
        print(f"waveforms: {args.waves}")
    if args.output:
        save_npz(args.output, design.dequantize(report.hw), option="--output")
        print(f"wrote {args.output}")
    if not report.ok:
        i, idx, want, got = report.first_mismatch
        where = f"; first diverging stage: {report.diverged_stage}" if report.diverged_stage else ""
        print(f"MISMATCH: inference {i}, output element {idx}: expected {want}, got {got}{where}")
        return 1
    return 0
