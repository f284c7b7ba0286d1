"""`onnx2hw sim`: bit-exact whole-model simulation, outputs comparable with onnxruntime, and
every way it must fail (early, clearly)."""
import re

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from _oracle import lsb_apart, run_spec
from _paths import EXAMPLES
from onnx2hw.cli import main

EX = EXAMPLES


@pytest.mark.sim
def test_sim_digits_mlp_matches_onnxruntime(tmp_path, capsys):
    x = np.load(f"{EX}/digits_test.npz")["input"][:6]
    np.savez(tmp_path / "x.npz", input=x)
    out = tmp_path / "y.npz"
    rc = main(["sim", f"{EX}/digits_mlp_int8.onnx", "--inputs", str(tmp_path / "x.npz"), "-o", str(out),
               "--target-fps", "20000", "--seed", "3", "--waves", str(tmp_path / "waves")])
    text = capsys.readouterr().out
    assert rc == 0, text
    assert "bit-exact: 6/6 inferences" in text
    measured, estimated = map(float, re.search(r"II: measured ([\d.]+) cycles, estimated (\d+)", text).groups())
    assert abs(measured - estimated) <= 0.1 * estimated and estimated <= 75e6 / 20000
    vcd = sorted((tmp_path / "waves").glob("run*.vcd"))
    assert vcd and "$var" in vcd[0].read_text()[:100000]
    hw = np.load(out)["logits"]
    ref = run_spec(EX / "digits_mlp_int8.onnx", {"input": x})[0]
    # the hardware rounds requantization half up, onnxruntime half to even: at most 1 LSB apart
    model = onnx.load(f"{EX}/digits_mlp_int8.onnx")
    scale = next(onnx.numpy_helper.to_array(t) for t in model.graph.initializer if t.name.startswith("logits")
                 and t.name.endswith("scale"))
    assert hw.shape == ref.shape == (6, 10) and hw.dtype == np.float32
    lsb = lsb_apart(hw, ref, scale)
    assert lsb.max() <= 1 and np.mean(lsb == 0) >= 0.9


def _model(tmp_path, nodes, name="m.onnx", inputs=None, outputs=None, inits=()):
    g = helper.make_graph(nodes, "g", inputs or [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
                          outputs or [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])], list(inits))
    path = tmp_path / name
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return str(path)


@pytest.mark.sim
def test_sim_model_named_like_the_pipeline_ends(tmp_path, capsys):
    """Nodes and tensors named "input", "output" and "x", a node named like the graph output: the
    stages are linked by object, so the names exporters use everywhere cannot confuse them."""
    rng = np.random.default_rng(0)
    w1, w2 = rng.normal(0, 0.3, (8, 16)).astype(np.float32), rng.normal(0, 0.3, (4, 8)).astype(np.float32)
    path = _model(tmp_path, [helper.make_node("Gemm", ["input", "w1"], ["x"], name="x", transB=1),
                             helper.make_node("Relu", ["x"], ["r"], name="input"),
                             helper.make_node("Gemm", ["r", "w2"], ["output"], name="output", transB=1)],
                  inputs=[helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 16])],
                  outputs=[helper.make_tensor_value_info("output", TensorProto.FLOAT, ["N", 4])],
                  inits=[numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")])
    np.savez(tmp_path / "c.npz", input=rng.uniform(0, 1, (32, 16)).astype(np.float32))
    assert main(["sim", path, "--calib", str(tmp_path / "c.npz"), "--count", "5"]) == 0
    assert "bit-exact: 5/5 inferences" in capsys.readouterr().out


def test_sim_float_model_needs_calib(capsys):
    assert main(["sim", f"{EX}/digits_mlp.onnx", "--count", "2"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "--calib" in err and "onnx2hw quantize" in err


def test_sim_lists_every_unsupported_node_first(tmp_path, capsys):
    path = _model(tmp_path, [helper.make_node("Softmax", ["x"], ["s"], name="sm"),
                             helper.make_node("Exp", ["s"], ["y"], name="ex")])
    assert main(["sim", path, "--count", "2"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "sm (Softmax)" in err and "ex (Exp)" in err


@pytest.mark.parametrize("argv, message", [
    (["--count", "0"], "--count must be at least 1"),
    (["--board", "nope"], "unknown board 'nope'"),
    (["--target-fps", "-5"], "--target-fps must be a positive finite number"),
    (["--clock-mhz", "inf"], "--clock-mhz must be a positive finite number"),
    (["--baud", "0"], "--baud must be a positive finite number"),
    (["--target-fps", "1e9"], "to reach 1 cycles per inference"),
])
def test_sim_bad_options(capsys, argv, message):
    assert main(["sim", f"{EX}/digits_mlp_int8.onnx", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err, err


def test_target_fps_takes_a_number_or_max(capsys):
    with pytest.raises(SystemExit) as exc:   # argparse's own usage error, as for any ill-typed option
        main(["sim", f"{EX}/digits_mlp_int8.onnx", "--target-fps", "fast"])
    assert exc.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].endswith(
        "error: argument --target-fps: must be a number or 'max', not 'fast'")


def test_sim_too_big_for_board(capsys):
    assert main(["sim", f"{EX}/digits_cnn_int8.onnx", "--board", "icebreaker", "--count", "1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: does not fit iCE40UP5K: needs ") and "at its smallest folding" in err, err


def test_sim_time_out_is_one_error_line(monkeypatch, capsys):
    """When the simulation harness gives up (a time-out: too few outputs in the cycle budget the
    pipeline's latency and II give), sim says so in one line with what came out, exit 2."""
    import onnx2hw.design as design_module

    def stalled(self, x, **kw):
        raise AssertionError("timeout after 45056 cycles (o: 3/20 out)\n  waveform: none")

    monkeypatch.setattr(design_module.Design, "simulate_raw", stalled)
    assert main(["sim", str(EXAMPLES / "digits_mlp_int8.onnx"), "--count", "2"]) == 2
    err = [l for l in capsys.readouterr().err.splitlines() if l.startswith("error")]
    assert err == ["error: simulation failed: timeout after 45056 cycles (o: 3/20 out) waveform: none"]
