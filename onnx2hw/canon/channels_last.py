"""QONNX's channels-last nodes (domain ``qonnx.custom_op.channels_last``, written by qonnx's
``ConvertToChannelsLastAndClean``) as standard nodes between two Transposes.

Such a node is the ONNX op of the same name applied to its first input transposed to channels
first (a ``Conv`` also transposes its weight), its output transposed back to channels last.
It is rewritten in exactly those terms: ``Transpose(to first) -> op -> Transpose(to last)``,
the weight transposed once as a constant (or by a Transpose node after its quantizer). :mod:`onnx2hw.canon.transposes` then cancels the
Transpose pairs that meet, which brings the graph back to channels first.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ..ir.errors import UnsupportedError
from ..ir.graph import Graph, Node
from .edit import Edit

__all__ = ["channels_last", "CHANNELS_LAST", "to_first", "to_last"]

CHANNELS_LAST = "qonnx.custom_op.channels_last"
_OPS = frozenset({"Conv", "MaxPool", "BatchNormalization"})


def to_last(rank: int) -> tuple[int, ...]:
    """Perm of a channels-first tensor to channels last: ``(0, 2, ..., rank - 1, 1)``."""
    return (0,) + tuple(range(2, rank)) + (1,)


def to_first(rank: int) -> tuple[int, ...]:
    """Perm of a channels-last tensor to channels first: ``(0, rank - 1, 1, ..., rank - 2)``."""
    return (0, rank - 1) + tuple(range(1, rank - 1))


def channels_last(graph: Graph) -> Graph:
    """Every channels-last node rewritten; a node whose input rank is known only once the nodes
    before it are standard (shape inference runs between the passes) waits for the next pass."""
    while any(n.domain == CHANNELS_LAST for n in graph.nodes):
        e = Edit(graph)
        done = [_rewrite(e, n, r) for n in graph.nodes if n.domain == CHANNELS_LAST
                and (r := _rank(graph, n)) is not None]
        if not done:
            n = next(n for n in graph.nodes if n.domain == CHANNELS_LAST)
            raise UnsupportedError(f"node {n.name!r} ({CHANNELS_LAST}::{n.op_type}): the rank of its input "
                                   f"{n.inputs[0]!r} is not known")
        if not any(n.domain == CHANNELS_LAST for n in e.nodes):
            e.source = dataclasses.replace(e.source, opsets={d: v for d, v in graph.opsets.items()
                                                             if d != CHANNELS_LAST})
        graph = e.graph()
    return graph


def _rank(graph: Graph, node: Node) -> int | None:
    """The rank of ``node``'s data input: from its weight or kernel, else from its known type."""
    if node.op_type not in _OPS:
        raise UnsupportedError(f"node {node.name!r} ({CHANNELS_LAST}::{node.op_type}) is not a "
                               f"channels-last op (those are {', '.join(sorted(_OPS))})")
    if node.op_type == "Conv" and node.inputs[1] in graph.initializers:
        return np.ndim(graph.initializers[node.inputs[1]])
    if node.attr("kernel_shape") is not None:
        return len(node.attr("kernel_shape")) + 2
    vi = graph.value_info.get(node.inputs[0])
    return None if vi is None or vi.shape is None else len(vi.shape)


def _rewrite(e: Edit, node: Node, rank: int) -> Node:
    """``node`` as ``Transpose(to first) -> op -> Transpose(to last)`` in ``e``."""
    first = e.fresh(f"{node.inputs[0]}_first")
    inputs = [first] + list(node.inputs[1:])
    before = [e.node("Transpose", [node.inputs[0]], [first], f"{node.name}_to_first", perm=list(to_first(rank)))]
    if node.op_type == "Conv":
        w = node.inputs[1]
        if e.is_const(w):
            inputs[1] = e.const(f"{w}_first", np.transpose(e.inits[w], to_first(rank)))
        else:   # a quantized weight (QONNX Quant of the stored one): the importer folds this Transpose
            inputs[1] = e.fresh(f"{w}_first")
            before.append(e.node("Transpose", [w], [inputs[1]], f"{node.name}_weight_to_first",
                                 perm=list(to_first(rank))))
    out = node.outputs[0]
    mid = e.fresh(f"{out}_first")
    e.replace(node, *before,
              e.node(node.op_type, inputs, [mid], node.name, **dict(node.attrs)),
              e.node("Transpose", [mid], [out], f"{node.name}_to_last", perm=list(to_last(rank))))
    return node
