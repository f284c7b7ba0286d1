"""A zero ``Pad`` moved down through views, Transposes and quantizer pairs to the window op it
pads, where :func:`~onnx2hw.canon.pads.pads_into_windows` makes it the op's own padding.

Padding with zeros commutes with the ops that only move elements:
- ``Transpose(p)``: ``transpose(pad(x, a), p) = pad(transpose(x, p), a')`` with ``a'[k] = a[p[k]]``
  (begin and end amounts alike);
- a view (``Reshape``, ``Flatten``, ``Squeeze``, ``Unsqueeze``) keeping the batch first that keeps
  every padded axis whole: axis ``i`` of the padded input is axis ``j`` of the output when the
  sizes before them and the axes themselves are equal. The view then splits or merges only the
  blocks of axes between padded axes, whose elements padding does not reorder, so the view of
  the unpadded input (its padded axes that much shorter) padded on the axes ``j`` is the same;
- ``QuantizeLinear -> DequantizeLinear`` (onnxruntime's QDQ around every view): it maps 0 to the
  zero point and back to 0, channel by channel, so padding before or after it is the same (a
  per-axis quantizer only along an axis that is not padded).
Exporters of channels-last frameworks write such chains: Keras ``Conv1D(padding="causal")``
through tf2onnx pads the ``(N, L, C)`` tensor, then views it as ``(N, 1, L, C)`` and transposes it
to ``(N, C, 1, L)`` for the Conv. The Pad moves only when the chain ends in a ``Conv`` or an
``AveragePool`` reading it (the ops that take zero padding as their own); the views become
``Reshape`` to literal shapes (batch ``-1`` when it is dynamic).
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ..ir.graph import Graph, Node
from .edit import DEFAULT, Edit
from .trace import Trace, trace_for

__all__ = ["pads_through_views", "drop_requantization", "zero_pad_amounts"]

_VIEWS = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze"})
#: window ops that may take a zero Pad in front of them as their own padding
_WINDOWS = frozenset({"Conv", "AveragePool"})


def zero_pad_amounts(e: Edit, pad: Node, rank: int) -> np.ndarray | None:
    """``pad``'s amounts ``(begin..., end...)`` over all ``rank`` axes when it pads with zeros
    only (none removed, the batch untouched), else ``None``."""
    if pad.attr("mode", b"constant") not in (b"constant", "constant") or len(pad.outputs) != 1:
        return None
    if pad.since_version < 11:
        if float(pad.attr("value", 0.0)) != 0.0 or pad.attr("pads") is None:
            return None
        amounts = np.asarray(pad.attr("pads"), np.int64)
    else:
        ins = list(pad.inputs) + [""] * (4 - len(pad.inputs))
        if not ins[1] or not e.is_const(ins[1]) or any(i and not e.is_const(i) for i in ins[2:]):
            return None
        if ins[2] and np.any(np.asarray(e.inits[ins[2]]).reshape(-1) != 0):
            return None
        given = np.asarray(e.inits[ins[1]], np.int64).reshape(-1)
        axes = [int(a) % rank for a in np.asarray(e.inits[ins[3]]).reshape(-1)] if ins[3] else list(range(rank))
        if given.size != 2 * len(axes) or len(set(axes)) != len(axes):
            return None
        amounts = np.zeros(2 * rank, np.int64)
        for k, a in enumerate(axes):
            amounts[a], amounts[rank + a] = given[k], given[len(axes) + k]
    if amounts.size != 2 * rank or np.any(amounts < 0) or not np.any(amounts) or amounts[0] or amounts[rank]:
        return None
    return amounts


def _transposed(amounts: np.ndarray, perm) -> np.ndarray:
    r = len(perm)
    return np.concatenate([amounts[:r][list(perm)], amounts[r:][list(perm)]])


def _viewed(amounts: np.ndarray, s, t) -> np.ndarray | None:
    """``amounts`` on the padded shape ``s`` mapped through its view as ``t`` (both batch first),
    or ``None`` when the view does not keep every padded axis whole."""
    rs, rt = len(s), len(t)
    if None in s[1:] or None in t[1:]:
        return None
    out = np.zeros(2 * rt, np.int64)
    before_t = [int(np.prod(t[1:j])) for j in range(rt)]
    for i in range(1, rs):
        if not amounts[i] and not amounts[rs + i]:
            continue
        before = int(np.prod(s[1:i]))
        js = [j for j in range(1, rt) if before_t[j] == before and t[j] == s[i]]
        if len(js) != 1:
            return None
        out[js[0]], out[rt + js[0]] = amounts[i], amounts[rs + i]
    return out


def _per_axis_ok(e: Edit, q: Node, amounts: np.ndarray, rank: int) -> bool:
    """Quantizer ``q``'s parameters do not vary along a padded axis."""
    if all(not i or (e.is_const(i) and np.size(e.inits[i]) == 1) for i in q.inputs[1:]):
        return True
    if not all(not i or e.is_const(i) for i in q.inputs[1:]) or q.attr("block_size", 0):
        return False
    axis = int(q.attr("axis", 1)) % rank
    return not amounts[axis] and not amounts[rank + axis]


class _Chain:
    """The ops a Pad moves through, each with the amounts in force after it."""

    def __init__(self, e: Edit, t: Trace, pad: Node, amounts: np.ndarray):
        self.e, self.t = e, t
        self.steps: list[tuple[Node, np.ndarray]] = []
        self.window: Node | None = None
        cur, a = pad.outputs[0], amounts
        while True:
            r = e.sole_reader(cur)
            if r is None or r.domain != DEFAULT or r.inputs[0] != cur:
                return
            if r.op_type in _WINDOWS:
                self.window = r if self.steps else None
                return
            a = self.through(r, a)
            if a is None:
                return
            if r.op_type == "QuantizeLinear":
                dq = e.sole_reader(r.outputs[0])
                if dq is None or dq.domain != DEFAULT or dq.op_type != "DequantizeLinear" or \
                        not _per_axis_ok(e, dq, a, len(a) // 2):
                    return
                self.steps.append((r, a))
                r = dq
            self.steps.append((r, a))
            cur = r.outputs[0]

    def through(self, r: Node, a: np.ndarray) -> np.ndarray | None:
        if len(r.outputs) != 1:
            return None
        if r.op_type == "Transpose":
            perm = r.attr("perm")
            return None if perm is None or len(perm) != len(a) // 2 or int(perm[0]) != 0 else \
                _transposed(a, [int(p) for p in perm])
        if r.op_type in _VIEWS:
            s, t = self.t.shape(r.inputs[0]), self.t.shape(r.outputs[0])
            if s is None or t is None or len(s) != len(a) // 2 or not len(t) or \
                    not (self.t.batch_first(r.inputs[0]) and self.t.batch_first(r.outputs[0])):
                return None
            return _viewed(a, s, t)
        if r.op_type == "QuantizeLinear" and _per_axis_ok(self.e, r, a, len(a) // 2):
            return a
        return None


def _unpadded_view(e: Edit, t: Trace, view: Node, a: np.ndarray) -> Node:
    """``view`` as a Reshape of the unpadded tensor: its output shape less the amounts ``a``."""
    shape = [d for d in t.shape(view.outputs[0])]
    r = len(shape)
    target = [-1] + [int(shape[j]) - int(a[j] + a[r + j]) for j in range(1, r)]
    if shape[0] is not None:
        target[0] = int(shape[0])
    shape_const = e.const(f"{view.outputs[0]}_shape", np.asarray(target, np.int64))
    return dataclasses.replace(view, op_type="Reshape", attrs={}, inputs=(view.inputs[0], shape_const))


def _moved_pad(e: Edit, pad: Node, src: str, dst: str, a: np.ndarray) -> Node:
    """``pad`` of ``src`` into ``dst`` by the amounts ``a`` over every axis."""
    if pad.since_version < 11:
        return dataclasses.replace(pad, inputs=(src,), outputs=(dst,), attrs=dict(pad.attrs, pads=[int(v) for v in a]))
    value = pad.inputs[2:3] if len(pad.inputs) > 2 and pad.inputs[2] else ()
    return dataclasses.replace(pad, inputs=(src, e.const(f"{pad.inputs[1]}_moved", a.astype(np.int64))) + tuple(value),
                               outputs=(dst,))


def pads_through_views(graph: Graph) -> Graph:
    t = trace_for(graph, {"Pad"})
    if t is None:
        return graph
    e = Edit(graph)
    changed = False
    for pad in [n for n in graph.nodes if n.op_type == "Pad" and n.domain == DEFAULT]:
        s = t.shape(pad.outputs[0])
        amounts = zero_pad_amounts(e, pad, len(s)) if s is not None and t.batch_first(pad.outputs[0]) else None
        if amounts is None or pad.outputs[0] in e.outputs:
            continue
        chain = _Chain(e, t, pad, amounts)
        if chain.window is None:
            continue
        steps = chain.steps
        src, prev = pad.inputs[0], amounts
        moved = []
        for node, a in steps:
            new = _unpadded_view(e, t, node, a) if node.op_type in _VIEWS else node
            moved.append(dataclasses.replace(new, inputs=(src,) + new.inputs[1:]))
            src, prev = node.outputs[0], a
        last = steps[-1][0].outputs[0]
        mid = e.fresh(f"{last}_unpadded")
        moved[-1] = dataclasses.replace(moved[-1], outputs=(mid,))
        e.nodes.remove(pad)
        for (node, _), new in zip(steps, moved):
            e.replace(node, new)
        e.replace(moved[-1], moved[-1], _moved_pad(e, pad, mid, last, prev))
        drop_requantization(e, moved[0])
        changed = True
    return e.graph() if changed else graph


def _same_grid(e: Edit, a: Node, b: Node) -> bool:
    """Quantizer nodes ``a`` and ``b`` have the same constant scale, zero point (and its type) and axis."""
    ins_a, ins_b = list(a.inputs[1:3]) + [""] * (3 - len(a.inputs)), list(b.inputs[1:3]) + [""] * (3 - len(b.inputs))
    for x, y in zip(ins_a, ins_b):
        if bool(x) != bool(y) or (x and not (e.is_const(x) and e.is_const(y))):
            return False
        if x and (e.inits[x].dtype != e.inits[y].dtype or not np.array_equal(e.inits[x], e.inits[y])):
            return False
    return int(a.attr("axis", 1)) == int(b.attr("axis", 1)) or np.size(e.inits[ins_a[0]]) == 1


def drop_requantization(e: Edit, q: Node) -> None:
    """``DequantizeLinear -> QuantizeLinear`` on one grid, left with nothing between them where a
    Pad moved away (onnxruntime's QDQ form of a Pad), is the identity: ``q``'s reader reads the
    integers the DequantizeLinear read."""
    d = e.producer(q.inputs[0]) if q.op_type == "QuantizeLinear" else None
    if d is None or d.domain != DEFAULT or d.op_type != "DequantizeLinear" or not _same_grid(e, d, q) \
            or q.outputs[0] in e.outputs:
        return
    for r in e.readers(q.outputs[0]):
        e.rename_input(r, q.outputs[0], d.inputs[0])
    e.nodes.remove(q)
    if not e.readers(d.outputs[0]) and d.outputs[0] not in e.outputs:
        e.nodes.remove(d)
