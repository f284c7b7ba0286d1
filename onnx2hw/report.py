"""Build reports: ``report.json`` (machine-readable) and ``report.html`` (one page a person
reads at a glance: the pipeline as an SVG diagram, resource bars against the device, clock)."""
from __future__ import annotations

import html
from pathlib import Path
from typing import NamedTuple

from .files import write_json, write_text

__all__ = ["make_report", "write_report", "render_html", "used_resources", "throughput", "io_part", "host_part"]

#: report resource -> nextpnr cell types (first present wins) and a multiplier
_CELLS = {
    "ecp5": {"lut": [("TRELLIS_COMB", 1), ("TRELLIS_SLICE", 2)], "ff": [("TRELLIS_FF", 1), ("TRELLIS_SLICE", 2)],
             "dsp": [("MULT18X18D", 1)], "bram": [("DP16KD", 1)]},
    "ice40": {"lut": [("ICESTORM_LC", 1)], "ff": [("ICESTORM_LC", 1)], "dsp": [("ICESTORM_DSP", 1)],
              "bram": [("ICESTORM_RAM", 1)]},
}


def used_resources(util: dict, family: str) -> dict[str, int | None]:
    out = {}
    for res, options in _CELLS[family].items():
        out[res] = next((util[c][0] * k for c, k in options if c in util), None)
    return out


def _rates(cycles_per_inference: float, latency_cycles: float, mhz: float) -> tuple[float, float]:
    """(inferences/s, latency in µs) of a pipeline at ``mhz``."""
    return mhz * 1e6 / cycles_per_inference, latency_cycles / mhz


def throughput(pipeline, *, clock_mhz: float, fmax_mhz: float | None, baud: float, link_bytes: int,
               simulated: dict | None = None, selftest: dict | None = None) -> dict:
    """The report's ``throughput`` section: the pipeline's II and latency, and three figures.

    * ``link_bound``: what the UART carries (10 bits per byte on the busier direction, frame
      headers not counted) — what ``onnx2hw run`` can reach over the link;
    * ``compute_bound``: the pipeline alone at the clock the build achieved (the target clock
      when timing is met, else the achieved Fmax), from the cost model's II and latency
      (``estimated``) and, when the design was simulated (``synth --verify``), from the
      simulated cycles (``simulated``: ``{"ii", "latency", "inferences"}``); each also at the
      achieved Fmax (what ``--clock-mhz FMAX`` would give);
    * ``measured``: on a board, by a self-test build (``synth --selftest``, then ``run
      --selftest``); the report only says how, the numbers come from the board.

    The flat keys (``inferences_per_s``, ``compute_bound_per_s`` at the target clock,
    ``link_bound_per_s``, ...) are kept for the readers of earlier reports.
    """
    compute = clock_mhz * 1e6 / pipeline.ii
    link = baud / 10 / link_bytes if link_bytes else None
    met = fmax_mhz is not None and fmax_mhz >= clock_mhz
    at = clock_mhz if met or fmax_mhz is None else fmax_mhz

    def figures(ii, latency):
        rate, lat = _rates(ii, latency, at)
        out = {"inferences_per_s": rate, "latency_us": lat}
        if fmax_mhz is not None:
            out["inferences_per_s_at_fmax"], out["latency_us_at_fmax"] = _rates(ii, latency, fmax_mhz)
        return out

    sim = None
    if simulated and simulated.get("ii") and simulated.get("latency") is not None:
        sim = {"cycles_per_inference": float(simulated["ii"]), "latency_cycles": int(simulated["latency"]),
               "inferences": int(simulated.get("inferences", 0)),
               **figures(float(simulated["ii"]), int(simulated["latency"]))}
    if selftest is None:
        how = ("not measured: build with `onnx2hw synth MODEL --selftest` (inputs held on chip, a cycle "
               "counter and an output check), then run `onnx2hw run BUILD_DIR --port PORT --selftest` "
               "with the board connected")
        status = "no self-test in this build"
    else:
        how = (f"not measured yet: run `onnx2hw run BUILD_DIR --port PORT --selftest` with the board connected; "
               f"it replays the {selftest['samples']} stored inputs back to back through the accelerator, "
               f"counts the cycles on the board and checks every output against the golden executor")
        status = "not measured"
    return {
        "ii_cycles": pipeline.ii, "latency_cycles": pipeline.latency,
        "inferences_per_s": min(compute, link) if link else compute,
        "compute_bound_per_s": compute, "link_bound_per_s": link, "baud": baud,
        "link_bytes_per_inference": link_bytes,
        "link_bound": {"inferences_per_s": link, "baud": baud, "bytes_per_inference": link_bytes},
        "compute_bound": {"clock_mhz": at, "fmax_mhz": fmax_mhz,
                          "estimated": {"ii_cycles": pipeline.ii, "latency_cycles": pipeline.latency,
                                        **figures(pipeline.ii, pipeline.latency)},
                          "simulated": sim},
        "measured": {"status": status, "how": how},
    }


def make_report(*, model: str, board, pipeline, clock_mhz: float, fmax_mhz: float | None,
                util: dict, times: dict, baud: float, link_bytes: int, link_cost=None,
                simulated: dict | None = None, selftest: dict | None = None) -> dict:
    """The report dictionary (see the ``synth`` verb's documentation for the fields).

    The estimate is the pipeline's cost model plus ``link_cost`` (the host link around it, and
    the self-test when there is one). ``simulated``: ``{"ii", "latency", "inferences"}``
    measured in simulation; ``selftest``: the self-test memory (``{"samples", "source",
    "cost": {"lut", "ff", "ebr"}}``) of a self-test build."""
    est = pipeline.total if link_cost is None else pipeline.total + link_cost
    used = used_resources(util, board.family)
    avail = {"lut": board.budget.lut, "dsp": board.budget.dsp, "bram": board.budget.ebr, "ff": board.budget.lut}
    estimated = {"lut": est.lut, "dsp": est.dsp, "bram": est.ebr, "ff": est.ff}
    report = {
        "model": model, "board": board.name, "device": board.device,
        "clock": {"target_mhz": clock_mhz, "fmax_mhz": fmax_mhz,
                  "met": fmax_mhz is not None and fmax_mhz >= clock_mhz},
        "resources": {r: {"used": used[r], "available": avail[r], "estimated": estimated[r]} for r in avail},
        "throughput": throughput(pipeline, clock_mhz=clock_mhz, fmax_mhz=fmax_mhz, baud=baud,
                                 link_bytes=link_bytes, simulated=simulated, selftest=selftest),
        "stages": [{"name": s.name, "op": s.op, "pe": s.pe, "simd": s.simd, **({"mul": s.mul} if s.mul else {}),
                    "cycles": s.cycles,
                    "lut": s.cost.lut, "dsp": s.cost.dsp, "bram": s.cost.ebr} for s in pipeline.stages],
        "times_s": {k: round(v, 2) for k, v in times.items()},
        "io": io_part(pipeline.graph),
        "host": host_part(pipeline.graph),
        "arithmetic": arithmetic(pipeline),
    }
    if selftest is not None:
        report["selftest"] = dict(selftest)
    return report


def arithmetic(pipeline) -> dict:
    """MACs per inference in hardware, multipliers instantiated (MACs per cycle at full rate),
    the roofline (multipliers / MACs: inferences per cycle if every multiplier were busy), and
    the bit widths: ``bits`` like ``w8a8`` (``w4-8a8`` when layers differ)."""
    wb = sorted({layer.w_type.bits for layer in pipeline.graph.layers if getattr(layer, "w_type", None)})
    ab = sorted({layer.output.dtype.bits for layer in pipeline.graph.layers})

    def span(v):
        return "?" if not v else f"{v[0]}" if len(v) == 1 else f"{v[0]}-{v[-1]}"
    macs, mults = pipeline.macs, pipeline.multipliers
    return {"macs": macs, "multipliers": mults, "bits": f"w{span(wb)}a{span(ab)}",
            "roofline_inferences_per_cycle": mults / macs if macs else None}


def io_part(ig) -> dict:
    """The hardware's inputs and outputs, in the order the host link carries them: the model's
    name of each (the input it quantizes, the output it dequantizes into), the hardware's
    tensor, its NHWC shape and integer type."""
    def entry(name, spec):
        return {"name": name, "tensor": spec.name, "shape": list(spec.shape), "type": str(spec.dtype)}
    return {"inputs": [entry(q.name, s) for q, s in zip(ig.inputs, ig.input_specs)],
            "outputs": [entry(d.name, s) for d, s in zip(ig.outputs, ig.output_specs)]}


def host_part(ig) -> dict | None:
    """What the host computes after the hardware's outputs (``None`` when nothing): the tensors
    the hardware hands over (``cuts``; ``cut``: the first), the model outputs the host makes
    and the host's nodes."""
    if ig.tail is None:
        return None
    return {"cut": ig.tail.input_names[0], "cuts": list(ig.tail.input_names), "outputs": list(ig.tail.output_names),
            "nodes": [{"name": n.name, "op": f"{n.domain}::{n.op_type}" if n.domain else n.op_type}
                      for n in ig.tail.nodes]}


def write_report(report: dict, build_dir) -> tuple[Path, Path]:
    """Write ``report.json`` and ``report.html`` into ``build_dir``, each atomically."""
    d = Path(build_dir)
    write_json(d / "report.json", report, indent=2)
    write_text(d / "report.html", render_html(report))
    return d / "report.json", d / "report.html"


#: the pipeline diagram: one column per stage, read left to right in rows that wrap
_DIAGRAM_WIDTH = 1200   # px the rows fit in
_FONT_PX = 12
_LINE_PX = 15           # between text baselines
_GAP_PX = 32            # between columns (the arrows) and between rows
_COLUMN_PX = (150, 260)  # a column's width: its widest detail line, within these bounds
_BOX_PX = (12, 56)      # a box's height: the stage's cycles scaled to the slowest stage's
_MARGIN_PX = 10
_BREAKS = "_/.:-"       # a name breaks onto its second line after one of these where it can
_NARROW = frozenset("ijlI.,:;!|'`ftr()[] ·")
_WIDE = frozenset("mwMW@%×…")


def _text_px(text: str, bold: bool = False) -> float:
    """``text``'s width in px at the diagram's font size, estimated on the wide side (the
    default sans-serif may be DejaVu Sans, wider than Arial or Helvetica)."""
    em = sum(0.36 if c in _NARROW else 1.0 if c in _WIDE else 0.8 if c.isupper() else 0.66 for c in text)
    return em * _FONT_PX * (1.1 if bold else 1.0)


def _head(text: str, px: float, bold: bool) -> str:
    """The longest start of ``text`` within ``px``, ending after a break character when that
    keeps at least half of it."""
    n = 0
    while n < len(text) and _text_px(text[:n + 1], bold) <= px:
        n += 1
    cut = max((k + 1 for k in range(n) if text[k] in _BREAKS), default=0)
    return text[:cut] if n < len(text) and cut >= n / 2 else text[:n]


def _tail(text: str, px: float, bold: bool) -> str:
    """The longest end of ``text`` within ``px`` after an ellipsis (``…end``), starting after a
    break character when that keeps at least half of it."""
    n = 0
    while n < len(text) and _text_px("…" + text[len(text) - n - 1:], bold) <= px:
        n += 1
    end = text[len(text) - n:]
    cut = next((k + 1 for k in range(len(end)) if end[k] in _BREAKS and k + 1 < len(end)), None)
    return "…" + (end[cut:] if cut is not None and len(end) - cut >= n / 2 else end)


def _fit(text: str, px: float, *, lines: int = 1, bold: bool = False) -> list[str]:
    """``text`` in at most ``lines`` (1 or 2) lines of ``px``: broken after a break character
    where it can be, a middle part that does not fit replaced by '…'."""
    if _text_px(text, bold) <= px:
        return [text]
    if lines == 1:
        return [_head(text, px - _text_px("…", bold), bold) + "…"]
    head = _head(text, px, bold)
    rest = text[len(head):]
    return [head, rest if _text_px(rest, bold) <= px else _tail(rest, px, bold)]


def _stage_details(s: dict) -> list[str]:
    products = f', {s["mul"].upper()} products' if s.get("mul") else ""
    return [s["op"], f'PE {s["pe"]} × SIMD {s["simd"]}{products}', f'{s["cycles"]:,} cycles',
            f'{s["lut"]:,} LUT · {s["dsp"]} DSP · {s["bram"]} BRAM']


class _Grid(NamedTuple):
    """Where the diagram's stages go: ``col`` px wide columns, ``per_row`` to a row, rows
    ``row_h`` px high (the box area ``_BOX_PX[1]``, then the text lines)."""
    col: float
    per_row: int
    row_h: float
    worst: int    # the slowest stage's cycles

    def at(self, k: int) -> tuple[float, float]:
        """Stage ``k``'s column's left edge and row's top."""
        row, c = divmod(k, self.per_row)
        return _MARGIN_PX + c * (self.col + _GAP_PX), _MARGIN_PX + row * (self.row_h + _GAP_PX)

    def box_top(self, k: int, cycles: int) -> float:
        top = self.at(k)[1] + _BOX_PX[1]
        return top - max(_BOX_PX[0], _BOX_PX[1] * cycles / self.worst)


def _stage_svg(k: int, s: dict, name: list[str], detail: list[str], grid: _Grid) -> str:
    """Stage ``k``: its box, and below it its name (bold) and figures; its title (a tooltip)
    in full."""
    x, top = grid.at(k)
    y = grid.box_top(k, s["cycles"])
    base = top + _BOX_PX[1] + 8 - 3
    weights = [' font-weight="bold"'] * len(name) + [""] * len(detail)
    lines = "".join(f'<text x="{x + grid.col / 2:.0f}" y="{base + (i + 1) * _LINE_PX:.0f}" text-anchor="middle"{w}>'
                    f'{html.escape(t)}</text>' for i, (t, w) in enumerate(zip(name + detail, weights)))
    fill = "#f4a582" if s["cycles"] == grid.worst else "#92c5de"
    return (f'<g class="stage"><title>{html.escape(chr(10).join([s["name"], *_stage_details(s)]))}</title>'
            f'<rect x="{x:.0f}" y="{y:.0f}" width="{grid.col:.0f}" height="{top + _BOX_PX[1] - y:.0f}" rx="6" '
            f'fill="{fill}" stroke="#333"/>{lines}</g>')


def _flow_svg(k: int, next_cycles: int, grid: _Grid) -> str:
    """The arrow from stage ``k`` to the next: across the gap to the next column, or from the
    end of a row through the gap below it to the top of the next row's first box."""
    x, top = grid.at(k)
    right, y = x + grid.col, top + _BOX_PX[1] - _BOX_PX[0] / 2
    if (k + 1) % grid.per_row:
        return (f'<line x1="{right:.0f}" y1="{y:.0f}" x2="{right + _GAP_PX - 4:.0f}" y2="{y:.0f}" stroke="#333" '
                f'marker-end="url(#arrow)"/>')
    turn, below, first = right + _GAP_PX / 2, top + grid.row_h + _GAP_PX / 2, _MARGIN_PX + grid.col / 2
    into = grid.box_top(k + 1, next_cycles) - 4
    return (f'<polyline points="{right:.0f},{y:.0f} {turn:.0f},{y:.0f} {turn:.0f},{below:.0f} {first:.0f},'
            f'{below:.0f} {first:.0f},{into:.0f}" fill="none" stroke="#333" marker-end="url(#arrow)"/>')


def _svg_pipeline(stages: list[dict]) -> str:
    """The stages as boxes in rows read left to right (an arrow carries the flow on to the
    next row), a box's height scaled by its cycles (the slowest stages are full height and
    orange); below each box its name (two lines at most, shortened in the middle) and figures.
    Every label stays within its column; hovering a stage shows its full name and figures."""
    widest = max(_text_px(t) for s in stages for t in _stage_details(s))
    col = min(max(_COLUMN_PX[0], widest), _COLUMN_PX[1])
    room = _DIAGRAM_WIDTH - 2 * _MARGIN_PX - _GAP_PX   # the last gap: a row's arrow on to the next
    per_row = max(1, min(len(stages), int((room + _GAP_PX) // (col + _GAP_PX))))
    names = [_fit(s["name"], col, lines=2, bold=True) for s in stages]
    details = [[_fit(t, col)[0] for t in _stage_details(s)] for s in stages]
    text_lines = max(len(n) for n in names) + max(len(d) for d in details)
    grid = _Grid(col, per_row, _BOX_PX[1] + 8 + text_lines * _LINE_PX, max(s["cycles"] for s in stages) or 1)
    parts = [_stage_svg(k, *a, grid) for k, a in enumerate(zip(stages, names, details))]
    parts += [_flow_svg(k, stages[k + 1]["cycles"], grid) for k in range(len(stages) - 1)]
    rows = -(-len(stages) // per_row)
    width = 2 * _MARGIN_PX + per_row * col + (per_row - 1) * _GAP_PX + (_GAP_PX if rows > 1 else 0)
    height = 2 * _MARGIN_PX + rows * grid.row_h + (rows - 1) * _GAP_PX
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
            f'font-family="sans-serif" font-size="{_FONT_PX}"><defs><marker id="arrow" markerWidth="8" '
            f'markerHeight="8" refX="6" refY="3" orient="auto"><path d="M0,0 L6,3 L0,6 z"/></marker></defs>'
            + "".join(parts) + "</svg>")


def _bar(name: str, r: dict) -> str:
    used, avail, est = r["used"], r["available"], r["estimated"]
    frac = 0 if not used or not avail else min(1.0, used / avail)
    efrac = 0 if not est or not avail else min(1.0, est / avail)
    label = "not reported" if used is None else f"{used:,} / {avail:,} ({frac:.1%})"
    return (f'<tr><td>{name}</td><td><div class="bar"><div class="used" style="width:{frac * 100:.1f}%"></div>'
            f'<div class="est" style="left:{efrac * 100:.1f}%"></div></div></td><td>{label}</td>'
            f'<td>estimated {est:,}</td></tr>')


def _host_html(host: dict | None) -> str:
    if not host:
        return "<p>The hardware computes the model's outputs; the host only quantizes and dequantizes.</p>"
    ops = ", ".join(f'{html.escape(n["name"])} ({html.escape(n["op"])})' for n in host["nodes"])
    cuts = host.get("cuts") or [host["cut"]]
    what = "output" if len(cuts) == 1 else "outputs"
    return (f'<p><b>On the host</b>, after the hardware’s {what} {html.escape(", ".join(cuts))}: {ops} '
            f'(the golden executor, as the model defines them)</p>')


def _io_html(io: dict | None) -> str:
    """The hardware's inputs and outputs as a table, in link order."""
    if not io:                # a report of an earlier version
        return ""
    rows = "".join(f'<tr><td>{side}</td><td>{html.escape(e["name"])}</td><td>{html.escape(e["tensor"])}</td>'
                   f'<td>{"×".join(map(str, e["shape"]))}</td><td>{html.escape(e["type"])}</td></tr>'
                   for side in ("inputs", "outputs") for e in io[side])
    return ("<h2>Inputs and outputs</h2><table><tr><th></th><th>model</th><th>hardware tensor</th>"
            f"<th>shape (NHWC)</th><th>type</th></tr>{rows}</table><p>In the order the host link carries "
            "them, one after the other in each inference.</p>")


def _num(v, fmt="{:,.0f}") -> str:
    return "–" if v is None else fmt.format(v)


def _throughput_html(r: dict) -> str:
    """The three throughput figures as a table (link-bound, compute-bound, measured)."""
    tp = r["throughput"]
    cb = tp.get("compute_bound")
    if cb is None:            # a report of an earlier version
        return ""
    at = f'{cb["clock_mhz"]:.1f} MHz'
    fmax = cb.get("fmax_mhz")
    rows = []
    lb = tp["link_bound"]
    rows.append(("link-bound (UART)", _num(lb["inferences_per_s"]), "–",
                 f'{lb["bytes_per_inference"]:,} bytes per inference at {lb["baud"]:,.0f} baud'))

    def compute_row(name, f, cycles):
        extra = ""
        if fmax is not None and "inferences_per_s_at_fmax" in f:
            extra = (f'; at Fmax {fmax:.1f} MHz: {_num(f["inferences_per_s_at_fmax"])}/s, '
                     f'{_num(f["latency_us_at_fmax"], "{:,.2f}")} µs')
        rows.append((name, _num(f["inferences_per_s"]), _num(f["latency_us"], "{:,.2f}"), cycles + f" at {at}" + extra))

    est = cb["estimated"]
    compute_row("compute-bound (estimated)", est, f'II {est["ii_cycles"]:,} cycles, latency {est["latency_cycles"]:,} cycles')
    sim = cb.get("simulated")
    if sim:
        compute_row("compute-bound (simulated)", sim,
                    f'{sim["cycles_per_inference"]:,.1f} cycles per inference, latency {sim["latency_cycles"]:,} cycles '
                    f'({sim["inferences"]} inferences simulated)')
    else:
        rows.append(("compute-bound (simulated)", "–", "–", "not simulated: build with <code>--verify N</code>"))
    m = tp["measured"]
    rows.append(("measured on the board", "–", "–", html.escape(m["how"]).replace("`onnx2hw", "<code>onnx2hw")
                 .replace("`", "</code>")))
    body = "".join(f"<tr><td>{a}</td><td>{b}</td><td>{c}</td><td>{d}</td></tr>" for a, b, c, d in rows)
    return ("<h2>Throughput and latency</h2><table><tr><th></th><th>inferences/s</th><th>latency µs</th>"
            f"<th></th></tr>{body}</table>")


def _selftest_html(r: dict) -> str:
    st = r.get("selftest")
    if not st:
        return ""
    c = st.get("cost", {})
    return (f'<p><b>Self-test:</b> {st["samples"]} inputs ({html.escape(st.get("source", ""))}) held on chip, '
            f'{c.get("ebr", 0)} EBR and about {c.get("lut", 0):,} LUT (in the estimate)</p>')


def pnr_runs_text(runs) -> str:
    """A build's place-and-route runs (``report["place_and_route"]``) in words ('' for one)."""
    if len(runs or ()) < 2:
        return ""

    def one(x):
        seed = "nextpnr's seed" if x["seed"] is None else f"seed {x['seed']}"
        fmax = "no timing report" if x["fmax_mhz"] is None else f"{x['fmax_mhz']:.1f} MHz"
        return f"{seed} {fmax}" + (" (kept)" if x["kept"] else "")
    return f"place and route ran {len(runs)} times: " + ", ".join(one(x) for x in runs)


def _pnr_runs_html(r: dict) -> str:
    text = pnr_runs_text(r.get("place_and_route"))
    return f"; {html.escape(text, quote=False)}" if text else ""


def _verify_html(v: dict | None) -> str:
    """The bit-exactness checks of ``synth --verify``: the RTL and the netlist after synthesis."""
    if not v:
        return "<p><b>Verification:</b> not simulated (build with <code>--verify N</code>)</p>"
    what = {"rtl": "RTL (Amaranth, Verilator)", "netlist": "netlist after synthesis and onnx2hw's netlist passes "
            "(the accelerator nextpnr places, with DP16KD/MULT18X18D models)"}
    rows = []
    for key, title in what.items():
        x = v.get(key)
        if x is None:
            rows.append(f"<tr><td>{title}</td><td>not simulated</td></tr>")
            continue
        secs = f", {x['seconds']:.1f} s" if x.get("seconds") is not None else ""
        cyc = f", {x['cycles']:,} cycles" if x.get("cycles") else ""
        rows.append(f'<tr><td>{title}</td><td class="ok">bit-exact on {x["exact"]}/{x["inferences"]} '
                    f"random inferences{cyc}{secs}</td></tr>")
    return "<h2>Verification</h2><table>" + "".join(rows) + "</table>"


def render_html(r: dict) -> str:
    clock = r["clock"]
    ok = clock["met"]
    fmax = "n/a" if clock["fmax_mhz"] is None else f'{clock["fmax_mhz"]:.1f} MHz'
    tp = r["throughput"]
    link = "" if tp["link_bound_per_s"] is None else f' (link bound {tp["link_bound_per_s"]:,.0f}/s at {tp["baud"]:,.0f} baud)'
    times = " · ".join(f"{k}: {v:.1f} s" for k, v in r["times_s"].items())
    bars = "".join(_bar(k.upper(), v) for k, v in r["resources"].items())
    return f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>onnx2hw report: {html.escape(r["model"])}</title>
<style>body{{font-family:sans-serif;margin:2em;color:#222}} .ok{{color:#1a7f37}} .bad{{color:#cf222e}}
table{{border-collapse:collapse}} td{{padding:4px 10px}} .bar{{position:relative;width:320px;height:14px;
background:#eee;border-radius:7px}} .used{{height:14px;background:#4393c3;border-radius:7px}}
.est{{position:absolute;top:-3px;width:2px;height:20px;background:#d6604d}}</style></head><body>
<h1>{html.escape(r["model"])} on {html.escape(r["board"])} ({html.escape(r["device"])})</h1>
<p class="{'ok' if ok else 'bad'}"><b>Clock: {'met' if ok else 'NOT met'}</b> — target {clock["target_mhz"]:.1f} MHz,
achieved Fmax {fmax}{_pnr_runs_html(r)}</p>
<p><b>Throughput:</b> {tp["inferences_per_s"]:,.0f} inferences/s; initiation interval {tp["ii_cycles"]:,} cycles,
latency {tp["latency_cycles"]:,} cycles{link}</p>
{_throughput_html(r)}{_selftest_html(r)}{_verify_html(r.get("verify"))}
<h2>Pipeline</h2>{_svg_pipeline(r["stages"])}
<p>Box height: a stage's cycles per inference; orange: the slowest, which sets the initiation interval. Hover
over a stage for its full name and figures.</p>{_io_html(r.get("io"))}{_host_html(r.get("host"))}
<h2>Resources</h2><table>{bars}</table><p>Bars: used after place and route; red tick: the estimate.</p>
<h2>Build time</h2><p>{times}</p></body></html>
"""
