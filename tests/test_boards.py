"""Board registry, PLL parameters (vs yowasp-icepll / the PLL equations) and board tops
elaborated for every board's platform; one real ULX3S-85F build through YoWASP (synth)."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import _int_models as models
from onnx2hw import boards
from onnx2hw.boards.pll import ecp5_pll, ice40_pll
from onnx2hw.dataflow.compile import compile_pipeline
from onnx2hw.dataflow.fold import Budget
from onnx2hw.flow import link_format_of
from onnx2hw.ir import ModelError
from onnx2hw.rtl.accelerator import AcceleratorCore

pytestmark = pytest.mark.filterwarnings("ignore::amaranth.hdl._ir.UnusedElaboratable")

BIN = Path(sys.executable).parent

# docs/architecture.md, device budgets
EXPECTED = {"ulx3s-12f": ("LFE5U-12F", 12000, 28, 32), "ulx3s-25f": ("LFE5U-25F", 24288, 28, 56),
            "ulx3s-45f": ("LFE5U-45F", 43848, 72, 108), "ulx3s-85f": ("LFE5U-85F", 83640, 156, 208),
            "icebreaker": ("iCE40UP5K", 5280, 8, 30), "orangecrab": ("LFE5U-25F", 24288, 28, 56)}


def test_registry_and_budgets():
    assert set(boards.BOARDS) == set(EXPECTED)
    assert boards.get_board("ulx3s") is boards.get_board("ULX3S-85F")
    for name, (device, lut, dsp, ebr) in EXPECTED.items():
        b = boards.get_board(name)
        assert (b.device, b.budget.lut, b.budget.dsp, b.budget.ebr) == (device, lut, dsp, ebr)
        assert b.family == ("ice40" if name == "icebreaker" else "ecp5")
        b.check_link(b.default_clock_hz, b.default_baud)          # suggested link is valid
        assert b.default_clock_hz % b.default_baud == 0           # with an exact divisor
        if b.default_clock_hz != b.osc_hz:
            assert b.pll(b.default_clock_hz).fout_hz == b.default_clock_hz
    with pytest.raises(ModelError, match="unknown board 'de10'.*ulx3s-85f"):
        boards.get_board("de10")


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_platform_matches_board(name):
    b = boards.get_board(name)
    plat = b.platform()
    assert plat.device == b.device
    assert plat.default_clk_frequency == b.osc_hz
    # nextpnr options as Amaranth's own Lattice platform spells them
    if b.family == "ecp5":
        assert plat._nextpnr_device_options[plat.device] == f"--{b.nextpnr_device}"
        assert plat._nextpnr_package_options[plat.package].upper() == b.nextpnr_package
    else:
        assert (plat.device, plat.package) == ("iCE40UP5K", "SG48")
    plat.lookup("uart", 0)                    # every board has a UART resource


def _icepll(fin_mhz, fout_mhz):
    out = subprocess.run([str(BIN / "yowasp-icepll"), "-i", str(fin_mhz), "-o", str(fout_mhz)],
                         capture_output=True, text=True, timeout=300).stdout
    get = lambda k: int(re.search(rf"^{k}:\s+(\d+)", out, re.M).group(1))  # noqa: E731
    achieved = float(re.search(r"F_PLLOUT:\s+([\d.]+) MHz \(achieved\)", out).group(1))
    return {"DIVR": get("DIVR"), "DIVF": get("DIVF"), "DIVQ": get("DIVQ"),
            "FILTER_RANGE": get("FILTER_RANGE")}, achieved


@pytest.mark.parametrize("fout", [24, 30, 36, 48, 60, 75])
def test_ice40_pll_matches_icepll(fout):
    want, achieved = _icepll(12, fout)
    got = ice40_pll(12e6, fout * 1e6)
    assert got.fout_hz / 1e6 == pytest.approx(achieved, abs=5e-4)
    assert {k: got.params[k] for k in want} == want
    p = got.params                                       # the PLL equation, independently
    assert 12e6 * (p["DIVF"] + 1) / (p["DIVR"] + 1) / 2 ** p["DIVQ"] == pytest.approx(got.fout_hz)


@pytest.mark.parametrize("fin,fout", [(25e6, 100e6), (25e6, 50e6), (25e6, 62.5e6), (48e6, 96e6)])
def test_ecp5_pll(fin, fout):
    p = ecp5_pll(fin, fout)
    q = p.params
    assert fin / q["CLKI_DIV"] * q["CLKFB_DIV"] == pytest.approx(fout)
    assert 400e6 <= fin / q["CLKI_DIV"] * q["CLKFB_DIV"] * q["CLKOP_DIV"] <= 800e6   # VCO range
    assert q["FEEDBK_PATH"] == "CLKOP" and p.primitive == "EHXPLLL"


def test_pll_errors():
    with pytest.raises(ValueError, match="cannot make 1000 MHz"):
        ecp5_pll(25e6, 1000e6)
    with pytest.raises(ValueError, match="16..275 MHz"):
        ice40_pll(12e6, 400e6)
    with pytest.raises(ValueError, match="positive"):
        ice40_pll(12e6, -1)


@pytest.fixture(scope="module")
def small_pipeline():
    return compile_pipeline(models.mlp(seed=1), budget=Budget(6000, 12, 20, "small"))


@pytest.mark.parametrize("name,clock,baud,pll,pins", [
    ("ulx3s-85f", 50e6, 3e6, "EHXPLLL", ['SITE "M1"', 'SITE "L4"', 'FREQUENCY PORT "clk25_0__io" 25000000']),
    ("ulx3s-12f", 25e6, 115200, None, ['SITE "M1"', 'SITE "L4"', 'FREQUENCY PORT "clk25_0__io" 25000000']),
    ("icebreaker", 24e6, 3e6, "SB_PLL40_PAD", ["set_io uart_0__rx__io 6", "set_io uart_0__tx__io 9",
                                                "set_frequency clk12_0__io 12.0"]),
    ("orangecrab", 48e6, 1e6, None, ['SITE "M18"', 'SITE "N17"', 'SITE "K4"']),
])
def test_board_top_elaborates_for_platform(small_pipeline, name, clock, baud, pll, pins):
    b = boards.get_board(name)
    top = b.make_top(AcceleratorCore(small_pipeline), link_format_of(small_pipeline), clock, baud)
    plan = b.platform().build(top, do_build=False)
    il = plan.files["top.il"]
    il = il.decode() if isinstance(il, bytes) else il
    cons = plan.files.get("top.lpf") or plan.files.get("top.pcf")
    cons = cons.decode() if isinstance(cons, bytes) else cons
    for prim in ("EHXPLLL", "SB_PLL40_PAD"):
        assert (prim in il) == (prim == pll)
    # behind an ECP5 PLL the synchronized reset reaches the flip-flops through a global (DCCA)
    assert ("cell \\DCCA" in il) == (pll == "EHXPLLL")
    for p in pins:
        assert p in cons
    script = plan.files["build_top.sh"]
    assert "dfu-suffix" not in (script.decode() if isinstance(script, bytes) else script)


def test_make_top_rejects_bad_link(small_pipeline):
    b = boards.get_board("ulx3s")
    with pytest.raises(ValueError, match="above the 3e\\+06 baud"):
        b.make_top(AcceleratorCore(small_pipeline), link_format_of(small_pipeline), 100e6, 4e6)
    with pytest.raises(ValueError, match="cannot be made"):
        b.make_top(AcceleratorCore(small_pipeline), link_format_of(small_pipeline), 25e6, 3e6)
