"""The sweep's table: one row per point, its figures read from the point's own ``report.json``
(:func:`row_of`), the Pareto-optimal rows marked (:func:`mark_pareto`), written as CSV and JSON,
each atomically (:func:`write_table`)."""
from __future__ import annotations

import csv
import io
from pathlib import Path

from ..files import write_json, write_text
from .pareto import pareto_mask

__all__ = ["COLUMNS", "OBJECTIVES", "row_of", "failed_row", "mark_pareto", "write_table", "best"]

#: the table's columns, in order
COLUMNS = ("point", "status", "built", "pareto", "bits", "target_cycles", "ii_cycles", "clock_mhz", "seed",
           "fmax_mhz", "timing_met", "inferences_per_s", "latency_us", "link_bound_per_s", "lut", "ff", "dsp",
           "bram", "lut_estimated", "dsp_estimated", "bram_estimated", "accuracy_top1", "build_s", "worker",
           "dir", "error")
#: Pareto objectives: throughput (at the clock the build reached) and accuracy up, resources down
OBJECTIVES = (("inferences_per_s", "max"), ("lut", "min"), ("dsp", "min"), ("bram", "min"),
              ("accuracy_top1", "max"))


def _params(point) -> dict:
    return {"point": point.name, "bits": point.bits, "target_cycles": point.target_cycles,
            "clock_mhz": point.clock_mhz, "seed": point.seed}


def row_of(point, report: dict, *, built: bool, directory: str, worker=None) -> dict:
    """The row of a finished point: its parameters and the figures of its ``report.json``
    (``inferences_per_s``: the pipeline's rate at the clock the build reached -- the target when
    timing is met, else Fmax; ``lut``...: used after place and route)."""
    tp, clock, res = report["throughput"], report["clock"], report["resources"]
    est = tp["compute_bound"]["estimated"]
    return {**{c: None for c in COLUMNS}, **_params(point), "status": "ok", "built": built, "pareto": False,
            "ii_cycles": tp["ii_cycles"], "clock_mhz": clock["target_mhz"], "fmax_mhz": clock["fmax_mhz"],
            "timing_met": clock["met"], "inferences_per_s": est["inferences_per_s"], "latency_us": est["latency_us"],
            "link_bound_per_s": tp["link_bound_per_s"],
            **{k: res[k]["used"] for k in ("lut", "ff", "dsp", "bram")},
            **{f"{k}_estimated": res[k]["estimated"] for k in ("lut", "dsp", "bram")},
            "build_s": report["times_s"].get("total"), "worker": worker, "dir": directory}


def failed_row(point, error: str, *, directory: str, status: str = "failed", worker=None, seconds=None) -> dict:
    """The row of a point that failed (or was stopped): its parameters and its one-line error."""
    return {**{c: None for c in COLUMNS}, **_params(point), "status": status, "built": False, "pareto": False,
            "ii_cycles": point.estimate["ii"], "build_s": seconds, "worker": worker, "dir": directory,
            "error": " ".join(str(error).split())}


def mark_pareto(rows: list[dict]) -> list[dict]:
    """``rows`` with ``pareto`` set on the finished rows no other finished row beats on every
    objective (:data:`OBJECTIVES`); sorted: Pareto rows fastest first, then the other finished
    rows, then the failed ones."""
    ok = [r for r in rows if r["status"] == "ok"]
    for r, keep in zip(ok, pareto_mask(ok, OBJECTIVES)):
        r["pareto"] = keep

    def order(r):
        rank = 0 if r["pareto"] else 1 if r["status"] == "ok" else 2
        return rank, -(r["inferences_per_s"] or 0), r["lut"] or 0, r["point"]
    return sorted(rows, key=order)


def best(rows: list[dict]) -> dict | None:
    """The fastest finished row (fewest LUTs among equals)."""
    ok = [r for r in rows if r["status"] == "ok"]
    return min(ok, key=lambda r: (-r["inferences_per_s"], r["lut"] or 0)) if ok else None


def _csv(rows: list[dict]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: ("" if r.get(k) is None else r[k]) for k in COLUMNS})
    return buf.getvalue()


def write_table(out_dir, rows: list[dict], meta: dict) -> tuple[Path, Path]:
    """Write ``pareto.csv`` and ``pareto.json`` (``meta`` plus the rows) into ``out_dir``,
    each atomically; returns their paths."""
    d = Path(out_dir)
    csv_path, json_path = d / "pareto.csv", d / "pareto.json"
    write_text(csv_path, _csv(rows))
    write_json(json_path, {**meta, "columns": list(COLUMNS), "rows": rows}, indent=1)
    return csv_path, json_path
