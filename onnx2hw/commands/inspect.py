"""``onnx2hw inspect MODEL [--json]``: what is in a model and what the hardware path can map."""
from __future__ import annotations

import json
import sys

from rich.console import Console
from rich.table import Table

from ..ir import load
from ..summary import summarize

HELP = "show a model's structure, size, MACs and hardware support"


def configure(parser):
    parser.add_argument("model", help="ONNX model file")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.add_argument("--sort", action="store_true", help="repair a node order that is not topological")


def _fmt_shape(shape) -> str:
    return "unknown rank" if shape is None else "[" + ", ".join(str(d) for d in shape) + "]"


def _human(n: int | None) -> str:
    if n is None:
        return "unknown"
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= scale:
            return f"{n / scale:.2f}{unit}"
    return str(n)


def _print_rich(s) -> None:

    con = Console(highlight=False)
    con.print(f"[bold]{s.path}[/bold]  IR v{s.ir_version}  producer: {s.producer or '-'}  "
              f"opsets: {', '.join(f'{d} {v}' for d, v in s.opsets.items())}")
    io = Table(title="Inputs and outputs", title_justify="left")
    for col in ("", "name", "type", "shape"):
        io.add_column(col)
    for kind, values in (("input", s.inputs), ("output", s.outputs)):
        for v in values:
            io.add_row(kind, v["name"], v["type"], _fmt_shape(v["shape"]))
    con.print(io)
    hw = Table(title="Operators", title_justify="left")
    for col in ("op", "count", "hardware"):
        hw.add_column(col)
    for h in s.hardware:
        mark = ("[cyan]host[/cyan]" if h["where"] == "host" else
                "[green]yes[/green]" if h["supported"] else "[red]no[/red]")
        hw.add_row(h["op"], str(h["count"]), f"{mark}  {h['mapping']}")
    con.print(hw)
    if s.layers:
        mac = Table(title="MACs per inference (batch 1)", title_justify="left")
        mac.add_column("layer")
        mac.add_column("op")
        mac.add_column("MACs", justify="right")
        for layer in s.layers:
            mac.add_row(layer["name"], layer["op"], f"{layer['macs']:,}" if layer["macs"] is not None else "unknown")
        mac.add_row("[bold]total[/bold]", "", f"[bold]{s.total_macs:,}[/bold]" if s.total_macs is not None else "unknown")
        con.print(mac)
    con.print(f"parameters: {s.parameters:,} ({_human(s.parameter_bytes)}B)")
    for key, value in s.metadata.items():
        con.print(f"metadata {key}: {value}")
    for w in s.warnings:
        con.print(f"[yellow]warning:[/yellow] {w}")
    if s.host:
        con.print(f"host/hardware split: the hardware ends at {s.host['cut']!r}; the host runs "
                  f"{len(s.host['nodes'])} node(s) after it: {', '.join(s.host['nodes'])}")
    unsupported = [h["op"] for h in s.hardware if not h["supported"]]
    if unsupported:
        con.print(f"[red]not mappable to hardware:[/red] {', '.join(unsupported)}")


def run(args) -> int:

    graph = load(args.model, sort=args.sort)
    summary = summarize(graph, args.model)
    if args.json:
        json.dump(summary.to_dict(), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        _print_rich(summary)
    return 0
