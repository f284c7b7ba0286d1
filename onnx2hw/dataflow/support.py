"""Which ONNX ops the hardware path can map, and how (used by `inspect` and the compiler).

Every op an importer (QDQ, QOperator, QONNX) or the float quantizer handles is listed here, and
nothing else: ``tests/test_dataflow_support.py`` checks the two agree.
"""
from __future__ import annotations

__all__ = ["HW_SUPPORT", "hw_support"]

QONNX = "qonnx.custom_op.general"
FINN = "finn.custom_op.general"  # the same QONNX ops under FINN's older domain name
MS = "com.microsoft"

#: (domain, op_type) -> how the hardware path maps the op
HW_SUPPORT: dict[tuple[str, str], str] = {
    ("", "Conv"): "SlidingWindow + MVU + Requantize",
    ("", "ConvInteger"): "SlidingWindow + MVU",
    ("", "QLinearConv"): "SlidingWindow + MVU + Requantize",
    ("", "Gemm"): "MVU + Requantize",
    ("", "MatMul"): "MVU + Requantize (constant weights)",
    ("", "MatMulInteger"): "MVU",
    ("", "QLinearMatMul"): "MVU + Requantize",
    (MS, "QGemm"): "MVU + Requantize",
    ("", "Relu"): "folded into the output clamp",
    ("", "Clip"): "folded into the output clamp",
    ("", "BatchNormalization"): "folded into the preceding layer",
    ("", "MaxPool"): "MaxPool",
    ("", "AveragePool"): "AvgPool + Requantize",
    ("", "GlobalAveragePool"): "GlobalAvgPool + Requantize",
    ("", "GlobalMaxPool"): "MaxPool over the whole image",
    (MS, "QLinearAveragePool"): "AvgPool + Requantize",
    (MS, "QLinearGlobalAveragePool"): "GlobalAvgPool + Requantize",
    ("", "Add"): "Fork + FIFO + Add (residual)",
    (MS, "QLinearAdd"): "Fork + FIFO + Add (residual)",
    ("", "Mul"): "folded into the requantizer (positive rescale of a layer)",
    ("", "Cast"): "removed (integer layer output)",
    ("", "Flatten"): "absorbed at compile time",
    ("", "Reshape"): "absorbed at compile time",
    ("", "Squeeze"): "absorbed at compile time",
    ("", "Constant"): "constant input, folded at compile time",
    ("", "Identity"): "removed",
    ("", "Dropout"): "removed (inference)",
    ("", "QuantizeLinear"): "quantization parameters / host input quantizer",
    ("", "DequantizeLinear"): "quantization parameters / host output dequantizer",
    (QONNX, "Quant"): "quantization parameters / thresholds",
    (QONNX, "BipolarQuant"): "1-bit bipolar quantization",
    (QONNX, "Trunc"): "requantization shift",
}
for _op in ("Quant", "BipolarQuant", "Trunc"):
    HW_SUPPORT[(FINN, _op)] = HW_SUPPORT[(QONNX, _op)]


def hw_support(domain: str, op_type: str) -> str | None:
    """How the hardware maps the op, or ``None`` when it cannot."""
    return HW_SUPPORT.get((domain, op_type))
