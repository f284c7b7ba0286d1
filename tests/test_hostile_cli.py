"""Hostile inputs through every verb: each bad file, array or option value ends in exactly one
``error:`` line naming what is wrong and exit status 2 -- no traceback, no output file, no build.
(Cases that need a simulator or a place-and-route stop before either runs.)"""
from __future__ import annotations

import json
import shutil
import zipfile
from functools import lru_cache

import numpy as np
import onnx
import pytest

from _paths import EXAMPLES
import onnx2hw
from onnx2hw.build_info import write_build_info
from onnx2hw.cli import main

MLP = str(EXAMPLES / "digits_mlp_int8.onnx")
FLOAT_MLP = str(EXAMPLES / "digits_mlp.onnx")
CALIB = str(EXAMPLES / "digits_calib.npz")
FLOAT_CNN = str(EXAMPLES / "digits_cnn.onnx")
IMG_CALIB = str(EXAMPLES / "digits_img_calib.npz")


def _arrays(tmp_path, name: str, **arrays) -> str:
    path = tmp_path / name
    np.savez(path, **arrays)
    return str(path)


def _npy(tmp_path, name: str, array) -> str:
    path = tmp_path / name
    np.save(path, array)
    return str(path)


def _file(tmp_path, name: str, data: bytes | str) -> str:
    path = tmp_path / name
    path.write_bytes(data if isinstance(data, bytes) else data.encode())
    return str(path)


def _member(tmp_path, name: str, member: str, data: bytes) -> str:
    """An .npz archive whose ``member`` is not in .npy format (numpy returns it as raw bytes)."""
    path = tmp_path / name
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(member, data)
    return str(path)


def _edited(tmp_path, model: str, edit) -> str:
    """``model`` with ``edit(graph)`` applied, saved in ``tmp_path``."""
    m = onnx.load(model)
    edit(m.graph)
    path = tmp_path / "edited.onnx"
    onnx.save(m, path)
    return str(path)


def _pool_reads_a_weight(g):
    next(n for n in g.node if n.name == "pool1").input[0] = "c2.w"


def _huge_pads(g):
    conv = next(n for n in g.node if n.op_type == "Conv")
    next(a for a in conv.attribute if a.name == "pads").ints[:] = [1 << 40] * 4


def _table_only(tmp_path) -> str:
    """A QONNX model that is one table between quantizers: nothing is left for the hardware."""
    from onnx import helper as h, numpy_helper as nh
    qd = "qonnx.custom_op.general"
    c = [nh.from_array(np.float32(v), n) for n, v in (("s", 0.05), ("s2", 1 / 255), ("z", 0), ("b", 8))]
    nodes = [h.make_node("Quant", ["x", "s", "z", "b"], ["q"], domain=qd, signed=1, narrow=0, rounding_mode="ROUND"),
             h.make_node("Sigmoid", ["q"], ["g"]),
             h.make_node("Quant", ["g", "s2", "z", "b"], ["y"], domain=qd, signed=0, narrow=0, rounding_mode="ROUND")]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 8])],
                     [h.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 8])], c)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 13), h.make_opsetid(qd, 1)])
    m.ir_version = 8
    path = tmp_path / "table_only.onnx"
    onnx.save(m, path)
    return str(path)


def _folding(tmp_path, doc) -> str:
    return _file(tmp_path, "fold.json", json.dumps(doc) if not isinstance(doc, str) else doc)


GOOD = np.zeros((2, 64), np.float32)


@lru_cache(maxsize=1)
def _mlp_design():
    return onnx2hw.compile(MLP)


def _build(tmp_path, name="build", **quant_edit) -> str:
    """A build description of the digits MLP (no bitstream: `run --port sim` rebuilds the design)."""
    d = _mlp_design()
    out = tmp_path / name
    path = write_build_info(out, d.pipeline, "ulx3s", d.clock_hz, d.baud, model=MLP)
    if quant_edit:
        info = json.loads(path.read_text())
        info["quant"]["input"].update(quant_edit)
        path.write_text(json.dumps(info))
    return str(out)


def _broken_description(tmp_path, edit) -> list:
    """`run` on a build whose accelerator.json was damaged by ``edit(info) -> info or text``."""
    build = _build(tmp_path)
    path = tmp_path / "build" / "accelerator.json"
    new = edit(json.loads(path.read_text()))
    path.write_text(new if isinstance(new, str) else json.dumps(new))
    return ["run", build, "--port", "sim", "--inputs", _arrays(tmp_path, "x.npz", input=GOOD)]


def _drop(info, *keys):
    d = info
    for k in keys[:-1]:
        d = d[k]
    del d[keys[-1]]
    return info


def _run(tmp_path, x, *extra, **quant_edit):
    return ["run", _build(tmp_path, **quant_edit), "--port", "sim", "--inputs", _arrays(tmp_path, "x.npz", input=x),
            *extra]

#: case id -> builder(tmp_path) -> (argv, what the error line must mention)
CASES = {
    # ---- files that are not models
    "inspect-missing": lambda t: (["inspect", str(t / "nope.onnx")], "nope.onnx"),
    "inspect-directory": lambda t: (["inspect", str(t)], str(t)),
    "inspect-empty": lambda t: (["inspect", _file(t, "e.onnx", b"")], "e.onnx"),
    "inspect-text": lambda t: (["inspect", _file(t, "t.onnx", "hello, not protobuf")], "t.onnx"),
    "inspect-truncated": lambda t: (["inspect", _file(t, "cut.onnx", open(MLP, "rb").read()[:300])], "cut.onnx"),
    # ---- quantize: calibration data and options
    "quantize-no-calib-file": lambda t: (["quantize", FLOAT_MLP, "--calib", str(t / "none.npz"), "-o",
                                          str(t / "q.onnx")], "none.npz"),
    "quantize-calib-not-npz": lambda t: (["quantize", FLOAT_MLP, "--calib", _file(t, "c.npz", b"PK\x03\x04junk"),
                                          "-o", str(t / "q.onnx")], "c.npz"),
    "quantize-calib-wrong-key": lambda t: (["quantize", FLOAT_MLP, "--calib", _arrays(t, "c.npz", x=GOOD), "-o",
                                            str(t / "q.onnx")], "'input'"),
    "quantize-calib-wrong-shape": lambda t: (["quantize", FLOAT_MLP, "--calib", _arrays(t, "c.npz", input=GOOD[:, :8]),
                                              "-o", str(t / "q.onnx")], "shape"),
    "quantize-calib-wrong-rank": lambda t: (["quantize", FLOAT_MLP, "--calib", _arrays(t, "c.npz", input=GOOD[0]),
                                             "-o", str(t / "q.onnx")], "rank"),
    "quantize-calib-nan": lambda t: (["quantize", FLOAT_MLP, "--calib",
                                      _arrays(t, "c.npz", input=np.full((2, 64), np.nan, np.float32)), "-o",
                                      str(t / "q.onnx")], "NaN"),
    "quantize-calib-complex": lambda t: (["quantize", FLOAT_MLP, "--calib",
                                          _arrays(t, "c.npz", input=GOOD.astype(np.complex64)), "-o",
                                          str(t / "q.onnx")], "complex"),
    "quantize-calib-empty": lambda t: (["quantize", FLOAT_MLP, "--calib", _arrays(t, "c.npz", input=GOOD[:0]), "-o",
                                        str(t / "q.onnx")], "no samples"),
    "quantize-calib-pickle": lambda t: (["quantize", FLOAT_MLP, "--calib",
                                         _arrays(t, "c.npz", input=np.array([None], dtype=object)), "-o",
                                         str(t / "q.onnx")], "c.npz"),
    "quantize-output-folder-missing": lambda t: (["quantize", FLOAT_MLP, "--calib", CALIB, "-o",
                                                  str(t / "no" / "q.onnx")], "does not exist"),
    "sim-seed-negative": lambda t: (["sim", MLP, "--seed", "-5"], "--seed"),
    "sim-waves-is-a-file": lambda t: (["sim", MLP, "--count", "1", "--waves", _file(t, "w", "x")], "--waves"),
    "quantize-already-quantized": lambda t: (["quantize", MLP, "--calib", CALIB, "-o", str(t / "q.onnx")],
                                             "already quantized"),
    # ---- sim / synth: option values (all refused before any simulator or tool runs)
    "sim-count-0": lambda t: (["sim", MLP, "--count", "0"], "--count"),
    "sim-count-negative": lambda t: (["sim", MLP, "--count", "-3"], "--count"),
    "sim-clock-inf": lambda t: (["sim", MLP, "--clock-mhz", "inf"], "--clock-mhz"),
    "sim-clock-nan": lambda t: (["sim", MLP, "--clock-mhz", "nan"], "--clock-mhz"),
    "sim-clock-zero": lambda t: (["sim", MLP, "--clock-mhz", "0"], "--clock-mhz"),
    "sim-clock-negative": lambda t: (["sim", MLP, "--clock-mhz", "-75"], "--clock-mhz"),
    "sim-fps-zero": lambda t: (["sim", MLP, "--target-fps", "0"], "--target-fps"),
    "sim-fps-inf": lambda t: (["sim", MLP, "--target-fps", "inf"], "--target-fps"),
    "sim-baud-zero": lambda t: (["sim", MLP, "--baud", "0"], "--baud"),
    "sim-board-unknown": lambda t: (["sim", MLP, "--board", "nosuchboard"], "nosuchboard"),
    "sim-folding-missing": lambda t: (["sim", MLP, "--folding", str(t / "none.json")], "none.json"),
    "sim-folding-inf": lambda t: (["sim", MLP, "--folding", _folding(t, '{"fc0": {"pe": Infinity, "simd": 1}}')],
                                  "fold.json"),
    "sim-folding-fraction": lambda t: (["sim", MLP, "--folding", _folding(t, {"fc0": {"pe": 1.5, "simd": 1}})],
                                       "pe"),
    "sim-folding-unknown-layer": lambda t: (["sim", MLP, "--folding", _folding(t, {"nope": {"pe": 1, "simd": 1}})],
                                            "nope"),
    "sim-folding-illegal": lambda t: (["sim", MLP, "--folding", _folding(t, {"fc0": {"pe": 7, "simd": 5}})],
                                      "fc0"),
    "sim-inputs-wrong-shape": lambda t: (["sim", MLP, "--inputs", _arrays(t, "x.npz", input=GOOD[:, :9])], "shape"),
    "sim-inputs-nan": lambda t: (["sim", MLP, "--inputs",
                                  _arrays(t, "x.npz", input=np.full((1, 64), np.inf, np.float32))], "NaN"),
    "sim-inputs-int": lambda t: (["sim", MLP, "--inputs", _arrays(t, "x.npz", input=GOOD.astype(np.int32))],
                                 "int32"),
    "sim-float-model-without-calib": lambda t: (["sim", FLOAT_MLP], "--calib"),
    "quantize-op-of-constants-only": lambda t: (["quantize", _edited(t, FLOAT_CNN, _pool_reads_a_weight), "--calib",
                                                 IMG_CALIB, "-o", str(t / "q.onnx")],
                                                "computes from constants only"),   # canonicalization folds pool1
    "sim-no-layer-for-the-hardware": lambda t: (["sim", _table_only(t), "--count", "2"], "no layer of the model"),
    "quantize-conv-pads-too-large": lambda t: (["quantize", _edited(t, FLOAT_CNN, _huge_pads), "--calib", IMG_CALIB,
                                                "-o", str(t / "q.onnx")], "'conv1' (Conv)"),
    "accuracy-labels-not-an-array": lambda t: (["accuracy", MLP, "--data", _member(t, "d.npz", "label.npy", b"x")],
                                               "member 'label' is not a NumPy array"),
    "synth-board-unknown": lambda t: (["synth", MLP, "--board", "nosuchboard", "-o", str(t / "b")], "nosuchboard"),
    "synth-baud-zero": lambda t: (["synth", MLP, "--board", "ulx3s", "--baud", "0", "-o", str(t / "b")], "--baud"),
    "synth-baud-too-fast": lambda t: (["synth", MLP, "--board", "ulx3s", "--baud", "1e9", "-o", str(t / "b")],
                                      "--baud"),
    "synth-clock-inf": lambda t: (["synth", MLP, "--board", "ulx3s", "--clock-mhz", "inf", "-o", str(t / "b")],
                                  "--clock-mhz"),
    "synth-verify-negative": lambda t: (["synth", MLP, "--board", "ulx3s", "--verify", "-1", "-o", str(t / "b")],
                                        "--verify"),
    "synth-output-is-a-file": lambda t: (["synth", MLP, "--board", "ulx3s", "-o", _file(t, "f", "x")], "f"),
    # ---- run: build directories that are not builds
    "run-missing-build": lambda t: (["run", str(t / "nobuild"), "--port", "sim", "--inputs",
                                     _arrays(t, "x.npz", input=GOOD)], "nobuild"),
    "run-build-without-description": lambda t: (["run", str(t), "--port", "sim", "--inputs",
                                                 _arrays(t, "x.npz", input=GOOD)], "accelerator.json"),
    "run-inputs-wrong-rank": lambda t: (_run(t, GOOD.reshape(2, 8, 8)), "rank 2 ([N, 64])"),
    "run-inputs-wrong-shape": lambda t: (_run(t, GOOD[:, :9]), "dim 1 must be 64"),
    "run-inputs-strings": lambda t: (_run(t, np.full((2, 64), "a")), "dtype 'str32'"),
    "run-inputs-bytes": lambda t: (_run(t, np.full((2, 64), b"ab")), "dtype 'bytes16'"),
    "run-inputs-object": lambda t: (_run(t, np.array([None, "x"], dtype=object)), "not a readable NumPy .npz"),
    "run-inputs-member-not-an-array": lambda t: (["run", _build(t), "--port", "sim", "--inputs",
                                                  _member(t, "x.npz", "input.npy", b"not an array")],
                                                 "member 'input' is not a NumPy array"),
    "run-inputs-missing-key": lambda t: (["run", _build(t), "--port", "sim", "--inputs",
                                          _arrays(t, "x.npz", x=GOOD, y=GOOD)], "missing input(s) 'input'"),
    "run-inputs-single-npy": lambda t: (["run", _build(t), "--port", "sim", "--inputs", _npy(t, "x.npy", GOOD)],
                                        "single .npy array"),
    "run-raw-inputs-float": lambda t: (_run(t, GOOD, "--raw"), "uint8 integer codes"),
    "run-raw-inputs-out-of-range": lambda t: (_run(t, np.full((2, 64), 300), "--raw"), "outside uint8 [0, 255]"),
    "run-raw-inputs-wrong-shape": lambda t: (_run(t, np.zeros((2, 9), np.uint8), "--raw"), "dim 1 must be 64"),
    "run-inputs-nan": lambda t: (_run(t, np.full((2, 64), np.nan, np.float32)), "NaN"),
    "run-inputs-complex": lambda t: (_run(t, GOOD.astype(np.complex64)), "complex64"),
    "run-inputs-int": lambda t: (_run(t, GOOD.astype(np.int16)), "--raw"),
    "run-inputs-empty": lambda t: (_run(t, GOOD[:0]), "holds no samples"),
    "run-scale-zero": lambda t: (_run(t, GOOD, scale=0.0), "scale"),
    "run-baud-inf": lambda t: (_run(t, GOOD, "--baud", "inf"), "--baud"),
    "run-output-is-a-directory": lambda t: (_run(t, GOOD, "-o", str(t)), str(t)),
    "run-description-not-json": lambda t: (_broken_description(t, lambda i: "{not json"), "accelerator.json"),
    "run-description-no-output-quant": lambda t: (_broken_description(t, lambda i: _drop(i, "quant", "output")),
                                                  "accelerator.json"),
    "run-description-no-pipeline": lambda t: (_broken_description(t, lambda i: _drop(i, "pipeline")), "pipeline"),
    "run-description-bad-lanes": lambda t: (_broken_description(
        t, lambda i: {**i, "pipeline": {**i["pipeline"], "input": {**i["pipeline"]["input"], "lanes": "x"}}}),
        "accelerator.json"),
    "run-description-a-list": lambda t: (_broken_description(t, lambda i: [1, 2]), "accelerator.json"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_hostile_case_is_one_error_line(case, tmp_path, capsys):
    argv, mention = CASES[case](tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    rc = main(argv)
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert rc == 2, (rc, out, err)
    assert "Traceback" not in err + out
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert mention in lines[0], (mention, lines[0])
    assert sorted(p.name for p in tmp_path.iterdir()) == before, "a failed command left files behind"


def test_inputs_are_not_modified(tmp_path, capsys):
    """A refused run leaves the user's files byte for byte as they were."""
    calib = tmp_path / "c.npz"
    shutil.copy(CALIB, calib)
    before = calib.read_bytes()
    assert main(["quantize", FLOAT_MLP, "--calib", str(calib), "--weight-bits", "3", "-o", str(tmp_path / "q.onnx")])
    capsys.readouterr()
    assert calib.read_bytes() == before and not (tmp_path / "q.onnx").exists()


#: bad input archives -> the arrays in them (or the raw bytes of a member named ``input.npy``)
BAD_INPUTS = {
    "strings": {"input": np.full((2, 64), "a")},
    "member-not-an-array": b"not an array",
    "missing-key": {"x": GOOD, "y": GOOD},
    "wrong-shape": {"input": GOOD[:, :9]},
    "wrong-rank": {"input": GOOD[0]},
    "nan": {"input": np.full((2, 64), np.nan, np.float32)},
    "empty": {"input": GOOD[:0]},
}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_run_and_sim_word_input_errors_alike(case, tmp_path, capsys):
    """`run` reads and checks its inputs as `sim` does: the same error line for the same file."""
    content = BAD_INPUTS[case]
    path = _member(tmp_path, "x.npz", "input.npy", content) if isinstance(content, bytes) else \
        _arrays(tmp_path, "x.npz", **content)
    errors = []
    for argv in (["sim", MLP, "--inputs", path], ["run", _build(tmp_path), "--port", "sim", "--inputs", path]):
        assert main(argv) == 2
        errors.append(capsys.readouterr().err)
    assert errors[0] == errors[1] and errors[0].startswith("error: ") and errors[0].count("\n") == 1, errors
