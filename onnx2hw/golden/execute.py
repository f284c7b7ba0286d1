"""``execute(graph, feeds) -> {output name: array}`` over the golden op registry."""
from __future__ import annotations

from typing import Mapping

import numpy as np

from ..ir.errors import ModelError, UnsupportedError
from ..ir.graph import Graph
from .registry import is_registered, lookup

__all__ = ["execute", "unsupported_nodes"]


def unsupported_nodes(graph: Graph) -> list[str]:
    """Every node the golden executor cannot run, as ``"name (domain::Op)"``."""
    return [f"{n.name} ({n.domain + '::' if n.domain else ''}{n.op_type})"
            for n in graph.nodes if not is_registered(n.domain, n.op_type)]


def execute(graph: Graph, feeds: Mapping[str, np.ndarray], *, outputs=None,
            keep_intermediates: bool = False) -> dict[str, np.ndarray]:
    """Run ``graph`` on ``feeds`` (batch is whatever the leading dims say).

    ``outputs`` selects which values to return (default: the graph outputs);
    ``keep_intermediates`` returns every value computed.
    """
    missing = unsupported_nodes(graph)
    if missing:
        raise UnsupportedError("golden executor has no implementation for: " + ", ".join(missing))
    env: dict[str, np.ndarray] = dict(graph.initializers)
    for name, value in feeds.items():
        if name not in graph.input_names and name not in graph.overridable:
            raise ModelError(f"feed {name!r} is not an input of the model (inputs: {', '.join(graph.input_names)})")
        env[name] = np.asarray(value)
    for vi in graph.inputs:
        if vi.name not in env:
            raise ModelError(f"no value fed for model input {vi.name!r}")
    wanted = list(outputs) if outputs is not None else list(graph.output_names)
    # free each value after its last use unless it is wanted
    last_use: dict[str, int] = {}
    if not keep_intermediates:
        for i, node in enumerate(graph.nodes):
            for name in node.inputs:
                last_use[name] = i
    keep = set(wanted) | set(graph.initializers)
    for i, node in enumerate(graph.nodes):
        args = [env[name] if name else None for name in node.inputs]
        result = lookup(node.domain, node.op_type)(node, *args)
        if not isinstance(result, tuple):
            result = (result,)
        for name, value in zip(node.outputs, result):
            if name:
                env[name] = value
        if not keep_intermediates:
            for name in node.inputs:
                if name and last_use.get(name) == i and name not in keep:
                    env.pop(name, None)
    if keep_intermediates:
        return env
    return {name: env[name] for name in wanted}
