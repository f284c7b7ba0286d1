"""`onnx2hw synth --selftest` and `onnx2hw run --selftest` (the board simulated with --port sim),
and the throughput section of report.json/report.html. The bitstream tools are replaced by a
stand-in (as in tests/test_atomic_outputs.py): everything up to and after place and route runs."""
from __future__ import annotations

import base64
import json
import shutil
import zlib

import numpy as np
import pytest

import onnx2hw.build as build_mod
from _paths import EXAMPLES
from onnx2hw.build_info import read_build_info
from onnx2hw.cli import main
from onnx2hw.design import compile as compile_design
from onnx2hw.golden.integer import execute_integer
from onnx2hw.report import throughput

pytestmark = pytest.mark.filterwarnings("ignore::amaranth.hdl._ir.UnusedElaboratable")

MLP_INT8 = str(EXAMPLES / "digits_mlp_int8.onnx")
TEST = str(EXAMPLES / "digits_test.npz")
FAST = ["--target-fps", "500000"]        # a short II keeps the simulated self-test short
SIM_BAUD = str(75e6 / 4)                 # 4 clock cycles per bit in the simulated UART


class _FakeTools:
    """run_build without Yosys/nextpnr: a bitstream and a timing log."""

    def __call__(self, plan, build_dir, name, progress=None, timeout=3600, after_synthesis=None, **retry):
        build_dir.mkdir(parents=True, exist_ok=True)
        (build_dir / f"{name}.tim").write_text(
            "Info: Device utilisation:\nInfo:            TRELLIS_COMB:  1234/ 83640     1%\n"
            "Info: Max frequency for clock '$glbnet$clk': 150.00 MHz (PASS at 75.00 MHz)\n")
        (build_dir / f"{name}.bit").write_bytes(b"\xff" * 2000)
        return {"synthesis (Yosys)": 0.1}


def _error_line(err: str) -> str:
    """The one ``error:`` line (progress notes may come before it), and no traceback."""
    lines = [ln for ln in err.splitlines() if ln.startswith("error")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    """A self-test build (4 inputs of the digits test set) and the same design without one."""
    d = tmp_path_factory.mktemp("selftest")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(build_mod, "run_build", _FakeTools())
        assert main(["synth", MLP_INT8, "-o", str(d / "st"), "--selftest", "4", "--selftest-inputs", TEST,
                     *FAST]) == 0
        assert main(["synth", MLP_INT8, "-o", str(d / "plain"), *FAST]) == 0
    return d / "st", d / "plain"


def test_selftest_build_records_its_memory(builds):
    st, _plain = builds
    info = read_build_info(st)
    rec = info["selftest"]
    assert rec["samples"] == 4 and rec["source"] == "the first 4 of digits_test.npz"
    # the memory holds the host's quantization of the first four test inputs, and the expected
    # outputs are the golden integer executor's for them
    design = compile_design(MLP_INT8, target_fps=500000)
    with np.load(TEST) as f:
        x = design.quantize({"input": f["input"][:4].astype(np.float32)})
    g = design.integer
    y = execute_integer(g, {g.input_specs[0].name: x})[g.output_specs[0].name]
    fmt = design.link
    assert base64.b64decode(rec["inputs"]) == fmt.encode_inputs(x)
    assert base64.b64decode(rec["outputs"]) == fmt.encode_outputs(y)
    assert rec["output_crc32"] == zlib.crc32(fmt.encode_outputs(y))


def test_report_throughput_three_ways(builds):
    st, plain = builds
    r, r0 = (json.loads((b / "report.json").read_text()) for b in (st, plain))
    tp = r["throughput"]
    ii, lat = tp["ii_cycles"], tp["latency_cycles"]
    assert tp["link_bound"] == {"inferences_per_s": 3e6 / 10 / 64, "baud": 3e6, "bytes_per_inference": 64}
    cb = tp["compute_bound"]
    assert cb["clock_mhz"] == 75.0 and cb["fmax_mhz"] == 150.0          # timing met: the build's clock
    est = cb["estimated"]
    assert (est["ii_cycles"], est["latency_cycles"]) == (ii, lat)
    assert est["inferences_per_s"] == pytest.approx(75e6 / ii) and est["latency_us"] == pytest.approx(lat / 75)
    assert est["inferences_per_s_at_fmax"] == pytest.approx(150e6 / ii)
    assert est["latency_us_at_fmax"] == pytest.approx(lat / 150)
    assert cb["simulated"] is None                                        # no --verify
    assert tp["measured"]["status"] == "not measured" and "run --selftest" not in tp["measured"]["how"]
    assert "`onnx2hw run BUILD_DIR --port PORT --selftest`" in tp["measured"]["how"]
    assert r0["throughput"]["measured"]["status"] == "no self-test in this build"
    assert "`onnx2hw synth MODEL --selftest`" in r0["throughput"]["measured"]["how"]
    # the self-test's resources are in the estimate
    cost = r["selftest"]["cost"]
    assert cost["lut"] > 0 and "selftest" not in r0
    assert r["resources"]["lut"]["estimated"] == r0["resources"]["lut"]["estimated"] + cost["lut"]
    assert r["resources"]["bram"]["estimated"] == r0["resources"]["bram"]["estimated"] + cost["ebr"]
    page = (st / "report.html").read_text()
    assert "Throughput and latency" in page and "link-bound (UART)" in page
    assert "compute-bound (estimated)" in page and "<code>onnx2hw run BUILD_DIR --port PORT --selftest</code>" in page
    assert "Self-test:</b> 4 inputs" in page


def test_run_selftest_on_the_simulated_board(builds, capsys):
    st, _plain = builds
    capsys.readouterr()
    assert main(["run", str(st), "--port", "sim", "--selftest", "--passes", "2", "--baud", SIM_BAUD]) == 0
    out = capsys.readouterr().out
    assert "self-test: 4 stored inputs (the first 4 of digits_test.npz) x 2 passes = 8 inferences in " in out
    assert "measured on the board: " in out and "inferences/s" in out and "latency" in out
    assert "outputs: all 2 passes match the golden executor" in out


def test_run_selftest_detects_a_wrong_expectation(builds, tmp_path, capsys):
    st, _plain = builds
    bad = tmp_path / "bad"
    shutil.copytree(st, bad)
    info = json.loads((bad / "accelerator.json").read_text())
    out = bytearray(base64.b64decode(info["selftest"]["outputs"]))
    out[0] ^= 0x80                                    # as if the golden had given another output
    info["selftest"].update(outputs=base64.b64encode(bytes(out)).decode(), output_crc32=zlib.crc32(bytes(out)))
    (bad / "accelerator.json").write_text(json.dumps(info))
    capsys.readouterr()
    assert main(["run", str(bad), "--port", "sim", "--selftest", "--passes", "1", "--baud", SIM_BAUD]) == 1
    err = capsys.readouterr().err
    line = _error_line(err)
    assert line.startswith("error: self-test FAILED: 1 of 1 passes gave outputs that differ from the golden")


def test_run_selftest_of_a_plain_build_is_one_error_line(builds, capsys):
    _st, plain = builds
    capsys.readouterr()
    assert main(["run", str(plain), "--port", "sim", "--selftest"]) == 2
    assert "has no self-test: build it with `onnx2hw synth MODEL --selftest`" in _error_line(capsys.readouterr().err)
    assert main(["run", str(plain), "--port", "sim"]) == 2
    assert "--inputs X.npz is required" in _error_line(capsys.readouterr().err)


def test_selftest_that_does_not_fit_is_one_error_line(tmp_path, capsys):
    out = tmp_path / "big"
    assert main(["synth", MLP_INT8, "-o", str(out), "--selftest", "100000"]) == 2
    line = _error_line(capsys.readouterr().err)
    assert line.startswith("error: a self-test of 100000 inputs (6,400,000 bytes) does not fit ULX3S-85F: it needs ")
    assert " EBR beside the design's " in line and "inputs fit (--selftest " in line
    fits = int(line.rsplit("--selftest ", 1)[1].rstrip(")"))
    assert 1000 < fits < 100000
    assert not out.exists()


@pytest.mark.parametrize("argv, message", [
    (["--selftest", "0"], "--selftest must be at least 1 input"),
    (["--selftest-inputs", TEST], "--selftest-inputs needs --selftest"),
    (["--selftest", "5000", "--selftest-inputs", TEST], "holds 450 inputs but --selftest asks for 5000"),
])
def test_selftest_option_errors(tmp_path, capsys, argv, message):
    with np.load(TEST) as f:
        assert len(f["input"]) == 450
    assert main(["synth", MLP_INT8, "-o", str(tmp_path / "b"), *argv]) == 2
    assert message in _error_line(capsys.readouterr().err)


def test_simulated_figures_in_the_throughput_section():
    design = compile_design(MLP_INT8, target_fps=500000)
    p = design.pipeline
    tp = throughput(p, clock_mhz=75.0, fmax_mhz=60.0, baud=3e6, link_bytes=64,
                    simulated={"ii": 130.0, "latency": 400, "inferences": 3})
    cb = tp["compute_bound"]
    assert cb["clock_mhz"] == 60.0                    # timing not met: the achieved Fmax
    assert cb["simulated"] == {"cycles_per_inference": 130.0, "latency_cycles": 400, "inferences": 3,
                               "inferences_per_s": pytest.approx(60e6 / 130), "latency_us": pytest.approx(400 / 60),
                               "inferences_per_s_at_fmax": pytest.approx(60e6 / 130),
                               "latency_us_at_fmax": pytest.approx(400 / 60)}
    assert tp["compute_bound_per_s"] == pytest.approx(75e6 / p.ii)    # the flat key: at the target clock
