"""A dense layer's vector viewed as a channels-first image or signal, in channels-last order.

A decoder (DCGAN generator, convolutional autoencoder with a dense bottleneck) views the vector
``v`` of a ``Gemm``/``MatMul`` as the image ``(N, C, H, W)`` (or the signal ``(N, C, L)``):
``v[c*H*W + h*W + w]`` is pixel ``(h, w)`` of channel ``c``. The hardware streams images
channels-last, so the vector is made to come out in that order instead: the dense layer's output
rows (weight rows, bias, per-channel quantizer parameters along that axis) are permuted by
``perm = arange(F).reshape(C, H, W).transpose(1, 2, 0).ravel()`` (new row ``k`` is old row
``perm[k]``), and the view becomes ``Reshape (N, H, W, C) -> Transpose (0, 3, 1, 2)``, which gives
back exactly the original tensor. Ops between the layer and the view that act on each element
alone (per-tensor quantizers, ``Relu``/``Clip`` and other elementwise ops of scalar constants)
commute with the permutation and stay where they are.

The rule applies only where it is exact and nothing else sees the order: every value from the
layer to the view has that one reader. A view whose pixels are one (``(C, 1, 1)``: a squeeze-excite
gate, streamed as the vector itself) is left alone; so is a view read (through such elementwise
ops) only by Transposes to channels first (Keras ``Reshape((H, W, C))`` through tf2onnx: that
vector is channels-last already; and this rule's own form).
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ..ir.graph import Graph, Node
from ..ir.load import QONNX_DOMAIN as QONNX
from .channels import elementwise_alone
from .channels_last import to_first
from .edit import DEFAULT, Edit
from .trace import Trace, trace_for

__all__ = ["vector_images"]


def vector_images(graph: Graph) -> Graph:
    """Every dense layer's vector viewed channels-first put in channels-last order (module
    docstring)."""
    t = trace_for(graph, {"Reshape"})
    if t is None:
        return graph
    e = Edit(graph)
    changed = False
    for r in list(e.nodes):
        if r.domain == DEFAULT and r.op_type == "Reshape" and r in e.nodes:
            changed |= _rewrite(e, t, r)
    return e.graph() if changed else graph


def _image_shape(e: Edit, t: Trace, r: Node) -> tuple[int, ...] | None:
    """``(C, *spatial)`` of a Reshape viewing a batch of vectors as images or signals of more than
    one pixel, not already read only by Transposes to channels first; else ``None``."""
    src, dst = t.shape(r.inputs[0]), t.shape(r.outputs[0])
    if src is None or dst is None or len(src) != 2 or len(dst) not in (3, 4) or None in src[1:] + dst[1:]:
        return None
    if not (t.batch_first(r.inputs[0]) and t.batch_first(r.outputs[0])) or not e.is_const(r.inputs[1]):
        return None
    if int(np.prod(dst[2:])) == 1:
        return None
    first = list(to_first(len(dst)))
    readers = _readers(e, r.outputs[0])
    if readers and all(n is not None and n.op_type == "Transpose" and list(n.attr("perm") or ()) == first
                       for n in readers):
        return None
    return tuple(int(d) for d in dst[1:])


def _readers(e: Edit, value: str) -> list[Node | None]:
    """The nodes reading ``value`` through ops acting on each element alone (``None``: a graph
    output on the way)."""
    found, todo = [], [value]
    while todo:
        v = todo.pop()
        found += [None] if v in e.outputs else []
        for n in e.readers(v):
            if elementwise_alone(e, n) and n.inputs[0] == v:
                todo.append(n.outputs[0])
            else:
                found.append(n)
    return found


def _dense_above(e: Edit, value: str) -> Node | None:
    """The ``Gemm``/``MatMul`` whose output reaches ``value`` through ops acting on each element
    alone, each value on the way read by that one path only; else ``None``."""
    while True:
        n = e.producer(value)
        if n is None or len(e.readers(value)) != 1 or value in e.outputs:
            return None
        if n.domain == DEFAULT and n.op_type in ("Gemm", "MatMul"):
            return n
        if not elementwise_alone(e, n):
            return None
        value = n.inputs[0]


def _out_axis(layer: Node) -> int | None:
    """The axis of the weight along the layer's outputs (``None``: not a ``x @ W`` form)."""
    if layer.op_type == "Gemm":
        return None if int(layer.attr("transA", 0)) else (0 if int(layer.attr("transB", 0)) else 1)
    return 1


def _permuted_const(e: Edit, name: str, axis: int, perm: np.ndarray, rank: int) -> str | None:
    """A new constant: ``name`` (broadcast against a rank-``rank`` operand) taken in ``perm``
    order along ``axis`` where it varies there; ``None`` when it is not a constant."""
    if not e.is_const(name):
        return None
    c = np.asarray(e.inits[name])
    full = c.reshape((1,) * (rank - c.ndim) + c.shape) if c.ndim <= rank else None
    if full is None:
        return None
    if full.shape[axis] == 1:
        return name
    return e.const(f"{name}_hwc", np.take(full, perm, axis=axis).reshape(c.shape))


def _permuted_input(e: Edit, name: str, axis: int, perm: np.ndarray, rank: int) -> tuple[str, list[Node]] | None:
    """``name`` (a weight or bias: a constant, or a DequantizeLinear / QONNX Quant of one) with
    its entries along ``axis`` in ``perm`` order, and the new quantizer node if any."""
    direct = _permuted_const(e, name, axis, perm, rank)
    if direct is not None:
        return direct, []
    q = e.producer(name)
    if q is None or not ((q.domain == DEFAULT and q.op_type == "DequantizeLinear" and not q.attr("block_size"))
                         or (q.domain == QONNX and q.op_type == "Quant")):
        return None
    data = _permuted_const(e, q.inputs[0], axis, perm, rank)
    if data is None or np.ndim(e.inits[q.inputs[0]]) != rank:
        return None
    params = [data]
    for i, p in enumerate(q.inputs[1:], start=1):
        if not p or (q.op_type == "Quant" and i == 3):   # Quant's bit width: one number
            params.append(p)
            continue
        if q.op_type == "DequantizeLinear":   # per-axis parameters are 1-D along ``axis`` of q
            c = np.asarray(e.inits.get(p)) if e.is_const(p) else None
            if c is None:
                return None
            qaxis = int(q.attr("axis", 1)) % rank
            params.append(e.const(f"{p}_hwc", c[perm]) if c.size > 1 and qaxis == axis else p)
        else:
            new = _permuted_const(e, p, axis, perm, rank)
            if new is None:
                return None
            params.append(new)
    out = e.fresh(f"{name}_hwc")
    return out, [dataclasses.replace(q, name=e.fresh(q.name), inputs=tuple(params), outputs=(out,))]


def _rewrite(e: Edit, t: Trace, r: Node) -> bool:
    """``r`` (a Reshape) and the dense layer above it rewritten (module docstring); ``False``
    when the rule does not apply."""
    shape = _image_shape(e, t, r)
    layer = _dense_above(e, r.inputs[0]) if shape is not None else None
    axis = _out_axis(layer) if layer is not None else None
    if axis is None or len(layer.inputs) < 2:
        return False
    perm = np.arange(int(np.prod(shape))).reshape(shape).transpose(tuple(range(1, len(shape))) + (0,)).ravel()
    w = _permuted_input(e, layer.inputs[1], axis, perm, 2)
    b = layer.inputs[2] if len(layer.inputs) > 2 else ""
    rank = max(1, np.ndim(e.inits[b])) if e.is_const(b) else 1   # a bias (F,), (1, F) or scalar: outputs last
    bias = _permuted_input(e, b, rank - 1, perm, rank) if b else ("", [])
    if w is None or bias is None:
        return False
    inputs = (layer.inputs[0], w[0]) + ((bias[0],) if len(layer.inputs) > 2 else ())
    e.replace(layer, *w[1], *bias[1], dataclasses.replace(layer, inputs=inputs))
    first = int(np.asarray(e.inits[r.inputs[1]]).reshape(-1)[0])
    target = e.const(f"{r.inputs[1]}_hwc", np.array([first, *shape[1:], shape[0]], np.int64))
    hwc = e.fresh(f"{r.outputs[0]}_hwc")
    e.replace(r, dataclasses.replace(r, inputs=(r.inputs[0], target), outputs=(hwc,)),
              e.node("Transpose", [hwc], [r.outputs[0]], f"{r.name}_to_first", perm=list(to_first(len(shape) + 1))))
    e.prune()
    return True
