"""``execute(graph, feeds) -> {output name: array}`` over the golden op registry."""
from __future__ import annotations

from typing import Mapping

import numpy as np

from ..ir.dims import bind_dims
from ..ir.errors import ModelError, UnsupportedError
from ..ir.graph import Graph
from ..layers import IntegerGraph
from .integer import execute_integer
from .registry import is_registered, lookup

__all__ = ["execute", "unsupported_nodes", "run_node"]


def unsupported_nodes(graph: Graph) -> list[str]:
    """Every node the golden executor cannot run, as ``"name (domain::Op)"``."""
    return [f"{n.name} ({n.domain + '::' if n.domain else ''}{n.op_type})"
            for n in graph.nodes if not is_registered(n.domain, n.op_type)]


def execute(graph: Graph, feeds: Mapping[str, np.ndarray], *, outputs=None,
            keep_intermediates: bool = False) -> dict[str, np.ndarray]:
    """Run ``graph`` on ``feeds`` (batch is whatever the leading dims say).

    Feeds are checked by :func:`onnx2hw.ir.bind_dims` (dtype, rank, fixed dims, one
    size per ``dim_param``); an initializer that is also a graph input may be fed to
    override it. Sequence/optional feeds pass through as given. ``outputs`` selects
    which values to return (default: the graph outputs); ``keep_intermediates``
    returns every value computed.
    """
    if isinstance(graph, IntegerGraph):  # exact integer path
        return execute_integer(graph, feeds, outputs=outputs, keep_intermediates=keep_intermediates)
    missing = unsupported_nodes(graph)
    if missing:
        raise UnsupportedError("golden executor has no implementation for: " + ", ".join(missing))
    bind_dims(graph, feeds)
    env: dict[str, np.ndarray] = dict(graph.initializers)
    for name, value in feeds.items():
        vi = graph.value_info.get(name)
        env[name] = value if vi is not None and vi.kind != "tensor" else np.asarray(value)
    wanted = list(outputs) if outputs is not None else list(graph.output_names)
    known = set(env) | {o for n in graph.nodes for o in n.outputs if o}
    for name in wanted:
        if name not in known:
            raise ModelError(f"requested output {name!r} is not a value of the graph")
    # free each value after its last use unless it is wanted
    last_use: dict[str, int] = {}
    if not keep_intermediates:
        for i, node in enumerate(graph.nodes):
            for name in node.inputs:
                last_use[name] = i
    keep = set(wanted) | set(graph.initializers)
    for i, node in enumerate(graph.nodes):
        try:
            args = [env[name] if name else None for name in node.inputs]
        except KeyError as e:
            raise ModelError(f"node {node.name!r} reads {e.args[0]!r}, which no earlier node or input defines") from None
        try:
            result = lookup(node.domain, node.op_type)(node, *args)
        except ModelError:
            raise
        except MemoryError:
            raise ModelError(f"node {node.name!r} ({node.op_type}): its output does not fit in memory "
                             "(check its attributes and input shapes)") from None
        except ValueError as exc:   # NumPy's own refusal (e.g. a dimension past its limit)
            raise ModelError(f"node {node.name!r} ({node.op_type}): {exc}") from None
        if not isinstance(result, tuple):
            result = (result,)
        for name, value in zip(node.outputs, result):
            if name:
                env[name] = np.asarray(value) if isinstance(value, np.generic) else value
        if not keep_intermediates:
            for name in node.inputs:
                if name and last_use.get(name) == i and name not in keep:
                    env.pop(name, None)
    if keep_intermediates:
        return env
    return {name: env[name] for name in wanted}


def run_node(node, *inputs) -> tuple:
    """One node's outputs (a tuple, one array per output) from its input arrays, by ONNX semantics."""
    if not is_registered(node.domain, node.op_type):
        raise UnsupportedError(f"golden executor has no implementation for {node.op_type!r}")
    result = lookup(node.domain, node.op_type)(node, *inputs)
    return result if isinstance(result, tuple) else (result,)
