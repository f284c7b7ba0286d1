"""``onnx2hw quantize``: success path and one clean ``error:`` line with exit 2 for bad input."""
from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from _oracle import run_spec
from _paths import EXAMPLES
from onnx2hw.cli import main

EX = EXAMPLES
MLP = str(EX / "digits_mlp.onnx")
CALIB = str(EX / "digits_calib.npz")


def _run(capsys, *argv):
    rc = main(["quantize", *map(str, argv)])
    out, err = capsys.readouterr()
    return rc, out, err


def _error(capsys, *argv) -> str:
    rc, out, err = _run(capsys, *argv)
    assert rc == 2, (rc, out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err
    return lines[0]


@pytest.mark.parametrize("extra,opset", [([], 17), (["--weight-bits", "4", "--per-channel"], 21),
                                         (["--act-bits", "4", "--method", "percentile"], 21)])
def test_quantize_writes_a_valid_qdq_model(tmp_path, capsys, extra, opset):
    out = tmp_path / "q.onnx"
    rc, stdout, err = _run(capsys, MLP, "--calib", CALIB, "-o", out, *extra)
    assert rc == 0, err
    assert stdout.startswith(f"wrote {out}: 3 weight layers") and f"opset {opset}" in stdout
    model = onnx.load(out)
    onnx.checker.check_model(model, full_check=True)
    assert {n.op_type for n in model.graph.node} == {"QuantizeLinear", "DequantizeLinear", "Gemm", "Relu"}
    x = np.load(EX / "digits_test.npz")
    y = run_spec(out, {"input": x["input"]})[0]
    assert np.mean(y.argmax(1) == x["label"]) > 0.93


def test_subprocess_entry_point(tmp_path):
    exe = shutil.which("onnx2hw", path=str(pathlib.Path(sys.executable).parent))
    cmd = [exe] if exe else [sys.executable, "-c", "import sys; from onnx2hw.cli import main; sys.exit(main())"]
    ok = subprocess.run(cmd + ["quantize", MLP, "--calib", CALIB, "-o", str(tmp_path / "q.onnx")],
                        capture_output=True, text=True, timeout=300)
    assert ok.returncode == 0 and "wrote" in ok.stdout, ok.stderr
    bad = subprocess.run(cmd + ["quantize", MLP, "--calib", CALIB, "-o", str(tmp_path / "q.onnx"),
                                "--weight-bits", "2"], capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2
    assert bad.stderr.strip() == "error: --weight-bits must be one of 8, 4, not '2'"


def _npz(tmp_path, name="c.npz", **arrays):
    path = tmp_path / name
    np.savez(path, **arrays)
    return path


def _calib_input():
    return np.load(CALIB)["input"]


def test_wrong_calibration_file(tmp_path, capsys):
    text = tmp_path / "calib.npz"
    text.write_text("not numpy")
    assert "is not a readable NumPy .npz archive" in _error(capsys, MLP, "--calib", text, "-o", tmp_path / "o.onnx")
    npy = tmp_path / "calib.npy"
    np.save(npy, _calib_input())
    assert "single .npy array" in _error(capsys, MLP, "--calib", npy, "-o", tmp_path / "o.onnx")
    assert "does not exist" in _error(capsys, MLP, "--calib", tmp_path / "none.npz", "-o", tmp_path / "o.onnx")
    assert not (tmp_path / "o.onnx").exists()


def test_missing_or_extra_input_name(tmp_path, capsys):
    msg = _error(capsys, MLP, "--calib", _npz(tmp_path, image=_calib_input()), "-o", tmp_path / "o.onnx")
    assert "missing input(s) 'input'" in msg and "unknown key(s) 'image'" in msg
    msg = _error(capsys, MLP, "--calib", _npz(tmp_path, input=_calib_input(), extra=_calib_input()),
                 "-o", tmp_path / "o.onnx")
    assert "unknown key(s) 'extra'" in msg


@pytest.mark.parametrize("array,needle", [
    (np.zeros((8, 32), np.float32) + 0.5, "dim 1 must be 64"),
    (np.zeros((8, 8, 8), np.float32) + 0.5, "has rank 2"),
    (np.zeros((0, 64), np.float32), "holds no samples"),
    (np.ones((8, 64), np.int64), "has dtype 'int64'"),
    (np.full((8, 64), np.nan, np.float32), "NaN or infinite"),
])
def test_mismatched_calibration_arrays(tmp_path, capsys, array, needle):
    msg = _error(capsys, MLP, "--calib", _npz(tmp_path, input=array), "-o", tmp_path / "o.onnx")
    assert needle in msg and "'input'" in msg


def test_all_zero_calibration_gives_a_clear_error(tmp_path, capsys):
    msg = _error(capsys, MLP, "--calib", _npz(tmp_path, input=np.zeros((8, 64), np.float32)),
                 "-o", tmp_path / "o.onnx")
    assert msg == ("error: tensor 'input' is zero for every calibration sample: its quantization scale would be 0; "
                   "calibrate with data that exercises the model")


@pytest.mark.parametrize("option,value", [("--weight-bits", "3"), ("--weight-bits", "16"), ("--weight-bits", "0"),
                                          ("--weight-bits", "-8"), ("--act-bits", "2"), ("--act-bits", "eight"),
                                          ("--method", "entropy")])
def test_bad_options(tmp_path, capsys, option, value):
    msg = _error(capsys, MLP, "--calib", CALIB, "-o", tmp_path / "o.onnx", option, value)
    assert msg.startswith(f"error: {option} must be one of") and repr(value) in msg


def _save(tmp_path, nodes, inits, x_shape=("N", 64), y_shape=("N", 4), elem=TensorProto.FLOAT):
    g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("input", elem, list(x_shape))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(y_shape))],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    path = tmp_path / "m.onnx"
    onnx.save(m, path)
    return path


def test_unsupported_layer_names_the_node(tmp_path, capsys):
    w = np.ones((4, 64), np.float32)
    path = _save(tmp_path, [helper.make_node("Gemm", ["input", "w"], ["h"], name="fc", transB=1),
                            helper.make_node("Exp", ["h"], ["y"], name="squash")], {"w": w})
    msg = _error(capsys, path, "--calib", CALIB, "-o", tmp_path / "o.onnx")
    assert "node 'squash' (Exp) is not supported" in msg


def test_non_float_or_quantized_model(tmp_path, capsys):
    path = _save(tmp_path, [helper.make_node("Identity", ["input"], ["y"], name="id")], {},
                 y_shape=("N", 64), elem=TensorProto.DOUBLE)
    assert "is not a float32 tensor" in _error(capsys, path, "--calib", CALIB, "-o", tmp_path / "o.onnx")
    msg = _error(capsys, EX / "digits_mlp_qonnx_w4a4.onnx", "--calib", CALIB, "-o", tmp_path / "o.onnx")
    assert "node 'input_quant' (Quant): the model is already quantized" in msg
    msg = _error(capsys, EX / "digits_mlp_int8.onnx", "--calib", CALIB, "-o", tmp_path / "o.onnx")
    assert "already quantized" in msg


def test_bad_model_file(tmp_path, capsys):
    assert "does not exist" in _error(capsys, tmp_path / "nope.onnx", "--calib", CALIB, "-o", tmp_path / "o.onnx")
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"\x00\xffnot a model")
    _error(capsys, junk, "--calib", CALIB, "-o", tmp_path / "o.onnx")
    assert "would overwrite" in _error(capsys, MLP, "--calib", CALIB, "-o", MLP)
