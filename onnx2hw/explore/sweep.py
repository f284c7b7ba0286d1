"""A design-space sweep (:func:`run_sweep`): the points not already built (content-keyed cache)
are built across the engine's workers, each into ``OUT/points/NAME/``, a normal build directory
(``onnx2hw run`` accepts it); the table and the report page are written again as each result
arrives, so an interrupted sweep keeps every finished point.

Cache: a point's directory holds ``explore.json`` with its key once its build has finished
(written after ``accelerator.json``); a point whose directory has it, with the same key and a
build that :func:`onnx2hw.build.open_build` accepts, is not built again. Failed points are.
"""
from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from pathlib import Path

from ..build import open_build
from ..files import write_json
from ..ir import ModelError
from .engine import Engine, Task
from .page import write_page
from .points import Point, Pruned, onnx2hw_version, sha256_of
from .table import COLUMNS, best, failed_row, mark_pareto, row_of, write_table

__all__ = ["run_sweep", "cached_report", "SweepSummary"]

RECORD = "explore.json"


def cached_report(directory: Path, key: str) -> dict | None:
    """The ``report.json`` of a finished build of ``key`` in ``directory``, else ``None``."""
    try:
        record = json.loads((directory / RECORD).read_text())
        if record.get("key") != key:
            return None
        open_build(directory)   # complete, files as accelerator.json describes them
        return json.loads((directory / "report.json").read_text())
    except (OSError, ValueError, ModelError):
        return None


class SweepSummary:
    """What a sweep ended with: ``rows`` (the table), ``built`` (points built now), ``cached``,
    ``failed``, and the files written."""

    def __init__(self, rows, built, cached, failed, files):
        self.rows, self.built, self.cached, self.failed, self.files = rows, built, cached, failed, files


def _spec(point: Point, directory: Path) -> dict:
    return {"model": point.model, "calib": point.calib, "board": point.board, "clock_mhz": point.clock_mhz,
            "target_cycles": point.target_cycles, "seed": point.seed, "host": list(point.host),
            "out_dir": str(directory), "key": point.key, "params": point.params()}


def _accuracy_tasks(points, data: str, board: str, out: Path, cache: dict) -> list[Task]:
    """One accuracy task per model variant (the integer model depends on the bits only), unless
    its result is cached in ``OUT/accuracy/``."""
    tasks, seen = [], set()
    data_sha = sha256_of(data)
    for p in points:
        if p.bits in seen:
            continue
        seen.add(p.bits)
        key = hashlib.sha256(json.dumps([sha256_of(p.model), sha256_of(p.calib), data_sha, p.bits, board,
                                         list(p.host), onnx2hw_version()]).encode()).hexdigest()[:16]
        path = out / "accuracy" / f"{p.bits}-{key}.json"
        if path.is_file():
            try:
                cache[p.bits] = json.loads(path.read_text())["integer"]["top1"]
                continue
            except (OSError, ValueError, KeyError, TypeError):
                pass
        path.parent.mkdir(parents=True, exist_ok=True)
        tasks.append(Task("accuracy", {"model": p.model, "calib": p.calib, "data": str(Path(data).resolve()),
                                       "board": board, "host": list(p.host), "json": str(path.resolve())},
                          ref=("accuracy", p.bits)))
    return tasks


def run_sweep(points: list[Point], pruned: list[Pruned], *, out_dir, engine: Engine | None, meta: dict,
              data: str | None = None, log: Callable[[str], None] = print) -> SweepSummary:
    """Build ``points`` (those not cached) on ``engine`` into ``out_dir``; write ``pareto.csv``,
    ``pareto.json`` and ``report.html`` as results arrive. ``data``: a labelled ``.npz`` whose
    accuracy of each bit width's integer model joins the table. ``meta``: the table's header
    (model, board, ...). ``log(line)`` gets the progress lines. ``engine`` (not yet entered) is
    started only when there is something to run; it may be ``None`` when every point is cached."""
    out = Path(out_dir).resolve()
    (out / "points").mkdir(parents=True, exist_ok=True)
    rows: dict[str, dict] = {}
    todo: list[Task] = []
    for p in points:
        d = out / "points" / p.name
        report = cached_report(d, p.key)
        if report is not None:
            rows[p.key] = row_of(p, report, built=False, directory=str(d.relative_to(out)))
        else:
            todo.append(Task("build", _spec(p, d), ref=p, log=str(d / "explore.log")))
    accuracy: dict[str, float] = {}
    acc_tasks = _accuracy_tasks(points, data, meta["board"], out, accuracy) if data else []
    cached = len(rows)
    meta = {**meta, "onnx2hw": onnx2hw_version(), "accuracy": bool(data), "interrupted": False,
            "pruned": [{"bits": q.bits, "target_cycles": q.target_cycles, "reason": q.reason} for q in pruned]}
    counts = {"built": 0, "failed": 0}
    t0 = time.monotonic()

    def table() -> list[dict]:
        ordered = [rows[p.key] for p in points if p.key in rows]
        for r in ordered:
            if r["status"] == "ok" and r["bits"] in accuracy:
                r["accuracy_top1"] = accuracy[r["bits"]]
        return mark_pareto(ordered)

    def publish() -> list[dict]:
        ordered = table()
        write_table(out, ordered, {**meta, "seconds": round(time.monotonic() - t0, 1)})
        write_page(out, meta, ordered, COLUMNS)
        return ordered

    def progress(extra: str = "") -> None:
        done = counts["built"] + cached
        remaining = len(points) - done - counts["failed"]
        b = best(list(rows.values()))
        top = (f"; fastest so far {b['point']}: {b['inferences_per_s']:,.0f} inferences/s, {b['lut']:,} LUT, "
               f"Fmax {b['fmax_mhz']} MHz" if b else "")
        log(f"[{time.monotonic() - t0:6.0f} s] {done} done ({cached} cached), {counts['failed']} failed, "
            f"{remaining} remaining{top}{extra}")

    def on_result(task: Task, result: dict) -> None:
        if task.kind == "accuracy":
            bits = task.ref[1]
            if result["status"] == "ok":
                accuracy[bits] = result["integer"]["top1"]
                log(f"accuracy of the {bits} integer model: top-1 {100 * accuracy[bits]:.2f}%")
            else:
                log(f"accuracy of the {bits} integer model failed: {result['error']}")
            publish()
            return
        p: Point = task.ref
        d = out / "points" / p.name
        rel = str(d.relative_to(out))
        report = cached_report(d, p.key) if result["status"] == "ok" else None
        if report is not None:
            rows[p.key] = row_of(p, report, built=True, directory=rel, worker=result.get("worker"))
            counts["built"] += 1
            note = f"; built {p.name} in {result['seconds']:.0f} s"
        else:
            error = result.get("error") or "the build finished without a complete build directory"
            rows[p.key] = failed_row(p, error, directory=rel, status=result["status"], worker=result.get("worker"),
                                     seconds=result.get("seconds"))
            if d.is_dir():
                write_json(d / "explore-failed.json", {"key": p.key, "params": p.params(), "status": result["status"],
                                                        "error": rows[p.key]["error"]})
            counts["failed"] += 1
            note = f"; FAILED {p.name}: {rows[p.key]['error']}"
        publish()
        progress(note)

    ordered = publish()
    log(f"{len(points)} points: {cached} cached, {len(todo)} to build"
        + (f"; {len(pruned)} foldings pruned (the cost model says they do not fit)" if pruned else ""))
    tasks = todo + acc_tasks
    if tasks:
        if engine is None:
            raise ValueError("points to build but no engine to build them")
        try:
            with engine:
                log(f"running {len(tasks)} tasks on {engine.description}")
                engine.run(tasks, on_result)
        except KeyboardInterrupt:
            meta["interrupted"] = True
            publish()
            raise
    ordered = publish()
    progress()
    return SweepSummary(ordered, counts["built"], cached, counts["failed"],
                        [out / "pareto.csv", out / "pareto.json", out / "report.html"])
