"""``onnx2hw inspect MODEL [--json]``: what is in a model and the verdict ``compile`` will reach.

The verdict comes from compile's own front half and folding (:func:`onnx2hw.verdict.predict`):
exit status 0 when the model maps, 2 with compile's one ``error:`` line when it is refused.
"""
from __future__ import annotations

import json
import sys

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..flow import load_npz
from ..ir import ModelError, load
from ..summary import summarize
from ..verdict import Verdict, predict
from ._options import add_host_option

HELP = "show a model's structure, size, MACs and the verdict compile will reach"

_MARKS = {"yes": "[green]yes[/green]", "no": "[red]no[/red]", "refused": "[red]refused[/red]",
          "host": "[cyan]host[/cyan]", "constant (folded)": "[dim]constant (folded)[/dim]",
          "folded": "[dim]folded[/dim]"}


def configure(parser):
    parser.add_argument("model", help="ONNX model file")
    parser.add_argument("--json", action="store_true", help="print the summary and the verdict as JSON")
    parser.add_argument("--sort", action="store_true", help="repair a node order that is not topological")
    parser.add_argument("--calib", metavar="CALIB.npz",
                        help="calibration inputs of a float model (default: synthetic data; the verdict then "
                             "assumes compile is given --calib)")
    parser.add_argument("--board", default="ulx3s", help="board whose resources the folding must fit (default ulx3s)")
    add_host_option(parser)


def _fmt_shape(shape) -> str:
    return "unknown rank" if shape is None else "[" + ", ".join(str(d) for d in shape) + "]"


def _count(n: int | None) -> str:
    return "unknown" if n is None else f"{n:,}"


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
            io.add_row(kind, escape(v["name"]), v["type"], escape(_fmt_shape(v["shape"])))
    con.print(io)
    hw = Table(title="Operators", title_justify="left")
    for col in ("op", "count", "hardware"):
        hw.add_column(col)
    for h in s.hardware:
        hw.add_row(escape(h["op"]), str(h["count"]), f"{_MARKS[h['status']]}  {escape(h['mapping'])}")
    con.print(hw)
    if s.layers:
        mac = Table(title="MACs per inference (batch 1)", title_justify="left")
        mac.add_column("layer")
        mac.add_column("op")
        mac.add_column("MACs", justify="right")
        for layer in s.layers:
            mac.add_row(escape(layer["name"]), layer["op"], _count(layer["macs"]))
        mac.add_row("[bold]total[/bold]", "", f"[bold]{_count(s.total_macs)}[/bold]")
        con.print(mac)
    con.print(f"parameters: {s.parameters:,} ({_human(s.parameter_bytes)}B)")
    for key, value in s.metadata.items():
        con.print(f"metadata {key}: {value}")
    for w in s.warnings:
        con.print(f"[yellow]warning:[/yellow] {w}")
    unsupported = [h["op"] for h in s.hardware if h["status"] == "no"]
    if unsupported:
        con.print(f"[red]not mappable to hardware:[/red] {escape(', '.join(unsupported))}")


def _print_verdict(s, v: Verdict) -> None:
    con = Console(highlight=False)
    if v.calibration == "synthetic":
        con.print("calibration: the model needs calibration data and none was given; synthetic data stood in, "
                  "so this verdict assumes compile is given --calib (the integer layers and the split do not depend on the "
                  "calibration data; activation types, and so the resources near the board's limit, can: "
                  "pass --calib to settle those)")
    if s.host:
        con.print(escape(f"host/hardware split: the hardware ends at {', '.join(map(repr, s.host['cuts']))}; the host runs "
                         f"{len(s.host['nodes'])} node(s) after it: {', '.join(s.host['nodes'])}"))
    if v.integer_layers:
        con.print(escape(f"integer layers ({len(v.integer_layers)}): "
                         + ", ".join(f"{name} ({kind})" for name, kind in v.integer_layers)))
    if v.maps:
        con.print(f"[green]verdict: maps[/green] on {v.board}: the hardware runs {len(v.hardware_nodes)} node(s), "
                  f"the host {len(v.view.host_nodes)}")
        return
    r = v.refusal
    where = "" if r.node is None else escape(f" at node {r.node!r} ({r.op})")
    step = "in its front half" if r.stage == "model" else f"when folding for {v.board}"
    con.print(f"[red]verdict: refused[/red]{where}, {step} (compile's error line follows)")
    if r.way_out:
        con.print(escape("way out (checked: the model then maps): " + " | ".join(r.way_out)))


def run(args) -> int:

    graph = load(args.model, sort=args.sort)
    calib = None if args.calib is None else load_npz(args.calib, graph, "calibration")
    verdict = predict(graph, calib=calib, host=args.host, board=args.board)
    summary = summarize(graph, args.model, verdict.view)
    if args.json:
        json.dump({**summary.to_dict(), **verdict.to_dict()}, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        _print_rich(summary)
        _print_verdict(summary, verdict)
    sys.stdout.flush()
    if verdict.refusal is not None:
        raise ModelError(verdict.refusal.message)
    return 0
