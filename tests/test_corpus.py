"""The corpus of exporter-written models (corpus/, issue #12): each file loads, the manifest
matches the files, and `onnx2hw inspect` answers with status 0 or 2, never a traceback.

Needs no exporter: corpus/make_corpus.py wrote the files in a separate environment. A file that
``onnx2hw.ir.load`` refuses today is a strict xfail carrying the exact error text, so the work of
#12 shows up here as an XPASS to turn into a plain pass.
"""
import collections
import dataclasses
import functools
import hashlib
import json
import re
import sys

import numpy as np
import onnx
import pytest
from onnx.reference import ReferenceEvaluator
from onnx.reference.op_run import OpRun

import onnx2hw
from _oracle import run_kernels, spec_session
from _pool_oracle import exact_pool_oracle
from _paths import ROOT
from onnx2hw.cli import main
from onnx2hw.dataflow import INPUT, OUTPUT, compile_pipeline
from onnx2hw.design import MismatchError
from onnx2hw.target import resolve_target
from onnx2hw.ir import ModelError, UnsupportedError, load
from onnx2hw.quant import ptq

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
    assert set(REFUSED) <= set(ENTRIES) and set(EXACT_POOLS) <= set(ENTRIES)
    assert not list(CORPUS.glob("*.data")), "no external data beside the corpus models"


def test_corpus_sizes_and_coverage():
    sizes = {p.name: p.stat().st_size for p in CORPUS.iterdir() if p.suffix in (".onnx", ".npz")}
    assert max(sizes.values()) < 1_000_000, max(sizes.items(), key=lambda kv: kv[1])
    assert sum(sizes.values()) < 15_000_000
    families = collections.Counter(e["family"] for e in ENTRIES.values())
    assert len(ENTRIES) >= 25 and {"pytorch", "onnxruntime", "brevitas"} <= set(families), families


#: the classes of files other exporter generations and conventions write (issue 32): 1 MatMul + Add of
#: a bias, 2 BatchNormalization not after a layer, 3 Keras Conv1D between NWC <-> NCW Transposes,
#: 4 QONNX channels-last nodes, 5 Brevitas exports of an older PyTorch, 6 FINN datatype
#: annotations on the input, 7 a QONNX model whose first layer reads the float input
ISSUE_32_CLASSES = range(1, 8)


def test_corpus_covers_every_exporter_generation_class():
    """Each class by at least two models of different shape (input shape or op histogram)."""
    for c in ISSUE_32_CLASSES:
        shapes = {(json.dumps(e["inputs"][0]["shape"]), json.dumps(e["ops"], sort_keys=True))
                  for e in ENTRIES.values() if c in e.get("classes", ())}
        assert len({s[0] for s in shapes}) >= 2 or len({s[1] for s in shapes}) >= 2, (c, shapes)


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
    if rc == 2:   # refused by load, or (inspect predicts compile's verdict) by compile
        assert name in REFUSED or name in FAILS, err
        if name in REFUSED:
            assert err == "error: " + REFUSED[name].format(path=path) + "\n"
        else:
            assert err.startswith("error: ") and err.count("\n") == 1, err
    else:
        assert name not in REFUSED and name not in FAILS
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


# ============================================================================================
# Acceptance harness of #12: every corpus model end to end through the public API.
#
#   onnx2hw.compile(model, board="ulx3s", calib=<its .npz input> for a float model)
#   -> the golden outputs (host input quantization, exact integer executor, host tail) against an
#      independent oracle, and design.simulate() on SAMPLES inputs, bit-exact against the golden
#      (design.simulate raises MismatchError otherwise), in one simulation per model.
#
# Oracles (never the code under test):
#   float model (quantized by onnx2hw)  the QDQ model onnx2hw's quantizer writes (ptq.quantize, what
#                                       compile and `onnx2hw quantize` run) under onnxruntime with
#                                       every graph optimization off
#   onnxruntime QDQ, TFLite int8 (QDQ)  the file itself under onnxruntime, optimizations off
#                                       (EXACT_POOLS: with its on-grid average pools in int64,
#                                       tests/_pool_oracle.py)
#   onnxruntime QOperator               onnx.reference, with the two com.microsoft ops it lacks
#                                       (QGemm, QLinearSoftmax) written below from their spec
#   Brevitas / QONNX                    the qonnx executor's outputs, stored by make_corpus.py in
#                                       the file's .npz ("oracle", or "oracle_<stem>" if it differs)
# Float outputs agree within 1e-6 of the output's largest magnitude; integer outputs exactly.
#
# A model that does not get through today is a strict xfail carrying its exception class and the
# first 120 characters of its one-line error (FAILS for compile and the golden, SIM_FAILS for a
# simulation that fails after a good compile). The lead updates the tables as pieces land: an
# XPASS (strict: a failure) says a model now passes, a changed message says it stops elsewhere.
# ============================================================================================

#: inputs per model in the golden check and the simulation (one simulator run)
SAMPLES = 16
#: the simulated designs are folded for at most this many cycles per inference (see _sim_design)
SIM_TARGET_CYCLES = 4096
#: the exception classes the tables name
_ERRORS = {c.__name__: c for c in (ModelError, UnsupportedError, ValueError, onnx2hw.MismatchError,
                                   AssertionError, RuntimeError, KeyError, TypeError, IndexError,
                                   NotImplementedError)}

#: file -> (exception class name, first 120 characters of the error; {corpus} = the corpus folder)
#: raised by onnx2hw.compile (or by the golden flow right after it) today
FAILS: dict[str, tuple[str, str]] = {
    # <FAILS> (python tests/test_corpus.py --tables [--sim] rewrites what is between the markers)
    # </FAILS>
}

#: file -> (exception class name, first 120 characters) of design.simulate after a good compile
SIM_FAILS: dict[str, tuple[str, str]] = {
    # <SIM_FAILS>
    # </SIM_FAILS>
}

#: failures whose one line names no node, op or tensor of the model (a gap of the message)
UNNAMED: set[str] = set()


def _entry_input(e) -> tuple[str, str]:
    vi = e["inputs"][0]
    return vi["name"], vi["dtype"]


def _data(e) -> dict[str, np.ndarray]:
    with np.load(CORPUS / e["data"]) as d:
        return {k: d[k] for k in d.files}


def _inputs(name: str, count: int | None = SAMPLES) -> dict[str, np.ndarray]:
    """The model's sample inputs by input name: the .npz ``input`` (``input_int8`` for a model
    whose graph input is int8: TFLite's full-integer models)."""
    e = ENTRIES[name]
    iname, dtype = _entry_input(e)
    d = _data(e)
    x = d["input_int8"] if dtype == "int8" else d["input"].astype(np.float32)
    return {iname: x[:count] if count else x}


#: issue-32 class of a QONNX model whose first layer reads the float model input (no input quantizer)
FLOAT_INPUT_CLASS = 7


def _calib(name: str):
    """All the file's sample inputs as calibration data for a float model or a QONNX model with a
    float input (issue 32, class 7), else ``None``."""
    e = ENTRIES[name]
    return _inputs(name, None) if e["kind"] == "float" or FLOAT_INPUT_CLASS in e.get("classes", ()) else None


@functools.cache
def _qonnx(name: str) -> bool:
    """The file writes its quantization with QONNX/FINN ops (its oracle is the qonnx executor's
    outputs, stored in its .npz by make_corpus.py)."""
    return any(n.domain.startswith(("qonnx.", "finn.", "onnx.brevitas")) for n in onnx.load(CORPUS / name).graph.node)


@functools.cache
def _compiled(name: str):
    """(design, None) or (None, the exception compile raised), once per file and process."""
    try:
        return onnx2hw.compile(str(CORPUS / name), board="ulx3s", calib=_calib(name)), None
    except Exception as exc:  # noqa: BLE001 - kept to be raised again by each test that needs it
        return None, exc


def _design(name: str):
    design, exc = _compiled(name)
    if exc is not None:
        raise exc
    return design


@functools.cache
def _sim_design(name: str):
    """The design to simulate: the default one when its initiation interval is at most
    SIM_TARGET_CYCLES, else the same model folded for SIM_TARGET_CYCLES (the public API's
    target_cycles) where the board allows it. The default folding matches the UART's rate and
    leaves a small CNN at ~74k cycles per inference: 16 of them took 37 s to simulate, against 7 s
    at 4,096 cycles (and its larger Verilog 7 s more to build)."""
    design = _design(name)
    if design.pipeline.ii <= SIM_TARGET_CYCLES:
        return design
    try:
        return onnx2hw.compile(str(CORPUS / name), board="ulx3s", calib=_calib(name),
                               target_cycles=SIM_TARGET_CYCLES)
    except ModelError as exc:   # that rate needs more than the board has: the widest folding that fits
        if not str(exc).startswith("no folding reaches") and "does not fit" not in str(exc):
            raise
        t = resolve_target("ulx3s")
        return dataclasses.replace(design, pipeline=compile_pipeline(design.integer, family=t.board.family,
                                                                     budget=t.budget))


def _golden(design, feeds: dict) -> dict[str, np.ndarray]:
    """The golden flow's outputs by model output name: host input quantization, the exact integer
    executor, host dequantization and tail (what design.simulate returns when bit-exact)."""
    return design.golden(feeds)


def _known_failure(name: str, exc: BaseException, table: dict) -> None:
    """A failure listed in ``table`` must be the listed one, class and words (then re-raised by
    the caller for the strict xfail); an unlisted one propagates as a plain failure."""
    if name in table:
        cls, text = table[name]
        assert (type(exc).__name__, _words(exc)) == (cls, text), (
            f"{name} now fails differently: {type(exc).__name__}: {_words(exc)!r} "
            f"(the table says {cls}: {text!r})")


def _words(exc: BaseException) -> str:
    """An error's first 120 characters as the tables hold them (the corpus folder as {corpus})."""
    return str(exc).replace(str(CORPUS), "{corpus}")[:120]


# ------------------------------------------------------------------ oracles


class QGemm(OpRun):  # onnx.reference takes the op type from the class name
    """com.microsoft QGemm from its contrib-op documentation: Y = alpha * (A - a_zp)(B - b_zp)
    a_scale b_scale + C a_scale b_scale (C int32 bias, zero point 0); quantized with (y_scale,
    y_zp) when given (round half to even, saturate), else float. Integer products in int64."""
    op_domain = "com.microsoft"

    def _run(self, a, a_scale, a_zp, b, b_scale, b_zp, c=None, y_scale=None, y_zp=None,
             alpha=None, transA=None, transB=None):
        alpha = 1.0 if alpha is None else alpha
        a = a.astype(np.int64) - np.asarray(a_zp, np.int64)
        b = b.astype(np.int64) - np.asarray(b_zp, np.int64).reshape(-1) if np.ndim(b_zp) else \
            b.astype(np.int64) - np.int64(b_zp)
        a = a.T if transA else a
        b = b.T if transB else b
        acc = a @ b + (0 if c is None else c.astype(np.int64))
        real = np.float64(alpha) * acc * np.float64(a_scale) * np.asarray(b_scale, np.float64)
        if y_scale is None:
            return (real.astype(np.float32),)
        info = np.iinfo(y_zp.dtype)
        q = np.rint(real / np.float64(y_scale)) + np.int64(y_zp)
        return (np.clip(q, info.min, info.max).astype(y_zp.dtype),)


class QLinearSoftmax(OpRun):
    """com.microsoft QLinearSoftmax from its documentation: quantize(softmax(dequantize(X)))
    along ``axis`` (float32 softmax; round half to even, saturate)."""
    op_domain = "com.microsoft"

    def _run(self, x, x_scale, x_zp, y_scale, y_zp, axis=None, opset=None):
        axis = -1 if axis is None else axis
        f = (x.astype(np.float32) - np.float32(x_zp)) * np.float32(x_scale)
        e = np.exp(f - f.max(axis=axis, keepdims=True))
        s = e / e.sum(axis=axis, keepdims=True)
        info = np.iinfo(y_zp.dtype)
        q = np.rint(s / np.float32(y_scale)) + np.int64(y_zp)
        return (np.clip(q, info.min, info.max).astype(y_zp.dtype),)


def _batched(run, feeds: dict, batch) -> list[np.ndarray]:
    """``run(feeds)`` on a model that fixes its batch size: one batch at a time (the last one
    filled up with its final sample and trimmed)."""
    if not isinstance(batch, int):
        return run(feeds)
    (iname, x), = feeds.items()
    parts = []
    for start in range(0, len(x), batch):
        chunk = x[start:start + batch]
        n = len(chunk)
        if n < batch:
            chunk = np.concatenate([chunk, np.repeat(chunk[-1:], batch - n, axis=0)])
        parts.append([o[:n] for o in run({iname: chunk})])
    return [np.concatenate(p) for p in zip(*parts)]


def _oracle(name: str, feeds: dict) -> dict[str, np.ndarray]:
    """The independent oracle's outputs by model output name for ``feeds`` (see the table above)."""
    e = ENTRIES[name]
    outs = [o["name"] for o in e["outputs"]]
    batch = e["inputs"][0]["shape"][0]
    if _qonnx(name):
        d = _data(e)
        y = d.get(f"oracle_{name.removesuffix('.onnx')}", d["oracle"])
        return {outs[0]: y[:len(next(iter(feeds.values())))]}
    if e["kind"] == "float":
        model = ptq.quantize(str(CORPUS / name), _calib(name))
    else:
        model = onnx.load(CORPUS / name)
    if any(n.domain == "com.microsoft" for n in model.graph.node):
        ev = ReferenceEvaluator(model, new_ops=[QGemm, QLinearSoftmax])
        ys = _batched(lambda f: ev.run(None, f), feeds, batch)
    elif name in EXACT_POOLS:
        ys = _batched(lambda f: exact_pool_oracle(model, f)[0], feeds, batch)
    else:
        sess = spec_session(model)
        ys = _batched(lambda f: sess.run(None, f), feeds, batch)
    return dict(zip(outs, ys))


#: models whose oracle (onnxruntime, optimizations off, on the QDQ model) rounds a float32 sum
#: that is an exact tie where the exact integer sum is not: the float32 Conv of
#: torch_conv1d_kws' second layer gives 74.5 for one sample where the exact value is 74.5000024, so
#: onnxruntime's QuantizeLinear takes 74 and the integer path 75; every later value of that sample
#: follows. In torch_opset9_cnn_relu_bn the second Conv + ReLU of sample 4 (channel 8, row 1,
#: column 0) is, exactly, (50909 - 11901) * s_x * s_w / s_y = 153.4999992 on the output grid (the
#: integer path takes 153), and onnxruntime's float32 Conv gives 0.29302648, 153.5 after the float32
#: division, so QuantizeLinear takes 154 (the QDQ model's bias scale, s_x * s_w rounded to float32,
#: alone moves the value to 153.5000001); one output element of that sample follows. Three more,
#: each one Conv output a hair above a tie (the exact value from the integer inputs, the int32 bias
#: times its scale and the float32 scales, as Fractions), which onnxruntime's float32 Conv puts at
#: or below it, so its QuantizeLinear takes k and the integer path k + 1; the rest of that sample
#: follows: ort_blk_atrous2d_qdq's second Conv (sample 7, channel 11, row 0, column 12):
#: 61.5000093 exactly, 61.499996 in float32; keras_blk_avgpool_same_tf2onnx's second Conv + ReLU
#: (sample 3, channel 13, row 4, column 0): 8.5000040 exactly, 8.499998 in float32;
#: keras_blk_convt2d_tf2onnx's first Conv + ReLU (sample 2, channel 0, row 4, column 3):
#: 58.5000015 exactly, 58.5 in float32 (an even tie: 58). Allowed: this many of the SAMPLES
#: samples differ (the rest exact to 1e-6).
ORACLE_TIES = {**{f"torch_conv1d_kws_{e}_{b}.onnx": 1 for e in ("ts", "dynamo") for b in ("dyn", "b1", "b3")},
               "torch_opset9_cnn_relu_bn.onnx": 1, "ort_blk_atrous2d_qdq.onnx": 1,
               "keras_blk_avgpool_same_tf2onnx.onnx": 1, "keras_blk_convt2d_tf2onnx.onnx": 1}


def _assert_close(name: str, got: dict, want: dict) -> None:
    assert set(got) == set(want), (sorted(got), sorted(want))
    for k, w in want.items():
        g = np.asarray(got[k])
        w = np.asarray(w)
        assert g.shape == w.shape, (name, k, g.shape, w.shape)
        if FLOAT_INPUT_CLASS in ENTRIES[name].get("classes", ()):
            # the oracle ran the float input; onnx2hw quantizes it to 8 bits from the calibration
            # data (the golden defines that input quantizer): 5 % of the largest magnitude, as for
            # any model quantized from a float one (tests/test_quant_qonnx_conventions.py checks the
            # quantized input path exactly against a NumPy formula)
            tol = 0.05 * float(np.abs(w).max())
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=0, atol=tol, err_msg=name)
            continue
        if name in ORACLE_TIES:
            tol = 1e-6 * max(float(np.abs(w).max()), np.finfo(np.float32).tiny)
            off = np.abs(g.astype(np.float64) - w.astype(np.float64)).reshape(len(w), -1).max(axis=1) > tol
            assert off.sum() <= ORACLE_TIES[name], f"{name}: {int(off.sum())} samples differ (a float32 tie allows " \
                                                   f"{ORACLE_TIES[name]})"
            continue
        if w.dtype.kind in "iub":
            np.testing.assert_array_equal(g, w, err_msg=f"{name}: output {k!r}")
        else:
            tol = 1e-6 * max(float(np.abs(w).max()), np.finfo(np.float32).tiny)
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=0, atol=tol,
                                       err_msg=f"{name}: output {k!r} (1e-6 of its largest magnitude)")


@pytest.mark.parametrize("name", sorted(n for n, e in ENTRIES.items() if e["kind"] == "quantized"))
def test_oracle_of_quantized_file_agrees_with_its_framework(name):
    """The oracles need no onnx2hw: each quantized file's runs and agrees with what the exporting
    framework computed (so a model that starts passing meets a working oracle). Tolerances:
    Brevitas' own outputs 1e-5 of the largest magnitude (the qonnx executor and PyTorch sum in
    different orders); TFLite's interpreter one int8 step; onnxruntime's own integer kernels one
    output step (not exact, see _oracle); the float model a quantized one came from, 5 % of its
    largest magnitude (8-bit quantization error)."""
    e = ENTRIES[name]
    feeds = _inputs(name)
    outs = _oracle(name, feeds)
    assert list(outs) == [o["name"] for o in e["outputs"]] and len(outs) == 1
    y = next(iter(outs.values())).astype(np.float64)
    d = _data(e)
    if _qonnx(name):
        ref = d["output"][:SAMPLES]
        assert np.abs(y - ref).max() <= 1e-5 * np.abs(ref).max()
    elif e["inputs"][0]["dtype"] == "int8":
        assert np.abs(y - d["output_tflite_int8"][:SAMPLES]).max() <= 1
    else:
        ref = d["output"][:SAMPLES]
        assert np.abs(y - ref).max() <= 0.05 * np.abs(ref).max()
        if any(n.domain == "com.microsoft" for n in onnx.load(CORPUS / name).graph.node):
            k = run_kernels(str(CORPUS / name), feeds)[0]
            step = np.abs(np.diff(np.unique(k))).min() if np.unique(k).size > 1 else 1.0
            assert np.abs(y - k).max() <= step * 1.001


# ------------------------------------------------------------------ the tests


def _accept_params(*tables):
    out = []
    for name in sorted(ENTRIES):
        table = next((t for t in tables if name in t), None)
        marks = ()
        if table is not None:
            cls, text = table[name]
            marks = pytest.mark.xfail(strict=True, raises=_ERRORS[cls], reason=f"#12: {cls}: {text}")
        out.append(pytest.param(name, marks=marks, id=name))
    return out


#: QDQ models whose average pools onnxruntime's quantizer puts on their input's grid: the exact mean
#: of a window of an even count is a tie k + 1/2 for some windows, which onnxruntime's float32 (each
#: dequantized value and the sum rounded) moves off the tie either way; the golden rounds it half to
#: even as QuantizeLinear defines (a divided Requantize where the divisor is no power of two). The
#: oracle computes those pools in int64 and runs the rest under onnxruntime (tests/_pool_oracle.py);
#: test_exact_pools_differ_from_onnxruntime_only_at_ties counts where onnxruntime's own pools differ.
EXACT_POOLS = {f"ort_blk_{m}_qdq.onnx" for m in ("avgpool_ceil", "avgpool_exclude_pad", "multiblock")}


def _golden_params():
    return _accept_params(FAILS)


@pytest.mark.parametrize("name", _golden_params())
def test_golden_matches_oracle(name):
    """compile -> golden outputs on SAMPLES inputs == the independent oracle's."""
    feeds = _inputs(name)
    try:
        got = _golden(_design(name), feeds)
    except Exception as exc:
        _known_failure(name, exc, FAILS)
        raise
    _assert_close(name, got, _oracle(name, feeds))


@pytest.mark.parametrize("name", sorted(EXACT_POOLS))
def test_exact_pools_differ_from_onnxruntime_only_at_ties(name, summary):
    """The pools of EXACT_POOLS on SAMPLES inputs: each has exact ties, and wherever
    onnxruntime's own (float32) pool output differs from the int64 one it is a tie rounded to the
    other neighbour; the counts go to the summary."""
    model = onnx.load(CORPUS / name)
    _, stats = exact_pool_oracle(model, _inputs(name))
    assert stats and sum(t for t, _, _ in stats.values()) > 0, stats
    for tensor, (ties, differ, at_ties) in stats.items():
        assert differ == at_ties, f"{name}: {tensor}: {differ - at_ties} differences that are no tie"
    summary(f"pool_ties_{name}", f"{name}: exact ties / onnxruntime float32 differs (all at ties) per pool: "
            + ", ".join(f"{t} {v[0]}/{v[1]}" for t, v in stats.items()))


#: hardware simulated by this process: (:func:`_hardware_key`, its integer inputs) -> its integer
#: outputs. Twin exports of one network (TorchScript/dynamo, fixed/dynamic batch, raw/cleaned
#: QONNX: the same data file, run by one worker through xdist_group) that compile to the same
#: hardware, node names aside, share one simulation of it (and skip its Verilog conversion).
_SIMULATED: dict[str, np.ndarray] = {}


def _feed(h, v) -> None:
    """Hash ``v`` (block parameters: arrays, sequences, mappings, scalars) into ``h``."""
    if isinstance(v, np.ndarray):
        h.update(f"array {v.dtype} {v.shape}".encode())
        h.update(np.ascontiguousarray(v).tobytes())
    elif isinstance(v, (tuple, list)):
        h.update(f"seq {len(v)}".encode())
        for e in v:
            _feed(h, e)
    elif hasattr(v, "items"):
        for k in sorted(v):
            h.update(f"key {k}".encode())
            _feed(h, v[k])
    else:
        h.update(f"value {v!r}".encode())


def _hardware_key(pipeline) -> str:
    """What the accelerator's hardware is built from, its stage and tensor names aside: per stage
    its blocks (class, constructor arguments) and lanes, per link its ends (as stage positions),
    ports, lanes, element type, count and FIFO depth (:class:`~onnx2hw.rtl.accelerator.AcceleratorCore`
    builds from nothing else)."""
    index = {INPUT: -1, OUTPUT: -2, **{s.name: i for i, s in enumerate(pipeline.stages)}}
    h = hashlib.sha256()
    for s in pipeline.stages:
        _feed(h, (len(s.inputs), s.in_lanes, s.out_lanes, s.out_bits, s.out_signed))
        for b in s.blocks:
            h.update(b.kind.encode())
            _feed(h, dict(b.params))
    for ln in pipeline.links:
        _feed(h, (index[ln.src], index[ln.dst], ln.dst_port, ln.src_port, ln.src_lanes, ln.dst_lanes, ln.bits,
                  ln.signed, ln.elements, ln.fifo_depth))
    return h.hexdigest()


def _sim_params():
    return [pytest.param(*p.values, marks=[*p.marks, pytest.mark.xdist_group(ENTRIES[p.values[0]]["data"])],
                         id=p.id) for p in _accept_params(FAILS, SIM_FAILS)]


@pytest.mark.sim
@pytest.mark.parametrize("name", _sim_params())
def test_sim_bit_exact(name):
    """compile -> the design simulated on SAMPLES inputs in one simulator run, bit-exact against
    the golden (else MismatchError); the model's outputs equal the golden flow's."""
    feeds = _inputs(name)
    try:
        design = _design(name)
    except Exception as exc:
        _known_failure(name, exc, FAILS)
        raise
    try:
        sim_design = _sim_design(name)
        x = sim_design.quantize(feeds)
        key = hashlib.sha256(_hardware_key(sim_design.pipeline).encode() + repr(x.shape).encode()
                             + x.tobytes()).hexdigest()
        if key not in _SIMULATED:
            report = sim_design.simulate_raw(x, timing=False)
            if not report.ok:
                raise MismatchError(report)
            _SIMULATED[key] = report.hw
        got = sim_design.dequantize(_SIMULATED[key])
    except Exception as exc:
        _known_failure(name, exc, SIM_FAILS)
        raise
    want = _golden(design, feeds)   # the same integer graph whatever the folding: equal, bit for bit
    assert set(got) == set(want)
    for k in want:
        np.testing.assert_array_equal(got[k], want[k], err_msg=f"{name}: output {k!r}")


def _names_of(name: str) -> set[str]:
    """Node names, op types and tensor names of a corpus model (what an error may name)."""
    m = onnx.load(CORPUS / name)
    names = {n.name for n in m.graph.node} | {n.op_type for n in m.graph.node}
    names |= {v for n in m.graph.node for v in list(n.input) + list(n.output)}
    return {s for s in names if s}


#: a corpus model with an op no hardware or host path takes (Sin) put after its first node: the
#: failing case this test keeps checking when every corpus model passes
BROKEN = "torch_cnn_softmax_ts_dyn.onnx"


def _with_sin(name: str) -> bytes:
    m = onnx.load(CORPUS / name)
    first = m.graph.node[0].output[0]
    for n in m.graph.node[1:]:
        n.input[:] = ["sin_out" if i == first else i for i in n.input]
    m.graph.node.insert(1, onnx.helper.make_node("Sin", [first], ["sin_out"], name="inserted_sin"))
    return m.SerializeToString()


@pytest.mark.parametrize("name", sorted(FAILS) + sorted(SIM_FAILS) + [f"{BROKEN}+Sin"])
def test_failing_model_fails_with_one_onnx2hw_line(name):
    """Each model that does not get through stops with one line of onnx2hw's own errors
    (ModelError/UnsupportedError/ValueError, or a MismatchError of the simulation) naming the
    node, op or tensor at fault, never another exception or a traceback."""
    table = FAILS if name in FAILS else SIM_FAILS
    with pytest.raises(Exception) as info:
        if name.endswith("+Sin"):
            onnx2hw.compile(_with_sin(BROKEN), calib=_calib(BROKEN))
        design = _design(name)
        if table is FAILS:
            _golden(design, _inputs(name))
        else:
            _sim_design(name).simulate(_inputs(name))
    exc = info.value
    if name.endswith("+Sin"):
        assert isinstance(exc, UnsupportedError) and str(exc).endswith("inserted_sin (Sin)"), exc
        return
    assert isinstance(exc, (ValueError, onnx2hw.MismatchError)), f"{type(exc).__module__}.{type(exc).__name__}: {exc}"
    text = str(exc)
    assert text and "\n" not in text and "Traceback" not in text, text
    if isinstance(exc, ValueError) and name not in UNNAMED:
        assert any(s in text for s in _names_of(name)), f"names no node, op or tensor of {name}: {text}"


def test_acceptance_tables_name_corpus_files():
    assert set(FAILS) <= set(ENTRIES) and set(SIM_FAILS) <= set(ENTRIES)
    assert not set(FAILS) & set(SIM_FAILS)
    for cls, text in list(FAILS.values()) + list(SIM_FAILS.values()):
        assert cls in _ERRORS and 0 < len(text) <= 120 and "\n" not in text, (cls, text)


# ------------------------------------------------------------------ the tables, measured


def _measure(sim: bool) -> tuple[dict, dict]:
    """(FAILS, SIM_FAILS) as the flow stands: each model compiled and run through the golden
    flow (and simulated if ``sim``)."""
    fails, sim_fails = {}, {}
    for name in sorted(ENTRIES):
        feeds = _inputs(name)
        try:
            design = _design(name)
            _golden(design, feeds)
        except Exception as exc:  # noqa: BLE001 - recorded
            fails[name] = (type(exc).__name__, _words(exc))
            print(f"{name:42s} {type(exc).__name__}: {_words(exc)}", flush=True)
            continue
        if sim:
            try:
                _sim_design(name).simulate(feeds)
            except Exception as exc:  # noqa: BLE001 - recorded
                sim_fails[name] = (type(exc).__name__, _words(exc))
                print(f"{name:42s} sim {type(exc).__name__}: {_words(exc)}", flush=True)
                continue
        print(f"{name:42s} passes", flush=True)
    return fails, sim_fails


def _rewrite_tables(fails: dict, sim_fails: dict | None) -> None:
    path = ROOT / "tests" / "test_corpus.py"
    text = path.read_text()
    for tag, table in (("FAILS", fails), ("SIM_FAILS", sim_fails)):
        if table is None:
            continue
        body = "".join(f"    {k!r}: ({c!r}, {t!r}),\n" for k, (c, t) in sorted(table.items()))
        text = re.sub(rf"(    # <{tag}>[^\n]*\n).*?(    # </{tag}>)", lambda m: m.group(1) + body + m.group(2),
                      text, count=1, flags=re.S)
    path.write_text(text)


if __name__ == "__main__":
    # python tests/test_corpus.py --tables [--sim]: measure and rewrite FAILS (and SIM_FAILS)
    if "--tables" not in sys.argv:
        sys.exit("usage: python tests/test_corpus.py --tables [--sim]")
    simulate = "--sim" in sys.argv
    f, sf = _measure(simulate)
    _rewrite_tables(f, sf if simulate else None)
    print(f"{len(ENTRIES) - len(f) - len(sf)} of {len(ENTRIES)} pass; {len(f)} FAILS, {len(sf)} SIM_FAILS")
