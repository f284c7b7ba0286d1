"""Stream harness on a real HDL simulator: Amaranth -> Verilog -> cocotb (Verilator or Icarus).

The component is converted to Verilog (:mod:`onnx2hw.sim.convert`) and wrapped in the Verilog
test wrapper of :mod:`onnx2hw.sim._harness` (toplevel ``onnx2hw_tb``), which drives the inputs,
applies the valid/ready pauses, checks the stream rules and collects the outputs inside the
simulator, cycle by cycle: no Python runs per cycle, so the design's own model sets the pace. The
cocotb testbench (:mod:`onnx2hw.sim._cocotb_stream_tb`) only configures the wrapper, starts the
clock and awaits its ``done``. Tensors travel to and from the wrapper as hexadecimal text files
(one transfer a line) in the run directory, and the run's parameters through the wrapper's input
ports, so the wrapper's Verilog depends only on the design's ports and one cached build
(:mod:`onnx2hw.sim.build_cache`) serves every run of a design.

On failure the run is repeated with tracing on, and the waveform's path is part of the
``AssertionError`` message.
"""
from __future__ import annotations

import json
import re
import shutil
import tempfile
from pathlib import Path

from ..files import copy_file
from ._harness import TB_MODULE, TB_TOP, harness_config, harness_reads, harness_result, harness_verilog
from ._stream import PAUSES, as_component, as_transfers, check_names, default_max_cycles, pack_hex, stream_ports, unpack_hex
from .build_cache import build_sources, ensure_build
from .cache_folder import cache_root
from .convert import verilog_once
from .toolchain import SIMULATORS, cocotb_runner, log_tail, simulator_available, tool_env

__all__ = ["run_cocotb", "harness_for", "LONG_RUN"]

#: a run expected to take more than this many cycles (``run_cocotb(expected_cycles=...)``, by
#: default its number of transfers) is long: the simulation, not the build, takes the time, so its
#: design is compiled for simulation speed (``ensure_build(long_run=True)``), and a failing one is
#: not re-run with tracing (that would take a traced build and gigabytes of waveform)
LONG_RUN = 1_000_000
#: the testbench's source, copied into each run directory as module ``TB_MODULE``
_TB_SOURCE = Path(__file__).with_name("_cocotb_stream_tb.py")


def _has_input(text: str, name: str) -> bool:
    """Whether the converted design's ``top`` module has the input port ``name``."""
    return re.search(rf"^\s*input\s+{name}\s*;", text, re.M) is not None


def harness_for(component, text: str) -> str:
    """The Verilog test wrapper around ``component``, whose converted Verilog is ``text``."""
    return harness_verilog(stream_ports(component), clk=_has_input(text, "clk"), rst=_has_input(text, "rst"))


def _waveform(rundir: Path) -> Path | None:
    """The waveform a traced run left in ``rundir``, if any."""
    return next((p for p in (rundir / "dump.vcd", rundir / "dump.fst", rundir / f"{TB_TOP}.fst")
                 if p.is_file()), None)


def _keep_waveform(rundir: Path, dest: Path) -> Path | None:
    """Copy the run's waveform into ``dest`` (numbered, never overwriting); returns its path."""
    wave = _waveform(rundir)
    if wave is None:
        return None
    dest.mkdir(parents=True, exist_ok=True)
    n = len(list(dest.glob("run*" + wave.suffix)))
    target = dest / f"run{n:03d}{wave.suffix}"
    copy_file(wave, target)
    return target


def _prepare_rundir(rundir: Path, spec: dict, arrays: dict, ports: dict) -> None:
    """Write the run's spec, testbench and input files into ``rundir`` (clearing a previous run's results)."""
    for f in ["result.json", "error.txt", *(f"out_{n}.hex" for n in ports)]:
        (rundir / f).unlink(missing_ok=True)
    (rundir / "spec.json").write_text(json.dumps(spec))
    copy_file(_TB_SOURCE, rundir / f"{TB_MODULE}.py")
    for n, p in ports.items():
        if p.is_input:
            (rundir / f"in_{n}.hex").write_text(pack_hex(arrays[n], p) if n in arrays else "")


def _simulate(bdir: Path, simulator: str, waves: bool, rundir: Path, log: Path) -> str | None:
    """Run the testbench on the build in ``bdir``; the runner's error, or ``None``."""
    with tool_env(simulator):
        runner = cocotb_runner(simulator)
        if simulator == "icarus":   # Icarus' test() reads attributes set by build()
            runner.build(sources=build_sources(bdir), hdl_toplevel=TB_TOP, build_dir=bdir,
                         timescale=("1ns", "1ps"), waves=waves, log_file=rundir / "build.log")
        try:
            runner.test(test_module=TB_MODULE, hdl_toplevel=TB_TOP, hdl_toplevel_lang="verilog",
                        build_dir=bdir, test_dir=rundir, waves=waves, log_file=log,
                        results_xml=str(rundir / "results.xml"),
                        extra_env={"ONNX2HW_TB_DIR": str(rundir)})
        except (RuntimeError, SystemExit) as e:
            return str(e)
    return None


def _collect(rundir: Path, spec: dict, ports: dict):
    """``(outputs, cycles, error, stats)`` from the wrapper's ``result.json`` in ``rundir``."""
    r = json.loads((rundir / "result.json").read_text())
    cycles, stats, err = harness_result(ports, r, top=spec["top_name"], lengths=spec["lengths"],
                                        expect=spec["expect"], max_cycles=spec["max_cycles"],
                                        idle_limit=spec["idle_limit"])
    if err is not None:
        return None, None, err, stats
    outs = {n: unpack_hex((rundir / f"out_{n}.hex").read_text(), ports[n]) for n in spec["expect"]}
    short = [n for n, a in outs.items() if len(a) != spec["expect"][n]]
    if short:   # the wrapper's count and its file disagree: not a result to trust
        return None, None, (f"output file of {short[0]!r} holds {len(outs[short[0]])} transfers, "
                            f"not {spec['expect'][short[0]]}; run directory {rundir}"), stats
    return outs, int(cycles), None, stats


def _run_once(text, harness, simulator, waves, rundir: Path, spec: dict, arrays: dict, ports: dict):
    """One simulator run; ``(outputs, cycles, error, stats)`` with ``error`` the one-line message
    of a failed run (then outputs and cycles are ``None``)."""
    bdir = ensure_build(text, harness, simulator, waves, spec["expected_cycles"] > LONG_RUN)
    _prepare_rundir(rundir, spec, arrays, ports)
    log = rundir / "sim.log"
    status = _simulate(bdir, simulator, waves, rundir, log)
    if (rundir / "result.json").is_file():
        return _collect(rundir, spec, ports)
    if simulator == "icarus" and (bdir / f"{TB_TOP}.fst").is_file():   # Icarus dumps in build_dir
        shutil.copy2(bdir / f"{TB_TOP}.fst", rundir / f"{TB_TOP}.fst")
    if (rundir / "error.txt").is_file():
        return None, None, (rundir / "error.txt").read_text(), None
    return None, None, f"simulation did not finish ({status}); log {log}:\n{log_tail(log)}", None


def _spec(dut, ports, arrays, expect, *, src_pause, sink_pause, seed, max_cycles, drain, idle_limit,
          expected_cycles) -> dict:
    """The run's parameters as the testbench (``spec.json``) and the result check read them."""
    spec = {
        "ports": [dict(name=p.name, is_input=p.is_input, width=p.width, signed=p.signed,
                       lanes=p.lanes) for p in ports.values()],
        "expect": {n: int(v) for n, v in expect.items()},
        "src_pause": src_pause, "sink_pause": sink_pause, "seed": int(seed),
        "max_cycles": int(max_cycles), "drain": int(drain), "idle_limit": int(idle_limit),
        "top_name": type(dut).__name__,
    }
    spec["lengths"] = {n: len(a) for n, a in arrays.items()}
    if expected_cycles is None:
        expected_cycles = sum(spec["lengths"].values()) + sum(spec["expect"].values())
    spec["expected_cycles"] = int(expected_cycles)
    spec["cfg"] = harness_config(ports, lengths=spec["lengths"], expect=spec["expect"], src_pause=src_pause,
                                 sink_pause=sink_pause, seed=seed, max_cycles=max_cycles, drain=drain,
                                 idle_limit=idle_limit)
    spec["read"] = harness_reads(ports)
    return spec


def _failure(err: str, run, rundir: Path, spec: dict, waves) -> AssertionError:
    """The error of a failed run: re-run with tracing (``run(waves=True)``) unless it already
    traced or is long, and name the waveform, or why there is none."""
    long_run = spec["expected_cycles"] > LONG_RUN
    if not waves and not long_run:
        _o, _c, err2, _s = run(True)
        err = err2 or err
    wave = _waveform(rundir)
    where = (f"waveform: {wave}" if wave else
             f"not re-run with tracing: a run of {spec['expected_cycles']:,} cycles (pass waves, or --waves DIR, "
             f"to trace it; run directory {rundir})" if long_run and not waves else
             f"no waveform written (run directory {rundir})")
    return AssertionError(f"{err.strip()}\n{where}")


def run_cocotb(dut_factory_or_component, feeds: dict, expect: dict, *, simulator="verilator",
               src_pause="none", sink_pause="none", seed=0, waves=False, max_cycles=None,
               drain=32, idle_limit=4096, stats=None, expected_cycles=None):
    """Simulate a component's Verilog under cocotb with the same stream checks as
    :func:`sim.pysim.run_stream` (except the combinational valid/ready check).

    The ports are driven and checked by a Verilog wrapper (:mod:`onnx2hw.sim._harness`) inside
    the simulator, which reads the input transfers from files and writes the output transfers
    to files: Python takes no part in the clock cycles, and the wrapper's Verilog depends only
    on the design's ports, so one simulator build serves every run of a design.

    Parameters
    ----------
    dut_factory_or_component : wiring.Component or callable returning one
    feeds, expect, src_pause, sink_pause, seed, max_cycles, drain, idle_limit
        As for :func:`sim.pysim.run_stream`.
    simulator : {"verilator", "icarus"}
    waves : bool or path
        Trace every run (``dump.vcd`` for Verilator, kept in the run directory); a folder keeps
        each successful run's waveform there as ``runNNN.vcd``. Without it a failing run is
        repeated with tracing to produce the waveform.
    expected_cycles : int, optional
        How many cycles the run should take, if known (default: its number of transfers, a lower
        bound); above :data:`LONG_RUN` the design is compiled for simulation speed.
    stats : dict, optional
        Filled after a successful run with ``cycles_run`` (clock cycles the wrapper ran, drain
        included) and ``stalls`` (per port: cycles an input had a transfer left with ``valid``
        low, or an output lacked transfers with ``ready`` low -- the pauses applied).

    Returns
    -------
    (outputs, cycles) as for :func:`sim.pysim.run_stream`.

    Raises
    ------
    AssertionError
        Stream-rule violation, timeout or deadlock; the message names the waveform file.
    RuntimeError
        The simulator is unavailable or the build failed.
    """
    if simulator not in SIMULATORS:
        raise ValueError(f"simulator must be one of {SIMULATORS!r}, not {simulator!r}")
    for p in (src_pause, sink_pause):
        if p not in PAUSES:
            raise ValueError(f"pause pattern must be one of {PAUSES!r}, not {p!r}")
    reason = simulator_available(simulator)
    if reason:
        raise RuntimeError(f"cannot run {simulator}: {reason}")
    dut = as_component(dut_factory_or_component)
    ports = stream_ports(dut)
    check_names(ports, feeds, expect)
    arrays = {n: as_transfers(n, a, ports[n]) for n, a in feeds.items()}
    if max_cycles is None:
        max_cycles = default_max_cycles(arrays, expect)
    spec = _spec(dut, ports, arrays, expect, src_pause=src_pause, sink_pause=sink_pause, seed=seed,
                 max_cycles=max_cycles, drain=drain, idle_limit=idle_limit, expected_cycles=expected_cycles)
    text = verilog_once(dut)
    harness = harness_for(dut, text)
    runs = cache_root() / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    rundir = Path(tempfile.mkdtemp(prefix=f"{type(dut).__name__}-", dir=runs))

    def run(traced: bool):
        return _run_once(text, harness, simulator, traced, rundir, spec, arrays, ports)

    outs, cycles, err, run_stats = run(bool(waves))
    if err is not None:
        raise _failure(err, run, rundir, spec, waves)
    if stats is not None:
        stats.update(run_stats)
    if waves and not isinstance(waves, bool):  # a folder to keep the waveform in
        _keep_waveform(rundir, Path(waves))
    shutil.rmtree(rundir, ignore_errors=True)
    return outs, cycles
