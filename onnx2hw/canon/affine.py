"""Affine maps by constants, wherever an exporter put them, in the forms the registry folds.

- :func:`matmul_add`: ``MatMul(x, W) -> Add(b)`` of a 2-D ``x`` and constant ``W``, ``b`` is a
  dense layer with bias: ``Gemm(x, W, b)``, in any opset. Of an ``x`` of rank 3 or more (a
  dense layer applied to every step of a sequence or pixel of an image, features last) it is
  the 1x1 convolution of ``x`` transposed to channels first, with or without a bias.
- :func:`affine_maps` (float graphs): ``BatchNormalization`` (any opset's form, ``spatial=0``
  included), and ``Mul``/``Add``/``Sub``/``Div`` of an activation by a constant, are the map
  ``y = x * k + t``. ``Sub``/``Div`` become ``Add``/``Mul``. A map after view ops (``Transpose``,
  ``Reshape``, ``Flatten``, ``Squeeze``, ``Unsqueeze``) read by it alone moves above them
  (``k`` and ``t`` carried through the view); above a linear layer, it stays a ``Mul``/``Add``
  that the post-training quantizer folds into that layer's weights and bias
  (:mod:`onnx2hw.layers.canonical`); after any other op (an activation, or on the model input)
  it folds into the layer that reads it where that is exact (a dense layer; a convolution
  without padding), else it becomes a layer of its own (an input normalization before a padded
  convolution too): a depthwise 1x1 ``Conv`` (per-channel ``k``, ``t``) on images and sequences, a
  ``Gemm`` with the diagonal weight ``diag(k)`` on vectors. Each rewrite is exact in real
  arithmetic (float32 rounding of the folded constants aside).
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ..ir.graph import Graph, Node
from .channels_last import to_first, to_last
from .edit import DEFAULT, Edit
from .trace import trace, trace_for

__all__ = ["batch_rows", "matmul_add", "affine_maps"]

_LINEAR = frozenset({"Conv", "Gemm", "MatMul", "ConvTranspose"})
_VIEWS = frozenset({"Transpose", "Reshape", "Flatten", "Squeeze", "Unsqueeze"})
_AFFINE = frozenset({"BatchNormalization", "Mul", "Add", "Sub", "Div"})
#: ops a per-channel map commutes with (conditions in _Maps.commutes)
_COMMUTING = frozenset({"Resize", "Upsample", "MaxPool", "GlobalMaxPool", "AveragePool", "GlobalAveragePool"})
#: ops that say a graph is already quantized (the maps of such graphs are the importers' business)
_QUANTIZED = frozenset({"QuantizeLinear", "DequantizeLinear", "QLinearConv", "QLinearMatMul", "MatMulInteger",
                        "ConvInteger", "DynamicQuantizeLinear"})


def batch_rows(graph: Graph) -> Graph:
    """A dense layer applied to every step of a sequence, written with the batch merged into the
    rows (TensorFlow's Tensordot: ``Reshape (N, L, F) -> (N*L, F)``, ``MatMul``, ``Reshape`` back
    to ``(N, L, O)``), is the ``MatMul`` of the sequence itself."""
    t = trace_for(graph, {"MatMul"})
    if t is None:
        return graph
    e = Edit(graph)
    changed = False
    for mm in list(e.nodes):
        if mm.op_type != "MatMul" or mm.domain != DEFAULT or not e.is_const(mm.inputs[1]):
            continue
        r1, r2 = e.producer(mm.inputs[0]), e.sole_reader(mm.outputs[0])
        if r1 is None or r2 is None or r1.op_type != "Reshape" or r2.op_type != "Reshape" \
                or e.sole_reader(r1.outputs[0]) is not mm:
            continue
        xs, ys = t.shape(r1.inputs[0]), t.shape(r2.outputs[0])
        w = np.asarray(e.inits[mm.inputs[1]])
        if xs is None or len(xs) < 3 or None in xs[1:] or w.ndim != 2 or ys != xs[:-1] + (w.shape[1],) \
                or not (t.batch_first(r1.inputs[0]) and t.batch_first(r2.outputs[0])):
            continue
        steps = int(np.prod(xs[1:-1]))
        if any(np.shape(r[mm.inputs[0]]) != (b * steps, xs[-1]) for r, b in zip(t.runs, t.batches)):
            continue
        e.nodes.remove(r1)
        e.nodes.remove(r2)
        e.replace(mm, dataclasses.replace(mm, inputs=(r1.inputs[0], mm.inputs[1]), outputs=r2.outputs))
        changed = True
    if not changed:
        return graph
    e.prune()
    return e.graph()


def matmul_add(graph: Graph) -> Graph:
    e = Edit(graph)
    changed = False
    for mm in list(e.nodes):
        if mm.op_type != "MatMul" or mm.domain != DEFAULT or not e.is_const(mm.inputs[1]):
            continue
        vi = graph.value_info.get(mm.inputs[0])
        w = np.asarray(e.inits[mm.inputs[1]])
        if vi is None or vi.shape is None or len(vi.shape) < 2 or w.ndim != 2:
            continue
        if len(vi.shape) > 2 and not any(isinstance(d, int) and d > 1 for d in vi.shape[1:-1]):
            continue   # one step or pixel (or unknown): a vector, which onnxslim's fold views as one
        add = e.sole_reader(mm.outputs[0])
        b = None if add is None or add.op_type != "Add" or add.domain != DEFAULT else \
            add.inputs[1] if add.inputs[0] == mm.outputs[0] else add.inputs[0]
        if b is not None and (not e.is_const(b) or np.size(e.inits[b]) != w.shape[1]
                              or any(d != 1 for d in np.shape(e.inits[b])[:-1])):
            b = None
        bias = () if b is None else (e.const(f"{b}_bias", np.asarray(e.inits[b]).reshape(-1).astype(w.dtype)),)
        out = mm.outputs if b is None else add.outputs
        if b is not None:
            e.nodes.remove(add)
        if len(vi.shape) == 2:
            if b is None:
                continue
            e.replace(mm, dataclasses.replace(mm, op_type="Gemm", inputs=(mm.inputs[0], mm.inputs[1]) + bias,
                                              outputs=out, attrs={}))
        else:
            e.replace(mm, *_pointwise_conv(e, mm, w, bias, out, len(vi.shape)))
        changed = True
    return e.graph() if changed else graph


def _pointwise_conv(e: Edit, mm: Node, w: np.ndarray, bias, out, rank: int) -> list[Node]:
    """``MatMul(x, W) [+ b]`` of a rank-``rank`` ``x`` (a sequence or an image, features last):
    the 1x1 convolution of ``x`` with channels first, between two Transposes."""
    first, conv = e.fresh(f"{mm.inputs[0]}_first"), e.fresh(f"{out[0]}_first")
    kernel = e.const(f"{mm.inputs[1]}_kernel", np.ascontiguousarray(w.T).reshape(w.shape[1], w.shape[0], *(1,) * (rank - 2)))
    return [e.node("Transpose", [mm.inputs[0]], [first], f"{mm.name}_to_first", perm=list(to_first(rank))),
            e.node("Conv", [first, kernel, *bias], [conv], mm.name, kernel_shape=[1] * (rank - 2)),
            e.node("Transpose", [conv], list(out), f"{mm.name}_to_last", perm=list(to_last(rank)))]


def _compress(a: np.ndarray) -> np.ndarray:
    """``a`` with every axis along which it is constant reduced to size 1."""
    for ax in range(a.ndim):
        first = np.take(a, [0], axis=ax)
        if a.shape[ax] > 1 and np.array_equal(a, np.broadcast_to(first, a.shape)):
            a = first
    return a


def _map_of(node: Node, e: Edit, rank: int) -> tuple[str, np.ndarray, np.ndarray] | None:
    """(data input, ``k``, ``t``) of ``node`` as ``y = x * k + t``, or ``None``."""
    if node.domain != DEFAULT or node.op_type not in _AFFINE:
        return None
    if node.op_type == "BatchNormalization":
        if len(node.outputs) > 1 and any(node.outputs[1:]) or not all(e.is_const(i) for i in node.inputs[1:5]):
            return None
        s, b, m, v = (np.asarray(e.inits[i], np.float64) for i in node.inputs[1:5])
        k = s / np.sqrt(v + float(node.attr("epsilon", 1e-5)))
        t = b - m * k
        if k.ndim == 1:
            k, t = (a.reshape((-1,) + (1,) * (rank - 2)) for a in (k, t))
        return node.inputs[0], k, t
    x, c = node.inputs
    flip = e.is_const(x) and not e.is_const(c)
    if flip:
        x, c = c, x
    if not e.is_const(c) or e.is_const(x):
        return None
    c = np.asarray(e.inits[c], np.float64)
    one, zero = np.ones(()), np.zeros(())
    if node.op_type == "Mul":
        return x, c, zero
    if node.op_type == "Add":
        return x, one, c
    if node.op_type == "Sub":
        return (x, -one, c) if flip else (x, one, -c)
    return None if flip else (x, 1 / c, zero)   # Div(c, x) is not affine


class _Maps:
    def __init__(self, graph: Graph):
        self.e = Edit(graph)
        self.t = trace(graph)

    def shape(self, name: str):
        s = self.t.shape(name) if self.t is not None else None
        return None if s is None or None in s[1:] else s

    def step(self) -> bool:
        for node in self.e.nodes:
            if node.op_type not in _AFFINE or node.domain != DEFAULT or self.shape(node.outputs[0]) is None:
                continue
            r = self.e.sole_reader(node.outputs[0])
            if r is not None and _map_of(r, self.e, len(self.shape(node.outputs[0]))) is not None:
                continue   # the map after it takes it in (two maps are one)
            m = _map_of(node, self.e, len(self.shape(node.outputs[0])))
            if m is not None and self.rewrite(node, *m):
                return True
        return False

    def rewrite(self, node: Node, x0: str, k0, t0) -> bool:
        views, gone, x, k, t = self.climb(node, x0, k0, t0)
        top = self.e.producer(x)
        # a linear layer takes the map in only where nothing else reads its output
        linear = self.after_linear(x) and self.e.sole_reader(x) is not None
        if not views and linear and all(n.op_type in ("BatchNormalization", "Mul", "Add") for n in [node] + gone):
            return False   # the quantizer folds these into that layer as they are
        if not linear and self.forward(node, x0, k0, t0):
            return True
        if k is None:
            return False
        out = node.outputs[0]
        head = self.e.fresh(f"{out}_affine") if views else out
        made = self.linear_pair(x, k, t, head, node.name) if linear else self.layer(x, k, t, head, node.name)
        if made is None:
            return False
        pos = min(self.e.nodes.index(n) for n in [node] + views + gone)
        chain = list(reversed(views))   # the views, top-most first, now after the map
        for i, v in enumerate(chain):
            chain[i] = self.e_input(v, chain[i - 1].outputs[0] if i else head)
        if chain:
            chain[-1] = dataclasses.replace(chain[-1], outputs=(out,))
        for n in [node] + views + gone:
            self.e.nodes.remove(n)
        self.e.nodes[pos:pos] = list(made) + chain
        return True

    def forward(self, node: Node, x: str, k, t) -> bool:
        """The map folded into the one layer that reads it, where that is exact: a dense layer
        (``W' = diag(k) W``, ``b' = b + t W``), or a convolution without padding (or ``t = 0``)
        and one group (``W'[o, c] = W[o, c] k[c]``, ``b'[o] = b[o] + sum W[o, c] t[c]``)."""
        r = self.e.sole_reader(node.outputs[0])
        shape = self.shape(node.outputs[0])
        if r is None or r.domain != DEFAULT or r.inputs[0] != node.outputs[0] or len(r.inputs) < 2 \
                or not self.e.is_const(r.inputs[1]) or (len(r.inputs) > 2 and r.inputs[2] and not self.e.is_const(r.inputs[2])):
            return False
        per = [_per_channel(np.broadcast_to(a, (1,) + shape[1:])[0] if a.ndim <= len(shape) else a, shape)
               for a in (k, t)] if len(shape) >= 2 else [None]
        if any(v is None for v in per):
            return False
        kc, tc = per
        w = np.asarray(self.e.inits[r.inputs[1]], np.float64)
        b = np.asarray(self.e.inits[r.inputs[2]], np.float64) if len(r.inputs) > 2 and r.inputs[2] else None
        if r.op_type in ("Gemm", "MatMul") and len(shape) == 2 and w.ndim == 2 and not r.attr("transA", 0) \
                and float(r.attr("alpha", 1.0)) == 1.0 and float(r.attr("beta", 1.0)) == 1.0:
            wt = w.T if r.attr("transB", 0) else w          # (in, out)
            w2, bias = (kc[:, None] * wt), tc @ wt + (0 if b is None else np.broadcast_to(b, wt.shape[1:]))
            w2 = w2.T if r.attr("transB", 0) else w2
        elif r.op_type == "Conv" and int(r.attr("group", 1)) == 1 and w.ndim == len(shape) and \
                (not np.any(tc) or (not any(r.attr("pads", ())) and r.attr("auto_pad", b"NOTSET") in (b"NOTSET", b"VALID", "NOTSET", "VALID"))):
            cshape = (1, -1) + (1,) * (w.ndim - 2)
            w2 = w * kc.reshape(cshape)
            bias = (w * tc.reshape(cshape)).sum(axis=tuple(range(1, w.ndim))) + (0 if b is None else b)
        else:
            return False
        inputs = (x, self.e.const(f"{r.inputs[1]}_mapped", w2.astype(np.float32)),
                  self.e.const(f"{r.name}_bias_mapped", np.asarray(bias, np.float32).reshape(-1)))
        op = "Gemm" if r.op_type == "MatMul" else r.op_type
        self.e.nodes.remove(node)
        self.e.replace(r, dataclasses.replace(r, op_type=op, inputs=inputs))
        return True

    def after_linear(self, x: str) -> bool:
        """``x`` is made by a linear layer, possibly through maps by constants read by one node each."""
        while (p := self.e.producer(x)) is not None and p.domain == DEFAULT:
            if p.op_type in _LINEAR:
                return True
            m = _map_of(p, self.e, 2)
            if m is None or self.e.sole_reader(x) is None:
                return False
            x = m[0]
        return False

    @staticmethod
    def e_input(view: Node, name: str) -> Node:
        return dataclasses.replace(view, inputs=(name,) + view.inputs[1:])

    def climb(self, node: Node, x: str, k, t):
        """(the ops the map moves above, the maps before it that it takes in, the value it then
        maps, ``k``, ``t`` there): it climbs
        views (``k``, ``t`` carried through the reshape or transpose) and the ops it commutes with
        (per-channel ``k``, ``t`` only: a resize, whose weights sum to 1; a max pool, for ``k > 0``;
        an average pool without counted padding), each read by the map's chain alone."""
        shape = self.shape(node.outputs[0])
        if k.ndim > len(shape) or t.ndim > len(shape):
            return [], x, None, None
        kf, tf = (np.broadcast_to(a, (1,) + shape[1:]) for a in (k, t))
        views, gone, last = [], [], node
        while (p := self.e.producer(x)) is not None and p.domain == DEFAULT \
                and self.e.sole_reader(x) is last and self.shape(p.inputs[0]):
            src = self.shape(p.inputs[0])
            if not (self.t.batch_first(p.inputs[0]) and self.t.batch_first(p.outputs[0])):
                break   # a view that moves the batch (a dense layer over time steps folded into it)
            if p.op_type == "Transpose":
                inv = np.argsort([int(a) for a in p.attr("perm")])
                kf, tf = np.transpose(kf, inv), np.transpose(tf, inv)
            elif p.op_type in _VIEWS:
                kf, tf = kf.reshape((1,) + src[1:]), tf.reshape((1,) + src[1:])
            elif (m := _map_of(p, self.e, len(src))) is not None:
                kp, tp = (np.broadcast_to(a, (1,) + src[1:]) for a in m[1:])
                kf, tf = kp * kf, tp * kf + tf   # x -> (x kp + tp) k + t: two maps are one
                gone.append(p)
                last = p
                x = m[0]
                continue
            elif self.commutes(p, kf, tf, src):
                kf, tf = (np.broadcast_to(_per_channel(a[0], a.shape).reshape((1, -1) + (1,) * (len(src) - 2)),
                                          (1,) + src[1:]) for a in (kf, tf))
            else:
                break
            views.append(p)
            last = p
            x = p.inputs[0]
        return views, gone, x, _compress(np.ascontiguousarray(kf)), _compress(np.ascontiguousarray(tf))

    def commutes(self, p: Node, kf, tf, src) -> bool:
        """The map ``kf``, ``tf`` is per-channel and may move above ``p``, whose input is ``src``."""
        out = self.shape(p.outputs[0])
        if p.op_type not in _COMMUTING or len(src) < 3 or out is None or out[1] != src[1] or len(out) != len(src):
            return False
        k = _per_channel(kf[0], kf.shape)
        if k is None or _per_channel(tf[0], tf.shape) is None:
            return False
        if p.op_type in ("MaxPool", "GlobalMaxPool"):
            return bool(np.all(k > 0)) and len(p.outputs) == 1
        if p.op_type == "AveragePool":
            return not any(p.attr("pads", ())) or not int(p.attr("count_include_pad", 0))
        return True

    def linear_pair(self, x, k, t, out, name) -> list[Node] | None:
        nodes, cur = [], x
        if not np.all(k == 1):
            mid = out if np.all(t == 0) else self.e.fresh(f"{out}_scaled")
            nodes.append(self.e.node("Mul", [cur, self.e.const(f"{name}_k", k.astype(np.float32))], [mid], f"{name}_mul"))
            cur = mid
        if not np.all(t == 0) or not nodes:
            nodes.append(self.e.node("Add", [cur, self.e.const(f"{name}_t", t.astype(np.float32))], [out], f"{name}_add"))
        return nodes

    def layer(self, x, k, t, out, name) -> list[Node] | None:
        """The map as a layer of its own: per-channel ``k``, ``t`` (axis 1), or on an image or
        sequence with its channels last the same layer between Transposes to and from channels
        first (which :mod:`.transposes` cancels against the graph's own)."""
        shape = self.shape(x)
        if len(shape) < 2:
            return None
        per = [_per_channel(a, shape) for a in (k, t)]
        if all(v is not None for v in per):
            return self._depthwise(x, *per, out, name, shape)
        rank = len(shape)
        if rank < 3:
            return None
        perm = to_first(rank)
        first_shape = tuple(shape[i] for i in perm)
        per = [_per_channel(np.transpose(np.broadcast_to(a, (1,) * (rank - np.ndim(a)) + np.shape(a)), perm), first_shape)
               for a in (k, t)]
        if any(v is None for v in per):
            return None
        first, mid = self.e.fresh(f"{x}_first"), self.e.fresh(f"{out}_first")
        return [self.e.node("Transpose", [x], [first], f"{name}_to_first", perm=list(perm)),
                *self._depthwise(first, *per, mid, name, first_shape),
                self.e.node("Transpose", [mid], [out], f"{name}_to_last", perm=list(to_last(rank)))]

    def _depthwise(self, x, kc, tc, out, name, shape) -> list[Node]:
        """``x * kc + tc`` (one value per channel, axis 1): a ``Gemm`` with the weight
        ``diag(kc)`` on vectors, else a depthwise 1x1 ``Conv``."""
        kc, tc = kc.astype(np.float32), tc.astype(np.float32)
        c = shape[1]
        if len(shape) == 2:
            w = self.e.const(f"{name}_diag", np.diag(kc))
            return [self.e.node("Gemm", [x, w, self.e.const(f"{name}_t", tc)], [out], name)]
        w = self.e.const(f"{name}_k", kc.reshape((c, 1) + (1,) * (len(shape) - 2)))
        return [self.e.node("Conv", [x, w, self.e.const(f"{name}_t", tc)], [out], name, group=c,
                            kernel_shape=[1] * (len(shape) - 2))]


def _per_channel(a: np.ndarray, shape) -> np.ndarray | None:
    """``a`` (broadcast against ``shape``, batch first) as one value per channel (axis 1), or
    ``None`` when it varies along another axis."""
    full = np.broadcast_to(a, (1,) + tuple(shape[1:]))[0]
    per = full.reshape(shape[1], -1)[:, 0]
    return per if np.array_equal(full, np.broadcast_to(per.reshape((-1,) + (1,) * (len(shape) - 2)), full.shape)) else None


def affine_maps(graph: Graph) -> Graph:
    if any(n.domain != DEFAULT or n.op_type in _QUANTIZED for n in graph.nodes):
        return graph
    m = _Maps(graph)
    changed = False
    for _ in range(len(graph.nodes) * 2):
        if not m.step():
            break
        changed = True
        m = _Maps(m.e.graph())
    return m.e.graph() if changed else graph
