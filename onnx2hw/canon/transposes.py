"""Transposes of activations as a layout: moved down through the ops they commute with until
they meet their inverse (both go) or a flatten into a dense layer (its weight rows are permuted
instead). A Transpose moves only where that leaves fewer of them; one that would only move
stays where the exporter wrote it (the importers read a model input's layout Transpose as such).

A Transpose ``y = transpose(a, p)`` (``y`` axis ``k`` is ``a`` axis ``p[k]``) commutes with:
- an elementwise op whose other operands are constants (or a QONNX quantizer of one, with
  scalar parameters): ``f(y, c) = transpose(f(a, c'), p)``,
  ``c'`` being ``c`` broadcast to the rank of ``y`` and transposed by the inverse of ``p``; the
  QONNX quantizers (``Quant``, ``BipolarQuant``, ``Trunc``) are elementwise in this sense, and
  ``QuantizeLinear``/``DequantizeLinear`` with their ``axis`` mapped to ``p[axis]``;
- an elementwise op of two activations both transposed by ``p``, and ``Concat`` of activations
  all transposed by ``p`` (on axis ``p[axis]``);
- a reduction (``ReduceMean``/``Max``/``Min``/``Sum``) over ``axes``: the reduction over
  ``p[axes]``, then the Transpose of the axes left (none when their order is kept);
- another Transpose ``q``: one Transpose ``p∘q``, none when that is the identity.
``transpose(a, p)`` flattened (batch kept) into a ``MatMul``/``Gemm`` with a constant weight is
``a`` flattened into the same layer with the weight's rows permuted. Every move is exact.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ..ir.graph import Graph, Node
from ..ir.load import QONNX_DOMAIN as QONNX
from .edit import DEFAULT, Edit
from .trace import trace

__all__ = ["sink_transposes", "ELEMENTWISE"]

#: default-domain ops computed element by element (NumPy broadcasting between their operands)
ELEMENTWISE = frozenset({
    "Relu", "Clip", "LeakyRelu", "Sigmoid", "Tanh", "HardSigmoid", "HardSwish", "Elu", "Selu", "Softplus",
    "Softsign", "Identity", "Neg", "Abs", "Exp", "Log", "Sqrt", "Erf", "Floor", "Ceil", "Round", "Sign",
    "Cast", "Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "PRelu", "Gelu", "Mish", "Reciprocal",
})
_QONNX_ELEMENTWISE = frozenset({"Quant", "BipolarQuant", "Trunc"})
_AXIS_OPS = frozenset({"QuantizeLinear", "DequantizeLinear"})
_REDUCE = frozenset({"ReduceMean", "ReduceMax", "ReduceMin", "ReduceSum"})
_MAX_STEPS = 10_000


def _inverse(p) -> tuple[int, ...]:
    inv = [0] * len(p)
    for k, a in enumerate(p):
        inv[a] = k
    return tuple(inv)


def _perm(node: Node) -> tuple[int, ...] | None:
    p = node.attr("perm")
    return tuple(int(a) for a in p) if p is not None else None


def _elementwise(n: Node) -> bool:
    return (n.domain == DEFAULT and (n.op_type in ELEMENTWISE or n.op_type in _AXIS_OPS)) or \
        (n.domain == QONNX and n.op_type in _QONNX_ELEMENTWISE)


class _Sinker:
    """Moves the Transposes named in ``moving`` (and those they become) down the graph."""

    def __init__(self, graph: Graph, moving: set[str] = frozenset()):
        self.e = Edit(graph)
        self.t = trace(graph)
        self.moving = set(moving)
        self.source = ""   # the name of the Transpose being moved (its copies keep it)

    def rank(self, name: str) -> int | None:
        vi = self.e.source.value_info.get(name)
        if vi is not None and vi.shape is not None:
            return len(vi.shape)
        s = self.t.shape(name) if self.t is not None else None
        return None if s is None else len(s)

    def transposed(self, name: str) -> tuple[Node, tuple[int, ...]] | None:
        n = self.e.producer(name)
        return (n, _perm(n)) if n is not None and n.op_type == "Transpose" and n.domain == DEFAULT \
            and _perm(n) is not None else None

    def operand(self, name: str, p, rank: int) -> str | None:
        """``name`` as the operand of the op moved above a Transpose ``p``: a constant transposed by
        the inverse of ``p``, the input of a Transpose ``p``; ``None`` if neither."""
        if self.e.is_const(name):
            c = np.asarray(self.e.inits[name])
            if c.ndim > rank:
                return None
            if c.size == 1 and c.ndim <= 1:
                return name
            c = c.reshape((1,) * (rank - c.ndim) + c.shape)
            return self.e.const(f"{name}_t", np.transpose(c, _inverse(p)))
        hit = self.transposed(name)
        if hit is not None and hit[1] == p:
            return hit[0].inputs[0]
        return self.quantized_constant(name, p, rank)

    def quantized_constant(self, name: str, p, rank: int) -> str | None:
        """A QONNX quantizer of a constant with scalar parameters (a quantized bias), as the
        same quantizer of the constant transposed by the inverse of ``p`` (quantizing commutes
        with moving elements); ``None`` for anything else."""
        q = self.e.producer(name)
        if q is None or q.domain != QONNX or q.op_type not in _QONNX_ELEMENTWISE or not self.e.is_const(q.inputs[0]) \
                or any(i and (not self.e.is_const(i) or np.size(self.e.inits[i]) != 1) for i in q.inputs[1:]):
            return None
        c = np.asarray(self.e.inits[q.inputs[0]])
        if c.ndim > rank:
            return None
        c = c.reshape((1,) * (rank - c.ndim) + c.shape)
        out = self.e.fresh(f"{name}_t")
        copy = dataclasses.replace(q, name=self.e.fresh(f"{q.name}_t"), outputs=(out,),
                                   inputs=(self.e.const(f"{q.inputs[0]}_t", np.transpose(c, _inverse(p))),) + q.inputs[1:])
        self.e.nodes.insert(self.e.nodes.index(q) + 1, copy)
        return out

    def move(self, op: Node, p) -> bool:
        """``op`` (reading Transposes ``p``) moved above them, a Transpose ``p`` after it."""
        rank = len(p)
        if op.op_type == "Concat":
            new = [self.operand(i, p, rank) if not self.e.is_const(i) else None for i in op.inputs]
            attrs = dict(op.attrs, axis=p[int(op.attr("axis")) % rank])
        else:
            data = [0] if op.domain == QONNX or op.op_type in _AXIS_OPS else range(len(op.inputs))
            new = [self.operand(i, p, rank) if (k in data or not self.e.is_const(i)) and i else i
                   for k, i in enumerate(op.inputs)]
            if op.domain == QONNX:  # parameters broadcast against the data like any operand
                new[1:] = [self.operand(i, p, rank) if i else i for i in op.inputs[1:]]
            attrs = dict(op.attrs)
            if op.op_type in _AXIS_OPS:
                if any(self.e.is_const(i) and np.size(self.e.inits[i]) > 1 for i in op.inputs[1:]):
                    attrs["axis"] = p[int(op.attr("axis", 1)) % rank]
                new[1:] = list(op.inputs[1:])
        if any(v is None for v in new) or len(op.outputs) != 1:
            return False
        self.place(op, dataclasses.replace(op, inputs=tuple(new), attrs=attrs), p)
        return True

    def place(self, op: Node, moved: Node, p) -> None:
        """``moved`` where ``op`` was, writing a fresh value that a Transpose ``p`` (none when
        ``p`` is the identity) turns into ``op``'s output."""
        if tuple(p) == tuple(range(len(p))):
            self.e.replace(op, dataclasses.replace(moved, outputs=op.outputs))
            return
        mid = self.e.fresh(f"{op.outputs[0]}_pre")
        t = self.e.node("Transpose", [mid], [op.outputs[0]], self.source, perm=list(p))
        self.moving.add(t.name)
        self.e.replace(op, dataclasses.replace(moved, outputs=(mid,)), t)

    def reduce(self, op: Node, p) -> bool:
        """A reduction over ``axes`` of ``transpose(a, p)``: the same reduction of ``a`` over
        ``p[axes]``, then the Transpose that orders the axes left as ``p`` did."""
        rank = len(p)
        if len(op.inputs) > 1 and op.inputs[1]:
            if not self.e.is_const(op.inputs[1]):
                return False
            axes = [int(a) for a in np.asarray(self.e.inits[op.inputs[1]]).reshape(-1)]
        else:
            axes = [int(a) for a in (op.attr("axes") or ())]
        if not axes or int(op.attr("noop_with_empty_axes", 0)):
            return False
        axes = sorted(a % rank for a in axes)
        src = sorted(p[a] for a in axes)
        if int(op.attr("keepdims", 1)):
            q = p
        else:   # the axes left, in a's order, arranged as y orders them
            left_a = [a for a in range(rank) if a not in src]
            q = tuple(left_a.index(p[k]) for k in range(rank) if k not in axes)
        if len(op.inputs) > 1 and op.inputs[1]:
            inputs = (self.transposed(op.inputs[0])[0].inputs[0],
                      self.e.const(f"{op.inputs[1]}_t", np.asarray(src, np.int64)))
            attrs = dict(op.attrs)
        else:
            inputs, attrs = (self.transposed(op.inputs[0])[0].inputs[0],), dict(op.attrs, axes=src)
        self.place(op, dataclasses.replace(op, inputs=inputs, attrs=attrs), q)
        return True

    def merge(self, outer: Node, p, q) -> None:
        """Transpose ``q`` of a Transpose ``p``: one Transpose, or none."""
        inner = self.e.producer(outer.inputs[0])
        pq = tuple(p[k] for k in q)
        if pq == tuple(range(len(pq))) and outer.outputs[0] not in self.e.outputs:
            for r in self.e.readers(outer.outputs[0]):
                self.e.rename_input(r, outer.outputs[0], inner.inputs[0])
            self.e.nodes.remove(outer)
        elif pq == tuple(range(len(pq))):   # a graph output: its producer writes it
            src = self.e.producer(inner.inputs[0])
            if src is not None and self.e.readers(inner.inputs[0]) == [inner] and \
                    self.e.readers(inner.outputs[0]) == [outer]:
                self.e.nodes.remove(inner)
                self.e.nodes.remove(outer)
                self.e.replace(src, dataclasses.replace(
                    src, outputs=tuple(outer.outputs[0] if o == inner.inputs[0] else o for o in src.outputs)))
            else:
                self.e.replace(outer, self.e.node("Identity", [inner.inputs[0]], list(outer.outputs), outer.name))
        else:
            self.e.replace(outer, dataclasses.replace(outer, inputs=(inner.inputs[0],), attrs={"perm": list(pq)}))
            self.moving.add(outer.name)

    def step(self) -> bool:
        for n in list(self.e.nodes):
            if n.op_type != "Transpose" or n.domain != DEFAULT or _perm(n) is None or n.outputs[0] in self.e.outputs \
                    or n.name not in self.moving:
                continue
            p = _perm(n)
            self.source = n.name
            for r in self.e.readers(n.outputs[0]):
                if r.op_type == "Transpose" and r.domain == DEFAULT and _perm(r) is not None:
                    self.merge(r, p, _perm(r))
                    return True
                if (_elementwise(r) or (r.op_type == "Concat" and r.domain == DEFAULT)) and self.move(r, p):
                    return True
                if r.op_type in _REDUCE and r.domain == DEFAULT and r.inputs[0] == n.outputs[0] and self.reduce(r, p):
                    return True
        return False

    def absorb_all(self) -> bool:
        """Every Transpose in :attr:`moving` (every one, if that is empty) absorbed where it can be."""
        changed = False
        for n in list(self.e.nodes):
            if n.op_type == "Transpose" and n.domain == DEFAULT and _perm(n) is not None and n in self.e.nodes \
                    and (not self.moving or n.name in self.moving):
                for r in self.e.readers(n.outputs[0]):
                    if self.absorb(n, r, _perm(n)):
                        changed = True
                        break
        return changed

    def absorb(self, tr: Node, view: Node, p) -> bool:
        """``transpose(a, p) -> flatten -> MatMul/Gemm(W)``: ``a`` flattened, ``W``'s rows permuted."""
        if view.op_type not in ("Reshape", "Flatten") or view.domain != DEFAULT or p[0] != 0 or self.t is None:
            return False
        a_shape, flat = self.t.shape(tr.inputs[0]), self.t.shape(view.outputs[0])
        if a_shape is None or flat is None or len(flat) != 2 or None in a_shape[1:] or \
                flat[1] != int(np.prod(a_shape[1:])) or not self.t.batch_first(view.outputs[0]):
            return False
        readers = self.e.readers(view.outputs[0])
        if not readers or view.outputs[0] in self.e.outputs or len(self.e.readers(tr.outputs[0])) != 1:
            return False
        index = np.transpose(np.arange(flat[1]).reshape(a_shape[1:]), [k - 1 for k in p[1:]]).reshape(-1)
        weights = [self.weight_rows(r) for r in readers]
        if any(w is None for w in weights):
            return False
        for name, axis in weights:
            w = np.asarray(self.e.inits[name])
            out = np.empty_like(w)
            if axis == 0:
                out[index] = w
            else:
                out[:, index] = w
            self.e.inits[name] = out
        self.e.nodes.remove(tr)
        self.e.rename_input(view, view.inputs[0], tr.inputs[0])
        return True

    def weight_rows(self, mm: Node) -> tuple[str, int] | None:
        """(the constant holding ``mm``'s weight, its axis of input features), for a MatMul/Gemm
        reading its weight as a constant or through a QONNX quantizer whose parameters do not
        vary along that axis; ``None`` otherwise (or if the weight has other readers)."""
        if mm.domain != DEFAULT or mm.op_type not in ("MatMul", "Gemm") or len(mm.inputs) < 2:
            return None
        if mm.op_type == "Gemm" and mm.attr("transA", 0):
            return None
        axis = 1 if mm.op_type == "Gemm" and mm.attr("transB", 0) else 0
        w = mm.inputs[1]
        q = self.e.producer(w)
        if q is not None:
            if not (q.domain == QONNX and q.op_type in _QONNX_ELEMENTWISE) or not self.e.is_const(q.inputs[0]):
                return None
            for param in q.inputs[1:]:
                c = np.asarray(self.e.inits.get(param, np.zeros((2, 2))))
                if not param or (c.ndim == 2 and c.shape[axis] != 1) or c.ndim > 2 or (c.ndim == 1 and axis == 1 and c.size > 1):
                    return None
            w = q.inputs[0]
        shared = [n for n in self.e.readers(w) if n is not (q if q is not None else mm)]
        if not self.e.is_const(w) or np.ndim(self.e.inits[w]) != 2 or shared:
            return None
        return w, axis


def _count(graph: Graph) -> int:
    return sum(n.op_type == "Transpose" and n.domain == DEFAULT for n in graph.nodes)


def _sink(graph: Graph, names: set[str]) -> Graph:
    """``graph`` with the Transposes ``names`` moved down as far as they go."""
    s = _Sinker(graph, names)
    steps = 0
    while steps < _MAX_STEPS and s.step():
        steps += 1
    if steps:
        s.e.nodes = [n for n in s.e.nodes if not (n.op_type == "Transpose" and not s.e.readers(n.outputs[0])
                                                   and n.outputs[0] not in s.e.outputs)]
        graph = s.e.graph()
    a = _Sinker(graph, s.moving)
    return a.e.graph() if a.absorb_all() else graph


def sink_transposes(graph: Graph) -> Graph:
    """Each Transpose moved down, and absorbed into a dense layer where it then can be, when
    that leaves fewer Transposes (it met its inverse, was absorbed, or Transposes joined), then
    all of them together (Transposes that meet at a join of two branches); one that would only
    move stays where the exporter put it (a model input's layout Transpose, which the importers
    read as such)."""
    names = [n.name for n in graph.nodes if n.op_type == "Transpose" and n.domain == DEFAULT]
    for group in [{name} for name in names] + [set(names)]:   # one at a time, then those that meet at a join
        group &= {n.name for n in graph.nodes if n.op_type == "Transpose"}
        if group:
            trial = _sink(graph, group)
            if _count(trial) < _count(graph):
                graph = trial
    return graph
