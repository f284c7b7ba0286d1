"""report.html in a real browser: headless Chromium lays the page out, a script in the page
measures the pipeline diagram (every box and label of every stage), and no label overlaps
another label or a box, nothing leaves the diagram, and the diagram fits a 1280 px window.
A screenshot of each page is kept in the test's temporary directory for a person to look at.

Needs Chromium (Debian package ``chromium``); skipped, with that reason, where it is absent."""
from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from itertools import combinations

import pytest

from _paths import EXAMPLES, ROOT
from onnx2hw.design import compile as compile_design
from onnx2hw.report import make_report, render_html

pytestmark = pytest.mark.filterwarnings("ignore::amaranth.hdl._ir.UnusedElaboratable")

#: a browser window a report is read in
WINDOW = (1280, 900)

#: measures the pipeline diagram after layout and writes the result into the page
_MEASURE = """<script>
const svg = document.querySelector("svg");
const box = e => { const r = e.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
const items = [...svg.querySelectorAll("g.stage")].flatMap((g, k) =>
  [...g.querySelectorAll("rect, text")].map(e => ({
    stage: k, tag: e.tagName, text: e.textContent, bold: e.getAttribute("font-weight") === "bold", box: box(e)})));
const titles = [...svg.querySelectorAll("g.stage > title")].map(t => t.textContent);
const out = document.createElement("pre");
out.id = "layout";
out.textContent = JSON.stringify({svg: box(svg), items, titles});
document.body.appendChild(out);
</script>"""


def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        if found := shutil.which(name):
            return found
    pytest.skip("Chromium is not installed (Debian package `chromium`): report.html's layout is not "
                "checked in a browser")


def _browser(exe: str, profile, *args: str, height: int = WINDOW[1]) -> str:
    argv = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", f"--user-data-dir={profile}",
            f"--window-size={WINDOW[0]},{height}", *args]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def _stage(name, op, cycles, lut=83_640, dsp=156, bram=208, mul=None):
    return {"name": name, "op": op, "pe": 64, "simd": 128, **({"mul": mul} if mul else {}), "cycles": cycles,
            "lut": lut, "dsp": dsp, "bram": bram}


def _awkward(n: int) -> list[dict]:
    """``n`` stages with the names and figures that are hardest to place: long ONNX names, a
    wide name with no place to break it, one-letter names, the largest counts."""
    names = ["fork_stem_stem_2_Relu_output_0_QuantizeLinear_Output", "W" * 40, "a",
             "/model/features/features.12/conv/conv.0/Conv_output_0_QuantizeLinear", "Add_17", "head_head_2_Gemm"]
    ops = ["fork", "conv", "add", "conv", "add", "dense"]
    return [_stage(f"{names[k % len(names)]}{'' if k < len(names) else k}", ops[k % len(ops)],
                   12_345_678 if k % 7 == 3 else 1_000 * (k + 1), mul=("lut", "dsp", None)[k % 3])
            for k in range(n)]


def _report(stages: list[dict]) -> dict:
    """A report around ``stages`` (the rest from a compiled example)."""
    r = _compiled("digits_mlp_int8.onnx")
    return {**r, "stages": stages}


def _compiled(model: str) -> dict:
    path = EXAMPLES / model if (EXAMPLES / model).exists() else ROOT / "corpus" / model
    d = compile_design(path)
    return make_report(model=d.name, board=d.board, pipeline=d.pipeline, clock_mhz=d.clock_hz / 1e6,
                       fmax_mhz=80.0, util={}, times={"compile": d.compile_seconds}, baud=d.baud,
                       link_bytes=d.link_bytes)


def _shortened(lines: list[str], name: str) -> bool:
    """True if ``lines`` show ``name``: whole, or its start and end around an ellipsis."""
    if len(lines) not in (1, 2) or not lines[0]:
        return False
    if "…" not in "".join(lines):
        return "".join(lines) == name
    head, tail = (lines[0].removesuffix("…"), "") if len(lines) == 1 else (lines[0], lines[1].removeprefix("…"))
    return name.startswith(head) and name.endswith(tail) and len(head) + len(tail) < len(name)


def _overlap(a, b) -> float:
    """The area two boxes ``[left, top, right, bottom]`` share."""
    return max(0.0, min(a[2], b[2]) - max(a[0], b[0])) * max(0.0, min(a[3], b[3]) - max(a[1], b[1]))


CASES = {"ort_resnet_qdq": lambda: _compiled("ort_resnet_qdq.onnx"),
         "digits_cnn_res_int8": lambda: _compiled("digits_cnn_res_int8.onnx"),
         "5 awkward stages": lambda: _report(_awkward(5)),
         "60 awkward stages": lambda: _report(_awkward(60))}


@pytest.mark.parametrize("case", CASES)
def test_the_pipeline_diagram_reads_in_a_browser(tmp_path, summary, case):
    exe = _chromium()
    report = CASES[case]()
    page = tmp_path / "report.html"
    page.write_text(render_html(report).replace("</body>", _MEASURE + "</body>"))
    dom = _browser(exe, tmp_path / "profile", "--dump-dom", page.as_uri())
    found = re.search(r'<pre id="layout">(.*?)</pre>', dom, re.S)
    assert found, "the measuring script did not run"
    layout = json.loads(html.unescape(found.group(1)))
    items, frame = layout["items"], layout["svg"]
    stages = report["stages"]

    assert [t.split("\n")[0] for t in layout["titles"]] == [s["name"] for s in stages], "a full name is missing"
    assert {i["stage"] for i in items if i["tag"] == "rect"} == set(range(len(stages)))
    assert all(i["box"][2] > i["box"][0] and i["box"][3] > i["box"][1] for i in items), "an empty label"
    for k, s in enumerate(stages):
        name = [i["text"] for i in items if i["stage"] == k and i["bold"]]
        assert _shortened(name, s["name"]), (name, s["name"])
        assert f'{s["cycles"]:,} cycles' in [i["text"] for i in items if i["stage"] == k], s
    outside = [i for i in items if i["box"][0] < frame[0] - 0.5 or i["box"][2] > frame[2] + 0.5
               or i["box"][1] < frame[1] - 0.5 or i["box"][3] > frame[3] + 0.5]
    assert not outside, f"drawn outside the diagram: {outside[:3]}"
    clashes = [(a["text"] or a["tag"], b["text"] or b["tag"]) for a, b in combinations(items, 2)
               if _overlap(a["box"], b["box"]) > 0.5]
    assert not clashes, f"{len(clashes)} overlapping labels or boxes, e.g. {clashes[:3]}"
    assert frame[2] - frame[0] <= WINDOW[0] - 60, f"the diagram is {frame[2] - frame[0]:.0f} px wide"

    shot = tmp_path / "report.png"
    height = max(WINDOW[1], int(frame[3]) + 200)
    _browser(exe, tmp_path / "profile", f"--screenshot={shot}", page.as_uri(), height=height)
    png = shot.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    assert int.from_bytes(png[16:20], "big") == WINDOW[0] and int.from_bytes(png[20:24], "big") == height
    summary(f"report-browser-{case}", f"report.html screenshot ({case}): {shot}")
