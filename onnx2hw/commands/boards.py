"""``onnx2hw boards [--json]``: the supported FPGA boards and their budgets."""
from __future__ import annotations

import json

from rich.console import Console
from rich.table import Table

from ..boards import ALIASES, BOARDS

HELP = "list the supported FPGA boards with device, LUT/DSP/EBR budgets, oscillator and maximum baud rate"


def configure(parser):
    parser.add_argument("--json", action="store_true", help="print the list as JSON")


def run(args) -> int:

    rows = [b.summary() for b in BOARDS.values()]
    aliases = {v: k for k, v in ALIASES.items()}
    for r in rows:
        r["alias"] = aliases.get(r["name"])
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0

    t = Table(title="Boards (onnx2hw synth --board NAME)", title_justify="left")
    for col, just in (("board", "left"), ("family", "left"), ("device", "left"), ("package", "left"),
                      ("LUT4", "right"), ("DSP", "right"), ("EBR", "right"), ("osc MHz", "right"),
                      ("max baud", "right"), ("default clock / baud", "right")):
        t.add_column(col, justify=just)
    for r in rows:
        name = r["name"] + (f" ({r['alias']})" if r["alias"] else "")
        t.add_row(name, r["family"], r["device"], r["package"], f"{r['lut']:,}", str(r["dsp"]),
                  str(r["ebr"]), f"{r['osc_mhz']:g}", f"{r['max_baud'] / 1e6:g}M",
                  f"{r['default_clock_mhz']:g} MHz / {r['default_baud'] / 1e6:g}M")
    Console(highlight=False, width=140).print(t)
    return 0
