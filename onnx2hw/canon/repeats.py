"""Chains of views and tilings that repeat each pixel: nearest up-sampling, as a ``Resize``.

A chain of views (``Reshape``, ``Transpose``, ``Flatten``, ``Squeeze``, ``Unsqueeze``), tilings
(``Tile`` and ``Expand`` by constants) and ops that act on each element alone (per-tensor
quantizers, elementwise ops of scalar constants), from an activation ``x`` to a value ``y`` of
shape ``(N, C, *S)`` that equals ``x``, possibly transposed, with each spatial position repeated
``r`` times along its axis (an integer ``r`` per axis, at least one above 1), is those elementwise
ops, the ``Transpose``, then ``Resize(nearest, asymmetric, floor)`` with the scales ``(1, 1, *r)``
(``out[i] = in[floor(i / r)]``: each position ``r`` times); the longest such chain. Keras' ``UpSampling1D/2D``
through tf2onnx (``ops.repeat``: ``Unsqueeze -> Tile -> Reshape`` per axis, between the
converter's Transposes) writes such a chain. The net effect is found by running the chain on an
index tensor (``np.arange``), in each traced run (every batch), not by matching the pattern.
Exact: repeating moves values without changing them, and the elementwise ops act on each element.
"""
from __future__ import annotations

import dataclasses
import itertools

import numpy as np

from ..ir.graph import Graph, Node
from .channels import elementwise_alone
from .edit import DEFAULT, Edit
from .trace import Trace, trace_for

__all__ = ["nearest_repeats"]

_VIEWS = frozenset({"Reshape", "Transpose", "Flatten", "Squeeze", "Unsqueeze"})
_TILES = frozenset({"Tile", "Expand"})


def nearest_repeats(graph: Graph) -> Graph:
    """Each chain from an activation that repeats its pixels as a ``Resize`` (module docstring)."""
    while (t := trace_for(graph, _TILES)) is not None:
        e = Edit(graph)
        found = next((hit for v in _activations(e, t) for r in e.readers(v)
                      if (hit := _chain(e, t, v, r)) is not None), None)
        if found is None:
            break
        _to_resize(e, *found)
        graph = e.graph()
    return graph


def _activations(e: Edit, t: Trace) -> list[str]:
    """Values a chain may start from: computed tensors of rank 3 or 4, batch first."""
    names = list(e.source.input_names) + [o for n in e.nodes for o in n.outputs if o]
    return [v for v in names if not e.is_const(v) and v in t.runs[0] and np.ndim(t.runs[0][v]) in (3, 4)
            and t.batch_first(v)]


def _run(e: Edit, n: Node, x: np.ndarray, out_shape) -> np.ndarray | None:
    """The view or tiling ``n`` of the index tensor ``x``; ``None`` if it is neither, its
    constants are not there, or the result's shape is not the traced one."""
    if n.domain != DEFAULT:
        return None
    if n.op_type == "Transpose":
        perm = n.attr("perm")
        y = np.transpose(x, [int(a) for a in perm] if perm is not None else None)
    elif n.op_type in _VIEWS:
        y = x.reshape(out_shape)
    elif n.op_type in _TILES and len(n.inputs) == 2 and e.is_const(n.inputs[1]):
        arg = [int(v) for v in np.asarray(e.inits[n.inputs[1]]).reshape(-1)]
        if n.op_type == "Tile":
            y = np.tile(x, arg) if len(arg) == x.ndim else None
        else:
            y = np.broadcast_to(x, np.broadcast_shapes(x.shape, tuple(arg)))
    else:
        return None
    return y if y is not None and y.shape == tuple(out_shape) else None


def _perms(rank: int):
    """Axis orders that keep the batch first, the identity first."""
    return [(0, *p) for p in itertools.permutations(range(1, rank))]


def _repeats(x: np.ndarray, y: np.ndarray) -> tuple | None:
    """``(p, factors, q, shape, z shape)``: ``y`` is ``z = transpose(x, p)`` repeated ``factors[a]`` times
    along each axis ``a`` (batch and channels, axes 0 and 1 of ``z``, not repeated; some factor
    above 1), transposed by ``q`` and, where ``y`` has unit axes more than ``x`` (``shape`` not
    ``None``), reshaped to ``shape`` (the shapes' batch ``None``: the same in every run)."""
    shape = None
    if y.ndim != x.ndim:
        kept = [0] + [a for a in range(1, y.ndim) if y.shape[a] != 1]
        if len(kept) != x.ndim:
            return None
        shape, y = (None, *y.shape[1:]), y.reshape([y.shape[a] for a in kept])
    if x.ndim not in (3, 4):
        return None
    for p in _perms(x.ndim):
        z0 = np.transpose(x, p)
        for q in _perms(x.ndim):
            inv = np.argsort(q)
            target = [y.shape[int(inv[a])] for a in range(x.ndim)]     # repeat(z0)'s shape
            if any(t % n for t, n in zip(target, z0.shape)):
                continue
            factors = tuple(t // n for t, n in zip(target, z0.shape))
            if factors[:2] != (1, 1) or max(factors) == 1:
                continue
            z = z0
            for a, f in enumerate(factors):
                z = np.repeat(z, f, axis=a)
            if np.array_equal(np.transpose(z, q), y):
                return p, factors, q, shape, (None, *z0.shape[1:])
    return None


def _chain(e: Edit, t: Trace, value: str, first: Node):
    """``(value, nodes, perm, factors)``: the longest chain from ``value`` through ``first`` and its
    sole readers that repeats ``value``'s pixels (the same way in every traced run) with a tiling
    in it; ``None`` if there is none."""
    xs = [np.arange(int(np.prod(np.shape(r[value]), dtype=np.int64)), dtype=np.int64).reshape(np.shape(r[value]))
          for r in t.runs]
    starts, nodes, node, cur, tiled, best = xs, [], first, value, False, None
    while node is not None and node.inputs and node.inputs[0] == cur and len(node.outputs) == 1 \
            and cur not in node.inputs[1:] and all(node.outputs[0] in r for r in t.runs):
        out = node.outputs[0]
        if elementwise_alone(e, node):
            nodes.append(node)
        else:
            xs = [_run(e, node, x, np.shape(r[out])) for x, r in zip(xs, t.runs)]
            if any(x is None for x in xs):
                break
            nodes.append(node)
            tiled |= node.op_type in _TILES
            hits = [_repeats(x0, x) for x0, x in zip(starts, xs)] if tiled else [None]
            if hits[0] is not None and all(h == hits[0] for h in hits):
                best = (value, list(nodes), *hits[0])
        node, cur = e.sole_reader(out), out
    return best


def _steps(p, factors, q, shape, zshape) -> list[tuple[str, object]]:
    """The ops of a repeat :func:`_repeats` found: ``Transpose(p)``, ``Resize(factors)``,
    ``Transpose(q)``, ``Reshape(shape)``; where ``y`` is a channels-first image with unit axes
    that ``x`` lacks (a signal repeated into an ``H = 1`` image), the views first and the
    ``Resize`` on ``y``'s layout, repeating commuting with views that keep the repeated axes; a
    signal ``(N, C, L)`` resized as the image ``(N, C, 1, L)`` (the importer resizes images).
    Identity transposes left out."""
    if shape is not None and len(shape) == 4:
        pq = tuple(p[k] for k in q)
        kept = [0] + [a for a in range(1, len(shape)) if shape[a] != 1]
        fy = [1] * len(shape)
        for k, a in enumerate(kept):
            fy[a] = factors[q[k]]
        if fy[1] == 1:
            before = (None, *(d // f for d, f in zip(shape[1:], fy[1:])))
            steps = [("Transpose", pq), ("Reshape", before), ("Resize", tuple(fy))]
            return [s for s in steps if s[0] != "Transpose" or list(s[1]) != sorted(s[1])]
    resize = [("Resize", factors)]
    if len(zshape) == 3:
        n, c, length = zshape
        resize = [("Reshape", (n, c, 1, length)), ("Resize", (1, 1, 1, factors[2])),
                  ("Reshape", (n, c, length * factors[2]))]
    steps = [("Transpose", p), *resize, ("Transpose", q), ("Reshape", shape)]
    return [s for s in steps if s[0] == "Resize" or (s[0] == "Transpose" and list(s[1]) != sorted(s[1]))
            or (s[0] == "Reshape" and s[1] is not None)]


def _to_resize(e: Edit, value: str, chain: list[Node], p, factors, q, shape, zshape) -> None:
    """``chain`` as its elementwise ops, in order, then the views and the ``Resize`` of
    :func:`_steps`."""
    at = e.nodes.index(chain[0])
    for n in chain:
        e.nodes.remove(n)
    new, cur = [], value
    for n in chain:
        if elementwise_alone(e, n):
            new.append(dataclasses.replace(n, inputs=(cur,) + n.inputs[1:]))
            cur = n.outputs[0]
    out = chain[-1].outputs[0]
    steps = _steps(p, factors, q, shape, zshape)
    for k, (op, arg) in enumerate(steps):
        nxt = out if k == len(steps) - 1 else e.fresh(f"{out}_{op.lower()}")
        attrs = {}
        if op == "Resize":
            ins = [cur, "", e.const("repeat_scales", np.asarray(arg, np.float32))]
            attrs = {"mode": "nearest", "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}
        elif op == "Reshape":
            ins = [cur, e.const("repeat_shape", np.asarray((-1, *arg[1:]), np.int64))]
        else:
            ins, attrs = [cur], {"perm": list(arg)}
        new.append(e.node(op, ins, [nxt], f"nearest_repeat_{op.lower()}", **attrs))
        cur = nxt
    e.nodes[at:at] = new
    e.prune()
