"""`onnx2hw inspect`: figures from an independent count, and one-line errors for bad files."""
import json
import pathlib
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from _paths import EXAMPLES, ROOT
from onnx2hw.cli import main

MLP = EXAMPLES / "digits_mlp.onnx"


def _inspect_json(capsys, path, status=0):
    assert main(["inspect", str(path), "--json"]) == status
    return json.loads(capsys.readouterr().out)


def test_inspect_mlp_counts(capsys):
    s = _inspect_json(capsys, MLP)
    model = onnx.load(MLP)
    gemm_weights = [numpy_helper.to_array(t) for t in model.graph.initializer if t.name.endswith("weight")]
    # Gemm with transB=1: weight (N, K) -> N*K MACs per sample
    assert s["total_macs"] == sum(w.size for w in gemm_weights) == 64 * 64 + 64 * 32 + 32 * 10
    assert s["parameters"] == sum(numpy_helper.to_array(t).size for t in model.graph.initializer)
    assert s["inputs"] == [{"name": "input", "type": "float", "shape": ["N", 64]}]
    assert s["op_histogram"] == {"Gemm": 3, "Relu": 2}
    assert all(h["supported"] for h in s["hardware"])
    assert s["metadata"]["dataset"] == "sklearn digits"


def test_inspect_conv_macs_and_unsupported(capsys, tmp_path):
    w = np.zeros((4, 2, 3, 3), np.float32)
    g = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
         helper.make_node("Erf", ["c"], ["e"], name="erf"),
         helper.make_node("Softmax", ["e"], ["y"], name="sm", axis=1)],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 2, 5, 7])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4, 5, 7])], [numpy_helper.from_array(w, "w")])
    path = tmp_path / "conv.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    s = _inspect_json(capsys, path, status=2)   # compile refuses the Erf: so does inspect
    assert s["layers"] == [{"name": "conv", "op": "Conv", "macs": 4 * 5 * 7 * 2 * 3 * 3}]
    assert s["inputs"][0]["shape"] == ["batch", 2, 5, 7]
    assert {h["op"]: (h["supported"], h["where"]) for h in s["hardware"]} == {
        "Conv": (True, "hardware"), "Erf": (False, "hardware"), "Softmax": (True, "host")}
    assert s["host"] == {"cut": "e", "cuts": ["e"], "nodes": ["sm"]}
    assert (s["verdict"], s["refusal"]["node"], s["refusal"]["op"]) == ("refused", "erf", "Erf")
    assert main(["inspect", str(path)]) == 2
    out, err = capsys.readouterr()
    assert "not mappable to hardware: Erf" in out
    assert "the hardware ends at 'e'; the host runs 1 node(s) after it: sm" in " ".join(out.split())
    assert err.startswith("error: ") and err.count("\n") == 1 and "erf (Erf)" in err


def _bad_files(tmp_path):
    good = MLP.read_bytes()
    files = {
        "missing": tmp_path / "missing.onnx",
        "directory": tmp_path,
        "empty": tmp_path / "empty.onnx",
        "truncated": tmp_path / "truncated.onnx",
        "not_onnx": tmp_path / "text.onnx",
    }
    files["empty"].write_bytes(b"")
    files["truncated"].write_bytes(good[: len(good) // 3])
    files["not_onnx"].write_text("this is not a protobuf\n" * 20)
    return files


@pytest.mark.parametrize("kind", ["missing", "directory", "empty", "truncated", "not_onnx"])
def test_inspect_bad_file_is_one_error_line(capsys, tmp_path, kind):
    path = _bad_files(tmp_path)[kind]
    assert main(["inspect", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err


def test_console_script_exit_status(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08\x07garbage")
    exe = pathlib.Path(sys.executable).parent / "onnx2hw"
    proc = subprocess.run([str(exe), "inspect", str(bad)], capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: ") and "Traceback" not in proc.stderr
    ok = subprocess.run([str(exe), "inspect", str(MLP)], capture_output=True, text=True)
    assert ok.returncode == 0 and "Gemm" in ok.stdout


def test_inspect_names_the_tensors_the_hardware_hands_over(capsys):
    """A model that maps: the split names each tensor where the host takes over (Brevitas'
    TensorNorm tail after the last dense layer)."""
    assert main(["inspect", str(ROOT / "corpus" / "brevitas_old_tfc_w2a2_opset9.onnx")]) == 0
    out = " ".join(capsys.readouterr()[0].split())
    assert "the hardware ends at '/features.14/MatMul_output_0'; the host runs 4 node(s)" in out
