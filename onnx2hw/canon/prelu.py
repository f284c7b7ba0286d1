"""A sum of the two halves of a piecewise-linear function is ``PRelu``:
``Relu(x) + k * Relu(-x)`` (``Add``, either order; ``Mul`` by the constant ``k``, either order) is
``PRelu(x, slope = -k)``, and ``Relu(x) - a * Relu(-x)`` (``Sub``) is ``PRelu(x, a)``: for ``x >= 0``
both are ``x``, for ``x < 0`` both are ``slope * x``. tf2onnx writes Keras' ``PReLU`` layer so (its
slope per channel, ``(1, C, 1, 1)`` after the converter's Transposes). As one elementwise op it is
one lookup table per channel of a quantized ``x``, where the parts would be two activations, a
product by a constant and a sum. The ``Neg``, the second ``Relu`` and the ``Mul`` must be read by
the next node alone; ``k`` must broadcast to ``x`` (the slope ``PRelu`` takes).
"""
from __future__ import annotations

import numpy as np

from ..ir.graph import Graph, Node
from .edit import DEFAULT, Edit
from .trace import trace_for

__all__ = ["prelu_sums"]


def prelu_sums(graph: Graph) -> Graph:
    t = trace_for(graph, ("Neg",))
    if t is None:
        return graph
    e = Edit(graph)
    changed = False
    for node in [n for n in graph.nodes if n.op_type in ("Add", "Sub") and n.domain == DEFAULT]:
        if node in e.nodes:
            changed |= _rewrite(e, t, node)
    if changed:
        e.prune()
    return e.graph() if changed else graph


def _op(e: Edit, name: str, op: str) -> Node | None:
    n = e.producer(name)
    return n if n is not None and n.domain == DEFAULT and n.op_type == op and len(n.outputs) == 1 else None


def _negative_half(e: Edit, name: str) -> tuple[str, np.ndarray, Node, Node, Node] | None:
    """``(x, k, mul, relu, neg)`` where ``name`` is ``Mul(Relu(Neg(x)), k)`` (either order), each
    read by the next alone; else ``None``."""
    mul = _op(e, name, "Mul")
    if mul is None or len(mul.inputs) != 2 or e.sole_reader(name) is None:
        return None
    a, b = mul.inputs
    if e.is_const(a):
        a, b = b, a
    if not e.is_const(b):
        return None
    relu = _op(e, a, "Relu")
    neg = _op(e, relu.inputs[0], "Neg") if relu is not None else None
    if neg is None or e.sole_reader(a) is None or e.sole_reader(relu.inputs[0]) is None:
        return None
    return neg.inputs[0], np.asarray(e.inits[b], np.float32), mul, relu, neg


def _rewrite(e: Edit, t, node: Node) -> bool:
    if len(node.inputs) != 2:
        return False
    orders = [(0, 1), (1, 0)] if node.op_type == "Add" else [(0, 1)]
    for i, j in orders:
        pos = _op(e, node.inputs[i], "Relu")
        neg_half = _negative_half(e, node.inputs[j])
        if pos is None or neg_half is None or e.sole_reader(node.inputs[i]) is None:
            continue
        x, k, mul, relu, neg = neg_half
        shape = t.shape(x)
        if pos.inputs[0] != x or shape is None or not _broadcasts(k.shape, shape):
            continue
        slope = -k if node.op_type == "Add" else k
        for n in (pos, neg, relu, mul):
            e.nodes.remove(n)
        e.replace(node, e.node("PRelu", [x, e.const(f"{node.name}_slope", slope)], list(node.outputs),
                               f"{node.name}_prelu"))
        return True
    return False


def _broadcasts(k_shape, x_shape) -> bool:
    """``k_shape`` broadcasts to ``x_shape`` one way (ONNX's unidirectional rule; batch left open)."""
    if len(k_shape) > len(x_shape):
        return False
    return all(a == 1 or a == b for a, b in zip(reversed(k_shape), reversed(x_shape)) if b is not None) and \
        all(a == 1 for a, b in zip(reversed(k_shape), reversed(x_shape)) if b is None)
