"""``onnx2hw synth MODEL --board B``: every stage from the model to a bitstream and a report
(:func:`onnx2hw.compile`, :meth:`onnx2hw.Design.verify`, :meth:`onnx2hw.Design.build`)."""
from __future__ import annotations

import sys
import time
from pathlib import Path

from rich.console import Console

from .._children import activity
from ..build import BuildResult
from ..design import Design, design_name
from . import UsageError
from ._options import add_folding_options, design_of, folding_note, host_note, require_simulator, target_of

HELP = "compile a model into a bitstream for a board (Yosys + nextpnr through YoWASP) with a report"


def configure(parser):
    parser.add_argument("model", help="ONNX model (quantized, or float with --calib)")
    parser.add_argument("-o", "--output", metavar="DIR", help="build directory (default build/<model>)")
    parser.add_argument("--calib", metavar="C.npz", help="calibration data to quantize a float model")
    parser.add_argument("--verify", type=int, default=0, metavar="N",
                        help="before place and route, simulate N random inferences of the design (Verilator) "
                             "and stop unless they are bit-exact against the golden model")
    add_folding_options(parser)


def run(args) -> int:
    con = Console(stderr=True, highlight=False)
    target = target_of(args)
    if args.verify < 0:
        raise UsageError(f"--verify must be 0 or more inferences, not {args.verify!r}")
    if args.verify:
        require_simulator("verilator", "--verify")
    out = Path(args.output or Path("build") / design_name(args.model))
    if out.exists() and not out.is_dir():
        raise UsageError(f"output {str(out)!r} exists and is not a directory")
    design = design_of(args, target)
    con.print(folding_note(design))
    if host_note(design):
        con.print(host_note(design))
    times = {}
    if args.verify:
        t0 = time.perf_counter()
        if not _verify(design, args.verify, con):
            return 1
        times["verify"] = time.perf_counter() - t0
    p, board = design.pipeline, design.board
    est = p.total
    con.print(f"{len(p.stages)} stages, II {p.ii:,} cycles, estimated {est.lut:,} LUT, {est.dsp} DSP, "
              f"{est.ebr} EBR of {board.title}'s {board.budget.lut:,} / {board.budget.dsp} / {board.budget.ebr}")
    with con.status("") as status:
        result = design.build(out, progress=lambda title: status.update(f"{title} ..."), times=times)
    _print_summary(result)
    if not result.timing_met:
        print(f"error: timing not met: achieved Fmax {result.fmax_mhz} MHz < target {result.clock_mhz:.1f} MHz "
              f"(try --clock-mhz {int(result.fmax_mhz or 0)})", file=sys.stderr)
        return 1
    return 0


def _verify(design: Design, count: int, con) -> bool:
    """Simulate ``count`` random inferences of the design to build; False (after an ``error:``
    line) unless they are bit-exact."""
    try:
        with con.status(f"verifying {count} inferences in Verilator ..."), \
                activity("--verify in Verilator (nothing was built)"):
            report = design.verify(count, seed=0)
    except AssertionError as e:   # a mismatch, or the harness timed out (it says what came out)
        print(f"error: --verify: {' '.join(str(e).split())}; nothing was built", file=sys.stderr)
        return False
    con.print(f"verified: bit-exact on {report.total}/{report.total} random inferences "
              f"({report.cycles:,} cycles in {report.seconds:.1f} s, Verilator build included)")
    return True


def _print_summary(r: BuildResult) -> None:
    parts = [f"{k.upper()} {v.used if v.used is not None else '?'}/{v.available}" for k, v in r.resources.items()]
    print(f"bitstream: {r.bitstream}")
    print("resources: " + ", ".join(parts))
    print(f"clock: target {r.clock_mhz:.1f} MHz, Fmax {r.fmax_mhz} MHz ({'met' if r.timing_met else 'NOT met'})")
    print(f"throughput: {r.inferences_per_s:,.0f} inferences/s (II {r.ii_cycles:,} cycles, "
          f"latency {r.latency_cycles:,} cycles)")
    print(f"report: {r.report_html}")
