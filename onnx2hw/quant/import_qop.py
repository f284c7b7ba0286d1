"""QOperator models (``QuantFormat.QOperator``) -> :class:`~onnx2hw.layers.IntegerGraph`.

Supported: QLinearConv, QLinearMatMul, MatMulInteger / ConvInteger (followed by Cast, a
constant positive Mul rescale, an optional constant Add bias, Relu/Clip and a QuantizeLinear),
and the ``com.microsoft`` ops onnxruntime's quantizer emits: QGemm, QLinearAdd,
QLinearAveragePool, QLinearGlobalAveragePool. MaxPool, Flatten and Reshape-to-vector run on the
integers directly; QuantizeLinear on the model input and DequantizeLinear on the outputs are the
host-side converters. The op handlers are the registry's (:func:`onnx2hw.layers.handlers`).
"""
from __future__ import annotations

from ..golden import run_node
from ..ir.graph import Graph
from ..layers import IntegerGraph, handlers
from ..layers.builder import Builder

__all__ = ["import_qop", "HANDLERS"]

HANDLERS = handlers("qoperator")


def import_qop(graph: Graph) -> IntegerGraph:
    """Exact integer graph of a QOperator-format model (``graph`` from :func:`onnx2hw.ir.load`)."""
    return Builder(graph, HANDLERS, "qoperator", run_node).run()
