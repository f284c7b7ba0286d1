"""`onnx2hw inspect` predicts compile's verdict (issue #32, item 4).

Over the corpus, inspect's verdict equals compile's: a model inspect calls mappable compiles
(``onnx2hw.compile(path, board="ulx3s", calib=...)``, shared with tests/test_corpus.py through
its per-process cache), and a refused one is refused by compile naming the node inspect names.
inspect gets the calibration data compile gets (``--calib``, for a float model); run without it,
it predicts with synthetic data the same verdict, integer layers and split. Refused models come
from corpus models made to fail (an op no path takes; a board too small). Small handmade models
check what inspect prints: the split, the refused node and its way out, constant computations
listed as folded, MACs from a formula written here.
"""
import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

import onnx2hw
import test_corpus as corpus
from onnx2hw.cli import main


def _inspect(capsys, *args) -> tuple[int, dict, str]:
    """(exit status, the --json output, stderr) of ``onnx2hw inspect ARGS --json``."""
    rc = main(["inspect", *map(str, args), "--json"])
    out, err = capsys.readouterr()
    return rc, json.loads(out), err


def _assert_agree(rc: int, v: dict, err: str, exc: BaseException | None, named: bool = True) -> None:
    """inspect's verdict (status, JSON, stderr) is compile's outcome ``exc`` (None: compiled);
    a refusal names the node compile names (unless not ``named``: a failure the corpus tests
    list as naming none)."""
    if v["verdict"] == "maps":
        assert rc == 0 and err == "" and v["refusal"] is None
        assert exc is None, f"inspect says it maps, compile refuses: {exc}"
        return
    assert v["verdict"] == "refused" and rc == 2
    assert err == f"error: {v['refusal']['message']}\n"
    assert exc is not None, f"inspect refuses ({v['refusal']['message']}), compile succeeds"
    assert isinstance(exc, ValueError), f"{type(exc).__name__}: {exc}"
    if named:
        assert v["refusal"]["node"] and v["refusal"]["node"] in str(exc), (v["refusal"], str(exc))


def _compile(path, board="ulx3s", calib=None):
    """(design, None) or (None, the exception) of ``onnx2hw.compile``."""
    try:
        return onnx2hw.compile(str(path), board=board, calib=calib), None
    except Exception as exc:  # noqa: BLE001 - compared with inspect's verdict by the caller
        return None, exc


def _corpus_params():
    return [pytest.param(name, marks=pytest.mark.xdist_group(corpus.ENTRIES[name]["data"]), id=name)
            for name in sorted(corpus.ENTRIES)]


def _calib_args(name: str, tmp_path) -> list:
    """``--calib FILE`` with the calibration data compile gets (a float model), else nothing."""
    calib = corpus._calib(name)
    if calib is None:
        return []
    np.savez(tmp_path / "calib.npz", **calib)
    return ["--calib", tmp_path / "calib.npz"]


def _structure(v: dict) -> dict:
    """The parts of inspect's JSON that do not depend on calibration values."""
    keys = ("verdict", "hardware_nodes", "host_nodes", "integer_layers", "layers")
    return {**{k: v[k] for k in keys}, "ops": {h["op"]: h["status"] for h in v["hardware"]}}


@pytest.mark.slow
@pytest.mark.parametrize("name", _corpus_params())
def test_inspect_verdict_is_compiles(name, capsys, tmp_path):
    path = corpus.CORPUS / name
    rc, v, err = _inspect(capsys, path, *_calib_args(name, tmp_path))
    design, exc = corpus._compiled(name)
    if v["calibration"] == "synthetic":
        # a model that asks for calibration data the corpus tests do not give it: the verdict
        # assumes --calib, so compile gets the model's sample inputs as calibration data
        assert exc is not None and "--calib" in str(exc), exc
        design, exc = _compile(path, calib=corpus._inputs(name, None))
    _assert_agree(rc, v, err, exc, named=name not in corpus.UNNAMED)
    if exc is None:   # the split and the layers are compile's
        assert v["integer_layers"] == [{"name": layer.name, "kind": type(layer).__name__}
                                       for layer in design.integer.layers]
        tail = design.integer.tail
        assert v["host_nodes"] == ([] if tail is None else [n.name for n in tail.nodes])
    if v["calibration"] == "given":   # without --calib: synthetic data, the same verdict and structure
        rc_synthetic, synthetic, _ = _inspect(capsys, path)
        assert rc_synthetic == rc and _structure(synthetic) == _structure(v)
        if v["verdict"] == "maps":
            assert synthetic["calibration"] == "synthetic"


#: corpus models (a float export, an onnxruntime QDQ file, a Brevitas QONNX file) with a Sin put
#: after their first node: an op no hardware or host path takes
_BROKEN = ["torch_cnn_softmax_ts_dyn.onnx", "ort_cnn_softmax_qdq.onnx", "brevitas_tfc_w2a2_clean.onnx"]


@pytest.mark.slow
@pytest.mark.parametrize("name", _BROKEN)
def test_refused_corpus_model_is_refused_at_the_same_node(name, capsys, tmp_path):
    path = tmp_path / name
    path.write_bytes(corpus._with_sin(name))
    rc, v, err = _inspect(capsys, path, *_calib_args(name, tmp_path))
    _assert_agree(rc, v, err, _compile(path, calib=corpus._calib(name))[1])
    assert v["verdict"] == "refused"


@pytest.mark.slow
@pytest.mark.parametrize("name", ["torch_resnet_ts_b1.onnx", "brevitas_cnv_w2a2_clean.onnx"])
def test_board_too_small_is_refused_with_boards_that_fit(name, capsys, tmp_path):
    """On the iCEBreaker these models do not fit: inspect names compile's node, and each board
    it offers as a way out compiles the model."""
    rc, v, err = _inspect(capsys, corpus.CORPUS / name, "--board", "icebreaker", *_calib_args(name, tmp_path))
    _assert_agree(rc, v, err, _compile(corpus.CORPUS / name, "icebreaker", corpus._calib(name))[1])
    assert v["refusal"]["stage"] == "board"
    boards = [w.removeprefix("--board ") for w in v["refusal"]["way_out"] if w.startswith("--board ")]
    assert "ulx3s-85f" in boards and "icebreaker" not in boards
    for board in boards:
        onnx2hw.compile(str(corpus.CORPUS / name), board=board, calib=corpus._calib(name))


# ------------------------------------------------------------------ handmade models

_RNG = np.random.default_rng(32)


def _save(path, nodes, x_shape, y_shape, inits, opset=17):
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TP.FLOAT, x_shape)],
                          [helper.make_tensor_value_info("y", TP.FLOAT, y_shape)],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)]), path)
    return path


def _f32(*shape):
    return _RNG.standard_normal(shape).astype(np.float32)


def _mlp(tmp_path):
    """x (N, 6) -> fc1 (8 outputs) -> relu -> fc2 (3 outputs) -> softmax; and calibration data."""
    path = _save(tmp_path / "mlp.onnx",
                 [helper.make_node("Gemm", ["x", "w1", "b1"], ["h"], name="fc1", transB=1),
                  helper.make_node("Relu", ["h"], ["r"], name="relu"),
                  helper.make_node("Gemm", ["r", "w2", "b2"], ["z"], name="fc2", transB=1),
                  helper.make_node("Softmax", ["z"], ["y"], name="sm", axis=1)],
                 ["N", 6], ["N", 3], {"w1": _f32(8, 6), "b1": _f32(8), "w2": _f32(3, 8), "b2": _f32(3)})
    calib = tmp_path / "calib.npz"
    np.savez(calib, x=_f32(64, 6))
    return path, calib


def test_mappable_model_prints_the_split(tmp_path, capsys):
    path, calib = _mlp(tmp_path)
    rc, v, err = _inspect(capsys, path, "--calib", calib)
    assert (rc, err, v["verdict"], v["calibration"]) == (0, "", "maps", "given")
    assert v["hardware_nodes"] == ["fc1", "relu", "fc2"] and v["host_nodes"] == ["sm"]
    assert v["integer_layers"] == [{"name": "fc1", "kind": "Dense"}, {"name": "fc2", "kind": "Dense"}]
    assert v["total_macs"] == 6 * 8 + 8 * 3
    assert {h["op"]: h["status"] for h in v["hardware"]} == {"Gemm": "yes", "Relu": "yes", "Softmax": "host"}
    onnx2hw.compile(str(path), calib=str(calib))   # compile agrees
    assert main(["inspect", str(path), "--calib", str(calib)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "the host runs 1 node(s) after it: sm" in out
    assert "verdict: maps on ulx3s-85f: the hardware runs 3 node(s), the host 1" in out


def test_float_model_without_calib_assumes_calib(tmp_path, capsys):
    path, calib = _mlp(tmp_path)
    rc, v, err = _inspect(capsys, path)
    assert (rc, err, v["verdict"], v["calibration"]) == (0, "", "maps", "synthetic")
    _, given, _ = _inspect(capsys, path, "--calib", calib)
    assert _structure(v) == _structure(given)
    with pytest.raises(onnx2hw.ModelError, match="--calib"):   # compile needs what the verdict assumes
        onnx2hw.compile(str(path))
    assert main(["inspect", str(path)]) == 0
    assert "this verdict assumes compile is given --calib" in " ".join(capsys.readouterr().out.split())


def _pooled(tmp_path):
    """conv -> relu -> pool: a dilated AveragePool (opset 19), which the hardware does not do."""
    return _save(tmp_path / "pool.onnx",
                 [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
                  helper.make_node("Relu", ["c"], ["r"], name="relu"),
                  helper.make_node("AveragePool", ["r"], ["y"], name="pool", kernel_shape=[2, 2], strides=[2, 2],
                                   dilations=[2, 2])],
                 ["N", 2, 6, 6], ["N", 4, 2, 2], {"w": _f32(4, 2, 3, 3)}, opset=19)


def test_refused_model_names_the_node_and_a_checked_way_out(tmp_path, capsys):
    path = _pooled(tmp_path)
    rc, v, err = _inspect(capsys, path)
    assert rc == 2 and v["verdict"] == "refused"
    assert err.startswith("error: node 'pool' (AveragePool): ") and err.count("\n") == 1
    r = v["refusal"]
    assert (r["node"], r["op"], r["stage"]) == ("pool", "AveragePool", "model")
    assert r["way_out"] == ["--host pool --calib CALIB.npz"]
    assert {h["op"]: h["status"] for h in v["hardware"]} == {"Conv": "yes", "Relu": "yes", "AveragePool": "refused"}
    calib = {"x": _f32(16, 2, 6, 6)}
    with pytest.raises(onnx2hw.ModelError, match="node 'pool'"):
        onnx2hw.compile(str(path), calib=calib)
    design = onnx2hw.compile(str(path), calib=calib, host=("pool",))   # the way out works
    assert [n.name for n in design.integer.tail.nodes] == ["pool"]
    assert main(["inspect", str(path)]) == 2
    out = " ".join(capsys.readouterr().out.split())
    assert "verdict: refused at node 'pool' (AveragePool)" in out
    assert "way out (checked: the model then maps): --host pool --calib CALIB.npz" in out


def test_constant_shape_chain_is_listed_as_folded(tmp_path, capsys):
    """A flatten written Shape -> Gather -> Unsqueeze -> Concat -> Reshape, and a weight computed
    by Pow from constants: those ops compute constants only."""
    path = _save(tmp_path / "shape.onnx",
                 [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
                  helper.make_node("Relu", ["c"], ["r"], name="relu"),
                  helper.make_node("Shape", ["r"], ["s"], name="shape"),
                  helper.make_node("Gather", ["s", "zero"], ["b"], name="gather", axis=0),
                  helper.make_node("Unsqueeze", ["b", "axes"], ["b1"], name="unsqueeze"),
                  helper.make_node("Concat", ["b1", "minus1"], ["target"], name="concat", axis=0),
                  helper.make_node("Reshape", ["r", "target"], ["flat"], name="flatten"),
                  helper.make_node("Pow", ["wbase", "one"], ["wfc"], name="pow"),
                  helper.make_node("Gemm", ["flat", "wfc"], ["y"], name="fc", transB=1)],
                 ["N", 2, 4, 4], ["N", 5],
                 {"w": _f32(3, 2, 3, 3), "zero": np.array(0, np.int64), "axes": np.array([0], np.int64),
                  "minus1": np.array([-1], np.int64), "wbase": _f32(5, 48), "one": np.array(1.0, np.float32)},
                 opset=13)
    rc, v, err = _inspect(capsys, path)
    assert (rc, err, v["verdict"]) == (0, "", "maps")
    status = {h["op"]: h["status"] for h in v["hardware"]}
    assert {op: status[op] for op in ("Shape", "Gather", "Unsqueeze", "Concat", "Pow")} == \
        dict.fromkeys(("Shape", "Gather", "Unsqueeze", "Concat", "Pow"), "constant (folded)")
    assert status["Conv"] == status["Gemm"] == "yes"
    # conv: 3 x 4 x 4 outputs of 2 x 3 x 3 products each; fc: 5 outputs of 3 * 4 * 4 products each
    assert {d["name"]: d["macs"] for d in v["layers"]} == {"conv": 3 * 4 * 4 * 2 * 3 * 3, "fc": 5 * 48}
    assert v["total_macs"] == 3 * 4 * 4 * 2 * 3 * 3 + 5 * 48
    assert main(["inspect", str(path)]) == 0
    assert "not mappable" not in capsys.readouterr().out
