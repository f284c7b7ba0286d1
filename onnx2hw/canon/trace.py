"""Shapes and constants of every value, found by running the graph.

The golden executor runs the graph on zero inputs with the batch set to 2 and to 3 (or once at
a fixed batch). A value's shape is then known for any batch: a dim that differs between the two
runs is the batch (``None``), the others are literal. This covers ops that ONNX shape inference
does not know (QONNX's ``Quant``, ``BipolarQuant``, ``Trunc``, ...) and files that carry no
``value_info``. A value computed only from constants and from the shapes of other values has the
same contents in both runs; :func:`constant_values` finds those.
"""
from __future__ import annotations

import dataclasses

import numpy as np
from onnx import helper

from ..golden.execute import execute, unsupported_nodes
from ..ir.errors import ModelError, UnsupportedError
from ..ir.graph import Graph, ValueInfo
from ..ir.memo import per_graph

__all__ = ["Trace", "trace", "trace_for"]

#: the two batch sizes of a dynamic-batch run
BATCHES = (2, 3)
#: a run needs at most this many elements in one input (a larger model is not traced)
_MAX_INPUT = 1 << 24


@dataclasses.dataclass(frozen=True)
class Trace:
    """The values of one run per batch (``runs[k]`` at ``batches[k]``)."""

    batches: tuple[int, ...]
    runs: tuple[dict[str, np.ndarray], ...]

    def shape(self, name: str) -> tuple[int | None, ...] | None:
        """``name``'s shape, ``None`` for a dim that follows the batch; ``None`` if not traced."""
        shapes = [np.shape(r[name]) for r in self.runs if name in r]
        if len(shapes) != len(self.runs) or len({len(s) for s in shapes}) != 1:
            return None
        return tuple(d[0] if len(set(d)) == 1 else None for d in zip(*shapes))

    def batch_first(self, name: str) -> bool:
        """``name``'s first dim is the batch in every run."""
        return all(name in r and np.ndim(r[name]) >= 1 and np.shape(r[name])[0] == b
                   for r, b in zip(self.runs, self.batches))

    def same(self, name: str) -> bool:
        """``name`` has the same contents in every run (a constant of the graph, if computed
        from constants and shapes only: the caller knows which)."""
        vals = [r.get(name) for r in self.runs]
        if any(v is None or not isinstance(v, np.ndarray) for v in vals):
            return False
        return all(v.shape == vals[0].shape and v.dtype == vals[0].dtype and np.array_equal(v, vals[0])
                   for v in vals[1:])

    def value(self, name: str) -> np.ndarray:
        return self.runs[0][name]

    def value_info(self, name: str) -> ValueInfo | None:
        """``name`` as a tensor type: element type from its dtype, the batch dim left open."""
        v = self.runs[0].get(name)
        shape = self.shape(name)
        if not isinstance(v, np.ndarray) or shape is None:
            return None
        try:
            elem = helper.np_dtype_to_tensor_dtype(v.dtype)
        except (KeyError, TypeError, ValueError):
            return None
        return ValueInfo(name, "tensor", int(elem), shape)


def _batches(graph: Graph) -> tuple[int, ...] | None:
    """The batches to run: (2, 3) for a dynamic batch, the one fixed batch, or ``None`` when an
    input has an unknown non-batch dim (or inputs disagree on a fixed batch)."""
    fixed = set()
    for v in graph.inputs:
        if v.name in graph.overridable:
            continue
        if v.kind != "tensor" or not v.shape or any(not isinstance(d, int) or d < 1 for d in v.shape[1:]):
            return None
        if isinstance(v.shape[0], int) and v.shape[0] > 0:
            fixed.add(v.shape[0])
    if len(fixed) > 1:
        return None
    return tuple(fixed) if fixed else BATCHES


@per_graph
def trace(graph: Graph) -> Trace | None:
    """The runs of ``graph`` on zero inputs, or ``None`` when it cannot run that way (an op the
    golden executor lacks, an unknown input dim, an error on zeros); once per graph object (rules
    that leave a graph as it was share its runs)."""
    batches = _batches(graph)
    if batches is None or unsupported_nodes(graph):
        return None
    runs = []
    for b in batches:
        feeds = {}
        for v in graph.inputs:
            if v.name in graph.overridable:
                continue
            shape = (b,) + tuple(v.shape[1:])
            if int(np.prod(shape)) > _MAX_INPUT:
                return None
            feeds[v.name] = np.zeros(shape, helper.tensor_dtype_to_np_dtype(v.elem_type))
        try:
            with np.errstate(all="ignore"):
                runs.append(execute(graph, feeds, keep_intermediates=True))
        except (ModelError, UnsupportedError, ArithmeticError, ValueError, TypeError, IndexError):
            return None
    return Trace(batches, tuple(runs))


def trace_for(graph: Graph, ops) -> Trace | None:
    """:func:`trace` of ``graph`` when it has a default-domain node of ``ops`` (a rule's work),
    else ``None`` (nothing to run)."""
    return trace(graph) if any(n.op_type in ops and not n.domain for n in graph.nodes) else None
