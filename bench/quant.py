"""Post-training quantization accuracy: float vs int8 vs int4 weights / int8 activations.

For each example model (``examples/``) on its held-out test split: the float model in
onnxruntime, then ``onnx2hw.quant.ptq.quantize`` (per-channel weights, min/max calibration on the
shipped calibration set) run in onnxruntime (QDQ model) and in the golden executor on the exact
IntegerGraph it imports to. Targets: int8 within 1 point of float, int4 weights within 3 points.
Also times the quantization itself.
"""
from __future__ import annotations

import pathlib
import time

import numpy as np
import onnxruntime as ort

from onnx2hw.golden import execute
from onnx2hw.ir import load
from onnx2hw import layers as ig
from onnx2hw.quant.convert import to_integer_graph
from onnx2hw.quant.ptq import quantize

__all__ = ["bench_quant", "accuracy_table"]

EX = pathlib.Path(__file__).resolve().parent.parent / "examples"
MODELS = {
    "digits_mlp": ("digits_calib", "digits_test"),
    "digits_cnn": ("digits_img_calib", "digits_img_test"),
    "digits_cnn_res": ("digits_img_calib", "digits_img_test"),
    "jet_mlp (synthetic)": ("jet_calib", "jet_test"),
}
CONFIGS = (("int8", 8, 1.0), ("int4w/int8a", 4, 3.0))


def _ort(model_bytes, key, x):
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model_bytes, so, providers=["CPUExecutionProvider"]).run(None, {key: x})[0]


def accuracy_table():
    """Rows ``(model, config, float %, onnxruntime %, golden IntegerGraph %, seconds to quantize, ok)``."""
    rows = []
    for label, (calib, test) in MODELS.items():
        name = label.split()[0]
        t = dict(np.load(EX / f"{test}.npz"))
        key = next(k for k in t if k != "label")
        x, y = t[key], t["label"]
        acc_f = 100 * np.mean(_ort((EX / f"{name}.onnx").read_bytes(), key, x).argmax(1) == y)
        cal = dict(np.load(EX / f"{calib}.npz"))
        for cfg, wbits, budget in CONFIGS:
            t0 = time.perf_counter()
            q = quantize(str(EX / f"{name}.onnx"), cal, weight_bits=wbits, act_bits=8, per_channel=True)
            seconds = time.perf_counter() - t0
            acc_q = 100 * np.mean(_ort(q.SerializeToString(), key, x).argmax(1) == y)
            g = to_integer_graph(load(q))
            out = ig.dequantize_outputs(g, execute(g, ig.quantize_inputs(g, {key: x})))
            acc_i = 100 * np.mean(next(iter(out.values())).argmax(1) == y)
            ok = min(acc_q, acc_i) >= acc_f - budget
            rows.append((label, cfg, acc_f, acc_q, acc_i, seconds, ok))
    return rows


def bench_quant():
    rows = accuracy_table()
    print(f"{'model':22s} {'config':12s} {'float':>7s} {'QDQ ort':>8s} {'integer':>8s} {'quantize':>9s}  target")
    for label, cfg, f, q, i, s, ok in rows:
        print(f"{label:22s} {cfg:12s} {f:6.2f}% {q:7.2f}% {i:7.2f}% {s:8.2f}s  {'ok' if ok else 'MISSED'}")
    print("targets: int8 within 1 point of float, int4 weights within 3 points "
          "(test splits: digits 450 images, jet 1000 samples)")


if __name__ == "__main__":
    bench_quant()
