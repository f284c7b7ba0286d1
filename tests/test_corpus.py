"""The corpus of exporter-written models (corpus/, issue #12): each file loads, the manifest
matches the files, and `onnx2hw inspect` answers with status 0 or 2, never a traceback.

Needs no exporter: corpus/make_corpus.py wrote the files in a separate environment. A file that
``onnx2hw.ir.load`` refuses today is a strict xfail carrying the exact error text, so the work of
#12 shows up here as an XPASS to turn into a plain pass.
"""
import collections
import hashlib
import json

import numpy as np
import onnx
import pytest

from _paths import ROOT
from onnx2hw.cli import main
from onnx2hw.ir import ModelError, load

CORPUS = ROOT / "corpus"
MANIFEST = json.loads((CORPUS / "manifest.json").read_text())
ENTRIES = {e["file"]: e for e in MANIFEST["files"]}

#: what load says today about the files it refuses ({path} is the file's path): issue #12, item 3
REFUSED: dict[str, str] = {}  # file -> the exact error ir.load gives today (none left: the QONNX
# files without their domain in opset_import load with a warning since #12's first step)


def _params():
    out = []
    for name in sorted(ENTRIES):
        marks = ()
        if name in REFUSED:
            marks = pytest.mark.xfail(strict=True, raises=ModelError,
                                      reason="#12: " + REFUSED[name].format(path=name))
        out.append(pytest.param(name, marks=marks, id=name))
    return out


def test_manifest_matches_files():
    on_disk = {p.name for p in CORPUS.glob("*.onnx")}
    assert on_disk == set(ENTRIES), (on_disk ^ set(ENTRIES))
    data = {e["data"] for e in ENTRIES.values() if e["data"]}
    assert data == {p.name for p in CORPUS.glob("*.npz")}
    assert set(REFUSED) <= set(ENTRIES)
    assert not list(CORPUS.glob("*.data")), "no external data beside the corpus models"


def test_corpus_sizes_and_coverage():
    sizes = {p.name: p.stat().st_size for p in CORPUS.iterdir() if p.suffix in (".onnx", ".npz")}
    assert max(sizes.values()) < 1_000_000, max(sizes.items(), key=lambda kv: kv[1])
    assert sum(sizes.values()) < 15_000_000
    families = collections.Counter(e["family"] for e in ENTRIES.values())
    assert len(ENTRIES) >= 25 and {"pytorch", "onnxruntime", "brevitas"} <= set(families), families


@pytest.mark.parametrize("name", sorted(ENTRIES))
def test_manifest_entry_describes_file(name):
    e = ENTRIES[name]
    path = CORPUS / name
    assert e["bytes"] == path.stat().st_size
    model = onnx.load(path)
    inits = {t.name for t in model.graph.initializer}
    assert [i["name"] for i in e["inputs"]] == [i.name for i in model.graph.input if i.name not in inits]
    assert [o["name"] for o in e["outputs"]] == [o.name for o in model.graph.output]
    ops = collections.Counter((f"{n.domain}:" if n.domain and n.domain != "ai.onnx" else "") + n.op_type
                              for n in model.graph.node)
    assert dict(ops) == e["ops"]
    assert e["kind"] in ("float", "quantized")
    if e["data"]:
        with np.load(CORPUS / e["data"]) as d:
            x = d["input"]
        fixed = e["inputs"][0]["shape"][1:]
        assert list(x.shape[1:]) == fixed, (x.shape, fixed)


@pytest.mark.parametrize("name", _params())
def test_corpus_file_loads(name):
    path = CORPUS / name
    try:
        graph = load(path)
    except ModelError as exc:
        if name in REFUSED:  # the refusal is the known one, word for word
            assert str(exc) == REFUSED[name].format(path=path)
        raise
    assert [v.name for v in graph.inputs] == [i["name"] for i in ENTRIES[name]["inputs"]]


@pytest.mark.parametrize("name", sorted(ENTRIES))
def test_inspect_answers_without_traceback(name, capsys, summary):
    path = CORPUS / name
    rc = main(["inspect", str(path), "--json"])
    out, err = capsys.readouterr()
    assert rc in (0, 2), rc
    assert "Traceback" not in out + err
    if rc == 2:
        assert name in REFUSED
        assert err == "error: " + REFUSED[name].format(path=path) + "\n"
    else:
        assert name not in REFUSED
        s = json.loads(out)
        bad = sorted({h["op"] for h in s["hardware"] if not h["supported"]})
        _UNSUPPORTED[name] = bad
        summary("corpus", f"corpus: {len(_UNSUPPORTED)} models inspected, ops inspect marks not mappable: "
                + ", ".join(f"{op} ({n})" for op, n in
                            collections.Counter(op for v in _UNSUPPORTED.values() for op in v).most_common()))


_UNSUPPORTED: dict[str, list] = {}


def test_corpus_files_are_what_the_manifest_hashed():
    """The generator's output is committed as written: nothing here edits a corpus file."""
    for name, e in ENTRIES.items():
        assert hashlib.sha256((CORPUS / name).read_bytes()).hexdigest() == e["sha256"], name
