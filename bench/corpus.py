"""How far each exporter-written model of corpus/ gets through the flow (issue #12's measure):
load, the op check, import or quantize (with the file's sample inputs as calibration data), and
compile to a pipeline; one line per model with where it stopped, then the count per stage."""
from __future__ import annotations

import collections
import json
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "corpus"


def _calib(entry, graph):
    """The file's sample inputs as calibration data for a float model (``None`` for a quantized one)."""
    if entry["kind"] != "float" or not entry.get("data"):
        return None
    with np.load(CORPUS / entry["data"]) as d:
        arrays = {k: d[k] for k in d.files}
    name = graph.input_names[0]
    key = name if name in arrays else next(k for k in arrays if "input" in k)
    return {name: arrays[key].astype(np.float32)}


def bench_corpus() -> list[dict]:
    from onnx2hw.dataflow import compile_pipeline
    from onnx2hw.flow import check_ops, integer_graph_of
    from onnx2hw.ir import load
    from onnx2hw.ir.simplify import simplify
    from onnx2hw.quant.partition import split

    manifest = json.loads((CORPUS / "manifest.json").read_text())
    rows, stages = [], collections.Counter()
    for entry in manifest["files"]:
        stage, why = "load", ""
        try:
            graph = load(str(CORPUS / entry["file"]))
            stage = "op check"
            check_ops(split(simplify(graph)).core)
            stage = "import/quantize"
            ig = integer_graph_of(graph, _calib(entry, graph))
            stage = "compile"
            compile_pipeline(ig)
            stage, why = "compiled", ""
        except Exception as exc:  # noqa: BLE001 - the point is to record where each model stops
            why = f"{type(exc).__name__}: {exc}"
        stages[stage] += 1
        rows.append(dict(file=entry["file"], family=entry["family"], stage=stage, why=why))
        print(f"{entry['file']:40} {stage:16} {why[:100]}", flush=True)
    print(", ".join(f"{n} {s}" for s, n in stages.most_common()) + f" (of {len(rows)})")
    return rows
