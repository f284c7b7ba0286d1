"""``onnx2hw synth MODEL --board B``: every stage from the model to a bitstream and a report
(:func:`onnx2hw.compile`, :meth:`onnx2hw.Design.verify`, :meth:`onnx2hw.Design.build`)."""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
from rich.console import Console

from ..children import activity
from ..build import PNR_TRIES, BuildResult, check_selftest_fits
from ..build_info import SelfTestData, selftest_record
from ..design import Design, MismatchError, design_name
from ..report import pnr_runs_text, throughput
from ..sim.netlist import NetlistSimError
from ..synth import RETRY_WITHIN
from . import UsageError
from ._options import add_folding_options, design_of, folding_note, host_note, require_simulator, target_of

HELP = "compile a model into a bitstream for a board (Yosys + nextpnr through YoWASP) with a report"


def configure(parser):
    parser.add_argument("model", help="ONNX model (quantized, or float with --calib)")
    parser.add_argument("-o", "--output", metavar="DIR", help="build directory (default build/<model>)")
    parser.add_argument("--calib", metavar="C.npz", help="calibration data to quantize a float model")
    parser.add_argument("--verify", type=int, default=0, metavar="N",
                        help="simulate N random inferences of the design (Verilator) before synthesis and stop "
                             "unless they are bit-exact against the golden model")
    parser.add_argument("--verify-netlist", action="store_true",
                        help="with --verify (ECP5 boards): also simulate the N inferences through the synthesized "
                             "netlist, after onnx2hw's netlist passes, before place and route (the accelerator is "
                             "kept a module through synthesis; seconds on small designs, minutes on large ones)")
    parser.add_argument("--selftest", type=int, nargs="?", const=16, metavar="N",
                        help="add a self-test: N inputs (default 16) held on chip, replayed through the "
                             "accelerator at full speed with a cycle counter and an output check "
                             "(`onnx2hw run BUILD --selftest` reads it back); inputs from --selftest-inputs, "
                             "else --calib, else random")
    parser.add_argument("--selftest-inputs", metavar="X.npz",
                        help="float inputs for the self-test, keyed by the model's input name (batch first; "
                             "the first N are used)")
    parser.add_argument("--pnr-seed", type=int, metavar="S",
                        help="nextpnr's placer seed (0..2**31-1; default nextpnr's own): another seed places "
                             "the same design differently, which can close timing that one placement missed")
    parser.add_argument("--pnr-tries", type=int, default=PNR_TRIES, metavar="N",
                        help=f"place-and-route runs at most (default {PNR_TRIES}): while the clock is missed by "
                             f"at most {RETRY_WITHIN:.0%}%, place and route again with the next seed (the netlist "
                             "is kept) and keep the first run that meets it, else the fastest; 1: one run")
    add_folding_options(parser)


def run(args) -> int:
    con = Console(stderr=True, highlight=False)
    target = target_of(args)
    if args.verify < 0:
        raise UsageError(f"--verify must be 0 or more inferences, not {args.verify!r}")
    if args.verify:
        require_simulator("verilator", "--verify")
    if args.verify_netlist and not args.verify:
        raise UsageError("--verify-netlist needs --verify N (the inferences to simulate)")
    if args.verify_netlist and target.board.family != "ecp5":
        raise UsageError(f"--verify-netlist models ECP5 cells only; {target.board.name} is {target.board.family}")
    if args.selftest is not None and args.selftest < 1:
        raise UsageError(f"--selftest must be at least 1 input, not {args.selftest!r}")
    if args.pnr_seed is not None and not 0 <= args.pnr_seed < 2 ** 31:
        raise UsageError(f"--pnr-seed must be a whole number from 0 to {2 ** 31 - 1}, not {args.pnr_seed!r}")
    if args.pnr_tries < 1:
        raise UsageError(f"--pnr-tries must be at least 1, not {args.pnr_tries!r}")
    if args.selftest_inputs and args.selftest is None:
        raise UsageError("--selftest-inputs needs --selftest")
    out = Path(args.output or Path("build") / design_name(args.model))
    if out.exists() and not out.is_dir():
        raise UsageError(f"output {str(out)!r} exists and is not a directory")
    design = design_of(args, target)
    con.print(folding_note(design))
    if host_note(design):
        con.print(host_note(design))
    selftest = None
    if args.selftest is not None:
        st_cost = check_selftest_fits(design, args.selftest)      # one error line when it does not fit
        selftest = _selftest(args, design)
        con.print(f"self-test: {selftest.samples} inputs ({selftest.source}) on chip, estimated "
                  f"{st_cost.ebr} EBR and {st_cost.lut:,} LUT")
    times = {}
    simulated = None
    if args.verify:
        t0 = time.perf_counter()
        simulated = _verify(design, args.verify, con)
        if simulated is None:
            return 1
        times["verify"] = time.perf_counter() - t0
    p, board = design.pipeline, design.board
    est = p.total
    con.print(f"{len(p.stages)} stages, II {p.ii:,} cycles, estimated {est.lut:,} LUT, {est.dsp} DSP, "
              f"{est.ebr} EBR of {board.title}'s {board.budget.lut:,} / {board.budget.dsp} / {board.budget.ebr}")
    netlist_n = args.verify if args.verify_netlist else 0
    rtl = None if simulated is None else {"inferences": simulated["inferences"], "exact": simulated["inferences"],
                                          "seconds": round(times["verify"], 1)}
    try:
        with con.status("") as status:
            result = design.build(out, progress=lambda title: status.update(f"{title} ..."), times=times,
                                  selftest=selftest, simulated=simulated, seed=args.pnr_seed,
                                  pnr_tries=args.pnr_tries, verify_netlist=netlist_n, verified_rtl=rtl)
    except NetlistSimError as e:
        print(f"error: --verify: {' '.join(str(e).split())}; {out} was left incomplete (not published)", file=sys.stderr)
        return 1
    if netlist_n:
        nl = json.loads(result.report_json.read_text())["verify"]["netlist"]
        con.print(f"verified the netlist: bit-exact on {nl['exact']}/{nl['inferences']} random inferences "
                  f"({nl['cycles']:,} cycles in {nl['seconds']:.1f} s, Verilator build included)")
    _print_summary(result, simulated)
    if selftest is not None:
        print(f"self-test: {selftest.samples} inputs on chip; measure the board with "
              f"`onnx2hw run {out} --port PORT --selftest`")
    if not result.timing_met:
        print(f"error: timing not met: achieved Fmax {result.fmax_mhz} MHz < target {result.clock_mhz:.1f} MHz "
              f"(try --clock-mhz {int(result.fmax_mhz or 0)}, or more --pnr-tries)", file=sys.stderr)
        return 1
    return 0


def _selftest(args, design: Design) -> SelfTestData:
    """The self-test memory: the first ``--selftest`` inputs of ``--selftest-inputs``, else of
    ``--calib``, else random ones, quantized as the host quantizes them."""
    n = args.selftest
    path = args.selftest_inputs or args.calib
    if path is None:
        return selftest_record(design.pipeline, design.random_inputs(n, seed=0), source="random inputs, seed 0")
    option = "--selftest-inputs" if args.selftest_inputs else "--calib"
    try:
        with np.load(path) as f:
            arrays = {k: f[k] for k in f.files}
    except Exception as e:  # noqa: BLE001 - a damaged archive may raise anything zipfile/zlib raise
        raise UsageError(f"cannot read {option} {path!r} as .npz: {e}") from None
    # the model's inputs (an .npz may also hold labels); the quantizer checks them
    feeds = {k: v for k, v in arrays.items() if k in design.graph.input_names} or arrays
    have = min((len(v) if np.ndim(v) else 0) for v in feeds.values()) if feeds else 0
    if have < n:
        raise UsageError(f"{option} {path!r} holds {have} inputs but --selftest asks for {n}")
    x = design.quantize({k: v[:n] for k, v in feeds.items()})
    return selftest_record(design.pipeline, x, source=f"the first {n} of {Path(path).name}")


def _verify(design: Design, count: int, con) -> dict | None:
    """Simulate ``count`` random inferences of the design to build, and measure its II and
    latency; ``None`` (after an ``error:`` line) unless they are bit-exact, else the measured
    ``{"ii", "latency", "inferences"}`` for the report."""
    try:
        with con.status(f"verifying {count} inferences in Verilator ..."), \
                activity("--verify in Verilator (nothing was built)"):
            report = design.simulate_raw(design.random_inputs(count, 0), seed=0, timing=True)
            if not report.ok:
                raise MismatchError(report, "the design")
    except AssertionError as e:   # a mismatch, or the harness timed out (it says what came out)
        print(f"error: --verify: {' '.join(str(e).split())}; nothing was built", file=sys.stderr)
        return None
    con.print(f"verified: bit-exact on {report.total}/{report.total} random inferences "
              f"({report.cycles:,} cycles in {report.seconds:.1f} s, Verilator build included); "
              f"simulated II {report.ii:,.1f} cycles, latency {report.latency:,} cycles")
    return {"ii": report.ii, "latency": report.latency, "inferences": report.total}


def _print_summary(r: BuildResult, simulated: dict | None = None) -> None:
    parts = [f"{k.upper()} {v.used if v.used is not None else '?'}/{v.available}" for k, v in r.resources.items()]
    print(f"bitstream: {r.bitstream}")
    print("resources: " + ", ".join(parts))
    print(f"clock: target {r.clock_mhz:.1f} MHz, Fmax {r.fmax_mhz} MHz ({'met' if r.timing_met else 'NOT met'})")
    if r.pnr_runs:
        print(pnr_runs_text(r.pnr_runs))
    print(f"throughput: {r.inferences_per_s:,.0f} inferences/s (II {r.ii_cycles:,} cycles, "
          f"latency {r.latency_cycles:,} cycles)")
    if r.design is None:
        return
    tp = throughput(r.design.pipeline, clock_mhz=r.clock_mhz, fmax_mhz=r.fmax_mhz, baud=r.baud,
                    link_bytes=r.design.link_bytes, simulated=simulated)
    cb = tp["compute_bound"]
    link = tp["link_bound"]["inferences_per_s"]
    parts = [f"link-bound {link:,.0f}/s" if link else "no link bound",
             f"compute-bound {cb['estimated']['inferences_per_s']:,.0f}/s, latency "
             f"{cb['estimated']['latency_us']:,.2f} µs at {cb['clock_mhz']:.1f} MHz (estimated)"]
    if cb.get("simulated"):
        parts.append(f"{cb['simulated']['inferences_per_s']:,.0f}/s, {cb['simulated']['latency_us']:,.2f} µs "
                     f"(simulated)")
    print("throughput: " + "; ".join(parts))
    print(f"report: {r.report_html}")
