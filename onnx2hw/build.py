"""A design's bitstream build and its result: :func:`build_design` (behind
:meth:`onnx2hw.Design.build`) elaborates the accelerator and its board top once, runs Yosys,
nextpnr and the packer through YoWASP (:mod:`onnx2hw.synth`), writes the files the user keeps
(bitstream, Verilog, ``folding.json``, ``accelerator.json``, ``report.json``/``.html``) and
returns a :class:`BuildResult`; :func:`open_build` reads one back from its directory.
"""
from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from amaranth.back import verilog

from .children import activity
from .build_info import (FILENAME as ACCELERATOR_JSON, SelfTestData, begin_build, finish_build, read_build_info,
                         write_build_info)
from .dataflow.fold import save_folding
from .files import copy_file, write_text
from .ir.errors import ModelError
from .report import make_report, write_report
from .rtl.replicate import YOSYS_COLLISION_X, YOSYS_KEEP_REPLICAS
from .rtl.board_top import LINK_COST
from .rtl.ram_outreg import absorb_output_registers
from .rtl.selftest import selftest_cost
from .sim.netlist import keep_accelerator, simulate_netlist
from .synth import SynthError, parse_fmax, parse_utilisation, run_build, tool_env

__all__ = ["BuildResult", "Resource", "build_design", "open_build", "BITSTREAM_EXTENSIONS", "check_selftest_fits",
           "nextpnr_options"]

#: bitstream files a build may produce (ECP5: .bit + .svf, iCE40: .bin)
BITSTREAM_EXTENSIONS = ("bit", "svf", "bin")


@dataclass(frozen=True)
class Resource:
    """One device resource after place and route: ``used`` (``None`` if nextpnr did not report
    it), ``available`` on the device, ``estimated`` by the cost model (pipeline + host link)."""

    used: int | None
    available: int
    estimated: int


@dataclass(frozen=True)
class BuildResult:
    """What a build produced (the fields of its ``report.json``, typed).

    ``resources`` maps ``lut``, ``dsp``, ``bram`` (EBR blocks) and ``ff`` to :class:`Resource`;
    ``inferences_per_s`` is the lower of ``link_bound_per_s`` (the UART) and
    ``compute_bound_per_s`` (the pipeline at the target clock). ``design`` is the
    :class:`onnx2hw.Design` built, when the build ran in this process (``None`` after
    :func:`open_build`).
    """

    out_dir: Path
    name: str
    board: str
    device: str
    bitstream: Path
    resources: Mapping[str, Resource]
    fmax_mhz: float | None
    clock_mhz: float
    timing_met: bool
    inferences_per_s: float
    link_bound_per_s: float | None
    compute_bound_per_s: float
    ii_cycles: int
    latency_cycles: int
    baud: float
    times_s: Mapping[str, float]
    report_json: Path
    report_html: Path
    verilog: Path
    accelerator_json: Path
    folding_json: Path
    #: the place-and-route runs when there was more than one (``report.json``'s ``place_and_route``)
    pnr_runs: tuple = ()
    design: object = field(default=None, compare=False, repr=False)

    @classmethod
    def from_report(cls, out_dir, report: dict, design=None) -> "BuildResult":
        """The result described by ``report`` (a ``report.json`` dictionary) in ``out_dir``."""
        out = Path(out_dir)
        name = report["model"]
        bit = next((out / f"{name}.{ext}" for ext in ("bit", "bin") if (out / f"{name}.{ext}").is_file()),
                   out / f"{name}.bit")
        c, tp = report["clock"], report["throughput"]
        res = {k: Resource(v["used"], v["available"], v["estimated"]) for k, v in report["resources"].items()}
        return cls(out_dir=out, name=name, board=report["board"], device=report["device"], bitstream=bit,
                   resources=MappingProxyType(res), fmax_mhz=c["fmax_mhz"], clock_mhz=c["target_mhz"],
                   timing_met=bool(c["met"]), inferences_per_s=tp["inferences_per_s"],
                   link_bound_per_s=tp["link_bound_per_s"], compute_bound_per_s=tp["compute_bound_per_s"],
                   ii_cycles=tp["ii_cycles"], latency_cycles=tp["latency_cycles"], baud=tp["baud"],
                   times_s=MappingProxyType(dict(report["times_s"])), report_json=out / "report.json",
                   report_html=out / "report.html", verilog=out / f"{name}.v",
                   accelerator_json=out / ACCELERATOR_JSON, folding_json=out / "folding.json",
                   pnr_runs=tuple(MappingProxyType(dict(x)) for x in report.get("place_and_route", ())), design=design)


def open_build(build_dir) -> BuildResult:
    """The :class:`BuildResult` of a build directory written by ``onnx2hw synth`` or
    :meth:`onnx2hw.Design.build` (read from its ``report.json``). ``ModelError`` for a build
    that is incomplete or whose files do not match its ``accelerator.json`` (see
    :func:`onnx2hw.build_info.read_build_info`)."""
    path = Path(build_dir) / "report.json"
    read_build_info(build_dir)
    try:
        report = json.loads(path.read_text())
        return BuildResult.from_report(build_dir, report)
    except FileNotFoundError:
        raise ModelError(f"{str(build_dir)!r} is not a build directory: no report.json "
                         f"(run `onnx2hw synth` first)") from None
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ModelError(f"cannot read {str(path)!r}: {e!r}") from None


def check_selftest_fits(design, samples: int):
    """The resources (:class:`~onnx2hw.rtl.cost.Cost`) of a self-test of ``samples`` inputs beside
    ``design`` (its pipeline and host link) on its board; ``ModelError`` in one line, with the
    most inputs that would fit, when the total exceeds the device."""
    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 1:
        raise ValueError(f"the self-test needs at least 1 input, not {samples!r}")
    board, fmt = design.board, design.link
    base = design.pipeline.total + LINK_COST[board.family]
    avail = {"LUT": board.budget.lut, "EBR": board.budget.ebr}

    def over(n):
        c = selftest_cost(fmt, n, board.family)
        need = {"LUT": base.lut + c.lut, "EBR": base.ebr + c.ebr}
        return c, [(k, need[k]) for k in avail if need[k] > avail[k]]

    cost, bad = over(samples)
    if not bad:
        return cost
    what, need = bad[0]
    lo, hi = 0, samples - 1            # the most inputs that fit (0: none)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if not over(mid)[1] else (lo, mid - 1)
    mine = cost.ebr if what == "EBR" else cost.lut
    hint = (f"at most {lo:,} inputs fit (--selftest {lo})" if lo else
            "no self-test fits beside this design (fold it smaller, e.g. a lower --target-fps)")
    raise ModelError(f"a self-test of {samples} inputs ({samples * fmt.in_bytes:,} bytes) does not fit "
                     f"{board.title}: it needs {mine:,} {what} beside the design's {need - mine:,} "
                     f"({need:,} of {avail[what]:,}); {hint}")


#: estimated LUT4s above which nextpnr routes with router2: router1 (its default) does not
#: converge in reasonable time on congested designs of tens of thousands of LUTs, router2 routes
#: by congestion-negotiated passes over the whole net list
ROUTER2_ABOVE_LUT = 20_000
#: nextpnr's analytic placer weighs timing-critical connections this much above its default (10)
#: in designs of more than :data:`ROUTER2_ABOVE_LUT` LUT4s: in large designs the default weight
#: lets the placer put registers far from the block RAMs or DSPs that feed them, and the route
#: then dominates the clock period
PLACER_TIMING_WEIGHT = 40


#: place-and-route runs a build makes at most while its clock is missed (the first and two more
#: seeds, :func:`retry_seeds`; ``synth.RETRY_WITHIN`` says how close it must be)
PNR_TRIES = 3


def retry_seeds(seed: int | None, tries: int) -> list[int]:
    """The placer seeds of the runs after the first (``seed``, ``None``: nextpnr's own): the
    next ``tries - 1`` whole numbers after it (after 1 for nextpnr's own)."""
    if isinstance(tries, bool) or not isinstance(tries, int) or tries < 1:
        raise ValueError(f"place-and-route tries must be a whole number of at least 1, not {tries!r}")
    first = 1 if seed is None else seed
    return [s for s in range(first + 1, first + tries) if s < 2 ** 31]


def nextpnr_options(estimated_lut: int, seed: int | None = None) -> str:
    """nextpnr's options for a design of ``estimated_lut`` LUT4s (``seed``: nextpnr's placer seed,
    its default when ``None``)."""
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2 ** 31):
        raise ValueError(f"the nextpnr seed must be a whole number from 0 to {2 ** 31 - 1}, not {seed!r}")
    big = estimated_lut > ROUTER2_ABOVE_LUT
    return ("--timing-allow-fail"
            + (f" --router router2 --placer-heap-timingweight {PLACER_TIMING_WEIGHT}" if big else "")
            + (f" --seed {seed}" if seed is not None else ""))


def build_design(design, out_dir, *, progress=None, times: Mapping[str, float] | None = None,
                 selftest: SelfTestData | None = None, simulated: Mapping | None = None,
                 seed: int | None = None, pnr_tries: int = PNR_TRIES, verify_netlist: int = 0,
                 verified_rtl: Mapping | None = None) -> BuildResult:
    """Build ``design`` (an :class:`onnx2hw.Design`) into ``out_dir``; see :meth:`onnx2hw.Design.build`.

    The directory is marked incomplete first (:func:`~onnx2hw.build_info.begin_build`), every file
    is written atomically, ``accelerator.json`` comes last with the hashes of the bitstream and
    design files, and only then is the marker removed: an interrupted or failed build leaves a
    directory that ``onnx2hw run`` and :func:`open_build` refuse, never a half-built design that
    looks complete.

    ``selftest`` (:func:`~onnx2hw.build_info.selftest_record`) builds the self-test into the board
    top (checked to fit first, :func:`check_selftest_fits`); ``simulated`` (``{"ii", "latency",
    "inferences"}`` measured in simulation) adds the simulated figures to the report; ``seed``
    is nextpnr's placer seed (default: nextpnr's); a missed clock runs place and route again,
    ``pnr_tries`` runs at most, with the seeds after it (:func:`retry_seeds`,
    :func:`~onnx2hw.synth.run_build`). The report names the kept run's seed (``nextpnr_seed``)
    and lists every run (``place_and_route``).

    ``verify_netlist`` (ECP5): after synthesis and the netlist passes, before place and route,
    simulate that many random inferences through the accelerator's netlist
    (:func:`onnx2hw.sim.netlist.simulate_netlist`); a difference from the golden model raises
    :class:`~onnx2hw.sim.netlist.NetlistSimError` and the build stays incomplete. The report's
    ``verify`` holds ``rtl`` (``verified_rtl``, the RTL simulation's record) and ``netlist``.
    """
    if verify_netlist and design.board.family != "ecp5":
        raise ModelError(f"netlist simulation models ECP5 cells only, not {design.board.family}'s")
    t_start = time.perf_counter()
    pnr_options = nextpnr_options(design.pipeline.total.lut, seed)   # a bad seed fails before any work
    more_seeds = retry_seeds(seed, pnr_tries)
    st_cost = None if selftest is None else check_selftest_fits(design, selftest.samples)
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise ValueError(f"output {str(out)!r} exists and is not a directory")
    board, p, name = design.board, design.pipeline, design.name
    steps = {"compile": design.compile_seconds, **(times or {})}
    with activity(f"building {out} (left incomplete: run synth again)"):
        begin_build(out)
        for ext in BITSTREAM_EXTENSIONS:   # an earlier build's bitstream must not pass for this one's
            (out / f"{name}.{ext}").unlink(missing_ok=True)
        save_folding(p.folding, out / "folding.json")
        if progress:
            progress("elaborating")
        t0 = time.perf_counter()
        with activity("elaborating"):
            accelerator = design.accelerator
            write_text(out / f"{name}.v", verilog.convert(accelerator, name=name))
            top = board.make_top(accelerator, design.link, design.clock_hz, design.baud,
                                 selftest=None if selftest is None else selftest.inputs)
            # `proc; opt_clean -purge` first: YoWASP Yosys 0.70's abc9 step can trip over Amaranth's
            # private wire names otherwise (seen with synth_ecp5); replica registers get `keep`
            # (rtl.replicate) before opt_merge could merge them
            # --timing-allow-fail: a missed clock is reported with the achieved Fmax, not a bare error
            # a netlist to simulate: the accelerator stays a module of its own, the one simulated
            keep = f"\n{keep_accelerator(name)}" if verify_netlist else ""
            plan = board.platform().build(top, name=name, do_build=False, script_after_read=f"proc\n{YOSYS_KEEP_REPLICAS}\n{YOSYS_COLLISION_X}\nopt_clean -purge{keep}",
                                          nextpnr_opts=pnr_options)
        steps["elaborate"] = time.perf_counter() - t0
        work = out / "work"
        netlist_record = {}

        def post(wd):
            absorb_output_registers(wd / f"{name}.json")
            if verify_netlist:
                if progress:
                    progress(f"simulating the netlist ({verify_netlist} inferences)")
                netlist_record.update(simulate_netlist(design, wd / f"{name}.json", verify_netlist, tool_env()["YOSYS"]))
        runs = []
        steps.update(run_build(plan, work, name, progress=progress, after_synthesis=post if board.family == "ecp5" else None,
                               retry_seeds=more_seeds,
                               attempts=runs))
        bitstreams = []
        for ext in BITSTREAM_EXTENSIONS:
            if (work / f"{name}.{ext}").is_file():
                copy_file(work / f"{name}.{ext}", out / f"{name}.{ext}")
                bitstreams.append(f"{name}.{ext}")
        if not bitstreams:
            raise SynthError(f"the flow ended without a bitstream in {str(work)!r}")
        log = (work / f"{name}.tim").read_text(errors="replace")
        fm = parse_fmax(log)
        steps["total"] = design.compile_seconds + sum((times or {}).values()) + time.perf_counter() - t_start
        link_cost = LINK_COST[board.family] if st_cost is None else LINK_COST[board.family] + st_cost
        st = None if selftest is None else {
            "samples": selftest.samples, "source": selftest.source, "output_crc32": selftest.output_crc32,
            "cost": {"lut": st_cost.lut, "ff": st_cost.ff, "ebr": st_cost.ebr}}
        report = make_report(model=name, board=board, pipeline=p, clock_mhz=design.clock_hz / 1e6,
                             fmax_mhz=fm[0] if fm else None, util=parse_utilisation(log), times=steps,
                             baud=design.baud, link_bytes=design.link_bytes, link_cost=link_cost,
                             simulated=simulated, selftest=st)
        kept = next((r["seed"] for r in runs if r["kept"]), seed)
        if kept is not None:
            report["nextpnr_seed"] = kept
        if len(runs) > 1:
            report["place_and_route"] = runs
        verify = {k: dict(v) for k, v in (("rtl", verified_rtl), ("netlist", netlist_record)) if v}
        if verify:
            report["verify"] = verify
        write_report(report, out)
        # last: the description with the hashes of what it describes, then the build is published
        write_build_info(out, design.pipeline, board, design.clock_hz, design.baud, model=design.source_model,
                         calib=design.source_calib, host=design.host, bitstream=bitstreams[0],
                         files=[*bitstreams, f"{name}.v", "folding.json", "report.json", "report.html"],
                         selftest=selftest)
        finish_build(out)
    return BuildResult.from_report(out, report, design=design)
