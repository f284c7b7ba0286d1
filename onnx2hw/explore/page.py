"""The sweep's report page (``report.html``): throughput against LUTs and against Fmax as inline
SVG scatter plots (Pareto points filled), and the table. No plotting library: the SVG is written
here."""
from __future__ import annotations

import html
import math
from pathlib import Path

from ..files import write_text

__all__ = ["render_page", "write_page", "scatter"]

#: one colour per bit width (cycled)
COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b")
W, H, PAD_L, PAD_B, PAD_T, PAD_R = 460, 300, 70, 45, 15, 15


def _ticks(lo: float, hi: float, log: bool) -> list[float]:
    if log:
        return [10.0 ** e for e in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)]
    step = 10 ** math.floor(math.log10(max(hi - lo, 1e-9)))
    while (hi - lo) / step > 6:
        step *= 2
    start = math.floor(lo / step) * step
    return [start + i * step for i in range(int((hi - start) / step) + 2)]


def _fmt(v: float) -> str:
    return f"{v:,.0f}" if abs(v) >= 10 else f"{v:g}"


def scatter(rows: list[dict], x: str, y: str, xlabel: str, ylabel: str, *, log_y: bool = True) -> str:
    """An SVG scatter plot of ``rows`` (finished points with both values), one colour per bit
    width, Pareto points filled; each point's title names it."""
    pts = [r for r in rows if r["status"] == "ok" and r.get(x) is not None and r.get(y)]
    if not pts:
        return "<p>(no finished point to plot)</p>"
    xs, ys = [r[x] for r in pts], [r[y] for r in pts]
    x0, x1 = min(xs), max(xs)
    x0, x1 = (x0 * 0.9, x1 * 1.1) if x0 != x1 else (x0 * 0.5, x1 * 1.5 + 1)
    if log_y:
        y0, y1 = 10 ** math.floor(math.log10(min(ys))), 10 ** math.ceil(math.log10(max(ys)) + 1e-9)
        if y0 == y1:
            y1 *= 10
    else:
        y0, y1 = min(ys) * 0.9, max(ys) * 1.1 + 1e-9
    pw, ph = W - PAD_L - PAD_R, H - PAD_T - PAD_B

    def px(v):
        return PAD_L + (v - x0) / (x1 - x0) * pw

    def py(v):
        f = (math.log10(v) - math.log10(y0)) / (math.log10(y1) - math.log10(y0)) if log_y else (v - y0) / (y1 - y0)
        return PAD_T + ph - f * ph

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" '
           f'font-size="11"><rect x="{PAD_L}" y="{PAD_T}" width="{pw}" height="{ph}" fill="none" stroke="#999"/>']
    for t in _ticks(x0, x1, False):
        if x0 <= t <= x1:
            out.append(f'<line x1="{px(t):.1f}" y1="{PAD_T + ph}" x2="{px(t):.1f}" y2="{PAD_T + ph + 4}" stroke="#999"/>'
                       f'<text x="{px(t):.1f}" y="{PAD_T + ph + 16}" text-anchor="middle">{_fmt(t)}</text>')
    for t in _ticks(y0, y1, log_y):
        if y0 <= t <= y1:
            out.append(f'<line x1="{PAD_L - 4}" y1="{py(t):.1f}" x2="{PAD_L + pw}" y2="{py(t):.1f}" stroke="#eee"/>'
                       f'<text x="{PAD_L - 6}" y="{py(t) + 4:.1f}" text-anchor="end">{_fmt(t)}</text>')
    out.append(f'<text x="{PAD_L + pw / 2}" y="{H - 8}" text-anchor="middle">{html.escape(xlabel)}</text>'
               f'<text transform="translate(14,{PAD_T + ph / 2}) rotate(-90)" text-anchor="middle">'
               f'{html.escape(ylabel)}</text>')
    bits = sorted({r["bits"] for r in pts})
    for r in pts:
        c = COLOURS[bits.index(r["bits"]) % len(COLOURS)]
        fill = c if r["pareto"] else "white"
        tip = (f"{r['point']}: {r['inferences_per_s']:,.0f} inferences/s, {r['lut']} LUT, {r['dsp']} DSP, "
               f"Fmax {r['fmax_mhz']} MHz" + (" (Pareto)" if r["pareto"] else ""))
        out.append(f'<g><title>{html.escape(tip)}</title><circle cx="{px(r[x]):.1f}" cy="{py(r[y]):.1f}" r="5" '
                   f'fill="{fill}" stroke="{c}" stroke-width="2"/></g>')
    for i, b in enumerate(bits):
        c = COLOURS[i % len(COLOURS)]
        out.append(f'<circle cx="{PAD_L + 12}" cy="{PAD_T + 12 + 14 * i}" r="4" fill="{c}"/>'
                   f'<text x="{PAD_L + 20}" y="{PAD_T + 16 + 14 * i}">{html.escape(b)}</text>')
    out.append("</svg>")
    return "".join(out)


def _cell(v) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "yes" if v else ""
    if isinstance(v, float):
        return f"{v:,.1f}" if abs(v) >= 100 else f"{v:.4g}"
    return html.escape(str(v))


def render_page(meta: dict, rows: list[dict], columns) -> str:
    """The report page of a sweep (``meta``: the table's header fields)."""
    ok = sum(r["status"] == "ok" for r in rows)
    failed = len(rows) - ok
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join("<tr" + (' class="pareto"' if r["pareto"] else ' class="failed"' if r["status"] != "ok" else "")
                   + ">" + "".join(f"<td>{_cell(r.get(c))}</td>" for c in columns) + "</tr>" for r in rows)
    pruned = meta.get("pruned", [])
    state = "interrupted: the table holds the points finished before" if meta.get("interrupted") else "complete"
    return f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>onnx2hw explore: {html.escape(meta['model'])}</title>
<style>body{{font-family:sans-serif;margin:1.5em}} table{{border-collapse:collapse;font-size:12px}}
td,th{{border:1px solid #ccc;padding:2px 5px;text-align:right}} tr.pareto{{background:#eef6ee}}
tr.failed{{color:#a00}} .plots{{display:flex;flex-wrap:wrap;gap:1em}}</style></head><body>
<h1>Design-space sweep: {html.escape(meta['model'])} on {html.escape(meta['board'])}</h1>
<p>{ok} points built or cached, {failed} failed, {len(pruned)} foldings pruned by the cost model (do not fit);
sweep {html.escape(state)}. Throughput is the pipeline's rate at the clock each build reached (its target when
timing is met, else its Fmax); the host link (UART) may carry less. Filled points are Pareto-optimal
(throughput{', accuracy' if meta.get('accuracy') else ''} up; LUT, DSP, EBR down).</p>
<div class="plots">{scatter(rows, 'lut', 'inferences_per_s', 'LUTs used', 'inferences/s')}
{scatter(rows, 'fmax_mhz', 'inferences_per_s', 'Fmax (MHz)', 'inferences/s')}</div>
<h2>Points</h2><table><tr>{head}</tr>{body}</table>
</body></html>
"""


def write_page(out_dir, meta: dict, rows: list[dict], columns) -> Path:
    """Write ``report.html`` into ``out_dir`` atomically; returns its path."""
    return write_text(Path(out_dir) / "report.html", render_page(meta, rows, columns))
