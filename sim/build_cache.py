"""Simulator builds of a design in its test wrapper, cached by content.

A build lives in ``<cache_root>/<key>`` (:mod:`onnx2hw.sim.cache_folder`), keyed by the
design's Verilog (source-location attributes removed) and the wrapper's, the simulator, the
toplevel, the compile flags and the cocotb install, so re-runs do not recompile, whatever their
data. Each build is made under its lock; Verilator builds link the shared runtime
(:mod:`onnx2hw.sim.verilator_runtime`) and fall back to a complete build if that fails. Only the
executable is kept.

Verilator's flags (:func:`flags_for`) trade build time against simulation speed: the design's
per-cycle code (``OPT_FAST``) is compiled at ``-Og``, which gives most of ``-O1``'s speed for
little more build time than ``-O0``. Designs above :data:`LARGE_DESIGN` bytes of Verilog are
highly parallel: they run few cycles per inference and compile for long (Verilator's
V3MergeCond dominates their verilation, and their C++ compiles several times faster at ``-O0``),
so they are verilated with ``-fno-merge-cond`` and compiled at ``-O0``. A long run (see
:data:`onnx2hw.sim.cocotb_run.LONG_RUN`) is paced by the simulation, not the build: its design is
compiled at ``-O2`` whatever its size, a build of its own in the cache. Verilator's default
``--x-assign fast`` applies.
"""
from __future__ import annotations

import hashlib
import shutil
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import cocotb_tools.config as cocotb_config

from ._harness import TB_MODULE, TB_TOP
from .cache_folder import cached_build
from .convert import SRC_ATTR, strip_src
from .toolchain import cocotb_runner, log_tail, simulator_available, tool_env
from .verilator_runtime import OPT_RUNTIME, ensure_runtime, runtime_make_vars

__all__ = ["Flags", "flags_for", "build_key", "ensure_build", "build_sources", "runtime_ready", "SRC_ATTR",
           "LARGE_DESIGN"]

#: the design's own C++: Verilator's make variables for the code evaluated every cycle
#: (OPT_FAST) and the code run once (OPT_SLOW)
OPT_FAST = "-Og"
OPT_SLOW = ""
#: above this many bytes of Verilog (source attributes removed) a design is highly parallel:
#: it runs few cycles per inference, so compile time counts more than simulation speed
LARGE_DESIGN = 512 * 1024
OPT_FAST_LARGE = "-O0"
VERILATOR_ARGS_LARGE: tuple[str, ...] = ("-fno-merge-cond",)
#: a long run's design (``ensure_build(long_run=True)``): the simulation, not the build, takes the time
OPT_FAST_LONG = "-O2"
_VERILATOR_WARNINGS = ("-Wno-fatal", "-Wno-WIDTH", "-Wno-UNOPTFLAT")


@dataclass(frozen=True)
class Flags:
    """How a design is verilated and its C++ compiled."""
    opt_fast: str
    opt_slow: str
    args: tuple[str, ...]     # Verilator options

    def describe(self) -> str:
        return " ".join([f"OPT_FAST={self.opt_fast}", f"OPT_SLOW={self.opt_slow}", *self.args])


def flags_for(stripped: str, long_run: bool = False) -> Flags:
    """Verilator's flags for the design ``stripped`` (its Verilog without source attributes)."""
    if len(stripped.encode()) > LARGE_DESIGN:
        return Flags(OPT_FAST_LONG if long_run else OPT_FAST_LARGE, OPT_SLOW,
                     (*_VERILATOR_WARNINGS, *VERILATOR_ARGS_LARGE))
    return Flags(OPT_FAST_LONG if long_run else OPT_FAST, OPT_SLOW, _VERILATOR_WARNINGS)


def build_key(stripped: str, simulator: str, toplevel: str, waves: bool, flags: Flags | None) -> str:
    """Content key of a simulator build. It names the cocotb install too: the executable links
    cocotb's libraries from there, so every environment (venv) gets builds of its own."""
    h = hashlib.sha256()
    env = (metadata.version("cocotb"), str(cocotb_config.libs_dir))
    for part in (stripped, simulator, toplevel, str(waves), TB_MODULE, flags.describe() if flags else "", *env):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:20]


def runtime_ready(text: str = "", waves: bool = False) -> dict | None:
    """Build (or find) now the shared Verilator runtime that the design ``text`` (default: a
    small design) would use; its description, or ``None`` if designs will be built without it."""
    if simulator_available("verilator"):
        return None
    return ensure_runtime(flags_for(strip_src(text)), waves)


def build_sources(bdir: Path) -> list[Path]:
    """The Verilog files of the build in ``bdir``: the design and its wrapper."""
    return [bdir / "top.v", bdir / "harness.v"]


def _build(bdir: Path, text: str, harness: str, simulator: str, flags: Flags | None, waves: bool,
           rt: dict | None) -> None:
    """Build the design ``text`` in the wrapper ``harness`` afresh in ``bdir`` (linking the
    shared runtime ``rt`` if given)."""
    if bdir.exists():
        shutil.rmtree(bdir)
    bdir.mkdir(parents=True)
    (bdir / "top.v").write_text(text)
    (bdir / "harness.v").write_text(harness)
    make_vars = {}
    if flags is not None:
        make_vars = {"OPT_FAST": flags.opt_fast, "OPT_SLOW": flags.opt_slow, "OPT_GLOBAL": OPT_RUNTIME}
        if rt is not None:
            make_vars.update(runtime_make_vars(rt))
    log = bdir / "build.log"
    with tool_env(simulator, make_vars):
        runner = cocotb_runner(simulator)
        try:
            runner.build(sources=build_sources(bdir), hdl_toplevel=TB_TOP, build_dir=bdir,
                         build_args=list(flags.args) if flags else [], timescale=("1ns", "1ps"),
                         waves=waves, log_file=log)
        except (RuntimeError, SystemExit) as e:
            raise RuntimeError(f"{simulator} build failed ({e}); log {log}:\n"
                               f"{log_tail(log)}") from None


def _build_with_fallback(bdir: Path, text: str, harness: str, simulator: str, flags: Flags | None,
                         waves: bool) -> bool:
    """Build in ``bdir`` with the shared runtime if there is one, else (or if that fails)
    completely; whether the shared runtime was used."""
    rt = ensure_runtime(flags, waves) if flags is not None else None
    try:
        _build(bdir, text, harness, simulator, flags, waves, rt)
    except RuntimeError:
        if rt is None:
            raise
        # not buildable with the shared runtime: the complete build decides (and reports)
        first = log_tail(bdir / "build.log", 10 ** 6)
        _build(bdir, text, harness, simulator, flags, waves, None)
        (bdir / "build.shared-runtime.log").write_text(first)
        return False
    return rt is not None


def ensure_build(text: str, harness: str, simulator: str, waves: bool, long_run: bool = False) -> Path:
    """Build (or reuse) the simulator binary for the design ``text`` in the wrapper ``harness``
    (compiled for simulation speed if ``long_run``); returns the build directory. The first
    build of a process prunes the cache (:func:`onnx2hw.sim.cache_folder.prune_cache`)."""
    stripped = strip_src(text)
    flags = flags_for(stripped, long_run) if simulator == "verilator" else None
    key = build_key(stripped + "\0" + harness, simulator, TB_TOP, waves, flags)

    def build(bdir: Path) -> dict:
        shared = _build_with_fallback(bdir, text, harness, simulator, flags, waves)
        if simulator == "verilator":   # only the `top` executable is needed to run tests
            for f in bdir.iterdir():
                if f.suffix in (".gch", ".o", ".a", ".d"):
                    f.unlink()
        return {"simulator": simulator, "waves": waves, "flags": flags.describe() if flags else None,
                "shared_runtime": shared}
    return cached_build(key, build)
