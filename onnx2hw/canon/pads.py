"""Padding as window ops take it: a zero ``Pad`` in front of a window op is the op's own
padding, a ``MaxPool``'s ``ceil_mode`` is end padding and a pool's ``auto_pad=SAME_*`` is
explicit ``pads`` (:func:`ceil_pools`).

``Conv(Pad(x, p))`` is ``Conv(x)`` with ``p`` added to its ``pads``, and so is an
``AveragePool`` that counts padded positions (``count_include_pad=1``; with ``ceil_mode`` only a
Pad of nothing at the end), and a ``MaxPool`` of a tensor that is never negative (made by a
``Relu``, a ``Clip`` from 0 or above, a ``Sigmoid``, ``HardSigmoid`` or ``Softplus``: its own
padding, which no maximum takes, and a zero then give the same maximum where a window holds a
value of the tensor; the padding on each side stays below the kernel), when the Pad is of constant
mode with value 0, adds nothing on the
batch and channel axes and removes nothing, and the window op sets its padding explicitly (no
``auto_pad``). Exporters of channels-last frameworks write Keras' ``ZeroPadding2D`` and
TensorFlow's explicit padding this way. A Pad that pads nothing (PyTorch's ``avg_pool2d`` at
opset 9 writes one) goes, whatever reads it.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ..ir.graph import Graph, Node
from .edit import DEFAULT, Edit
from .trace import trace

__all__ = ["pads_into_windows", "ceil_pools"]


def _pad_amounts(e: Edit, pad: Node) -> np.ndarray | None:
    """``pad``'s amounts ``(begin..., end...)`` when it pads with zeros only, else ``None``."""
    if pad.attr("mode", b"constant") not in (b"constant", "constant"):
        return None
    if pad.since_version < 11:
        amounts, value = pad.attr("pads"), float(pad.attr("value", 0.0))
    else:
        if len(pad.inputs) < 2 or not e.is_const(pad.inputs[1]) or (len(pad.inputs) > 3 and pad.inputs[3]):
            return None
        amounts = e.inits[pad.inputs[1]]
        value = float(np.asarray(e.inits[pad.inputs[2]]).reshape(-1)[0]) \
            if len(pad.inputs) > 2 and pad.inputs[2] and e.is_const(pad.inputs[2]) else \
            (0.0 if len(pad.inputs) < 3 or not pad.inputs[2] else None)
    if amounts is None or value != 0.0:
        return None
    amounts = np.asarray(amounts, np.int64).reshape(-1)
    rank = amounts.size // 2
    if rank < 3 or np.any(amounts < 0) or amounts[0] or amounts[1] or amounts[rank] or amounts[rank + 1]:
        return None
    return amounts


#: ops whose result is never negative
_NON_NEGATIVE = frozenset({"Relu", "Sigmoid", "HardSigmoid", "Softplus"})


def _non_negative(e: Edit, name: str) -> bool:
    """``name`` is made by an op whose result is never negative (a Clip with a lower bound of 0
    or more among them)."""
    p = e.producer(name)
    if p is None or p.domain != DEFAULT:
        return False
    if p.op_type == "Clip":
        lo = p.attr("min") if p.since_version < 11 else \
            (np.asarray(e.inits[p.inputs[1]]).reshape(-1)[0] if len(p.inputs) > 1 and p.inputs[1] and
             e.is_const(p.inputs[1]) else None)
        return lo is not None and float(lo) >= 0
    return p.op_type in _NON_NEGATIVE


def _takes_pads(e: Edit, node: Node, amounts: np.ndarray, x: str) -> bool:
    """``node`` takes a zero Pad of ``amounts`` of ``x`` as its own ``pads``: a Conv, an
    AveragePool that counts padding, a MaxPool of a never negative ``x`` whose padding stays
    below the kernel; the pools with ``ceil_mode`` only a Pad of nothing at the end (a last window
    may start in a Pad's end padding but not in the pool's own)."""
    if node.domain != DEFAULT or node.attr("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET"):
        return False
    if node.op_type == "Conv":
        return True
    rank = amounts.size // 2
    if int(node.attr("ceil_mode", 0)) and np.any(amounts[rank:]):
        return False
    if node.op_type == "AveragePool":
        return bool(int(node.attr("count_include_pad", 0)))
    if node.op_type != "MaxPool" or not _non_negative(e, x) or (len(node.outputs) > 1 and node.outputs[1]):
        return False
    kernel = np.asarray(node.attr("kernel_shape", ()), np.int64)
    own = np.asarray(node.attr("pads", (0,) * 2 * kernel.size), np.int64)
    extra = np.concatenate([amounts[2:rank], amounts[rank + 2:]])
    return kernel.size == rank - 2 and bool(np.all(own + extra < np.concatenate([kernel, kernel])))


def pads_into_windows(graph: Graph) -> Graph:
    e = Edit(graph)
    changed = False
    for pad in [n for n in graph.nodes if n.op_type == "Pad" and n.domain == DEFAULT]:
        amounts = _pad_amounts(e, pad)
        readers = e.readers(pad.outputs[0])
        if amounts is not None and not np.any(amounts) and pad.outputs[0] not in e.outputs:
            for r in readers:   # pads nothing: the identity
                e.rename_input(r, pad.outputs[0], pad.inputs[0])
            e.nodes.remove(pad)
            changed = True
            continue
        if amounts is None or not readers or pad.outputs[0] in e.outputs or \
                not all(_takes_pads(e, r, amounts, pad.inputs[0]) and r.inputs[0] == pad.outputs[0] for r in readers):
            continue
        rank = amounts.size // 2
        extra = np.concatenate([amounts[2:rank], amounts[rank + 2:]])
        for r in readers:
            own = np.asarray(r.attr("pads", (0,) * extra.size), np.int64)
            e.replace(r, dataclasses.replace(r, inputs=(pad.inputs[0],) + r.inputs[1:],
                                             attrs=dict(r.attrs, pads=[int(v) for v in own + extra])))
        e.nodes.remove(pad)
        changed = True
    return e.graph() if changed else graph


def _ceil_end_pad(n: int, k: int, s: int, begin: int, end: int) -> int | None:
    """The end padding with which a floor-mode window count equals ONNX's ceil-mode count on an
    axis of ``n`` (a last window may not start in the end padding), or ``None`` if none does."""
    o = -(-(n + begin + end - k) // s) + 1
    if (o - 1) * s >= n + begin:
        o -= 1
    pad = max(end, (o - 1) * s + k - n - begin)
    return pad if (n + begin + pad - k) // s + 1 == o else None


def _auto(node: Node) -> str:
    auto = node.attr("auto_pad", "NOTSET")
    return auto.decode() if isinstance(auto, bytes) else auto


def _same_form(node: Node, shape) -> Node | None:
    """Pool ``node`` with ``auto_pad=SAME_UPPER``/``SAME_LOWER`` as explicit ``pads`` on an input of
    ``shape``: ``ceil(n / s)`` windows, the padding they need split evenly, the odd one at the end
    (UPPER) or the start (LOWER); ``ceil_mode`` changes nothing there and goes."""
    kernel = [int(k) for k in node.attr("kernel_shape", ())]
    d = len(kernel)
    if shape is None or len(shape) != d + 2 or None in shape[2:]:
        return None
    strides = [int(x) for x in node.attr("strides", None) or (1,) * d]
    dilations = [int(x) for x in node.attr("dilations", None) or (1,) * d]
    begin, end = [], []
    for n, k, s, dl in zip(shape[2:], kernel, strides, dilations):
        total = (-(-n // s) - 1) * s + (k - 1) * dl + 1 - n
        if total < 0:   # a stride beyond the kernel: negative padding, which onnxruntime refuses
            return None  # or crops by (as its version goes): the pool stays as it is
        small, big = total // 2, total - total // 2
        begin.append(small if _auto(node) == "SAME_UPPER" else big)
        end.append(big if _auto(node) == "SAME_UPPER" else small)
    attrs = {k: v for k, v in node.attrs.items() if k not in ("auto_pad", "ceil_mode")}
    return dataclasses.replace(node, attrs=dict(attrs, pads=begin + end))


def _floor_form(node: Node, shape) -> Node | None:
    """The floor-mode MaxPool computing what ceil-mode ``node`` does on an input of ``shape``
    (``None`` when its geometry is unknown or not one this rule takes)."""
    kernel = [int(k) for k in node.attr("kernel_shape", ())]
    d = len(kernel)
    auto = _auto(node)
    if shape is None or len(shape) != d + 2 or None in shape[2:] or len(node.outputs) > 1 \
            or any(int(x) != 1 for x in node.attr("dilations", (1,) * d)) or auto not in ("NOTSET", "VALID"):
        return None
    strides = [int(x) for x in node.attr("strides", (1,) * d)]
    pads = [int(x) for x in node.attr("pads", (0,) * (2 * d))] if auto == "NOTSET" else [0] * (2 * d)
    ends = [_ceil_end_pad(shape[2 + i], kernel[i], strides[i], pads[i], pads[d + i]) for i in range(d)]
    if None in ends:
        return None
    attrs = {k: v for k, v in node.attrs.items() if k != "auto_pad"}
    return dataclasses.replace(node, attrs=dict(attrs, ceil_mode=0, pads=pads[:d] + ends))


def _explicit(node: Node) -> bool:
    """``node`` is a pool whose padding this rule makes explicit."""
    if node.domain != DEFAULT or node.op_type not in ("MaxPool", "AveragePool"):
        return False
    return _auto(node) in ("SAME_UPPER", "SAME_LOWER") or (node.op_type == "MaxPool" and int(node.attr("ceil_mode", 0)))


def ceil_pools(graph: Graph) -> Graph:
    """Pool padding made explicit. A ``MaxPool`` with ``ceil_mode=1`` is the floor-mode ``MaxPool``
    with the partial last windows' extent added to its end padding: max pooling ignores padded
    positions, so the two are the same function (an ``AveragePool`` is not: its divisor would
    count them, so its import takes ``ceil_mode`` itself); with ``auto_pad=VALID`` the padding
    becomes explicit. A ``MaxPool`` or ``AveragePool`` with ``auto_pad=SAME_UPPER``/``SAME_LOWER``
    is the pool with that padding as ``pads`` (:func:`_same_form`; an average pool counts explicit
    padding exactly as SAME padding), so that the rules reading ``pads`` (a counted padding stops
    an affine map, a unit-width signal turns) see it."""
    pools = [n for n in graph.nodes if _explicit(n)]
    t = trace(graph) if pools else None
    if t is None:
        return graph
    e = Edit(graph)
    changed = False
    for node in pools:
        shape = t.shape(node.inputs[0])
        new = _same_form(node, shape) if _auto(node).startswith("SAME") else _floor_form(node, shape)
        if new is not None:
            e.replace(node, new)
            changed = True
    return e.graph() if changed else graph
