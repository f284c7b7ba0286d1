"""``onnx2hw explore MODEL --board B``: a design-space sweep built in parallel on Dask distributed
(:mod:`onnx2hw.explore`), with a Pareto table and a report page; ``--verify``: a simulation
regression of one or more models split across the same workers."""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from ..children import activity
from ..design import design_name
from ..explore.engine import DEFAULT_RETRIES, Engine
from ..explore.points import enumerate_points
from ..explore.space import Space, load_space
from ..explore.sweep import run_sweep
from ..explore.verify import run_verify, verify_tasks
from ..files import check_output_file
from ..target import resolve_target
from . import UsageError
from ._options import CLI_LABELS, add_folding_options, require_simulator

HELP = ("sweep a design space (foldings, bit widths, clocks, nextpnr seeds) in parallel on Dask and write a "
        "Pareto table; --verify: split a simulation regression across the workers")

#: seconds one point may take by default
DEFAULT_TIMEOUT = 3600.0


def configure(parser):
    parser.add_argument("model", nargs="+", help="ONNX model (quantized, or float with --calib); several only "
                                                 "with --verify")
    parser.add_argument("--calib", metavar="C.npz", help="calibration data to quantize a float model")
    parser.add_argument("--space", metavar="SPACE.toml",
                        help="the space to sweep (keys foldings or target_cycles, bits, clock_mhz, seeds; "
                             "default: 2 foldings from the cost model's Pareto front)")
    parser.add_argument("-o", "--output", metavar="DIR",
                        help="sweep directory: points/, pareto.csv, pareto.json, report.html "
                             "(default build/explore/<model>)")
    parser.add_argument("--data", metavar="LABELLED.npz",
                        help="labelled inputs: adds the accuracy of each bit width's integer model to the table")
    parser.add_argument("--cluster", metavar="ADDRESS",
                        help="the scheduler of an existing Dask cluster (tcp://host:8786); default: a local cluster")
    parser.add_argument("--workers", type=int, metavar="N",
                        help="worker processes of the local cluster (default: one per core)")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, metavar="S",
                        help=f"seconds one point (or chunk) may take before it is recorded as failed "
                             f"(default {DEFAULT_TIMEOUT:g})")
    parser.add_argument("--retries", type=int, default=DEFAULT_RETRIES, metavar="N",
                        help=f"times a task is run again when its worker dies under it (local cluster; "
                             f"default {DEFAULT_RETRIES})")
    parser.add_argument("--dry-run", action="store_true", help="list the points and what was pruned; build nothing")
    v = parser.add_argument_group("verification regression (--verify)")
    v.add_argument("--verify", action="store_true",
                   help="simulate the models bit for bit (as `onnx2hw sim`), split into chunks across the workers, "
                        "one merged report")
    src = v.add_mutually_exclusive_group()
    src.add_argument("--count", type=int, metavar="N", help="random inferences per model (default 20)")
    src.add_argument("--inputs", metavar="X.npz", help="float inputs keyed by the model's input names (batch first)")
    v.add_argument("--chunk", type=int, default=10, metavar="N", help="inferences per task (default 10)")
    v.add_argument("--seed", type=int, default=0, help="seed of the inputs and backpressure (chunk i: seed + i)")
    v.add_argument("--simulator", choices=("verilator", "icarus"), default="verilator")
    add_folding_options(parser)


def _check_common(args) -> None:
    if args.workers is not None and args.workers < 1:
        raise UsageError(f"--workers must be at least 1, not {args.workers!r}")
    if args.workers is not None and args.cluster:
        raise UsageError("--workers sizes the local cluster; an existing cluster (--cluster) has its own workers")
    if not (args.timeout > 0) or args.timeout == float("inf"):
        raise UsageError(f"--timeout must be a positive number of seconds, not {args.timeout!r}")
    if args.retries < 0:
        raise UsageError(f"--retries must be 0 or more, not {args.retries!r}")
    if args.cluster is not None and "://" not in args.cluster and ":" not in args.cluster:
        raise UsageError(f"--cluster must be a scheduler address like tcp://host:8786, not {args.cluster!r}")
    for option, path in (("--calib", args.calib), ("--data", args.data), ("--inputs", args.inputs)):
        if path is not None and not os.path.isfile(path):
            raise UsageError(f"{option} file {path!r} does not exist")
    for m in args.model:
        if not os.path.isfile(m):
            raise UsageError(f"model file {m!r} does not exist")


def _engine(args) -> Engine:
    return Engine(args.cluster, workers=args.workers, retries=args.retries, timeout=args.timeout)


def _log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def run(args) -> int:
    _check_common(args)
    if args.verify:
        return _run_verify(args)
    sweep_only = {"--count": args.count, "--inputs": args.inputs, "--folding": args.folding,
                  "--target-fps": args.target_fps, "--clock-mhz": args.clock_mhz, "--baud": args.baud}
    given = [k for k, v in sweep_only.items() if v is not None]
    if given:
        raise UsageError(f"{given[0]} applies to --verify; a sweep takes its foldings and clocks from --space")
    if len(args.model) > 1:
        raise UsageError(f"a sweep takes one model, not {len(args.model)} (several models: --verify)")
    model = args.model[0]
    space = load_space(args.space) if args.space else Space()
    out = Path(args.output or Path("build") / "explore" / design_name(model))
    if out.exists() and not out.is_dir():
        raise UsageError(f"output {str(out)!r} exists and is not a directory")
    t0 = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    points, pruned = enumerate_points(model, board=args.board, calib=args.calib, space=space, out_dir=out,
                                      host=tuple(args.host), progress=_log)
    if not points:
        raise UsageError(f"no point of the space fits {args.board}: every folding was pruned "
                         f"({pruned[0].reason if pruned else 'nothing to fold'})")
    meta = {"model": str(model), "calib": args.calib, "board": args.board, "space": args.space,
            "engine": args.cluster or f"local ({args.workers or os.cpu_count()} workers)", "timeout_s": args.timeout}
    if args.dry_run:
        for p in points:
            e = p.estimate
            print(f"{p.name}: estimated II {e['ii']:,} cycles, {e['lut']:,} LUT, {e['dsp']} DSP, {e['ebr']} EBR")
        for q in pruned:
            print(f"pruned {q.bits} target {q.target_cycles} cycles: {q.reason}")
        return 0
    with activity(f"the sweep (the points finished before are in {out / 'pareto.csv'})"):
        summary = run_sweep(points, pruned, out_dir=out, engine=_engine(args), meta=meta, data=args.data, log=_log)
    for r in summary.rows:
        if r["pareto"]:
            acc = f", top-1 {100 * r['accuracy_top1']:.2f}%" if r["accuracy_top1"] is not None else ""
            print(f"pareto: {r['point']}: {r['inferences_per_s']:,.0f} inferences/s, {r['lut']:,} LUT, {r['dsp']} DSP, "
                  f"{r['bram']} EBR, Fmax {r['fmax_mhz']} MHz{acc}")
    for r in summary.rows:
        if r["status"] != "ok":
            print(f"failed: {r['point']}: {r['error']}")
    print(f"{len(points)} points: {summary.built} built, {summary.cached} cached, {summary.failed} failed in "
          f"{time.perf_counter() - t0:.0f} s")
    print("table: " + ", ".join(str(f) for f in summary.files))
    return 1 if summary.failed else 0


def _run_verify(args) -> int:
    if args.space or args.data or args.dry_run:
        raise UsageError(f"{'--space' if args.space else '--data' if args.data else '--dry-run'} applies to a sweep, "
                         "not to --verify")
    require_simulator(args.simulator, "--verify")
    count = 20 if args.count is None else args.count
    if args.inputs is None and count < 1:
        raise UsageError(f"--count must be at least 1, not {count!r}")
    if args.seed < 0:
        raise UsageError(f"--seed must be a non-negative integer, not {args.seed!r}")
    resolve_target(args.board, clock_mhz=args.clock_mhz, baud=args.baud, folding=args.folding,
                   target_fps=args.target_fps, labels=CLI_LABELS)   # options checked before any work
    if args.baud is not None:
        raise UsageError("--baud does not change what --verify simulates")
    out = Path(args.output or Path("build") / "explore" / f"{design_name(args.model[0])}-verify.json")
    if out.is_dir():
        out = out / "verify.json"
    check_output_file(out, "-o")
    tasks = verify_tasks(args.model, board=args.board, calib=args.calib, clock_mhz=args.clock_mhz,
                         target_fps=args.target_fps, folding=args.folding, host=tuple(args.host), count=count,
                         inputs=args.inputs, chunk=args.chunk, seed=args.seed, simulator=args.simulator)
    meta = {"board": args.board, "simulator": args.simulator, "seed": args.seed, "chunk": args.chunk}
    with activity(f"the regression (the chunks finished before are in {out})"):
        report = run_verify(tasks, engine=_engine(args), out_file=out, meta=meta, log=_log)
    for m in report["models"]:
        ii = m["ii_measured"]
        line = (f"{m['model']}: {m['exact']}/{m['inferences']} inferences bit-exact in {m['chunks']} chunks"
                + (f"; II measured {ii['min']:.1f}-{ii['max']:.1f} cycles, estimated {m['estimated_ii']}" if ii else ""))
        print(line)
        if m["first_mismatch"]:
            print(f"MISMATCH: {m['model']}: {m['first_mismatch']['message']} (inference {m['first_mismatch']['inference']} "
                  f"of the regression)")
        for f in m["failed_chunks"]:
            print(f"failed: {m['model']} chunk {f['chunk']}: {f['error']}")
    print(f"report: {out}")
    return 0 if report["ok"] else 1
