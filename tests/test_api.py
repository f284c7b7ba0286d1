"""The Python API: onnx2hw.compile -> Design (simulate, verify, build -> BuildResult), open_build,
and the driver opened on a design; `synth` elaborates its design once and never reads its own
accelerator.json back."""
from __future__ import annotations

import json
import pathlib

import numpy as np
import onnx
import pytest

import onnx2hw
import onnx2hw.build as build_mod
from _paths import EXAMPLES
from _sim_fixtures import require_simulator
from onnx2hw import BuildResult, Design, MismatchError, ModelError, open_build
from onnx2hw.cli import main
from onnx2hw.driver import Accelerator, read_build_info
from onnx2hw.dataflow import compile_pipeline
from onnx2hw.flow import fold_for_board, integer_graph_of
from onnx2hw.golden.integer import execute_integer
from onnx2hw.ir import load
from onnx2hw.layers import dequantize_outputs, quantize_inputs
from onnx2hw.rtl.accelerator import AcceleratorCore
from onnx2hw.rtl.board_top import BoardTop
from onnx2hw.sim.model_sim import SimReport
from onnx2hw.target import resolve_target

pytestmark = pytest.mark.filterwarnings("ignore::amaranth.hdl._ir.UnusedElaboratable")

MLP = str(EXAMPLES / "digits_mlp.onnx")
MLP_INT8 = str(EXAMPLES / "digits_mlp_int8.onnx")
CALIB = str(EXAMPLES / "digits_calib.npz")


def _test_inputs(n: int) -> np.ndarray:
    with np.load(EXAMPLES / "digits_test.npz") as f:
        return f["input"][:n]


def _golden(design: Design, x: np.ndarray) -> dict[str, np.ndarray]:
    g = design.integer
    xi = quantize_inputs(g, {"input": x})
    return dequantize_outputs(g, execute_integer(g, xi))


def test_public_names():
    assert set(onnx2hw.__all__) >= {"compile", "Design", "BuildResult", "open_build", "driver"}
    for name in onnx2hw.__all__:
        assert getattr(onnx2hw, name) is not None
    assert onnx2hw.driver.Accelerator is Accelerator


def test_compile_defaults_match_the_cli_design():
    design = onnx2hw.compile(MLP_INT8)
    assert isinstance(design, Design)
    assert design.board.name == "ulx3s-85f" and design.clock_hz == 75e6 and design.baud == 3e6
    assert design.name == "digits_mlp_int8" and design.source_model == MLP_INT8
    assert design.link_fold_rate == pytest.approx(design.link_bound_per_s)
    assert design.inferences_per_s == min(design.link_bound_per_s, design.compute_bound_per_s)
    # the design `sim`/`synth` compile for the same options, step by step
    t = resolve_target("ulx3s")
    pipeline, _ = fold_for_board(integer_graph_of(load(MLP_INT8)), family="ecp5", budget=t.budget,
                                 clock_hz=t.clock_hz, baud=t.baud)
    assert design.pipeline.describe() == pipeline.describe()
    # the model may be given as a ModelProto or a loaded Graph: same design, no source file
    for model in (onnx.load(MLP_INT8), load(MLP_INT8)):
        other = onnx2hw.compile(model)
        assert other.pipeline.describe() == design.pipeline.describe() and other.source_model is None


def test_compile_options():
    d = onnx2hw.compile(MLP_INT8, board="ulx3s-25f", clock_mhz=30, target_cycles=2000)
    assert d.board.name == "ulx3s-25f" and d.clock_hz == 30e6 and d.link_fold_rate is None
    assert d.pipeline.ii <= 2000
    fixed = {k: tuple(v) for k, v in d.pipeline.folding.items()}
    again = onnx2hw.compile(MLP_INT8, board="ulx3s-25f", clock_mhz=30, folding=fixed)
    assert again.pipeline.describe() == d.pipeline.describe() and again.folding_source == "the folding argument"
    fps = onnx2hw.compile(MLP_INT8, clock_mhz=50, target_fps=50e6 / 1000)
    assert fps.clock_hz == 50e6 and fps.pipeline.ii <= 1000
    # "max": the most parallel folding the board's budget takes (what a self-test build measures)
    t = resolve_target("ulx3s")
    fastest = onnx2hw.compile(MLP_INT8, target_fps="max")
    widest = compile_pipeline(fastest.integer, family="ecp5", budget=t.budget)
    assert fastest.fastest and fastest.link_fold_rate is None
    assert fastest.pipeline.describe() == widest.describe()
    assert widest.ii < onnx2hw.compile(MLP_INT8).pipeline.ii / 10   # the link-rate default is far slower


@pytest.mark.parametrize("kwargs, error, message", [
    ({"clock_mhz": -1}, ValueError, "clock_mhz must be a positive finite number, not -1"),
    ({"baud": 0}, ValueError, "baud must be a positive finite number"),
    ({"target_cycles": 0}, ValueError, "target_cycles must be a positive finite number"),
    ({"target_cycles": 10, "target_fps": 10}, ValueError, "not both"),
    ({"target_cycles": 10, "target_fps": "max"}, ValueError, "not both"),
    ({"target_fps": "fast"}, ValueError, "target_fps must be a positive finite number, not 'fast'"),
    ({"board": "nope"}, ModelError, "unknown board 'nope'"),
    ({"baud": 4e6}, ValueError, "above the 3e+06 baud"),
    ({"folding": {"fc1": "x"}}, ValueError, "folding of layer 'fc1'"),
    ({"board": "icebreaker", "model": str(EXAMPLES / "digits_cnn_int8.onnx")}, ModelError,
     "does not fit iCE40UP5K"),
    ({"model": MLP}, ModelError, "the model is not quantized"),
])
def test_compile_errors(kwargs, error, message):
    kwargs = {"model": MLP_INT8, **kwargs}
    with pytest.raises(error, match=message.replace("+", r"\+").replace("(", r"\(")):
        onnx2hw.compile(kwargs.pop("model"), **kwargs)


def test_calibration_as_path_or_arrays():
    with np.load(CALIB) as f:
        arrays = {k: f[k] for k in f.files}
    a = onnx2hw.compile(MLP, calib=CALIB)
    b = onnx2hw.compile(MLP, calib=arrays)
    assert a.pipeline.describe() == b.pipeline.describe()
    assert a.source_calib == CALIB and b.source_calib is None


def test_mismatch_error_names_the_first_difference():
    report = SimReport(total=2, exact=1, hw=np.zeros((2, 3)), golden=np.zeros((2, 3)),
                       first_mismatch=(1, 2, 5, 7), diverged_stage="fc2")
    e = MismatchError(report)
    assert isinstance(e, AssertionError) and e.report is report
    assert str(e) == ("the simulated design is not bit-exact: inference 1, output element 2: expected 5, got 7 "
                      "(first diverging stage: fc2)")


@pytest.mark.sim
def test_simulate_returns_the_model_outputs_bit_exact():
    require_simulator("verilator")
    design = onnx2hw.compile(MLP, calib=CALIB)
    x = _test_inputs(6)
    y = design.simulate({"input": x})
    want = _golden(design, x)
    assert set(y) == set(want) == {o.name for o in design.graph.outputs}
    for name in y:
        assert y[name].dtype == want[name].dtype and y[name].shape == (6, 10)
        np.testing.assert_array_equal(y[name], want[name])
    np.testing.assert_array_equal(design.simulate(x)[name], want[name])     # one input: an array will do
    report = design.verify(3)
    assert report.ok and report.total == 3


@pytest.mark.sim
def test_driver_opens_a_design_in_this_process():
    """Accelerator.open(design, "sim") simulates that very design (no build directory, no JSON)."""
    design = onnx2hw.compile(MLP_INT8, target_cycles=256)
    x = _test_inputs(2)
    with Accelerator.open(design, "sim", baud=design.clock_hz / 4) as acc:
        y = acc.run(x)
    np.testing.assert_array_equal(y, _golden(design, x)[design.graph.outputs[0].name])


class _FakeTools:
    """Stands in for Yosys/nextpnr/ecppack: writes a timing log and a bitstream (Fmax ``fmax``)."""

    def __init__(self, fmax: float):
        self.fmax = fmax

    def __call__(self, plan, build_dir, name, progress=None, timeout=3600, after_synthesis=None, **retry):
        build_dir.mkdir(parents=True, exist_ok=True)
        if progress:
            progress("synthesis (Yosys)")
        (build_dir / f"{name}.tim").write_text(
            "Info: Device utilisation:\n"
            "Info:            TRELLIS_COMB:  1234/ 83640     1%\n"
            "Info:              MULT18X18D:     3/   156     1%\n"
            "Info:                  DP16KD:     2/   208     0%\n"
            "Info:              TRELLIS_FF:   999/ 83640     1%\n"
            f"Info: Max frequency for clock '$glbnet$clk': {self.fmax:.2f} MHz (PASS at 75.00 MHz)\n")
        (build_dir / f"{name}.bit").write_bytes(b"\xff" * 2000)
        if retry.get("attempts") is not None and self.fmax < 75:    # a near miss placed twice
            assert retry["retry_seeds"] == [2, 3]
            retry["attempts"] += [{"seed": None, "fmax_mhz": self.fmax - 1, "kept": False},
                                  {"seed": 2, "fmax_mhz": self.fmax, "kept": True}]
        return {"synthesis (Yosys)": 0.5}


def test_synth_elaborates_once_and_does_not_read_its_json_back(tmp_path, monkeypatch, capsys):
    made = {"core": 0, "top": 0}
    core_init, top_init = AcceleratorCore.__init__, BoardTop.__init__

    def count_core(self, *a, **k):
        made["core"] += 1
        core_init(self, *a, **k)

    def count_top(self, *a, **k):
        made["top"] += 1
        top_init(self, *a, **k)

    read = []
    read_text = pathlib.Path.read_text

    def spy_read(self, *a, **k):
        read.append(self.name)
        return read_text(self, *a, **k)

    monkeypatch.setattr(AcceleratorCore, "__init__", count_core)
    monkeypatch.setattr(BoardTop, "__init__", count_top)
    monkeypatch.setattr(pathlib.Path, "read_text", spy_read)
    monkeypatch.setattr(build_mod, "run_build", _FakeTools(200.0))
    out = tmp_path / "b"
    assert main(["synth", MLP_INT8, "-o", str(out)]) == 0
    assert made == {"core": 1, "top": 1}
    assert "accelerator.json" not in read
    text = capsys.readouterr().out
    assert f"bitstream: {out / 'digits_mlp_int8.bit'}" in text and "LUT 1234/83640" in text
    # the files the user keeps are all there, and `run` reads the description back
    info = read_build_info(out)
    assert info["pipeline"] == onnx2hw.compile(MLP_INT8).pipeline.describe()
    result = open_build(out)
    assert result.timing_met and result.fmax_mhz == 200.0 and result.resources["dsp"].used == 3
    # a missed clock: exit 1 with the achieved Fmax, the build still written
    monkeypatch.setattr(build_mod, "run_build", _FakeTools(60.0))
    assert main(["synth", MLP_INT8, "-o", str(out)]) == 1
    shown, err = capsys.readouterr()
    assert "error: timing not met: achieved Fmax 60.0 MHz < target 75.0 MHz (try --clock-mhz 60, or more --pnr-tries)" in err
    missed = open_build(out)
    assert [dict(r) for r in missed.pnr_runs] == [{"seed": None, "fmax_mhz": 59.0, "kept": False},
                                                  {"seed": 2, "fmax_mhz": 60.0, "kept": True}]
    report = json.loads(missed.report_json.read_text())
    assert report["nextpnr_seed"] == 2
    runs = "place and route ran 2 times: nextpnr's seed 59.0 MHz, seed 2 60.0 MHz (kept)"
    assert runs in shown and runs in missed.report_html.read_text()
    assert not missed.timing_met


def test_open_build_of_a_non_build_directory(tmp_path):
    with pytest.raises(ModelError, match="not a build directory"):
        open_build(tmp_path)


@pytest.mark.synth
@pytest.mark.slow
def test_compile_simulate_build_digits_mlp(tmp_path):
    require_simulator("verilator")
    design = onnx2hw.compile(MLP, calib=CALIB)
    x = _test_inputs(4)
    y, want = design.simulate({"input": x}), _golden(design, x)
    assert set(y) == set(want)
    for name in y:
        np.testing.assert_array_equal(y[name], want[name])
    steps = []
    result = design.build(tmp_path / "mlp", progress=steps.append)
    assert isinstance(result, BuildResult) and result.design is design
    assert steps[0] == "elaborating" and any("nextpnr" in s for s in steps)
    assert result.bitstream == tmp_path / "mlp" / "digits_mlp.bit" and result.bitstream.stat().st_size > 1000
    for f in (result.verilog, result.folding_json, result.accelerator_json, result.report_json, result.report_html):
        assert f.is_file(), f
    r = json.loads(result.report_json.read_text())
    assert result.board == r["board"] == "ulx3s-85f" and result.name == r["model"] == "digits_mlp"
    assert result.fmax_mhz == r["clock"]["fmax_mhz"] and result.clock_mhz == r["clock"]["target_mhz"] == 75.0
    assert result.timing_met == r["clock"]["met"] is True
    for k, v in r["resources"].items():
        res = result.resources[k]
        assert (res.used, res.available, res.estimated) == (v["used"], v["available"], v["estimated"])
        assert res.used is not None and 0 < res.used <= res.available or k in ("dsp", "bram")
    tp = r["throughput"]
    assert result.inferences_per_s == tp["inferences_per_s"] == pytest.approx(design.inferences_per_s)
    assert result.link_bound_per_s == tp["link_bound_per_s"] and result.compute_bound_per_s == tp["compute_bound_per_s"]
    assert result.ii_cycles == tp["ii_cycles"] == design.pipeline.ii
    assert set(result.times_s) >= {"compile", "elaborate", "total"}
    assert open_build(result.out_dir) == result
    info = read_build_info(result.out_dir)
    assert info["pipeline"] == design.pipeline.describe() and info["source"]["calib"].endswith("digits_calib.npz")
