"""Verification regressions on the engine (``onnx2hw explore --verify``): the inferences of one
or more models, split into chunks (:func:`verify_tasks`), simulated bit for bit against the
golden model across the workers as ``onnx2hw sim`` does, and merged into one report
(:func:`merge`, :func:`run_verify`).

Random inputs: chunk ``i`` of a model simulates its own random inputs, seed ``seed + i``; with an
``.npz`` of inputs, each chunk takes its slice.
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path

from ..files import write_json
from ..flow import load_graph, load_npz
from .engine import Engine, Task

__all__ = ["verify_tasks", "merge", "run_verify"]


def verify_tasks(models, *, board: str, calib=None, clock_mhz=None, target_fps=None, folding=None, host=(),
                 count: int = 20, inputs=None, chunk: int = 10, seed: int = 0,
                 simulator: str = "verilator") -> list[Task]:
    """The chunks of a regression: ``count`` random inferences per model (or every sample of
    ``inputs``), ``chunk`` inferences per task."""
    if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
        raise ValueError(f"--chunk must be at least 1 inference, not {chunk!r}")
    tasks = []
    for model in models:
        base = {"model": str(Path(model).resolve()), "calib": None if calib is None else str(Path(calib).resolve()),
                "board": board, "clock_mhz": clock_mhz, "target_fps": target_fps,
                "folding": None if folding is None else str(Path(folding).resolve()), "host": list(host),
                "simulator": simulator}
        if inputs is not None:
            feeds = load_npz(inputs, load_graph(model))   # checked here, before any task runs
            n = len(next(iter(feeds.values())))
            spans = [(a, min(n, a + chunk)) for a in range(0, n, chunk)]
            for i, (a, b) in enumerate(spans):
                tasks.append(Task("verify", {**base, "inputs": str(Path(inputs).resolve()), "start": a, "stop": b,
                                             "seed": seed + i}, ref=(str(model), i, a)))
        else:
            for i in range(math.ceil(count / chunk)):
                a = i * chunk
                tasks.append(Task("verify", {**base, "count": min(chunk, count - a), "seed": seed + i},
                                  ref=(str(model), i, a)))
    return tasks


def merge(tasks: list[Task], results: dict[int, dict]) -> dict:
    """One report of the chunks' results (``results``: task index -> result), per model:
    inferences simulated and bit-exact, measured II and latency, the first mismatch (its
    inference numbered across the model's chunks), and the chunks that failed to run."""
    models: dict[str, dict] = {}
    for i, t in enumerate(tasks):
        model, part, start = t.ref
        m = models.setdefault(model, {"model": model, "chunks": 0, "inferences": 0, "exact": 0, "failed_chunks": [],
                                      "first_mismatch": None, "ii_measured": [], "latency_measured": [],
                                      "estimated_ii": None, "seconds": 0.0, "workers": []})
        m["chunks"] += 1
        r = results.get(i)
        if r is None or r["status"] != "ok":
            m["failed_chunks"].append({"chunk": part, "error": "not run (interrupted)" if r is None else r["error"]})
            continue
        m["inferences"] += r["inferences"]
        m["exact"] += r["exact"]
        m["ii_measured"].append(r["ii"])
        m["latency_measured"].append(r["latency"])
        m["estimated_ii"] = r["estimated_ii"]
        m["seconds"] += r["seconds"] or 0.0
        if r["worker"] not in m["workers"]:
            m["workers"].append(r["worker"])
        fm = r.get("first_mismatch")
        if fm and (m["first_mismatch"] is None or start + fm["inference"] < m["first_mismatch"]["inference"]):
            m["first_mismatch"] = {**fm, "inference": start + fm["inference"], "chunk": part,
                                   "diverged_stage": r.get("diverged_stage")}
    for m in models.values():
        ii = m.pop("ii_measured")
        lat = m.pop("latency_measured")
        m["ii_measured"] = {"min": min(ii), "max": max(ii)} if ii else None
        m["latency_measured"] = {"min": min(lat), "max": max(lat)} if lat else None
        m["seconds"] = round(m["seconds"], 1)
        m["ok"] = not m["failed_chunks"] and m["inferences"] > 0 and m["exact"] == m["inferences"]
    return {"ok": bool(models) and all(m["ok"] for m in models.values()), "models": list(models.values())}


def run_verify(tasks: list[Task], *, engine: Engine, out_file, meta: dict,
               log: Callable[[str], None] = print) -> dict:
    """Run the chunks on ``engine`` (not yet entered) and write the merged report to
    ``out_file`` (atomically, again after each chunk: an interrupted run keeps what finished)."""
    results: dict[int, dict] = {}
    index = {id(t): i for i, t in enumerate(tasks)}
    t0 = time.monotonic()

    def publish(interrupted=False) -> dict:
        report = {**meta, **merge(tasks, results), "interrupted": interrupted,
                  "seconds": round(time.monotonic() - t0, 1)}
        write_json(out_file, report, indent=1)
        return report

    def on_result(task: Task, result: dict) -> None:
        results[index[id(task)]] = result
        bad = sum(r["status"] != "ok" or r.get("exact") != r.get("inferences") for r in results.values())
        model, part, _ = task.ref
        what = (f"{result['exact']}/{result['inferences']} bit-exact" if result["status"] == "ok"
                else f"FAILED: {result['error']}")
        log(f"[{time.monotonic() - t0:6.0f} s] {len(results)}/{len(tasks)} chunks done, {bad} not bit-exact or "
            f"failed, {len(tasks) - len(results)} remaining; {Path(model).name} chunk {part}: {what}")
        publish()

    publish()
    try:
        with engine:
            log(f"{len(tasks)} chunks on {engine.description}")
            engine.run(tasks, on_result)
    except KeyboardInterrupt:
        publish(interrupted=True)
        raise
    return publish()
