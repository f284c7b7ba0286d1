"""A clamp of an affine map scaled to the unit interval is ``HardSigmoid``:
``c * Clip(a*x + b, 0, hi)`` with ``c*hi == 1`` (to float32 rounding) is
``clip(a*c*x + b*c, 0, 1)``, i.e. ``HardSigmoid(x, alpha=a*c, beta=b*c)``, exact in real
arithmetic. Keras' ``hard_sigmoid``/``hard_swish`` through tf2onnx (``Add(3) -> Clip(0, 6) ->
Mul(1/6)``, the last times ``x``), decomposed PyTorch ``Hardsigmoid`` and hand-written hard
swish ``x * relu6(x + 3) / 6`` (the scaling after the product, which moves onto the clamp) write
it so; as one
elementwise op it is one lookup table of a quantized ``x`` (and ``x * HardSigmoid(x)`` the
importer's HardSwish), where the parts would be a map with no layer to fold into, a clamp and a
scaling. ``a``, ``b``, ``c`` and the bounds are scalar constants (``a`` = 1 without the
``Mul``, ``c`` = 1 without the scaling, the scaling a ``Mul`` or ``Div``); the ``Add`` (or
``Sub``) must be there (a bare ``Clip`` stays, a clamp the layer before absorbs); each node
replaced is read by the next alone.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ..ir.graph import Graph, Node
from .edit import DEFAULT, Edit

__all__ = ["hard_sigmoids"]

#: ``|c*hi - 1|`` allowed: the float32 rounding of ``1/hi`` written as a constant
_TOLERANCE = 1e-6


def hard_sigmoids(graph: Graph) -> Graph:
    if not any(n.op_type == "Clip" for n in graph.nodes):
        return graph
    e = Edit(graph)
    changed = False
    for clip in [n for n in graph.nodes if n.op_type == "Clip" and n.domain == DEFAULT]:
        if clip in e.nodes:
            changed |= _rewrite(e, clip)
    return e.graph() if changed else graph


def _scalar(e: Edit, name: str) -> float | None:
    if not name or not e.is_const(name) or np.size(e.inits[name]) != 1 or e.inits[name].dtype.kind != "f":
        return None
    return float(np.asarray(e.inits[name]).reshape(()))


def _bounds(e: Edit, clip: Node) -> tuple[float, float] | None:
    """Clip's constant ``(lo, hi)`` (attributes below opset 11, inputs from it on)."""
    if clip.since_version and clip.since_version < 11:
        return float(clip.attr("min", -np.inf)), float(clip.attr("max", np.inf))
    ins = list(clip.inputs) + ["", ""]
    lo, hi = (_scalar(e, ins[1]), _scalar(e, ins[2]))
    if (ins[1] and lo is None) or (ins[2] and hi is None):
        return None
    return (-np.inf if lo is None else lo), (np.inf if hi is None else hi)


def _by_constant(e: Edit, node: Node | None, ops) -> tuple[str, float] | None:
    """``(x, k)`` of ``node`` = ``op(x, k)`` with ``k`` a scalar constant (either side for the
    commutative ``Add``/``Mul``); ``None`` when it is not one."""
    if node is None or node.op_type not in ops or node.domain != DEFAULT or len(node.inputs) != 2:
        return None
    x, k = node.inputs
    if _scalar(e, k) is None and node.op_type in ("Add", "Mul"):
        x, k = k, x
    v = _scalar(e, k)
    return None if v is None or e.is_const(x) else (x, v)


def _sole_producer(e: Edit, name: str) -> Node | None:
    """The node writing ``name`` when ``name`` has one reader and is no graph output."""
    p = e.producer(name)
    return p if p is not None and e.sole_reader(name) is not None else None


def _rewrite(e: Edit, clip: Node) -> bool:
    bounds = _bounds(e, clip)
    if bounds is None or bounds[0] != 0.0 or not 0 < bounds[1] < np.inf or len(clip.outputs) != 1:
        return False
    hi = bounds[1]
    add = _sole_producer(e, clip.inputs[0])
    shifted = _by_constant(e, add, ("Add", "Sub"))
    if shifted is None:
        return False
    x, b = shifted
    b = -b if add.op_type == "Sub" else b
    gone = [add, clip]
    a = 1.0
    mul = _sole_producer(e, x)
    scaled = _by_constant(e, mul, ("Mul",))
    if scaled is not None:
        (x, a), gone = scaled, [mul] + gone
    after = e.sole_reader(clip.outputs[0])
    out = _by_constant(e, after, ("Mul", "Div"))
    c = 1.0
    if out is not None and out[0] == clip.outputs[0] and out[1] != 0:
        c = out[1] if after.op_type == "Mul" else 1.0 / out[1]
        gone.append(after)
    product = None
    if abs(c * hi - 1.0) > _TOLERANCE:
        product = _scaled_product(e, after)
        if product is None or abs(product[1] * hi - 1.0) > _TOLERANCE:
            return False
        c = product[1]
    hs = Node(name=e.fresh(clip.name + "_hard_sigmoid"), op_type="HardSigmoid", domain=DEFAULT, inputs=(x,),
              outputs=gone[-1].outputs, attrs={"alpha": float(np.float32(a * c)), "beta": float(np.float32(b * c))},
              since_version=6)
    for n in gone[:-1]:
        e.nodes.remove(n)
    e.replace(gone[-1], hs)
    if product is not None:     # x * clip(...) / 6 is x * HardSigmoid(...): the scaling goes
        post = product[0]
        e.nodes.remove(post)
        e.replace(after, dataclasses.replace(after, outputs=post.outputs))
    return True


def _scaled_product(e: Edit, prod: Node | None) -> tuple[Node, float] | None:
    """``(scaling node, c)`` where ``prod`` multiplies two activations and its one reader scales
    the product by the scalar constant ``c`` (a ``Mul``, or a ``Div`` by ``1 / c``): the scaling of
    PyTorch's hand-written hard swish ``x * relu6(x + 3) / 6``, which belongs to the clamp."""
    if prod is None or prod.op_type != "Mul" or prod.domain != DEFAULT or len(prod.inputs) != 2 \
            or any(e.is_const(i) for i in prod.inputs) or len(prod.outputs) != 1:
        return None
    post = e.sole_reader(prod.outputs[0])
    out = _by_constant(e, post, ("Mul", "Div"))
    if out is None or out[0] != prod.outputs[0] or out[1] == 0:
        return None
    return post, (out[1] if post.op_type == "Mul" else 1.0 / out[1])
