"""``to_integer_graph(graph)``: detect the quantization flavour of a loaded model and import it."""
from __future__ import annotations

from ..ir.errors import ModelError
from ..ir.graph import Graph
from ..layers import IntegerGraph
from ..layers.qonnx import DOMAINS as QONNX_DOMAINS
from .import_qdq import import_qdq
from .import_qonnx import import_qonnx
from .import_qop import import_qop

__all__ = ["to_integer_graph", "flavour"]

_QOP_OPS = {"QLinearConv", "QLinearMatMul", "MatMulInteger", "ConvInteger"}


def flavour(graph: Graph) -> str:
    """``"qonnx"``, ``"qoperator"``, ``"qdq"`` or ``"float"``."""
    ops = {(n.domain, n.op_type) for n in graph.nodes}
    if any(d in QONNX_DOMAINS for d, _ in ops):
        return "qonnx"
    if any(op in _QOP_OPS for d, op in ops if d == "") or any(d == "com.microsoft" for d, _ in ops):
        return "qoperator"
    if ("", "QuantizeLinear") in ops or ("", "DequantizeLinear") in ops:
        return "qdq"
    return "float"


def to_integer_graph(graph: Graph) -> IntegerGraph:
    """The exact :class:`IntegerGraph` of a quantized model (QDQ, QOperator or QONNX).

    A float model raises :class:`ModelError` suggesting ``onnx2hw quantize``.
    """
    kind = flavour(graph)
    if kind == "qonnx":
        return import_qonnx(graph)
    if kind == "qoperator":
        return import_qop(graph)
    if kind == "qdq":
        return import_qdq(graph)
    raise ModelError(f"model {graph.name or '<unnamed>'!r} is not quantized (no QuantizeLinear/DequantizeLinear, "
                     f"QLinear* or QONNX Quant nodes); run `onnx2hw quantize MODEL --calib CALIB.npz -o OUT.onnx` first")
