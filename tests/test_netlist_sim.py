"""`synth --verify N --verify-netlist` simulates the synthesized netlist (after onnx2hw's netlist passes) before place
and route: bit-exact on the digits MLP, whose netlist holds DP16KD blocks with absorbed output
registers and MULT18X18D multipliers; a netlist pass that drops an output register is caught
(exit 1, one error line, nothing published); a netlist with a cell that has no model is refused."""
import json
from pathlib import Path

import pytest

from _paths import EXAMPLES
from onnx2hw.build import open_build
from onnx2hw.cli import main
from onnx2hw.ir.errors import ModelError
from onnx2hw.rtl import ram_outreg
from onnx2hw.sim.netlist import NetlistSimError, check_netlist

MODEL = str(EXAMPLES / "digits_mlp_int8.onnx")


@pytest.mark.synth
@pytest.mark.sim
@pytest.mark.slow
def test_synth_verify_simulates_the_netlist_bit_exact(tmp_path, capsys):
    out = tmp_path / "b"
    assert main(["synth", MODEL, "--board", "ulx3s", "-o", str(out), "--verify", "6", "--verify-netlist"]) == 0
    err = capsys.readouterr().err
    assert "verified: bit-exact on 6/6" in err and "verified the netlist: bit-exact on 6/6" in " ".join(err.split())
    r = json.loads((out / "report.json").read_text())
    assert r["verify"]["rtl"]["exact"] == 6 and r["verify"]["rtl"]["inferences"] == 6
    nl = r["verify"]["netlist"]
    assert nl["exact"] == nl["inferences"] == 6 and nl["cycles"] > 0
    assert nl["cells"]["DP16KD"] >= 1 and nl["cells"]["MULT18X18D"] >= 1, nl
    netlist = json.loads((out / "work" / "digits_mlp_int8.json").read_text())
    acc = netlist["modules"]["digits_mlp_int8.accelerator"]
    assert any(c["type"] == "DP16KD" and "OUTREG" in (c["parameters"].get("REGMODE_A"), c["parameters"].get("REGMODE_B"))
               for c in acc["cells"].values()), "the pass moved no register: the models' OUTREG path was not simulated"
    page = (out / "report.html").read_text()
    assert "Verification" in page and "netlist after synthesis" in page and "bit-exact on 6/6" in page


@pytest.mark.synth
@pytest.mark.sim
@pytest.mark.slow
def test_a_pass_that_drops_an_output_register_is_caught(tmp_path, capsys, monkeypatch):
    """The pass moves registers into the blocks, then loses one: the block's read data arrives a
    cycle early, which the netlist simulation sees; the build stops before place and route."""
    dropped = []

    def broken(netlist):
        n = ram_outreg.absorb_output_registers(netlist)
        design = json.loads(Path(netlist).read_text())
        for mname, module in design["modules"].items():
            if not mname.endswith(".accelerator"):     # the framing logic around it is not simulated
                continue
            for name, cell in module["cells"].items():
                p = cell["parameters"]
                ports = [q for q in ("A", "B") if p.get(f"REGMODE_{q}") == "OUTREG"]
                if cell["type"] == "DP16KD" and ports and not dropped:
                    for q in ports:
                        p[f"REGMODE_{q}"] = "NOREG"
                    dropped.append(name)
        Path(netlist).write_text(json.dumps(design))
        return n

    monkeypatch.setattr("onnx2hw.build.absorb_output_registers", broken)
    out = tmp_path / "b"
    rc = main(["synth", MODEL, "--board", "ulx3s", "-o", str(out), "--verify", "4", "--verify-netlist"])
    err = capsys.readouterr().err
    assert dropped, "no output register was absorbed, so none could be dropped"
    assert rc == 1
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and "the netlist differs from the golden model" in lines[0], err
    assert "left incomplete (not published)" in lines[0]
    assert not list(out.glob("*.bit")) and not (out / "report.json").exists()
    assert not (out / "work" / "digits_mlp_int8.config").exists()      # place and route never ran
    with pytest.raises(ModelError):
        open_build(out)


def test_a_cell_without_a_model_is_refused():
    netlist = {"modules": {"top.accelerator": {"ports": {}, "cells": {
        "x": {"type": "ALU54B", "connections": {}, "parameters": {}}}}}}
    with pytest.raises(NetlistSimError, match="cell 'x' of type ALU54B has no simulation model"):
        check_netlist(netlist, "top.accelerator")
    netlist["modules"]["top.accelerator"]["cells"] = {"m": {
        "type": "MULT18X18D", "parameters": {}, "port_directions": {"P0": "output", "SROA0": "output"},
        "connections": {"P0": [5], "SROA0": [6]}}}
    with pytest.raises(NetlistSimError, match="uses output SROA0, which its model does not drive"):
        check_netlist(netlist, "top.accelerator")


@pytest.mark.parametrize("argv, says", [([], "--verify-netlist needs --verify"),
                                        (["--verify", "2", "--board", "icebreaker"], "models ECP5 cells only")])
def test_verify_netlist_option_errors(tmp_path, capsys, argv, says):
    assert main(["synth", MODEL, "-o", str(tmp_path / "b"), "--verify-netlist", *argv]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and says in err[0], err
    assert not (tmp_path / "b").exists()
