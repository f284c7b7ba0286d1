"""`onnx2hw explore` on a real Dask LocalCluster (one per module, 2 worker processes): a 2-point
sweep of the digits MLP whose table matches each point's report.json, a rerun that builds
nothing, a failing point recorded while the table keeps the others, workers killed under their
tasks, and a --verify regression split across the workers."""
from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import pytest

from _paths import EXAMPLES
from onnx2hw.build import open_build
from onnx2hw.build_info import read_build_info
from onnx2hw.cli import main
from onnx2hw.explore.engine import Engine, Task

#: one xdist worker runs the whole module (`make test` is --dist loadgroup): one cluster, one sweep
pytestmark = [pytest.mark.synth, pytest.mark.slow, pytest.mark.xdist_group("explore_cluster")]

MLP, CALIB = str(EXAMPLES / "digits_mlp.onnx"), str(EXAMPLES / "digits_calib.npz")
#: the smallest folding of the digits MLP, two nextpnr seeds: two quick, distinct builds
SPACE = "target_cycles = [4096]\nseeds = [1, 2]\n"


@pytest.fixture(scope="module")
def engine():
    with Engine(workers=2, retries=1) as e:
        yield e


@pytest.fixture(scope="module")
def sweep(engine, tmp_path_factory):
    """The 2-point sweep, run once for the module through the CLI on the module's cluster."""
    d = tmp_path_factory.mktemp("explore")
    (d / "space.toml").write_text(SPACE)
    argv = ["explore", MLP, "--calib", CALIB, "--board", "ulx3s-12f", "--space", str(d / "space.toml"),
            "-o", str(d / "out"), "--cluster", engine.cluster.scheduler_address, "--data",
            str(EXAMPLES / "digits_test.npz")]
    rc = main(argv)
    return d, argv, rc


def _table(out: Path) -> list[dict]:
    return json.loads((out / "pareto.json").read_text())["rows"]


def test_sweep_table_matches_each_report(sweep, capsys):
    d, _, rc = sweep
    out = d / "out"
    assert rc == 0
    rows = _table(out)
    assert len(rows) == 2 and {r["seed"] for r in rows} == {1, 2}
    assert all(r["status"] == "ok" and r["built"] for r in rows)
    for r in rows:
        point = out / r["dir"]
        rep = json.loads((point / "report.json").read_text())
        assert open_build(point).bitstream.is_file()     # a normal build directory: `onnx2hw run` reads it
        assert read_build_info(point)["source"]["model"] == str(Path(MLP).resolve())
        assert rep["nextpnr_seed"] == r["seed"] and rep["arithmetic"]["bits"] == r["bits"] == "w8a8"
        assert r["ii_cycles"] == rep["throughput"]["ii_cycles"] and r["target_cycles"] == 4096
        assert r["clock_mhz"] == rep["clock"]["target_mhz"] and r["fmax_mhz"] == rep["clock"]["fmax_mhz"]
        assert r["timing_met"] == rep["clock"]["met"]
        assert r["inferences_per_s"] == rep["throughput"]["compute_bound"]["estimated"]["inferences_per_s"]
        for k in ("lut", "ff", "dsp", "bram"):
            assert r[k] == rep["resources"][k]["used"] and r[k] is not None
        assert 0.9 < r["accuracy_top1"] <= 1.0       # the w8a8 integer model on the labelled test split
    assert any(r["pareto"] for r in rows)
    # the CSV holds the same rows
    with open(out / "pareto.csv") as f:
        csv_rows = list(csv.DictReader(f))
    assert [c["point"] for c in csv_rows] == [r["point"] for r in rows]
    assert [float(c["fmax_mhz"]) for c in csv_rows] == [r["fmax_mhz"] for r in rows]
    page = (out / "report.html").read_text()
    assert page.count("<svg") == 2 and all(r["point"] in page for r in rows)


def test_rerun_builds_nothing(sweep, capsys):
    d, argv, _ = sweep
    out = d / "out"
    stamps = {p: p.stat().st_mtime_ns for p in out.glob("points/*/*.bit")}
    assert len(stamps) == 2
    capsys.readouterr()
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert "2 points: 0 built, 2 cached, 0 failed" in captured.out
    assert "2 points: 2 cached, 0 to build" in captured.err
    assert {p: p.stat().st_mtime_ns for p in out.glob("points/*/*.bit")} == stamps
    assert all(not r["built"] and r["status"] == "ok" for r in _table(out))


def test_failing_point_is_recorded_and_the_rest_kept(sweep, capsys):
    d, argv, _ = sweep
    out = d / "out"
    (d / "space3.toml").write_text("target_cycles = [4096]\nseeds = [1, 2, 3]\n")
    argv = [a if a != str(d / "space.toml") else str(d / "space3.toml") for a in argv] + ["--timeout", "2"]
    capsys.readouterr()
    assert main(argv) == 1            # a point failed: exit status 1, the sweep went on
    captured = capsys.readouterr()
    rows = _table(out)
    assert [r["status"] for r in rows] == ["ok", "ok", "failed"]
    failed = rows[-1]
    assert failed["seed"] == 3 and failed["error"] == "timed out after 2 s" and failed["lut"] is None
    assert f"failed: {failed['point']}: timed out after 2 s" in captured.out
    assert "3 points: 0 built, 2 cached, 1 failed" in captured.out
    assert "1 failed" in captured.err and "FAILED" in captured.err
    # its directory is an incomplete build that nothing mistakes for a finished one
    assert not (out / failed["dir"] / "explore.json").exists()
    assert json.loads((out / failed["dir"] / "explore-failed.json").read_text())["error"] == "timed out after 2 s"


# ----------------------------------------------------------------------- killed workers (engine)

def _die_once(kind, spec, **_):
    """A task whose first run kills its worker process (as the OOM killer would)."""
    marker = Path(spec["marker"])
    if not marker.exists():
        marker.write_text("died once")
        os._exit(1)
    return {"status": "ok", "error": None, "worker": "w", "seconds": 0.0, "runs": 2}


def _always_die(kind, spec, **_):
    os._exit(1)


def _fine(kind, spec, **_):
    return {"status": "ok", "error": None, "worker": "w", "seconds": 0.0, "runs": 1}


def _dispatch(kind, spec, **kw):
    return {"die_once": _die_once, "always_die": _always_die, "fine": _fine}[kind](kind, spec, **kw)


def test_killed_worker_task_is_retried_then_reported_failed(engine, tmp_path):
    results = {}

    def keep(task, result):
        results[task.ref] = result

    # a worker dies under a task once: the task runs again on another worker; the other task is kept
    engine.run([Task("die_once", {"marker": str(tmp_path / "m")}, ref="a"), Task("fine", {}, ref="c")], keep,
               fn=_dispatch)
    assert results["a"]["status"] == "ok" and results["a"]["runs"] == 2
    assert results["c"]["status"] == "ok"
    engine.client.wait_for_workers(2, timeout=60)                    # the nanny restarted the worker
    # a task under which every worker dies: reported failed after the bounded retries
    engine.run([Task("always_die", {}, ref="b"), Task("fine", {}, ref="d")], keep, fn=_dispatch)
    assert results["b"] == {"status": "failed", "error": "the worker running it died (2 times; not tried again)",
                            "seconds": None, "worker": None}
    assert results["d"]["status"] == "ok"
    engine.client.wait_for_workers(2, timeout=60)


# ------------------------------------------------------------------------------------- --verify

@pytest.mark.sim
def test_verify_regression_is_split_and_merged(engine, tmp_path, capsys):
    out = tmp_path / "verify.json"
    rc = main(["explore", MLP, "--calib", CALIB, "--verify", "--count", "4", "--chunk", "2", "--board", "ulx3s-12f",
               "--cluster", engine.cluster.scheduler_address, "-o", str(out)])
    captured = capsys.readouterr()
    assert rc == 0, captured
    report = json.loads(out.read_text())
    assert report["ok"] and not report["interrupted"]
    (m,) = report["models"]
    assert m["chunks"] == 2 and m["inferences"] == 4 and m["exact"] == 4 and m["failed_chunks"] == []
    assert m["ii_measured"]["min"] > 0 and m["estimated_ii"] > 0
    assert "4/4 inferences bit-exact in 2 chunks" in captured.out
    assert "2/2 chunks done" in captured.err


# ------------------------------------------------------------------------------------- Ctrl-C

def _wait_for_stop(kind, spec, *, stop=None, **_):
    """A task that runs until the sweep's stop event is set (up to a minute), then says so."""
    import time

    from onnx2hw.explore.tasks import _stopped

    Path(spec["started"]).write_text("started")
    t0 = time.monotonic()
    while time.monotonic() - t0 < 60:
        if _stopped(stop):
            Path(spec["stopped"]).write_text("stopped")
            return {"status": "stopped", "error": "stopped by the sweep (interrupted)", "worker": "w",
                    "seconds": time.monotonic() - t0}
        time.sleep(0.2)
    return {"status": "ok", "error": None, "worker": "w", "seconds": 60.0}


def _quick_or_wait(kind, spec, **kw):
    """``fine`` once the file ``spec["after"]`` exists (another task has started), else wait."""
    import time

    if kind != "fine":
        return _wait_for_stop(kind, spec, **kw)
    for _ in range(300):
        if Path(spec["after"]).exists():
            break
        time.sleep(0.1)
    return _fine(kind, spec, **kw)


def test_ctrl_c_stops_running_tasks_and_starts_no_more(engine, tmp_path):
    """Ctrl-C in the main thread (here: raised by the result callback, where the sweep is when
    it arrives): run() re-raises it at once, the running task sees the stop event and ends, and
    the tasks still queued never start; the result already delivered stays delivered."""
    import time

    def marks(k):
        return {"started": str(tmp_path / f"{k}.started"), "stopped": str(tmp_path / f"{k}.stopped")}

    kept = []

    def interrupt(task, result):
        kept.append((task.ref, result["status"]))
        raise KeyboardInterrupt

    tasks = [Task("fine", {"after": marks("a")["started"]}, ref="quick"), Task("wait", marks("a"), ref="a"), Task("wait", marks("b"), ref="b"),
             Task("wait", marks("c"), ref="c")]
    with Engine(engine.cluster.scheduler_address) as e:   # its own stop event on the module's cluster
        t0 = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            e.run(tasks, interrupt, fn=_quick_or_wait)
        assert time.monotonic() - t0 < 30
    assert kept == [("quick", "ok")]
    for _ in range(50):                  # the running task saw the stop event and ended
        if (tmp_path / "a.stopped").exists():
            break
        time.sleep(0.2)
    assert (tmp_path / "a.stopped").exists()
    time.sleep(2)
    assert not (tmp_path / "b.started").exists() and not (tmp_path / "c.started").exists()
    engine.client.wait_for_workers(2, timeout=60)
