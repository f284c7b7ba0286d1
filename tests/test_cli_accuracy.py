"""`onnx2hw accuracy MODEL --data LABELLED.npz`: top-1/top-5 of the integer model (golden) and of the
ONNX model under onnxruntime, and every way bad input must fail (one `error:` line, status 2).

Truth for the expected counts: labels are chosen here from an independent oracle's class scores,
at known ranks, so the expected top-1/top-5 counts follow from the oracle alone: onnxruntime with
every optimization off on the QDQ file (or on the QDQ model the quantizer writes, for a float
model), the qonnx executor's outputs stored in the corpus for a QONNX file. Only labels whose
oracle score is apart from every other class's score are used, so no tie decides a count.
"""
from __future__ import annotations

import json

import numpy as np
import onnx
import pytest

from _oracle import spec_session
from _paths import ROOT
from onnx2hw.cli import main
from onnx2hw.commands import accuracy
from onnx2hw.quant.ptq import quantize

CORPUS = ROOT / "corpus"
QDQ = CORPUS / "ort_cnn_softmax_qdq.onnx"
RESNET8 = ROOT / "benchmarks/mlperf_tiny/ic_resnet8.onnx"
RESNET8_DATA = ROOT / "benchmarks/mlperf_tiny/ic_resnet8.npz"
#: ranks the labels are taken at, in turn (0: top-1; below 5: top-5)
RANKS = (0, 1, 0, 4, 5, 9, 0, 2)


def labels_at_ranks(scores: np.ndarray, gap: float = 1e-4) -> tuple[np.ndarray, np.ndarray]:
    """(labels, their ranks): for sample i the class at rank RANKS[i % len(RANKS)] of the oracle's
    scores (descending), or the nearest rank whose score is more than ``gap`` (of the row's
    largest magnitude) away from every other score."""
    labels, ranks = [], []
    for i, row in enumerate(np.asarray(scores, np.float64)):
        order = np.argsort(-row, kind="stable")
        tol = gap * np.abs(row).max()
        apart = [r for r in range(len(row))
                 if np.all(np.abs(np.delete(row, order[r]) - row[order[r]]) > tol)]
        assert apart, f"sample {i}: every class ties with another"
        r = min(apart, key=lambda a: (abs(a - RANKS[i % len(RANKS)]), a))
        labels.append(int(order[r]))
        ranks.append(r)
    return np.array(labels), np.array(ranks)


def run(argv, capsys):
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def test_accuracy_of_qdq_model_matches_oracle_counts(tmp_path, capsys):
    with np.load(CORPUS / "torch_cnn_softmax.npz") as d:
        x = d["input"].astype(np.float32)
    scores = spec_session(str(QDQ)).run(None, {"input": x})[0]
    labels, ranks = labels_at_ranks(scores)
    np.savez(tmp_path / "data.npz", input=x, labels=labels)
    rc, out, err = run(["accuracy", QDQ, "--data", tmp_path / "data.npz", "--json", tmp_path / "acc.json"], capsys)
    assert rc == 0, err
    n, top1, top5 = len(x), int(np.sum(ranks == 0)), int(np.sum(ranks < 5))
    assert 0 < top1 < top5 < n
    assert f"{n} samples, 10 classes (output 'output')" in out
    assert f"integer model (golden, bit-exact with the hardware): top-1 {100 * top1 / n:.2f}% ({top1}/{n}), " \
           f"top-5 {100 * top5 / n:.2f}% ({top5}/{n})" in out
    assert f"ONNX model as given (onnxruntime, optimizations off): top-1 {100 * top1 / n:.2f}% ({top1}/{n})" in out
    fig = json.loads((tmp_path / "acc.json").read_text())
    assert (fig["samples"], fig["classes"], fig["output"]) == (n, 10, "output")
    for part in ("integer", "float"):
        assert (fig[part]["correct1"], fig[part]["correct5"], fig[part]["samples"]) == (top1, top5, n)
        assert fig[part]["top1"] == pytest.approx(top1 / n) and fig[part]["top5"] == pytest.approx(top5 / n)
    assert fig["float"]["top1_agreement"] == 1.0
    assert "samples/s" in out


def test_limit_uses_the_first_samples_and_key_x_y(tmp_path, capsys):
    with np.load(CORPUS / "torch_cnn_softmax.npz") as d:
        x = d["input"].astype(np.float32)
    labels, ranks = labels_at_ranks(spec_session(str(QDQ)).run(None, {"input": x})[0])
    np.savez(tmp_path / "data.npz", x=x, y=labels.astype(np.uint8)[:, None])     # (N, 1) labels
    rc, out, err = run(["accuracy", QDQ, "--data", tmp_path / "data.npz", "--limit", 5], capsys)
    assert rc == 0, err
    top1, top5 = int(np.sum(ranks[:5] == 0)), int(np.sum(ranks[:5] < 5))
    assert f"5 samples, 10 classes" in out
    assert f"top-1 {100 * top1 / 5:.2f}% ({top1}/5), top-5 {100 * top5 / 5:.2f}% ({top5}/5)" in out


def test_progress_lines_when_stderr_is_not_a_terminal(tmp_path, capsys, monkeypatch):
    """Chunks of 7 samples, a progress line after each (not on a terminal: no bar)."""
    monkeypatch.setattr(accuracy, "CHUNK", 7)
    monkeypatch.setattr(accuracy, "PLAIN_EVERY", 0.0)
    with np.load(CORPUS / "torch_cnn_softmax.npz") as d:
        x = d["input"].astype(np.float32)
    labels, ranks = labels_at_ranks(spec_session(str(QDQ)).run(None, {"input": x})[0])
    np.savez(tmp_path / "data.npz", input=x, label=labels)        # the examples' key
    rc, out, err = run(["accuracy", QDQ, "--data", tmp_path / "data.npz"], capsys)
    assert rc == 0, err
    top1 = int(np.sum(ranks == 0))
    assert f"top-1 {100 * top1 / 32:.2f}% ({top1}/32)" in out
    for done in (7, 14, 21, 28):
        assert f"integer model (golden): {done}/32 samples, " in err
        assert f"float model (onnxruntime): {done}/32 samples, " in err
    assert "32/32" not in err


def test_qonnx_model_onnxruntime_cannot_run(tmp_path, capsys):
    """A Brevitas QONNX file: the integer model against the qonnx executor's stored outputs; the
    float comparison says onnxruntime cannot run the custom ops."""
    with np.load(CORPUS / "brevitas_tfc_w1a1.npz") as d:
        x, oracle = d["input"], d["oracle"]
    labels, ranks = labels_at_ranks(oracle)
    np.savez(tmp_path / "data.npz", input=x, labels=labels)
    rc, out, err = run(["accuracy", CORPUS / "brevitas_tfc_w1a1_clean.onnx", "--data", tmp_path / "data.npz",
                        "--json", tmp_path / "a.json"], capsys)
    assert rc == 0, err
    n, top1, top5 = len(x), int(np.sum(ranks == 0)), int(np.sum(ranks < 5))
    assert f"top-1 {100 * top1 / n:.2f}% ({top1}/{n}), top-5 {100 * top5 / n:.2f}% ({top5}/{n})" in out
    assert "float model: onnxruntime cannot run it (" in out
    fig = json.loads((tmp_path / "a.json").read_text())
    assert fig["integer"]["correct1"] == top1 and "error" in fig["float"]


def test_float_model_calibrated_with_its_calibration_file(tmp_path, capsys):
    """ResNet-8 (float, Softmax head on the host) calibrated with its .npz: the integer counts follow from onnxruntime's spec session on the QDQ
    model the quantizer writes from the same calibration; the float ones from onnxruntime's
    float run (labels at ranks of the spec session's scores, far apart from their neighbours)."""
    with np.load(RESNET8_DATA) as d:
        calib, x = d["input"], d["input"][:12]
    qdq = quantize(str(RESNET8), {"input": calib})
    scores = spec_session(qdq).run(None, {"input": x})[0]
    labels, ranks = labels_at_ranks(scores, gap=2e-2)
    np.savez(tmp_path / "data.npz", input=x, labels=labels)
    rc, out, err = run(["accuracy", RESNET8, "--data", tmp_path / "data.npz", "--calib", RESNET8_DATA,
                        "--board", "ulx3s-85f", "--json", tmp_path / "a.json"], capsys)
    assert rc == 0, err
    fig = json.loads((tmp_path / "a.json").read_text())
    assert (fig["integer"]["correct1"], fig["integer"]["correct5"]) == (int(np.sum(ranks == 0)), int(np.sum(ranks < 5)))
    fl = onnx.load(str(RESNET8))
    fscores = spec_session(fl).run(None, {"input": x})[0]
    franks = np.array([np.sum(row > row[lab]) for row, lab in zip(fscores, labels)])
    assert fig["float"]["correct1"] == int(np.sum(franks == 0))
    assert "float model (onnxruntime): top-1" in out
    assert "host runs" in err


# ------------------------------------------------------------------ bad input: one line, status 2

def _bad(tmp_path, capsys, argv, words):
    rc, out, err = run(argv, capsys)
    assert rc == 2, (out, err)
    lines = [line for line in err.strip().splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and err.strip().endswith(lines[0]), err
    assert "Traceback" not in err
    for w in words:
        assert w in lines[0], lines[0]


def _data(tmp_path, **arrays):
    path = tmp_path / "d.npz"
    np.savez(path, **arrays)
    return path


X = np.zeros((4, 1, 8, 8), np.float32)
Y = np.array([0, 1, 2, 3])


@pytest.mark.parametrize("arrays,words", [
    (dict(images=X, labels=Y), ["no inputs for the model input 'input'", "'images'"]),
    (dict(input=X, target=Y), ["no labels", "'labels'", "'y'"]),
    (dict(input=X, labels=Y.astype(np.float32)), ["labels 'labels' must be integer class indices", "float32"]),
    (dict(input=X, labels=np.zeros((4, 2), np.int64)), ["must have shape (N,)"]),
    (dict(input=X, labels=Y[:3]), ["3 labels for 4 input samples"]),
    (dict(input=X, labels=np.array([0, 1, 10, 3])), ["label 10 of sample 2", "10 classes [0, 9]"]),
    (dict(input=X, labels=np.array([0, -1, 2, 3])), ["label -1 of sample 1"]),
    (dict(input=np.zeros((4, 1, 8, 9), np.float32), labels=Y), ["'input'", "dim 3 must be 8"]),
    (dict(input=np.zeros((4, 64), np.float32), labels=Y), ["'input'", "rank 4"]),
    (dict(input=X.astype(np.int32), labels=Y), ["dtype 'int32'"]),
    (dict(input=X[:0], labels=Y[:0]), ["no samples"]),
])
def test_bad_data_is_one_error_line(tmp_path, capsys, arrays, words):
    _bad(tmp_path, capsys, ["accuracy", QDQ, "--data", _data(tmp_path, **arrays)], words)


def test_labels_are_checked_before_the_compile(tmp_path, capsys):
    _bad(tmp_path, capsys, ["accuracy", QDQ, "--data", _data(tmp_path, input=X, labels=np.array([0, 1, 10, 3]))],
         ["label 10"])
    assert not capsys.readouterr().err     # nothing else was printed
    rc = main(["accuracy", str(QDQ), "--data", str(_data(tmp_path, input=X, labels=np.array([0, 1, 10, 3])))])
    assert rc == 2 and "host/hardware split" not in capsys.readouterr().err


def test_bad_files_and_options(tmp_path, capsys):
    good = _data(tmp_path, input=X, labels=Y)
    _bad(tmp_path, capsys, ["accuracy", QDQ, "--data", tmp_path / "none.npz"], ["does not exist"])
    (tmp_path / "junk.npz").write_text("not a zip")
    _bad(tmp_path, capsys, ["accuracy", QDQ, "--data", tmp_path / "junk.npz"], ["not a readable NumPy .npz"])
    np.save(tmp_path / "one.npy", X)
    _bad(tmp_path, capsys, ["accuracy", QDQ, "--data", tmp_path / "one.npy"], ["single .npy array"])
    _bad(tmp_path, capsys, ["accuracy", QDQ, "--data", good, "--limit", "0"], ["--limit must be at least 1"])
    _bad(tmp_path, capsys, ["accuracy", QDQ, "--data", good, "--json", tmp_path / "no" / "a.json"],
         ["--json", "does not exist"])
    _bad(tmp_path, capsys, ["accuracy", QDQ, "--data", good, "--board", "nosuchboard"], ["nosuchboard"])
    (tmp_path / "bad.onnx").write_bytes(b"\x08\x07garbage")
    _bad(tmp_path, capsys, ["accuracy", tmp_path / "bad.onnx", "--data", good], [])
    _bad(tmp_path, capsys, ["accuracy", RESNET8, "--data", _data(tmp_path, input=np.zeros((2, 32, 32, 3), np.float32),
                                                                   labels=Y[:2])], ["--calib"])


def test_model_without_class_scores(tmp_path, capsys):
    """A model whose output is an image, not a vector of class scores."""
    x = np.zeros((2, 1, 16, 16), np.float32)
    _bad(tmp_path, capsys, ["accuracy", CORPUS / "ort_unet_qdq.onnx", "--data", _data(tmp_path, input=x, labels=Y[:2])],
         ["output", "class scores"])


def test_accuracy_is_listed_in_help(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "accuracy" in capsys.readouterr().out
