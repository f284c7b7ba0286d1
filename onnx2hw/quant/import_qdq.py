"""QDQ models (QuantizeLinear / DequantizeLinear pairs, as ``onnxruntime.quantization`` writes
them with ``QuantFormat.QDQ``) -> :class:`~onnx2hw.layers.IntegerGraph`.

Weights and biases are ``DequantizeLinear`` of integer initializers (per tensor or per output
channel; int8/uint8/int4/uint4); every layer (Conv, Gemm, MatMul [+ Add bias], Add,
GlobalAveragePool, AveragePool) reads dequantized integer tensors and is followed by a
``QuantizeLinear`` (after an optional Relu / Clip, folded into the clamp). MaxPool, Flatten
and Reshape-to-vector pass integers through. The op handlers are the registry's
(:func:`onnx2hw.layers.handlers`); anything else raises naming the node.
"""
from __future__ import annotations

from ..golden import run_node
from ..ir.graph import Graph
from ..layers import IntegerGraph, handlers
from ..layers.builder import Builder

__all__ = ["import_qdq", "HANDLERS"]

HANDLERS = handlers("qdq")


def import_qdq(graph: Graph) -> IntegerGraph:
    """Exact integer graph of a QDQ-format model (``graph`` from :func:`onnx2hw.ir.load`)."""
    return Builder(graph, HANDLERS, "qdq", run_node).run()
