"""1-D signals written as images of unit width: a window op (``Conv``, ``MaxPool``,
``AveragePool``) on ``(N, C, L, 1)`` with a kernel ``(k, 1)`` is the same op on the ``H = 1``
image ``(N, C, 1, L)`` with kernel ``(1, k)`` (its attributes and a Conv's weight with their
two spatial axes swapped), between two Reshapes that the literal-view rule merges with the
exporter's own. The importers hold a 1-D signal as the ``H = 1`` image, so both forms reach the
same hardware.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ..ir.graph import Graph, Node
from .edit import DEFAULT, Edit
from .trace import trace_for

__all__ = ["unit_width"]

_WINDOW_OPS = frozenset({"Conv", "MaxPool", "AveragePool"})


def _swapped(node: Node, name: str, default):
    """Attribute ``name`` of a 2-D window op with its H and W entries swapped."""
    v = node.attr(name, default)
    if v is None:
        return None
    v = [int(a) for a in v]
    return [v[1], v[0]] if name != "pads" else [v[1], v[0], v[3], v[2]]


def _turnable(node: Node, e: Edit, s_in, s_out) -> bool:
    if node.domain != DEFAULT or node.op_type not in _WINDOW_OPS or node.attr("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET"):
        return False
    if s_in is None or s_out is None or len(s_in) != 4 or None in s_in[1:] or None in s_out[1:]:
        return False
    if s_in[3] != 1 or s_in[2] == 1 or s_out[3] != 1:
        return False
    if node.op_type == "Conv" and (not e.is_const(node.inputs[1]) or np.ndim(e.inits[node.inputs[1]]) != 4):
        return False
    kernel = node.attr("kernel_shape") or np.shape(e.inits[node.inputs[1]])[2:]
    pads = node.attr("pads", (0, 0, 0, 0))
    return len(kernel) == 2 and kernel[1] == 1 and not pads[1] and not pads[3]


def unit_width(graph: Graph) -> Graph:
    t = trace_for(graph, _WINDOW_OPS)
    if t is None:
        return graph
    e = Edit(graph)
    changed = False
    for node in list(e.nodes):
        s_in, s_out = t.shape(node.inputs[0]), t.shape(node.outputs[0])
        if not _turnable(node, e, s_in, s_out):
            continue
        batch = -1 if s_in[0] is None else s_in[0]
        flat = e.fresh(f"{node.inputs[0]}_h1")
        mid = e.fresh(f"{node.outputs[0]}_h1")
        attrs = {k: v for k, v in node.attrs.items()}
        for name in ("kernel_shape", "strides", "dilations", "pads"):
            if name in attrs:
                attrs[name] = _swapped(node, name, None)
        inputs = [flat] + list(node.inputs[1:])
        if node.op_type == "Conv":
            inputs[1] = e.const(f"{node.inputs[1]}_h1", np.transpose(e.inits[node.inputs[1]], (0, 1, 3, 2)))
        e.replace(node,
                  e.node("Reshape", [node.inputs[0], e.const(f"{flat}_shape", np.asarray([batch, s_in[1], 1, s_in[2]], np.int64))],
                         [flat], f"{node.name}_as_h1"),
                  dataclasses.replace(node, inputs=tuple(inputs), outputs=(mid,), attrs=attrs),
                  e.node("Reshape", [mid, e.const(f"{mid}_shape", np.asarray([batch, s_out[1], s_out[2], 1], np.int64))],
                         list(node.outputs), f"{node.name}_as_w1"))
        changed = True
    return e.graph() if changed else graph
