"""QDQ models (QuantizeLinear / DequantizeLinear pairs, as ``onnxruntime.quantization`` writes
them with ``QuantFormat.QDQ``) -> :class:`~onnx2hw.quant.integer_graph.IntegerGraph`.

Weights and biases are ``DequantizeLinear`` of integer initializers (per tensor or per output
channel; int8/uint8/int4/uint4); every layer (Conv, Gemm, MatMul [+ Add bias], Add,
GlobalAveragePool, AveragePool) reads dequantized integer tensors and is followed by a
``QuantizeLinear`` (after an optional Relu / Clip, folded into the clamp). MaxPool, Flatten
and Reshape-to-vector pass integers through. Anything else raises ``ModelError`` naming the node.
"""
from __future__ import annotations

from ..ir.graph import Graph
from ._build import Builder
from ._common import COMMON, FLOAT_LINEAR, QDQ_PAIR
from .integer_graph import IntegerGraph

__all__ = ["import_qdq", "HANDLERS"]

HANDLERS = {**COMMON, **QDQ_PAIR, **FLOAT_LINEAR}


def import_qdq(graph: Graph) -> IntegerGraph:
    """Exact integer graph of a QDQ-format model (``graph`` from :func:`onnx2hw.ir.load`)."""
    return Builder(graph, HANDLERS, "qdq").run()
