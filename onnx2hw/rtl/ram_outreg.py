"""ECP5 block-RAM output registers: a netlist pass between Yosys and nextpnr.

Yosys maps every memory onto ``DP16KD`` with ``REGMODE = NOREG``: the read data leaves the
block 5.61 ns after the clock (nextpnr-ecp5's timing model, speed grade 6), so at 100 MHz the
route to the first register after it has 4.4 ns, and a placer that puts that register tens of
columns away misses the clock. The block has an output register of its own
(``REGMODE = OUTREG``, clocked by the read port's clock and enabled by its ``OCE`` pin): its
clock-to-out is 0.97 ns in the same model.

:func:`absorb_output_registers` moves a register into the block when nothing can tell the
difference: every used data output of the read port drives exactly one flip-flop's ``DI`` and
nothing else, and every such flip-flop is a plain register of the read port's clock (rising
edge, no set/reset: ``LSR`` constant 0, reset value 0), all with one clock enable (a net or
none), which becomes the block's ``OCE``; the read port itself must have no reset (``RST``
would then act on the output register). The register then has the same input, clock, enable
and initial value inside the block as outside, so the design's cycle behaviour does not
change; its ``Q`` net is driven by the block's output pin instead. In pseudo-dual-port mode
(``DATA_WIDTH_A = 36``: port A writes, port B reads all 36 bits on ``DOA``/``DOB`` in the
``CLKB`` domain) both ports' ``REGMODE`` and ``OCE`` are set, as Lattice's tools configure a
registered ``PDPW16KD``.

The RTL and its Verilator simulation are untouched: the pass only relocates registers.
"""
from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from ..files import write_text

__all__ = ["absorb_output_registers", "absorb_in_module"]

_PDP_WIDTH = 36


def _width(cell, port: str) -> int:
    """A ``DATA_WIDTH`` parameter (Yosys writes integers as 32-digit binary strings)."""
    v = cell["parameters"].get(f"DATA_WIDTH_{port}", 18)
    return int(v, 2) if isinstance(v, str) and len(v) == 32 else int(v)


def _register_enable(ff, clock):
    """The clock enable (``["1"]`` or a one-bit net) of ``ff`` if it is a plain rising-edge
    register of ``clock`` with no set/reset and reset value 0; ``None`` otherwise."""
    p, c = ff["parameters"], ff["connections"]
    if not (ff["type"] == "TRELLIS_FF" and c.get("CLK") == clock and p.get("CLKMUX", "CLK") == "CLK"
            and c.get("LSR", ["0"]) == ["0"] and p.get("LSRMUX", "LSR") == "LSR"
            and p.get("REGSET", "RESET") == "RESET" and c.get("M", ["x"])[0] in ("x", "0")):
        return None
    mux = p.get("CEMUX", "1").strip()
    if mux == "1":
        return ["1"]
    return c.get("CE") if mux == "CE" else None


def absorb_in_module(module: dict) -> int:
    """Absorb the eligible output registers of every ``DP16KD`` in ``module`` (a Yosys JSON
    module, changed in place); returns how many block read ports took their register."""
    cells = module["cells"]
    sinks = defaultdict(list)
    for name, cell in cells.items():
        dirs = cell.get("port_directions", {})
        for port, bits in cell["connections"].items():
            if dirs.get(port) != "output":
                for b in bits:
                    if not isinstance(b, str):
                        sinks[b].append((name, port))
    for port_ in module.get("ports", {}).values():   # a module port counts as a use
        for b in port_["bits"]:
            if not isinstance(b, str):
                sinks[b].append((None, None))
    absorbed, dead = 0, []
    for cell in list(cells.values()):
        if cell["type"] != "DP16KD":
            continue
        pdp = _width(cell, "A") == _PDP_WIDTH
        conn, params = cell["connections"], cell["parameters"]
        for port in ("B",) if pdp else ("A", "B"):
            if params.get(f"REGMODE_{port}", "NOREG") != "NOREG":
                continue
            outs = [(p, i) for p in conn if p.startswith(("DOA", "DOB") if pdp else f"DO{port}")
                    for i, b in enumerate(conn[p]) if not isinstance(b, str) and sinks.get(b)]
            if not outs or conn.get(f"RST{port}", ["0"]) != ["0"]:
                continue
            clock = conn.get(f"CLK{port}")
            if params.get(f"CLK{port}MUX", f"CLK{port}") != f"CLK{port}" or not clock or isinstance(clock[0], str):
                continue
            regs, enables = [], set()
            for p, i in outs:
                users = sinks[conn[p][i]]
                ce = (_register_enable(cells[users[0][0]], clock)
                      if len(users) == 1 and users[0][0] is not None and users[0][1] == "DI" else None)
                if ce is None:
                    break
                enables.add(tuple(ce))
                regs.append((p, i, users[0][0]))
            if len(regs) == len(outs) and len(enables) == 1:
                ce = list(enables.pop())
                for p, i, ff in regs:
                    conn[p][i] = cells[ff]["connections"]["Q"][0]
                    dead.append(ff)
                for q in ("A", "B") if pdp else (port,):
                    params[f"REGMODE_{q}"] = "OUTREG"
                    conn[f"OCE{q}"] = list(ce)
                absorbed += 1
    for ff in dead:
        cells.pop(ff, None)
    return absorbed


def absorb_output_registers(netlist) -> int:
    """Apply :func:`absorb_in_module` to every module of the Yosys JSON file ``netlist``,
    rewritten atomically (only if something changed); returns the number of read ports."""
    path = Path(netlist)
    design = json.loads(path.read_text())
    n = sum(absorb_in_module(m) for m in design.get("modules", {}).values())
    if n:
        write_text(path, json.dumps(design))
    return n
