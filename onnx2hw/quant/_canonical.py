"""Float-graph clean-up before post-training quantization (private to :mod:`onnx2hw.quant.ptq`).

:func:`prepare` returns an equivalent float :class:`~onnx2hw.ir.Graph` in the canonical form the
quantizer writes: every node is handed, in order, to its pattern's ``canonical`` function
(declared with the op in :mod:`onnx2hw.layers`; it works with a
:class:`~onnx2hw.layers.canonical.Rewrite`), which checks it, makes its constant operands
explicit, rewrites it, folds it into the linear layer before it, or removes it.

Anything outside :data:`SUPPORTED` raises :class:`~onnx2hw.ir.UnsupportedError` naming the node.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ..ir.errors import ModelError, UnsupportedError
from ..ir.graph import Graph, Node
from ..layers import PATTERNS, Pattern, ptq_ops
from ..layers.canonical import Rewrite

__all__ = ["prepare", "SUPPORTED", "QUANT_OPS"]

#: float ops the post-training quantizer accepts (default domain; declared in :mod:`onnx2hw.layers`)
SUPPORTED = ptq_ops()

#: ops that mean the model is already quantized
QUANT_OPS = frozenset({
    "QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "QLinearConv", "QLinearMatMul",
    "MatMulInteger", "ConvInteger", "Quant", "BipolarQuant", "Trunc", "MultiThreshold", "QGemm",
    "QLinearAdd", "QLinearAveragePool", "QLinearGlobalAveragePool",
})


def _label(node: Node) -> str:
    return f"node {node.name!r} ({node.op_type})"


def pattern(node: Node) -> Pattern:
    """The registry's declaration of a float node the quantizer takes."""
    return PATTERNS[(node.domain, node.op_type)]


def check_float_model(graph: Graph, check_ops: bool = True) -> None:
    """Reject models that are not plain float models (of supported ops, with ``check_ops``)."""
    for node in graph.nodes:
        if node.op_type in QUANT_OPS:
            raise ModelError(f"{_label(node)}: the model is already quantized; "
                             "onnx2hw quantize takes float models only")
    for vi in graph.inputs:
        if vi.kind != "tensor" or vi.elem_type != 1:
            raise ModelError(f"model input {vi.name!r} is not a float32 tensor (elem_type {vi.elem_type}); "
                             "onnx2hw quantize takes float32 models only")
    if not check_ops:
        return
    for vi in graph.outputs:
        if vi.kind != "tensor" or vi.elem_type not in (0, 1):
            raise ModelError(f"model output {vi.name!r} is not a float32 tensor (elem_type {vi.elem_type})")
    for node in graph.nodes:
        if node.domain or node.op_type not in SUPPORTED:
            op = f"{node.domain}::{node.op_type}" if node.domain else node.op_type
            raise UnsupportedError(f"node {node.name!r} ({op}) is not supported by onnx2hw quantize "
                                   f"(supported: {', '.join(sorted(SUPPORTED))})")


def prepare(graph: Graph) -> Graph:
    """Canonical float graph (see module docstring); raises on unsupported content."""
    check_float_model(graph)
    rw = Rewrite(graph, lambda node: pattern(node).linear)
    for k, node in enumerate(graph.nodes):
        rw.rest = graph.nodes[k + 1:]
        node = dataclasses.replace(node, inputs=tuple(rw.source(i) if i else i for i in node.inputs))
        canonical = pattern(node).canonical
        node = canonical(node, rw) if canonical else node
        if node is not None:
            rw.nodes.append(node)
    for vi in graph.outputs:
        if rw.source(vi.name) != vi.name:  # pragma: no cover - outputs keep an Identity above
            raise ModelError(f"model output {vi.name!r} lost its producer")
    out = rw.finish(graph)
    for name, value in out.initializers.items():
        if value.dtype.kind == "f" and not np.all(np.isfinite(value)):
            raise ModelError(f"initializer {name!r} holds NaN or infinite values")
    return out
