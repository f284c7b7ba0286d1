"""The only way tests run onnxruntime (see README, "Testing: where exact expectations come from").

``spec_session`` is onnxruntime as an exact oracle: graph optimizations off, so a QDQ graph runs
DequantizeLinear -> float op -> QuantizeLinear as the ONNX spec defines it, on every CPU.

``kernel_session`` is onnxruntime with its default optimizations and integer kernels
(QLinearConv, QLinearMatMul, MatMulInteger, com.microsoft QGemm, fused QDQ). On x86 CPUs without
VNNI those kernels form u8 x s8 products with an instruction whose 16-bit pairwise sums saturate
(onnxruntime #6004, #14642), so their results depend on the CPU: a test may compare with them only
within a stated tolerance, never as exact truth.

``reference`` is ``onnx.reference.ReferenceEvaluator``, written from the spec in NumPy int64/float.
"""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx.reference import ReferenceEvaluator
from onnx.reference.op_run import OpRun

__all__ = ["spec_session", "kernel_session", "run_spec", "run_kernels", "reference", "lsb_apart"]


def _model_arg(model):
    """onnxruntime takes a path or serialized bytes (a ModelProto, bytes or a path here)."""
    if isinstance(model, onnx.ModelProto):
        return model.SerializeToString()
    return model if isinstance(model, bytes) else str(model)


def _options(optimize: bool) -> ort.SessionOptions:
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    if not optimize:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return so


def spec_session(model) -> ort.InferenceSession:
    """onnxruntime with every graph optimization off: exact on QDQ and float graphs, any CPU."""
    return ort.InferenceSession(_model_arg(model), _options(False), providers=["CPUExecutionProvider"])


def kernel_session(model) -> ort.InferenceSession:
    """onnxruntime as users run it by default (QDQ fused into integer kernels): CPU-dependent,
    compare only within a stated tolerance."""
    return ort.InferenceSession(_model_arg(model), _options(True), providers=["CPUExecutionProvider"])


def run_spec(model, feeds: dict) -> list:
    return spec_session(model).run(None, feeds)


def run_kernels(model, feeds: dict) -> list:
    return kernel_session(model).run(None, feeds)


class QLinearConcat(OpRun):
    """com.microsoft QLinearConcat as its contrib-op spec defines it (onnx.reference has no
    com.microsoft ops): inputs ``Y_scale, Y_zero_point, (X, X_scale, X_zero_point)...``;
    ``y = saturate(round_half_even((x - x_zp) * x_scale / y_scale) + y_zp)`` per input, then Concat
    on ``axis``; computed in float64 from the float32 scales."""
    op_domain = "com.microsoft"

    def _run(self, y_scale, y_zp, *triples, axis=None):
        info = np.iinfo(y_zp.dtype)
        parts = []
        for x, xs, xz in zip(triples[0::3], triples[1::3], triples[2::3]):
            real = (x.astype(np.int64) - np.int64(xz)) * np.float64(xs)
            q = np.rint(real / np.float64(y_scale)) + np.int64(y_zp)
            parts.append(np.clip(q, info.min, info.max).astype(y_zp.dtype))
        return (np.concatenate(parts, axis=self.axis if axis is None else axis),)


def reference(model, feeds: dict) -> list:
    """``onnx.reference`` outputs (in the graph's output order), with com.microsoft QLinearConcat."""
    m = model if isinstance(model, onnx.ModelProto) else onnx.load(str(model))
    return ReferenceEvaluator(m, new_ops=[QLinearConcat]).run(None, feeds)


def lsb_apart(a, b, scale) -> np.ndarray:
    """How many output steps apart two dequantized float32 outputs are: each mapped back to its
    integer in the model's own dtype (float32), so the float rounding of ``q * scale`` never counts
    as a difference."""
    s = np.asarray(scale, np.float32)
    return np.abs(np.rint(np.asarray(a, np.float32) / s) - np.rint(np.asarray(b, np.float32) / s))
