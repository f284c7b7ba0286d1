"""A graph under rewrite: mutable node list and constants, fresh names, and the frozen
:class:`~onnx2hw.ir.Graph` again at the end (shapes inferred anew by the loader)."""
from __future__ import annotations

import dataclasses

import numpy as np

from ..ir.errors import ModelError
from ..ir.graph import Graph, Node
from ..ir.load import load
from ..ir.names import FreshNames
from ..ir.simplify import to_model

__all__ = ["Edit", "DEFAULT"]

#: the default ONNX domain as :class:`~onnx2hw.ir.Node` spells it
DEFAULT = ""


class Edit:
    """``nodes`` (in order) and ``inits`` (name -> array) of ``graph``, to change in place."""

    def __init__(self, graph: Graph):
        self.source = graph
        self.nodes: list[Node] = list(graph.nodes)
        self.inits: dict[str, np.ndarray] = {k: np.asarray(v) for k, v in graph.initializers.items()}
        self._names = FreshNames(graph)
        self.outputs = frozenset(graph.output_names)

    def fresh(self, base: str) -> str:
        return self._names.fresh(base)

    def const(self, base: str, value) -> str:
        """A new initializer under a fresh name (returned)."""
        name = self.fresh(base)
        self.inits[name] = np.asarray(value)
        return name

    def node(self, op_type: str, inputs, outputs, name: str, **attrs) -> Node:
        """A new default-domain node (not yet placed in :attr:`nodes`)."""
        return Node(name=self.fresh(name), op_type=op_type, domain=DEFAULT, inputs=tuple(inputs),
                    outputs=tuple(outputs), attrs=attrs)

    def producer(self, name: str) -> Node | None:
        return next((n for n in self.nodes if name in n.outputs), None)

    def readers(self, name: str) -> list[Node]:
        return [n for n in self.nodes if name in n.inputs]

    def sole_reader(self, name: str) -> Node | None:
        """The one node reading ``name`` when nothing else (no other node, no graph output) does."""
        rs = self.readers(name)
        return rs[0] if len(rs) == 1 and name not in self.outputs else None

    def replace(self, old: Node, *new: Node) -> None:
        """``old`` replaced by ``new`` (in that order, where ``old`` was)."""
        k = self.nodes.index(old)
        self.nodes[k:k + 1] = list(new)

    def rename_input(self, node: Node, old: str, new: str) -> Node:
        """``node`` reading ``new`` where it read ``old`` (the node is replaced in :attr:`nodes`)."""
        out = dataclasses.replace(node, inputs=tuple(new if i == old else i for i in node.inputs))
        self.replace(node, out)
        return out

    def is_const(self, name: str) -> bool:
        return name in self.inits

    def prune(self) -> None:
        """Drop the nodes whose outputs nothing reads (what fed a view now literal, ...)."""
        while True:
            used = {i for n in self.nodes for i in n.inputs} | set(self.outputs)
            live = [n for n in self.nodes if any(o in used for o in n.outputs)]
            if len(live) == len(self.nodes):
                return
            self.nodes = live

    def graph(self) -> Graph:
        """The edited graph, checked and with shapes inferred again; unused constants dropped."""
        used = {i for n in self.nodes for i in n.inputs} | set(self.outputs)
        inits = {k: v for k, v in self.inits.items() if k in used}
        g = dataclasses.replace(self.source, nodes=tuple(self.nodes), initializers=inits,
                                overridable=frozenset(self.source.overridable & set(inits)),
                                value_info={v.name: v for v in self.source.inputs + self.source.outputs})
        model = to_model(g)
        if model is None:
            raise ModelError("canonicalization: the graph holds what the writer cannot express")
        return load(model)
