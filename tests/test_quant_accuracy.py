"""Accuracy of post-training quantization on held-out test splits (float vs int8 vs int4 weights).

Each quantized model is run twice: by onnxruntime on the QDQ model and by the golden executor on
the exact IntegerGraph it imports to. Figures go to the junit properties and to the terminal
summary (``onnx2hw summary`` section, printed with or without ``-s``).
"""
from __future__ import annotations


import numpy as np
import onnx
import onnx.numpy_helper
import pytest

from _oracle import run_spec
from _paths import EXAMPLES
from onnx2hw.golden import execute
from onnx2hw.ir import load
from onnx2hw import layers as ig
from onnx2hw.quant.convert import to_integer_graph
from onnx2hw.quant.ptq import quantize

EX = EXAMPLES
MODELS = {  # model -> (calibration, test split)
    "digits_mlp": ("digits_calib", "digits_test"),
    "digits_cnn": ("digits_img_calib", "digits_img_test"),
    "digits_cnn_res": ("digits_img_calib", "digits_img_test"),
    "jet_mlp": ("jet_calib", "jet_test"),
}
#: config -> (quantize options, allowed loss in accuracy points vs float)
CONFIGS = {
    "int8": (dict(weight_bits=8, act_bits=8, per_channel=True), 1.0),
    "int8-per-tensor": (dict(weight_bits=8, act_bits=8, per_channel=False), 1.0),
    "int4w-int8a": (dict(weight_bits=4, act_bits=8, per_channel=True), 3.0),
}


def _split(name):
    t = dict(np.load(EX / f"{MODELS[name][1]}.npz"))
    key = next(k for k in t if k != "label")
    return key, t[key], t["label"]


def _ort_accuracy(model_bytes, key, x, labels) -> float:
    y = run_spec(model_bytes, {key: x})[0]
    return 100.0 * float(np.mean(y.argmax(1) == labels))


@pytest.fixture(scope="module")
def float_accuracy():
    cache = {}

    def get(name):
        if name not in cache:
            key, x, labels = _split(name)
            cache[name] = _ort_accuracy((EX / f"{name}.onnx").read_bytes(), key, x, labels)
        return cache[name]
    return get


@pytest.mark.parametrize("cfg", CONFIGS)
@pytest.mark.parametrize("name", MODELS)
def test_accuracy_within_budget(name, cfg, float_accuracy, record_property, summary):
    options, budget = CONFIGS[cfg]
    key, x, labels = _split(name)
    calib = dict(np.load(EX / f"{MODELS[name][0]}.npz"))
    q = quantize(str(EX / f"{name}.onnx"), calib, **options)
    acc_f = float_accuracy(name)
    acc_ort = _ort_accuracy(q.SerializeToString(), key, x, labels)
    igraph = to_integer_graph(load(q))
    y = ig.dequantize_outputs(igraph, execute(igraph, ig.quantize_inputs(igraph, {key: x})))
    acc_int = 100.0 * float(np.mean(next(iter(y.values())).argmax(1) == labels))
    line = (f"accuracy {name:15s} {cfg:16s} float {acc_f:6.2f}%  onnxruntime {acc_ort:6.2f}%  "
            f"golden IntegerGraph {acc_int:6.2f}%  (n={len(labels)})")
    print(line)
    summary(f"acc-{name}-{cfg}", line)
    for k, v in (("float", acc_f), ("onnxruntime", acc_ort), ("golden_integer", acc_int)):
        record_property(f"accuracy_{k}", round(v, 3))
    assert acc_ort >= acc_f - budget, line
    assert acc_int >= acc_f - budget, line
    # the exact integer graph and onnxruntime may differ by 1 LSB on a few logits; not in accuracy much
    assert abs(acc_int - acc_ort) <= 0.5, line


@pytest.mark.parametrize("fixture,min_acc", [("digits_mlp_qonnx_w4a4", 95.0), ("digits_mlp_qonnx_w2a2", 88.0),
                                             ("digits_mlp_brevitas_w4a4", 95.0)])
def test_qonnx_fixtures_classify(fixture, min_acc, record_property, summary):
    """The QONNX fixtures (hand-built and Brevitas-exported) are meaningful classifiers under the
    QONNX float semantics (golden executor), with logits on the final quantizer's 8-bit grid."""
    path = EX / f"{fixture}.onnx"
    model = onnx.load(path)
    onnx.checker.check_model(model)
    quants = [n for n in model.graph.node if n.op_type == "Quant"]
    assert {n.domain for n in quants} == {"qonnx.custom_op.general"}
    assert len(quants) == 7  # input, 3 weights, 2 activations, logits
    key, x, labels = _split("digits_mlp")
    y = execute(load(path), {key: x})["logits"]
    acc = 100.0 * float(np.mean(y.argmax(1) == labels))
    line = f"accuracy {fixture} QONNX float semantics {acc:6.2f}%"
    print(line)
    summary(f"acc-{fixture}", line)
    record_property("accuracy_qonnx", acc)
    assert acc >= min_acc
    final = next(n for n in quants if n.output[0] == "logits")
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    scale, bits = inits[final.input[1]], int(inits[final.input[3]])
    assert bits == 8
    codes = y / scale
    np.testing.assert_allclose(codes, np.rint(codes), atol=1e-3)
    assert codes.min() >= -128 and codes.max() <= 127
