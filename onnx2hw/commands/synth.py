"""``onnx2hw synth MODEL --board B``: every stage from the model to a bitstream and a report."""
from __future__ import annotations

import re
import shutil
import sys
import time
from pathlib import Path

from ._options import add_folding_options, folding_note, folding_request, prepare_for_args, require_simulator

HELP = "compile a model into a bitstream for a board (Yosys + nextpnr through YoWASP) with a report"


def configure(parser):
    parser.add_argument("model", help="ONNX model (quantized, or float with --calib)")
    parser.add_argument("-o", "--output", metavar="DIR", help="build directory (default build/<model>)")
    parser.add_argument("--calib", metavar="C.npz", help="calibration data to quantize a float model")
    parser.add_argument("--verify", type=int, default=0, metavar="N",
                        help="before place and route, simulate N random inferences of the design (Verilator) "
                             "and stop unless they are bit-exact against the golden model")
    add_folding_options(parser)


def _name(model: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", Path(model).stem) or "model"


def run(args) -> int:
    from rich.console import Console

    from ..driver.build_info import write_build_info
    from ..flow import link_rate
    from ..dataflow.fold import save_folding
    from ..rtl.accelerator import AcceleratorCore
    from ..rtl.board_top import LINK_COST
    from ..report import make_report, write_report
    from ..synth import parse_fmax, parse_utilisation, run_build
    from . import UsageError

    con = Console(stderr=True, highlight=False)
    t_start = time.perf_counter()
    req = folding_request(args)
    board, clock_hz, baud = req.board, req.clock_hz, req.baud
    if args.verify < 0:
        raise UsageError(f"--verify must be 0 or more inferences, not {args.verify!r}")
    if args.verify:
        require_simulator("verilator", "--verify")
    name = _name(args.model)
    out = Path(args.output or Path("build") / name)
    if out.exists() and not out.is_dir():
        raise UsageError(f"output {str(out)!r} exists and is not a directory")
    times = {}
    t0 = time.perf_counter()
    prepared = prepare_for_args(args, req)
    con.print(folding_note(prepared, req))
    p = prepared.pipeline
    times["compile"] = time.perf_counter() - t0
    if args.verify:
        t0 = time.perf_counter()
        if not _verify(p, args.verify, con):
            return 1
        times["verify"] = time.perf_counter() - t0
    est = p.total
    con.print(f"{len(p.stages)} stages, II {p.ii:,} cycles, estimated {est.lut:,} LUT, {est.dsp} DSP, "
              f"{est.ebr} EBR of {board.title}'s {board.budget.lut:,} / {board.budget.dsp} / {board.budget.ebr}")
    out.mkdir(parents=True, exist_ok=True)
    save_folding(p.folding, out / "folding.json")
    info_path = write_build_info(out, prepared, board, clock_hz, baud, model=args.model, calib=args.calib)
    t0 = time.perf_counter()
    accelerator = AcceleratorCore(p)
    from amaranth.back import verilog
    (out / f"{name}.v").write_text(verilog.convert(accelerator, name=name))
    import json
    top = board.make_top(AcceleratorCore(p), json.loads(info_path.read_text()), clock_hz, baud)
    # `proc; opt_clean -purge` first: YoWASP Yosys 0.70's abc9 step can trip over Amaranth's
    # private wire names otherwise (seen with synth_ecp5)
    # --timing-allow-fail: a missed clock is reported with the achieved Fmax, not a bare error
    plan = board.platform().build(top, name=name, do_build=False, script_after_read="proc\nopt_clean -purge",
                                  nextpnr_opts="--timing-allow-fail")
    times["elaborate"] = time.perf_counter() - t0
    work = out / "work"
    with con.status("") as status:
        steps = run_build(plan, work, name, progress=lambda title: status.update(f"{title} ..."))
    times.update(steps)
    for ext in ("bit", "svf", "bin"):
        if (work / f"{name}.{ext}").is_file():
            shutil.copy2(work / f"{name}.{ext}", out / f"{name}.{ext}")
    log = (work / f"{name}.tim").read_text(errors="replace")
    fm = parse_fmax(log)
    fmax = fm[0] if fm else None
    times["total"] = time.perf_counter() - t_start
    per, _ = link_rate(p, baud)
    report = make_report(model=name, board=board, pipeline=p, clock_mhz=clock_hz / 1e6, fmax_mhz=fmax,
                         util=parse_utilisation(log), times=times, baud=baud, link_bytes=per,
                         link_cost=LINK_COST[board.family])
    jpath, hpath = write_report(report, out)
    _print_summary(report, out, name)
    if not report["clock"]["met"]:
        print(f"error: timing not met: achieved Fmax {fmax} MHz < target {clock_hz / 1e6:.1f} MHz "
              f"(try --clock-mhz {int(fmax or 0)})", file=sys.stderr)
        return 1
    return 0


def _verify(pipeline, count: int, con) -> bool:
    """Simulate ``count`` random inferences of the design to build; False (after an ``error:``
    line) unless they are bit-exact."""
    from onnx2hw.sim.model_sim import random_inputs, simulate

    x = random_inputs(pipeline.graph, count, seed=0)
    with con.status(f"verifying {count} inferences in Verilator ..."):
        report = simulate(pipeline, x, timing=False)
    if not report.ok:
        i, idx, want, got = report.first_mismatch
        where = f" (first diverging stage: {report.diverged_stage})" if report.diverged_stage else ""
        print(f"error: --verify: the design is not bit-exact: inference {i}, output element {idx}: "
              f"expected {want}, got {got}{where}; nothing was built", file=sys.stderr)
        return False
    con.print(f"verified: bit-exact on {report.total}/{report.total} random inferences "
              f"({report.cycles:,} cycles in {report.seconds:.1f} s, Verilator build included)")
    return True


def _print_summary(r: dict, out: Path, name: str) -> None:
    res = r["resources"]
    parts = [f"{k.upper()} {v['used'] if v['used'] is not None else '?'}/{v['available']}" for k, v in res.items()]
    c, tp = r["clock"], r["throughput"]
    print(f"bitstream: {out / (name + ('.bin' if (out / (name + '.bin')).exists() else '.bit'))}")
    print("resources: " + ", ".join(parts))
    print(f"clock: target {c['target_mhz']:.1f} MHz, Fmax {c['fmax_mhz']} MHz ({'met' if c['met'] else 'NOT met'})")
    print(f"throughput: {tp['inferences_per_s']:,.0f} inferences/s (II {tp['ii_cycles']:,} cycles, "
          f"latency {tp['latency_cycles']:,} cycles)")
    print(f"report: {out / 'report.html'}")
