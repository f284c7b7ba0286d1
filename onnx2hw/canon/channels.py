"""Channel selections and permutations as algebra.

* :func:`channel_splits`: a ``Split`` of an activation is one ``Slice`` per output (each output
  the contiguous part the Split gives it), so every later stage sees one output per node.
* :func:`channel_shuffles`: a chain of views and transposes (``Reshape``, ``Transpose``,
  ``Flatten``, ``Squeeze``, ``Unsqueeze``), with ops between them that commute with any
  permutation of elements (per-tensor ``QuantizeLinear``/``DequantizeLinear``, QONNX quantizers
  with scalar parameters, elementwise ops whose other operands are scalar constants, ``Identity``),
  from an activation of shape ``S`` back to shape ``S`` whose net effect is one permutation of
  the channel axis (axis 1) at every pixel and batch index, is those commuting ops (in their
  order) then ``Gather(axis=1, indices=perm)``. The net effect is found by running the chain on
  an index tensor (``np.arange`` over the batch and each pixel's channels), not by matching an
  exporter's pattern: the channel shuffle ``Reshape (N, g, C/g, H, W) -> Transpose (0, 2, 1, 3,
  4) -> Reshape (N, C, H, W)`` of PyTorch's exporters and its channels-last form between
  tf2onnx's Transposes are two such chains. A chain from an image ``(N, C, H, W)`` whose net
  effect is a ``DepthToSpace`` (either mode) or a DCR ``SpaceToDepth`` of a block ``r`` (the
  ``Reshape (N, C/r^2, r, r, H, W) -> Transpose (0, 1, 4, 2, 5, 3) -> Reshape`` PyTorch's
  exporters wrote for ``PixelShuffle`` before opset 11) is, the same way, those ops then that
  one; below opset 11, where DepthToSpace has only the DCR order, a CRD one is the ``Gather``
  of the channels into DCR order then the DCR ``DepthToSpace``.
* :func:`channel_gathers`: a channel ``Gather`` (axis 1, constant indices) read (through the same
  ops) by another selection of channels (a ``Slice`` of the channel axis, a ``Gather`` on axis 1) is that
  selection with the indices composed; a ``Gather`` that permutes the channels and is read,
  through commuting ops and pools (each channel from itself alone), only by linear layers
  reading those channels (a ``Conv`` with one
  group, a ``Gemm``/``MatMul`` on vectors) goes: each layer's weight has its input-channel axis
  permuted instead (``W'[:, perm[j]] = W[:, j]``; a quantized weight, ``DequantizeLinear`` or
  QONNX ``Quant`` of a constant, when its parameters do not vary along that axis).
* :func:`crd_into_producers`: a ``DepthToSpace`` in CRD order (PyTorch's ``PixelShuffle``) whose
  input a ``Conv`` of one group with constant weight and bias makes, through ops acting on each
  element alone and read by nothing else, is the DCR one of that ``Conv`` with its output
  channels (weight rows, bias) in DCR order: hardware on several lanes then needs no channel
  permutation beside it. A channel permutation by ``Gather`` of such a ``Conv``'s output goes
  into its output channels the same way.

Every rewrite is exact: a permutation moves values without changing them, and the ops it crosses
act on each element alone.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ..golden.registry import lookup
from ..ir.graph import Graph, Node
from ..ir.load import QONNX_DOMAIN as QONNX
from .edit import DEFAULT, Edit
from .trace import Trace, trace_for
from .transposes import ELEMENTWISE

__all__ = ["channel_splits", "channel_shuffles", "channel_gathers", "crd_into_producers", "elementwise_alone"]

_VIEWS = frozenset({"Reshape", "Transpose", "Flatten", "Squeeze", "Unsqueeze"})
_QDQ = frozenset({"QuantizeLinear", "DequantizeLinear"})
_QONNX_QUANT = frozenset({"Quant", "BipolarQuant", "Trunc"})
_LINEAR = frozenset({"Conv", "Gemm", "MatMul"})
_POOLS = frozenset({"MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool"})


# ---- Split -> Slices ---------------------------------------------------------------------------

def channel_splits(graph: Graph) -> Graph:
    """Each ``Split`` of a computed tensor as one ``Slice`` per output something reads (module
    docstring); the parts are read off the outputs' inferred shapes (the golden executor, hence
    the trace, has no Split)."""
    if not any(n.op_type == "Split" and n.domain == DEFAULT for n in graph.nodes):
        return graph
    e = Edit(graph)
    changed = False
    for node in list(e.nodes):
        if node.op_type != "Split" or node.domain != DEFAULT or e.is_const(node.inputs[0]):
            continue
        shapes = [graph.value_info.get(v) for v in (node.inputs[0],) + node.outputs]
        if any(vi is None or vi.shape is None for vi in shapes):
            continue
        rank = len(shapes[0].shape)
        axis = int(node.attr("axis", 0)) % rank
        sizes = [vi.shape[axis] for vi in shapes[1:]]
        if any(not isinstance(d, int) for d in sizes) or any(len(vi.shape) != rank for vi in shapes):
            continue
        slices, start = [], 0
        for out, size in zip(node.outputs, sizes):
            out = out if out and (e.readers(out) or out in e.outputs) else ""   # a part nothing reads: no Slice
            if out and graph.opsets.get(DEFAULT, 13) < 10:   # Slice's attribute form
                slices.append(e.node("Slice", [node.inputs[0]], [out], f"{node.name}_{out}", starts=[start],
                                     ends=[start + size], axes=[axis]))
            elif out:
                ins = [node.inputs[0]] + [e.const(f"{out}_{w}", np.asarray([v], np.int64))
                                          for w, v in (("starts", start), ("ends", start + size), ("axes", axis))]
                slices.append(e.node("Slice", ins, [out], f"{node.name}_{out}"))
            start += size
        e.replace(node, *slices)
        changed = True
    return e.graph() if changed else graph


# ---- view chains -> Gather ---------------------------------------------------------------------

def _scalar_const(e: Edit, name: str) -> bool:
    return not name or (e.is_const(name) and np.size(e.inits[name]) == 1)


def elementwise_alone(e: Edit, n: Node) -> bool:
    """``n`` acts on each element of its first input alone (so it commutes with any permutation
    of the elements): a per-tensor quantizer, or an elementwise op of scalar constants."""
    if n.domain == DEFAULT and n.op_type in _QDQ:
        return all(_scalar_const(e, i) for i in n.inputs[1:]) and not n.attr("block_size")
    if n.domain == QONNX and n.op_type in _QONNX_QUANT:
        return all(_scalar_const(e, i) for i in n.inputs[1:])
    if n.domain == DEFAULT and n.op_type in ELEMENTWISE:
        return len(n.outputs) == 1 and all(_scalar_const(e, i) for i in n.inputs[1:])
    return False


def _channelwise(e: Edit, n: Node) -> bool:
    """``n`` computes each channel from the same channel only, alike for every channel (a pool),
    or acts on each element alone: it commutes with any permutation of the channels."""
    if n.domain == DEFAULT and n.op_type in _POOLS:
        return len([o for o in n.outputs if o]) == 1
    return elementwise_alone(e, n)


def _view(n: Node) -> bool:
    return n.domain == DEFAULT and n.op_type in _VIEWS


def _run_view(n: Node, x: np.ndarray, out_shape) -> np.ndarray | None:
    """The view ``n`` of the index tensor ``x``; ``None`` if its traced output shape disagrees."""
    if n.op_type == "Transpose":
        perm = n.attr("perm")
        y = np.transpose(x, [int(a) for a in perm] if perm is not None else None)
    else:
        y = x.reshape(out_shape)
    return y if y.shape == tuple(out_shape) else None


def _channel_perm(y: np.ndarray, shape) -> np.ndarray | None:
    """``perm`` when the index tensor ``y`` of ``shape`` is ``x[:, perm]`` of
    ``x = arange(size).reshape(shape)``; else ``None``."""
    if y.shape != tuple(shape) or len(shape) < 2:
        return None
    n, c = shape[0], shape[1]
    p = int(np.prod(shape[2:], dtype=np.int64))
    v = y.reshape(n, c, p)
    src = (v // p) % c
    if not (np.array_equal(v // (c * p), np.broadcast_to(np.arange(n)[:, None, None], v.shape))
            and np.array_equal(v % p, np.broadcast_to(np.arange(p)[None, None, :], v.shape))
            and np.all(src == src[:1, :, :1])):
        return None
    return src[0, :, 0].astype(np.int64)


def _shuffle_node(op: str, r: int, mode: str) -> Node:
    """``op`` (DepthToSpace or SpaceToDepth) of block ``r`` in channel order ``mode``, opset 13."""
    attrs = {"blocksize": r} if op == "SpaceToDepth" else {"blocksize": r, "mode": mode}
    return Node(name=op, op_type=op, domain=DEFAULT, inputs=("x",), outputs=("y",), attrs=attrs, since_version=13)


def _dcr_order(channels: int, r: int) -> np.ndarray:
    """For each DCR channel ``(i*r + j)*C + c`` of a deep pixel (``channels`` = ``C*r*r``), its CRD
    channel ``c*r*r + i*r + j``."""
    rr = r * r
    return np.asarray([c * rr + s for s in range(rr) for c in range(channels // rr)], np.int64)


def _shuffle_nodes(e: Edit, node: Node, src: str, out: str, channels: int) -> list[Node]:
    """The pixel shuffle ``node`` from ``src`` to ``out`` in the graph's opset: a CRD DepthToSpace
    below opset 11 is the Gather of the ``channels`` into DCR order, then the DCR one."""
    if node.op_type == "DepthToSpace" and node.attr("mode") == "CRD" and e.source.opsets.get(DEFAULT, 13) < 11:
        mid = e.fresh(f"{out}_dcr")
        order = _dcr_order(channels, node.attr("blocksize"))
        return [e.node("Gather", [src, e.const("dcr_order", order)], [mid], "crd_to_dcr", axis=1),
                e.node("DepthToSpace", [mid], [out], "DepthToSpace", blocksize=node.attr("blocksize"))]
    if node.op_type == "DepthToSpace" and e.source.opsets.get(DEFAULT, 13) < 11:
        return [e.node("DepthToSpace", [src], [out], "DepthToSpace", blocksize=node.attr("blocksize"))]
    return [dataclasses.replace(node, name=e.fresh(node.op_type), inputs=(src,), outputs=(out,))]


def _pixel_shuffle(x: np.ndarray, y: np.ndarray) -> Node | None:
    """The ``DepthToSpace``/``SpaceToDepth`` (:func:`_shuffle_node`) that makes ``y`` of the
    index tensor ``x`` (an image), by the golden executor's definition of the op; else ``None``."""
    if x.ndim != 4 or y.ndim != 4 or x.shape[0] != y.shape[0]:
        return None
    (_, c, h, w), (_, oc, oh, ow) = x.shape, y.shape
    if oh > h and oh % h == 0 and ow == w * (oh // h) and c == oc * (oh // h) ** 2:
        candidates = [("DepthToSpace", oh // h, m) for m in ("DCR", "CRD")]
    elif h > oh and h % oh == 0 and w == ow * (h // oh) and oc == c * (h // oh) ** 2:
        candidates = [("SpaceToDepth", h // oh, "DCR")]
    else:
        return None
    for op, r, mode in candidates:
        node = _shuffle_node(op, r, mode)
        if np.array_equal(lookup(DEFAULT, op)(node, x), y):
            return node
    return None


def _longest_chain(e: Edit, t: Trace, value: str, first: Node):
    """``(nodes, perm)``: the longest chain from ``value`` through ``first`` and its sole readers
    (views and commuting ops) that ends in a view whose output is a channel permutation of
    ``value`` other than the identity (``perm``: its indices) or a pixel shuffle of ``value``
    (``perm``: the :func:`_pixel_shuffle` node; only with a Transpose among the views: a
    Reshape alone, such as a one-pixel image viewed as a bigger one, stays a view), the same one
    in every traced run (each batch); ``None`` if none."""
    if not (_view(first) or elementwise_alone(e, first)):
        return None
    shapes = [tuple(np.shape(r[value])) for r in t.runs]
    xs = [np.arange(int(np.prod(s, dtype=np.int64)), dtype=np.int64).reshape(s) for s in shapes]
    x0s = list(xs)
    best, nodes, node, cur = None, [], first, value
    while node is not None and node.inputs and node.inputs[0] == cur and len(node.outputs) == 1 \
            and cur not in node.inputs[1:] and all(node.outputs[0] in r for r in t.runs):
        out = node.outputs[0]
        if _view(node):
            xs = [_run_view(node, x, np.shape(r[out])) for x, r in zip(xs, t.runs)]
            if any(x is None for x in xs):
                break
        elif not elementwise_alone(e, node):
            break
        nodes.append(node)
        perms = [_channel_perm(x, s) for x, s in zip(xs, shapes)] if _view(node) else [None]
        perm = perms[0]
        if perm is not None and all(p is not None and np.array_equal(p, perm) for p in perms) \
                and not np.array_equal(perm, np.arange(perm.size)):
            best = (list(nodes), perm)
        elif _view(node) and any(n.op_type == "Transpose" for n in nodes) \
                and (shuffles := [_pixel_shuffle(x0, x) for x0, x in zip(x0s, xs)])[0] is not None \
                and all(n == shuffles[0] for n in shuffles):
            best = (list(nodes), shuffles[0])
        node, cur = e.sole_reader(out), out
    return best


def _activations(e: Edit, t: Trace) -> list[str]:
    """Values a chain may start from: graph inputs and node outputs of rank 2 or more, batch first."""
    names = list(e.source.input_names) + [o for n in e.nodes for o in n.outputs if o]
    return [v for v in names if not e.is_const(v) and v in t.runs[0] and np.ndim(t.runs[0][v]) >= 2
            and t.batch_first(v)]


def channel_shuffles(graph: Graph) -> Graph:
    """Chains of views equal to a permutation of the channels as a ``Gather``, or to a pixel
    shuffle as that op (module docstring);
    one chain at a time, the longest, each on a fresh trace of the graph."""
    while (t := trace_for(graph, _VIEWS)) is not None:
        e = Edit(graph)
        found = None
        for v in _activations(e, t):
            for r in e.readers(v):
                hit = _longest_chain(e, t, v, r)
                if hit is not None and (found is None or len(hit[0]) > len(found[1])):
                    found = (v, *hit)
        if found is None:
            break
        _to_gather(e, t, *found)
        graph = e.graph()
    return graph


def _to_gather(e: Edit, t: Trace, value: str, chain: list[Node], perm: np.ndarray | Node) -> None:
    """``chain`` (from ``value``) as its commuting ops, in order, then ``Gather(perm)`` (or the
    pixel shuffle ``perm``)."""
    at = e.nodes.index(chain[0])
    for n in chain:
        e.nodes.remove(n)
    new, cur = [], value
    for n in chain:
        if not _view(n):
            new.append(dataclasses.replace(n, inputs=(cur,) + n.inputs[1:]))
            cur = n.outputs[0]
    if isinstance(perm, Node):
        new += _shuffle_nodes(e, perm, cur, chain[-1].outputs[0], t.shape(value)[1])
    else:
        new.append(e.node("Gather", [cur, e.const("channel_perm", perm)], [chain[-1].outputs[0]], "channel_shuffle",
                          axis=1))
    e.nodes[at:at] = new
    e.prune()


# ---- Gathers composed, or absorbed into weights ------------------------------------------------

def _channel_gather(e: Edit, t: Trace, n: Node) -> np.ndarray | None:
    """The indices of ``n`` when it is a ``Gather`` of a computed tensor's channels (axis 1,
    constant 1-D indices, made non-negative); else ``None``."""
    if n.op_type != "Gather" or n.domain != DEFAULT or e.is_const(n.inputs[0]) or not e.is_const(n.inputs[1]):
        return None
    shape = t.shape(n.inputs[0])
    idx = np.asarray(e.inits[n.inputs[1]])
    if shape is None or len(shape) < 2 or shape[1] is None or idx.ndim != 1 or idx.dtype.kind not in "iu":
        return None
    if int(n.attr("axis", 0)) % len(shape) != 1 or np.any(idx < -shape[1]) or np.any(idx >= shape[1]):
        return None
    return (idx.astype(np.int64) % shape[1]).astype(np.int64)


def _slice_indices(e: Edit, t: Trace, n: Node, channels: int) -> np.ndarray | None:
    """The channels a ``Slice`` (opset 10+ form, constant inputs) keeps when it slices axis 1
    only; else ``None``."""
    if n.op_type != "Slice" or n.domain != DEFAULT or len(n.inputs) < 3:
        return None
    if any(i and not e.is_const(i) for i in n.inputs[1:]):
        return None
    shape = t.shape(n.inputs[0])
    vals = [np.asarray(e.inits[i]).reshape(-1).astype(np.int64) if len(n.inputs) > k and i else None
            for k, i in enumerate(n.inputs[:5]) if k]
    vals += [None] * (4 - len(vals))
    starts, ends, axes, steps = vals
    axes = np.arange(starts.size) if axes is None else axes
    steps = np.ones(starts.size, np.int64) if steps is None else steps
    if shape is None or len(axes) != 1 or int(axes[0]) % len(shape) != 1 or int(steps[0]) == 0:
        return None
    return np.arange(channels)[slice(int(starts[0]), int(ends[0]), int(steps[0]))]


def _weight(e: Edit, layer: Node) -> tuple[str, int, Node | None] | None:
    """``(constant, input-channel axis, quantizer or None)`` of a linear layer's weight read as a
    constant or through a quantizer of one whose parameters do not vary along that axis;
    ``None`` for any other layer or a weight something else reads."""
    if layer.domain != DEFAULT or layer.op_type not in _LINEAR or len(layer.inputs) < 2:
        return None
    if layer.op_type == "Conv" and int(layer.attr("group", 1)) != 1:
        return None
    if layer.op_type == "Gemm" and int(layer.attr("transA", 0)):
        return None
    axis = 1 if layer.op_type == "Conv" or (layer.op_type == "Gemm" and int(layer.attr("transB", 0))) else 0
    w, q = layer.inputs[1], e.producer(layer.inputs[1])
    if q is not None:
        if not ((q.domain == DEFAULT and q.op_type == "DequantizeLinear") or
                (q.domain == QONNX and q.op_type == "Quant")) or not e.is_const(q.inputs[0]):
            return None
        rank = np.ndim(e.inits[q.inputs[0]])
        for p in q.inputs[1:]:
            if not p:
                continue
            if not e.is_const(p):
                return None
            c = np.asarray(e.inits[p])
            if q.op_type == "DequantizeLinear" and c.size > 1 and int(q.attr("axis", 1)) % rank == axis:
                return None
            if q.op_type == "Quant" and (c.ndim > rank or (c.ndim > rank - 1 - axis and c.shape[axis - rank] != 1)):
                return None   # broadcast against the weight's last axes: one value along the input channels
        if len(e.readers(q.outputs[0])) != 1 or q.outputs[0] in e.outputs:
            return None
        w = q.inputs[0]
    if not e.is_const(w) or len([n for n in e.nodes if w in n.inputs]) != 1 or np.ndim(e.inits[w]) <= axis:
        return None
    if layer.op_type == "MatMul" and np.ndim(e.inits[w]) != 2:
        return None
    return w, axis, q


def _linear_readers(e: Edit, t: Trace, value: str):
    """The linear layers reading ``value`` (through commuting ops and pools) and their weights,
    when that is all that reads it; else ``None``."""
    found, todo = [], [value]
    while todo:
        v = todo.pop()
        if v in e.outputs:
            return None
        for r in e.readers(v):
            if r.inputs[0] != v or v in r.inputs[1:]:
                return None
            if _channelwise(e, r):
                todo.append(r.outputs[0])
                continue
            w = _weight(e, r)
            shape = t.shape(v)
            if w is None or (r.op_type == "MatMul" and (shape is None or len(shape) != 2)):
                return None
            found.append((r, w))
    return found or None


def _permute_weight(e: Edit, w: str, axis: int, perm: np.ndarray) -> None:
    """``W'`` with ``W'[..., perm[j], ...] = W[..., j, ...]`` along ``axis``."""
    old = np.asarray(e.inits[w])
    new = np.empty_like(old)
    index = [slice(None)] * old.ndim
    index[axis] = perm
    new[tuple(index)] = old
    e.inits[w] = new


def channel_gathers(graph: Graph) -> Graph:
    """Channel Gathers composed into the selections reading them, or absorbed into the weights of
    the linear layers reading them (module docstring)."""
    t = trace_for(graph, {"Gather"})
    if t is None:
        return graph
    e = Edit(graph)
    changed = False
    for g in list(e.nodes):
        idx = _channel_gather(e, t, g)
        if idx is None or g not in e.nodes or g.outputs[0] in e.outputs:
            continue
        if _compose(e, t, g, idx) or _absorb(e, t, g, idx):
            changed = True
    return e.graph() if changed else graph


def _compose(e: Edit, t: Trace, g: Node, idx: np.ndarray) -> bool:
    """``g``, then commuting ops and pools, read only by channel selections: those ops read
    ``g``'s input and each selection reads their result with its indices composed with ``idx``."""
    chain, v = [], g.outputs[0]
    while (r := e.sole_reader(v)) is not None and r.inputs[0] == v and v not in r.inputs[1:] and _channelwise(e, r):
        chain.append(r)
        v = r.outputs[0]
    readers = e.readers(v)
    if not readers or v in e.outputs:
        return False
    picks = []
    for r in readers:
        sub = _channel_gather(e, t, r) if r.op_type == "Gather" else _slice_indices(e, t, r, idx.size)
        if sub is None or r.inputs[0] != v or v in r.inputs[1:]:
            return False
        picks.append(sub)
    if chain:
        e.rename_input(chain[0], g.outputs[0], g.inputs[0])
    src = v if chain else g.inputs[0]
    for r, sub in zip(readers, picks):
        e.replace(r, e.node("Gather", [src, e.const("channel_pick", idx[sub])], list(r.outputs), r.name, axis=1))
    e.nodes.remove(g)
    return True


def _absorb(e: Edit, t: Trace, g: Node, idx: np.ndarray) -> bool:
    """A permuting ``g`` read only by linear layers: their weights permuted, ``g`` gone."""
    shape = t.shape(g.inputs[0])
    if sorted(idx.tolist()) != list(range(shape[1])):
        return False
    found = _linear_readers(e, t, g.outputs[0])
    if found is None:
        return False
    for _layer, (w, axis, _q) in found:
        _permute_weight(e, w, axis, idx)
    for r in e.readers(g.outputs[0]):
        e.rename_input(r, g.outputs[0], g.inputs[0])
    e.nodes.remove(g)
    return True


# ---- a CRD DepthToSpace's channel order into the convolution making its input ----------------------

def crd_into_producers(graph: Graph) -> Graph:
    """CRD ``DepthToSpace`` nodes, and channel permutations by ``Gather``, folded into the ``Conv``
    making their input (module docstring)."""
    t = trace_for(graph, {"Gather"})
    e = Edit(graph)
    changed = False
    for d in list(e.nodes):
        if d.domain == DEFAULT and d.op_type == "DepthToSpace" and d.since_version >= 11 \
                and d.attr("mode") in ("CRD", b"CRD") and (conv := _sole_conv(e, d.inputs[0])) is not None:
            _permute_outputs(e, conv, _dcr_order(len(e.inits[conv.inputs[1]]), int(d.attr("blocksize"))))
            e.replace(d, dataclasses.replace(d, attrs={**d.attrs, "mode": "DCR"}))
            changed = True
        elif t is not None and (idx := _channel_gather(e, t, d)) is not None and d.outputs[0] not in e.outputs \
                and np.array_equal(np.sort(idx), np.arange(idx.size)) \
                and (conv := _sole_conv(e, d.inputs[0])) is not None:
            _permute_outputs(e, conv, idx)
            for r in e.readers(d.outputs[0]):
                e.rename_input(r, d.outputs[0], d.inputs[0])
            e.nodes.remove(d)
            changed = True
    return e.graph() if changed else graph


def _permute_outputs(e: Edit, conv: Node, order: np.ndarray) -> None:
    """``conv`` with output channel ``k`` computing what its channel ``order[k]`` did."""
    ins = list(conv.inputs)
    for k in (1, 2):
        if len(ins) > k and ins[k]:
            ins[k] = e.const(f"{ins[k]}_perm", np.asarray(e.inits[ins[k]])[order])
    e.replace(conv, dataclasses.replace(conv, inputs=tuple(ins)))


def _sole_conv(e: Edit, value: str) -> Node | None:
    """The ``Conv`` (one group; constant weight and bias, read by it alone, not graph inputs) making ``value``
    through ops acting on each element alone, each value on the way read only by the next;
    else ``None``."""
    while (p := e.producer(value)) is not None and e.sole_reader(value) is not None:
        if p.domain == DEFAULT and p.op_type == "Conv":
            consts = [i for i in p.inputs[1:3] if i]
            ok = int(p.attr("group", 1)) == 1 and all(e.is_const(i) and len(e.readers(i)) == 1
                                                      and i not in e.source.overridable for i in consts)
            return p if ok and len(p.inputs) > 1 and p.outputs[0] == value else None
        if not elementwise_alone(e, p) or p.inputs[0] in p.inputs[1:]:
            return None
        value = p.inputs[0]
    return None
