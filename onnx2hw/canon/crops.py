"""A crop of a transposed convolution's output border is the transposed convolution with larger
``pads``: ``Slice(ConvTranspose(x), starts, ends)`` on spatial axes with step 1 is the
``ConvTranspose`` with ``starts`` added to its begin pads and ``n - ends`` (``n`` the axis's
length, ``ends`` clamped to it) to its end pads, since a ConvTranspose's ``pads`` remove exactly
that many output positions at each border (ONNX: the output length is ``s*(i-1) + op +
(k-1)*d + 1 - begin - end``, and position ``o`` of the padded form is position ``o + begin`` of
the unpadded one). Keras ``Conv1DTranspose(padding="same")`` through tf2onnx writes this form (the
2-D layer gets ``pads`` directly); onnxruntime's QDQ puts ``QuantizeLinear -> DequantizeLinear``
pairs between the two, which a crop commutes with (elementwise, their parameters at most per
channel); a pair left on one grid where the Slice was goes. The ConvTranspose must set its
padding explicitly (no ``auto_pad`` other than ``VALID``, no ``output_shape``) and have the Slice
as its only reader; batch and channel axes must be kept whole.

A zero ``Pad`` of the end of the spatial axes after a ConvTranspose without bias and without end
padding is its ``output_padding`` (positions past the last the kernel reaches hold the bias
alone, here 0), where the sum stays below the stride: Keras ``Conv1DTranspose(padding="same")``
with a kernel shorter than the stride writes it so (the layer's bias an ``Add`` after it, which
the affine-map rule then folds into the ConvTranspose).

A crop of a convolution's output border is the convolution with smaller ``pads``: output ``o``
of a ``Conv`` reads input ``o*s - begin + j*d``, so cropping ``a`` outputs at the begin of an
axis is ``a*s`` less begin padding, and cropping ``b`` at the end is the end padding lowered
until the output count (``(L + begin + end - (k-1)*d - 1) // s + 1``) drops by ``b`` (with
stride 1 exactly ``b`` less). The rule applies where every pad stays at least 0, under the same
conditions on the Slice and the quantizer pairs as above. PyTorch TCNs write this form
(``Conv1d(padding=(k-1)*d)`` then ``x[:, :, :-p]``, locuslab's ``Chomp1d``): a causal Conv.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ..ir.graph import Graph, Node
from .edit import DEFAULT, Edit
from .pad_views import drop_requantization, zero_pad_amounts
from .trace import trace_for

__all__ = ["crops_into_conv", "crops_into_conv_transpose"]


def _slice_params(e: Edit, sl: Node, rank: int):
    """``(starts, ends, axes)`` of Slice ``sl`` (attributes below opset 10, constant inputs from
    it on, steps all 1), axes normalized; ``None`` when not constant or with another step."""
    if sl.since_version < 10:
        starts, ends, axes = sl.attr("starts"), sl.attr("ends"), sl.attr("axes")
    else:
        ins = list(sl.inputs) + [""] * (5 - len(sl.inputs))
        if any(i and not e.is_const(i) for i in ins[1:]):
            return None
        if ins[4] and np.any(np.asarray(e.inits[ins[4]]).reshape(-1) != 1):
            return None
        starts, ends = e.inits[ins[1]], e.inits[ins[2]]
        axes = e.inits[ins[3]] if ins[3] else None
    if starts is None or ends is None:
        return None
    starts, ends = [int(v) for v in np.asarray(starts).reshape(-1)], [int(v) for v in np.asarray(ends).reshape(-1)]
    axes = list(range(len(starts))) if axes is None else [int(a) % rank for a in np.asarray(axes).reshape(-1)]
    if not (len(starts) == len(ends) == len(axes)) or len(set(axes)) != len(axes):
        return None
    return starts, ends, axes


def _crops(shape, starts, ends, axes) -> list[tuple[int, int]] | None:
    """Per spatial axis ``(cropped at the begin, cropped at the end)`` of a Slice of ``shape``
    (ONNX Slice clamping for step 1), or ``None`` when it cuts the batch or channel axes or
    keeps nothing."""
    rank = len(shape)
    out = [(0, 0)] * (rank - 2)
    for s, t, a in zip(starts, ends, axes):
        n = shape[a]
        if n is None:   # the batch: kept whole by a start 0 and an end at the index type's maximum
            if s != 0 or t < 2 ** 31 - 1:
                return None
            continue
        s = min(max(s + n if s < 0 else s, 0), n)
        t = min(max(t + n if t < 0 else t, 0), n)
        if t <= s:
            return None
        if a < 2:
            if (s, t) != (0, n):
                return None
            continue
        out[a - 2] = (s, n - t)
    return out


def _quantizer_pairs(e: Edit, name: str) -> list[Node]:
    """The ``QuantizeLinear -> DequantizeLinear`` pairs (each the sole reader of what it reads,
    parameters constant and at most per channel) from ``name`` on, as the list of their nodes."""
    out: list[Node] = []
    while True:
        q = e.sole_reader(name)
        dq = e.sole_reader(q.outputs[0]) if q is not None and q.op_type == "QuantizeLinear" else None
        if dq is None or dq.op_type != "DequantizeLinear" or q.domain != DEFAULT or dq.domain != DEFAULT or \
                not all(_channel_params(e, n) for n in (q, dq)):
            return out
        out += [q, dq]
        name = dq.outputs[0]


def _channel_params(e: Edit, q: Node) -> bool:
    return all(not i or (e.is_const(i) and (np.size(e.inits[i]) == 1 or int(q.attr("axis", 1)) in (0, 1)))
               for i in q.inputs[1:3]) and not q.attr("block_size", 0)


def _explicit(node: Node) -> bool:
    auto = node.attr("auto_pad", "NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    return auto in ("NOTSET", "VALID") and node.attr("output_shape") is None


def _cropping_slice(e: Edit, t, node: Node):
    """``(pairs, slice, crops)``: the step-1 Slice that reads ``node``'s output (through quantizer
    ``pairs``) as its only reader and crops only spatial axes, with its per-axis crops; ``None``
    when there is none."""
    shape = t.shape(node.outputs[0])
    if shape is None or not _explicit(node) or len(node.outputs) != 1:
        return None
    pairs = _quantizer_pairs(e, node.outputs[0])
    cur = pairs[-1].outputs[0] if pairs else node.outputs[0]
    sl = e.sole_reader(cur)
    if sl is None or sl.op_type != "Slice" or sl.domain != DEFAULT or sl.inputs[0] != cur:
        return None
    params = _slice_params(e, sl, len(shape))
    crops = _crops(shape, *params) if params is not None else None
    return None if crops is None else (pairs, sl, crops)


def _pads(node: Node, d: int) -> list[int]:
    """``node``'s explicit pads (begins, then ends); zeros under ``auto_pad=VALID``."""
    if node.attr("auto_pad", "NOTSET") in ("VALID", b"VALID"):
        return [0] * (2 * d)
    return [int(p) for p in node.attr("pads", (0,) * (2 * d))]


def crops_into_conv_transpose(graph: Graph) -> Graph:
    t = trace_for(graph, {"ConvTranspose"})
    if t is None:
        return graph
    e = Edit(graph)
    changed = False
    for ct in [n for n in graph.nodes if n.op_type == "ConvTranspose" and n.domain == DEFAULT]:
        found = _cropping_slice(e, t, ct)
        if found is None:
            continue
        pairs, sl, crops = found
        d = len(crops)
        pads = _pads(ct, d)
        pads = [pads[i] + crops[i][0] for i in range(d)] + [pads[d + i] + crops[i][1] for i in range(d)]
        attrs = {k: v for k, v in ct.attrs.items() if k != "auto_pad"}
        _absorb(e, ct, dataclasses.replace(ct, attrs=dict(attrs, pads=pads)), pairs, sl)
        changed = True
    for ct in [n for n in e.nodes if n.op_type == "ConvTranspose" and n.domain == DEFAULT]:
        changed |= _pad_into_output_padding(e, t, ct)
    return e.graph() if changed else graph


def crops_into_conv(graph: Graph) -> Graph:
    """A Slice cropping a Conv's output border as the Conv with smaller pads (see the module
    docstring); the graph unchanged where a pad would go below zero."""
    t = trace_for(graph, {"Conv"})
    if t is None:
        return graph
    e = Edit(graph)
    changed = False
    for conv in [n for n in graph.nodes if n.op_type == "Conv" and n.domain == DEFAULT]:
        found = _cropping_slice(e, t, conv)
        in_shape, w_shape = t.shape(conv.inputs[0]), t.shape(conv.inputs[1]) if len(conv.inputs) > 1 else None
        if found is None or in_shape is None or w_shape is None:
            continue
        pairs, sl, crops = found
        pads = _conv_pads(conv, in_shape[2:], w_shape[2:], crops)
        if pads is None:
            continue
        attrs = {k: v for k, v in conv.attrs.items() if k != "auto_pad"}
        _absorb(e, conv, dataclasses.replace(conv, attrs=dict(attrs, pads=pads)), pairs, sl)
        changed = True
    return e.graph() if changed else graph


def _conv_pads(conv: Node, lengths, kernel, crops) -> list[int] | None:
    """The pads of ``conv`` that give its output with ``crops`` removed, or ``None`` when one
    would be negative. Output ``o`` reads input ``o*s - begin + j*dl``: dropping ``a`` outputs at
    the begin is ``begin - a*s``. The output count is ``(L + begin + end - span) // s + 1`` with
    ``span = (k-1)*dl + 1``; with ``R`` that floor's remainder, an end pad lowered by any ``delta``
    in ``[b*s + R - s + 1, b*s + R]`` drops ``b`` more outputs and leaves the others' reads as
    they were: the largest such ``delta`` the pad allows is taken (the least padding)."""
    d = len(crops)
    strides = [int(s) for s in conv.attr("strides", (1,) * d)]
    dilations = [int(s) for s in conv.attr("dilations", (1,) * d)]
    old = _pads(conv, d)
    begins, ends = [], []
    for i, (a, b) in enumerate(crops):
        s, n = strides[i], lengths[i]
        begin = old[i] - a * s
        span = (int(kernel[i]) - 1) * dilations[i] + 1
        if n is None or begin < 0:
            return None
        rem = (n + old[i] + old[d + i] - span) % s
        delta = min(old[d + i], b * s + rem) if b else 0
        if delta < b * s + rem - s + 1 and b:
            return None
        begins.append(begin)
        ends.append(old[d + i] - delta)
    return begins + ends


def _absorb(e: Edit, ct: Node, new: Node, pairs: list[Node], op: Node) -> None:
    """``ct`` becomes ``new``, and ``op`` (read through the quantizer ``pairs``) goes: its readers
    read the last pair's output (or ``new``'s)."""
    e.nodes.remove(op)
    last = pairs[-1] if pairs else ct
    e.replace(ct, dataclasses.replace(new, outputs=op.outputs) if last is ct else new)
    if last is not ct:
        e.replace(last, dataclasses.replace(last, outputs=op.outputs))
        after = e.sole_reader(op.outputs[0])
        if after is not None and after.op_type == "QuantizeLinear" and after.domain == DEFAULT:
            drop_requantization(e, after)
            if after in e.nodes:
                _relu_of_floor_grid(e, after)


def _relu_of_floor_grid(e: Edit, q: Node) -> None:
    """A ``QuantizeLinear`` whose zero point is its type's minimum maps every real value below 0
    to that minimum, as it maps 0: it equals itself after a Relu. onnxruntime's QDQ drops a Relu
    so (the Relu of a Slice's output into its quantizer); with the Slice gone, ``q`` reads a
    DequantizeLinear on another grid directly, and the Relu put back makes that requantization
    the activation the importer tabulates."""
    zp = q.inputs[2] if len(q.inputs) > 2 else ""
    d = e.producer(q.inputs[0])
    if (zp and not e.is_const(zp)) or d is None or d.op_type != "DequantizeLinear" or d.domain != DEFAULT:
        return
    z = np.asarray(e.inits[zp]) if zp else np.zeros((), np.uint8)
    if z.dtype.kind not in "iu" or np.any(z != np.iinfo(z.dtype).min):
        return
    relu = e.node("Relu", [q.inputs[0]], [e.fresh(q.inputs[0] + "_relu")], q.name + "_relu")
    q = e.rename_input(q, q.inputs[0], relu.outputs[0])
    e.nodes.insert(e.nodes.index(q), relu)


def _pad_into_output_padding(e: Edit, t, ct: Node) -> bool:
    """A zero Pad of the spatial axes' ends after ``ct`` (see the module docstring) as its
    ``output_padding``; ``False`` when it is not one."""
    shape = t.shape(ct.outputs[0])
    if shape is None or not _explicit(ct) or len(ct.outputs) != 1 or \
            (len(ct.inputs) > 2 and ct.inputs[2] and (not e.is_const(ct.inputs[2]) or np.any(e.inits[ct.inputs[2]]))):
        return False
    pairs = _quantizer_pairs(e, ct.outputs[0])
    cur = pairs[-1].outputs[0] if pairs else ct.outputs[0]
    pad = e.sole_reader(cur)
    if pad is None or pad.op_type != "Pad" or pad.domain != DEFAULT or pad.inputs[0] != cur:
        return False
    r, d = len(shape), len(shape) - 2
    amounts = zero_pad_amounts(e, pad, r)
    pads = [int(p) for p in ct.attr("pads", (0,) * (2 * d))]
    if ct.attr("auto_pad", "NOTSET") in ("VALID", b"VALID"):
        pads = [0] * (2 * d)
    if amounts is None or np.any(amounts[:r]) or amounts[r + 1] or any(pads[d:]):
        return False
    strides = [int(s) for s in ct.attr("strides", (1,) * d)]
    dilations = [int(s) for s in ct.attr("dilations", (1,) * d)]
    out_pad = [int(p) + int(a) for p, a in zip(ct.attr("output_padding", (0,) * d), amounts[r + 2:])]
    if any(p >= max(s, dl) for p, s, dl in zip(out_pad, strides, dilations)):
        return False
    attrs = {k: v for k, v in ct.attrs.items() if k != "auto_pad"}
    _absorb(e, ct, dataclasses.replace(ct, attrs=dict(attrs, pads=pads, output_padding=out_pad)), pairs, pad)
    return True
