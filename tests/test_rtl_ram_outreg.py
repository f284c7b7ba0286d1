"""The ECP5 netlist pass that moves a block RAM's first register into its output register
(onnx2hw.rtl.ram_outreg): which registers it takes, which it must leave, and what it writes."""
import copy
import json

import pytest

from onnx2hw.rtl.ram_outreg import absorb_in_module, absorb_output_registers

pytestmark = pytest.mark.filterwarnings("ignore:.*created but never used")

CLK, CE, RST = 2, 3, 4


def _ram(width=18, dout=(10, 11), clk_b=CLK, rst_b="0"):
    """A DP16KD whose port B reads ``dout`` (net numbers) on DOB0.. (on DOA0.. then DOB0.. in
    pseudo-dual-port mode, ``width`` 36)."""
    names = [f"DOA{i}" for i in range(18)] + [f"DOB{i}" for i in range(18)] if width == 36 else \
        [f"DOB{i}" for i in range(18)]
    conn = {"CLKA": [CLK] if width != 36 else ["0"], "CLKB": [clk_b], "CEB": ["1"], "OCEA": ["0"],
            "OCEB": ["1"], "RSTA": ["0"], "RSTB": [rst_b], "DOA0": [90]}
    dirs = {p: "input" for p in conn}
    dirs["DOA0"] = "output"
    for name, net in zip(names, dout):
        conn[name], dirs[name] = [net], "output"
    w = format(width, "032b")
    return {"type": "DP16KD", "parameters": {"DATA_WIDTH_A": w, "DATA_WIDTH_B": w, "REGMODE_A": "NOREG",
                                             "REGMODE_B": "NOREG", "CLKBMUX": "CLKB"},
            "port_directions": dirs, "connections": conn}


def _ff(d, q, *, ce=None, lsr="0", regset="RESET", clk=CLK):
    conn = {"CLK": [clk], "DI": [d], "LSR": [lsr], "Q": [q]}
    params = {"CEMUX": "1 ", "CLKMUX": "CLK", "GSR": "DISABLED", "LSRMUX": "LSR", "REGSET": regset}
    if ce is not None:
        conn["CE"], params["CEMUX"] = [ce], "CE"
    return {"type": "TRELLIS_FF", "parameters": params,
            "port_directions": {"CLK": "input", "DI": "input", "LSR": "input", "CE": "input", "Q": "output"},
            "connections": conn}


def _lut(a, z):
    return {"type": "LUT4", "parameters": {}, "port_directions": {"A": "input", "Z": "output"},
            "connections": {"A": [a], "Z": [z]}}


def _module(ram, *cells, ports=None):
    return {"ports": ports or {}, "cells": {"ram": ram, **{f"c{i}": c for i, c in enumerate(cells)}}}


def test_plain_registers_move_into_the_block():
    m = _module(_ram(), _ff(10, 20), _ff(11, 21), _lut(20, 30))
    assert absorb_in_module(m) == 1
    ram = m["cells"]["ram"]
    assert ram["parameters"]["REGMODE_B"] == "OUTREG" and ram["parameters"]["REGMODE_A"] == "NOREG"
    assert ram["connections"]["DOB0"] == [20] and ram["connections"]["DOB1"] == [21]   # drives Q's nets
    assert ram["connections"]["OCEB"] == ["1"]
    assert sorted(m["cells"]) == ["c2", "ram"]          # the registers are gone, their user stays


def test_a_register_enable_becomes_the_output_enable():
    m = _module(_ram(), _ff(10, 20, ce=CE), _ff(11, 21, ce=CE))
    assert absorb_in_module(m) == 1
    assert m["cells"]["ram"]["connections"]["OCEB"] == [CE]


def test_pseudo_dual_port_sets_both_halves():
    """36 bits read on DOA and DOB in the CLKB domain: both REGMODEs and OCEs, as Lattice's
    tools configure a registered PDPW16KD."""
    ram = _ram(width=36, dout=(10, 11))              # DOA0, DOA1
    ram["connections"]["DOB0"], ram["port_directions"]["DOB0"] = [12], "output"
    m = _module(ram, _ff(10, 20), _ff(11, 21), _ff(12, 22))
    assert absorb_in_module(m) == 1
    ram = m["cells"]["ram"]
    assert (ram["parameters"]["REGMODE_A"], ram["parameters"]["REGMODE_B"]) == ("OUTREG", "OUTREG")
    assert (ram["connections"]["OCEA"], ram["connections"]["OCEB"]) == (["1"], ["1"])
    assert [ram["connections"][p] for p in ("DOA0", "DOA1", "DOB0")] == [[20], [21], [22]]


@pytest.mark.parametrize("why, cells, ram_kw, ports", [
    ("a read bit also feeds logic", [_ff(10, 20), _ff(11, 21), _lut(11, 31)], {}, None),
    ("a read bit feeds logic, not a register", [_ff(10, 20), _lut(11, 31)], {}, None),
    ("the register has a reset", [_ff(10, 20, lsr=RST), _ff(11, 21)], {}, None),
    ("the register resets to 1", [_ff(10, 20, regset="SET"), _ff(11, 21)], {}, None),
    ("the registers' enables differ", [_ff(10, 20, ce=CE), _ff(11, 21)], {}, None),
    ("the register runs on another clock", [_ff(10, 20, clk=7), _ff(11, 21, clk=7)], {}, None),
    ("the read port has a reset", [_ff(10, 20), _ff(11, 21)], {"rst_b": RST}, None),
    ("a read bit is a module port", [_ff(10, 20), _ff(11, 21)], {}, {"o": {"direction": "output", "bits": [11]}}),
])
def test_what_cannot_move_stays(why, cells, ram_kw, ports):
    m = _module(_ram(**ram_kw), *copy.deepcopy(cells), ports=ports)
    before = copy.deepcopy(m)
    assert absorb_in_module(m) == 0, why
    assert m == before, why


def test_the_file_is_rewritten_only_when_something_moved(tmp_path):
    path = tmp_path / "top.json"
    path.write_text(json.dumps({"modules": {"top": _module(_ram(), _ff(10, 20), _lut(11, 31))}}))
    stamp = path.stat().st_mtime_ns
    assert absorb_output_registers(path) == 0 and path.stat().st_mtime_ns == stamp
    path.write_text(json.dumps({"modules": {"top": _module(_ram(), _ff(10, 20), _ff(11, 21))}}))
    assert absorb_output_registers(path) == 1
    assert json.loads(path.read_text())["modules"]["top"]["cells"]["ram"]["parameters"]["REGMODE_B"] == "OUTREG"


@pytest.mark.synth
@pytest.mark.parametrize("block", ["deframer", "window", "fifo"])
def test_block_ram_first_registers_move_in_synthesized_blocks(block, tmp_path):
    """Every block RAM read port of the deframer's buffer, a block-RAM line buffer and a
    block-RAM FIFO feeds a plain register after Yosys, and the pass takes each one."""
    from amaranth.hdl import signed

    from onnx2hw.rtl.fifo import StreamFIFO
    from onnx2hw.rtl.framing import Deframer
    from onnx2hw.rtl.synth_check import synthesize
    from onnx2hw.rtl.window import bench_config

    comp = {"deframer": lambda: Deframer(in_bytes=3000, buffer_bytes=4096 * 2, timeout=100),
            "window": lambda: bench_config()[0][1](),
            "fifo": lambda: StreamFIFO(signed(8), 4, 1100)}[block]()
    _, netlist = synthesize(comp, "ecp5", workdir=tmp_path, json_out=True)
    moved = absorb_output_registers(netlist)
    top = next(m for m in json.loads(netlist.read_text())["modules"].values() if m.get("attributes", {}).get("top"))
    rams = [c for c in top["cells"].values() if c["type"] == "DP16KD"]
    assert len(rams) >= 2 and moved == len(rams)    # one read port each, all registered now
    assert all("OUTREG" in (c["parameters"]["REGMODE_A"], c["parameters"]["REGMODE_B"]) for c in rams)
