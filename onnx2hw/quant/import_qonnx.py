"""QONNX models (``Quant``, ``BipolarQuant``, ``Trunc`` as Brevitas exports them) ->
:class:`~onnx2hw.layers.IntegerGraph`.

How each quantizer becomes exact integer thresholds or requantization is described in
:mod:`onnx2hw.layers.qonnx`; the other op handlers are the registry's
(:func:`onnx2hw.layers.handlers`).
"""
from __future__ import annotations

from ..golden import run_node
from ..ir.graph import Graph
from ..layers import IntegerGraph, handlers
from ..layers.builder import Builder

__all__ = ["import_qonnx", "HANDLERS"]

HANDLERS = handlers("qonnx")


def import_qonnx(graph: Graph) -> IntegerGraph:
    """Exact integer graph of a QONNX model (``graph`` from :func:`onnx2hw.ir.load`)."""
    return Builder(graph, HANDLERS, "qonnx", run_node).run()
