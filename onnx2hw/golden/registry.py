"""The one explicit registry of golden ops: ``(domain, op_type) -> module``.

Each module in :mod:`onnx2hw.golden.ops` defines ``run(node, *inputs)`` returning
one array or a tuple of arrays (one per node output). ``node.since_version`` selects
the semantics where the ONNX definition changed between opsets. Omitted optional
inputs arrive as ``None``. Modules are imported on first use.
"""
from __future__ import annotations

import importlib
from typing import Callable

__all__ = ["OPS", "lookup", "is_registered"]

QONNX = "qonnx.custom_op.general"
FINN = "finn.custom_op.general"  # FINN's older name of the QONNX domain
MS = "com.microsoft"

#: (domain, op_type) -> module name in onnx2hw.golden.ops
OPS: dict[tuple[str, str], str] = {
    # elementwise and activations
    ("", "Add"): "binary", ("", "Sub"): "binary", ("", "Mul"): "binary", ("", "Div"): "binary",
    ("", "Relu"): "relu", ("", "LeakyRelu"): "leaky_relu", ("", "Clip"): "clip", ("", "Neg"): "neg",
    ("", "Sigmoid"): "sigmoid", ("", "Tanh"): "tanh", ("", "Softmax"): "softmax", ("", "Pow"): "pow",
    ("", "LogSoftmax"): "log_softmax", ("", "TopK"): "top_k",
    ("", "PRelu"): "prelu", ("", "Selu"): "selu", ("", "Elu"): "elu", ("", "HardSigmoid"): "hard_sigmoid",
    ("", "HardSwish"): "hard_swish", ("", "Softplus"): "softplus", ("", "Mish"): "mish",
    # shape and data movement
    ("", "Flatten"): "flatten", ("", "Reshape"): "reshape", ("", "Transpose"): "transpose",
    ("", "Squeeze"): "squeeze", ("", "Unsqueeze"): "unsqueeze", ("", "Concat"): "concat",
    ("", "Pad"): "pad", ("", "Constant"): "constant", ("", "ConstantOfShape"): "constant_of_shape",
    ("", "Identity"): "identity", ("", "Resize"): "resize", ("", "Upsample"): "upsample",
    ("", "Dropout"): "dropout", ("", "Cast"): "cast", ("", "Shape"): "shape",
    ("", "Gather"): "gather", ("", "Slice"): "slice", ("", "Split"): "split", ("", "ArgMax"): "argmax",
    ("", "ReduceMean"): "reduce_mean", ("", "ReduceMax"): "reduce_max", ("", "Tile"): "tile", ("", "Expand"): "expand",
    ("", "DepthToSpace"): "depth_to_space", ("", "SpaceToDepth"): "space_to_depth",
    # compute
    ("", "Conv"): "conv", ("", "ConvInteger"): "conv_integer", ("", "QLinearConv"): "qlinear_conv",
    ("", "ConvTranspose"): "conv_transpose",
    ("", "MatMul"): "matmul", ("", "MatMulInteger"): "matmul_integer",
    ("", "QLinearMatMul"): "qlinear_matmul", ("", "Gemm"): "gemm",
    ("", "MaxPool"): "max_pool", ("", "AveragePool"): "average_pool",
    ("", "GlobalAveragePool"): "global_average_pool", ("", "GlobalMaxPool"): "global_max_pool",
    ("", "BatchNormalization"): "batch_normalization",
    # quantization
    ("", "QuantizeLinear"): "quantize_linear", ("", "DequantizeLinear"): "dequantize_linear",
    (QONNX, "Quant"): "qonnx_quant", (QONNX, "BipolarQuant"): "qonnx_bipolar_quant",
    (QONNX, "Trunc"): "qonnx_trunc", (QONNX, "MultiThreshold"): "qonnx_multithreshold",
    (FINN, "Quant"): "qonnx_quant", (FINN, "BipolarQuant"): "qonnx_bipolar_quant", (FINN, "Trunc"): "qonnx_trunc",
    (FINN, "MultiThreshold"): "qonnx_multithreshold",
    # com.microsoft ops of onnxruntime's QOperator quantizer
    (MS, "QGemm"): "ms_qgemm", (MS, "QLinearAdd"): "ms_qlinear_add",
    (MS, "QLinearAveragePool"): "ms_qlinear_average_pool",
    (MS, "QLinearGlobalAveragePool"): "ms_qlinear_global_average_pool", (MS, "QLinearConcat"): "ms_qlinear_concat",
    (MS, "QLinearSoftmax"): "ms_qlinear_softmax",
    (MS, "QLinearMul"): "ms_qlinear_mul",
}

_cache: dict[str, Callable] = {}


def is_registered(domain: str, op_type: str) -> bool:
    return (domain, op_type) in OPS


def lookup(domain: str, op_type: str) -> Callable:
    """The ``run`` function of an op; ``KeyError`` if not registered."""
    module = OPS[(domain, op_type)]
    fn = _cache.get(module)
    if fn is None:
        fn = _cache[module] = importlib.import_module(f"onnx2hw.golden.ops.{module}").run
    return fn
