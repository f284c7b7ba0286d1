"""``execute(graph, feeds) -> {output name: array}`` over the golden op registry."""
from __future__ import annotations

from typing import Mapping

import numpy as np
from onnx.helper import tensor_dtype_to_np_dtype

from ..ir.errors import ModelError, UnsupportedError
from ..ir.graph import Graph, ValueInfo
from .registry import is_registered, lookup

__all__ = ["execute", "unsupported_nodes"]


def unsupported_nodes(graph: Graph) -> list[str]:
    """Every node the golden executor cannot run, as ``"name (domain::Op)"``."""
    return [f"{n.name} ({n.domain + '::' if n.domain else ''}{n.op_type})"
            for n in graph.nodes if not is_registered(n.domain, n.op_type)]


def _expected_dtype(vi: ValueInfo) -> np.dtype | None:
    if vi.kind != "tensor" or not vi.elem_type:
        return None
    try:
        return np.dtype(tensor_dtype_to_np_dtype(vi.elem_type))
    except (KeyError, TypeError, ValueError):
        return None


def _check_feed(vi: ValueInfo, value, bound: dict[str, tuple[int, str]]):
    """``value`` as the model input ``vi`` wants it, or a one-line ModelError.

    Tensors must have the declared dtype, rank and fixed dims; a ``dim_param`` must
    have the same size in every input that names it.
    """
    if vi.kind in ("sequence", "optional", "map"):
        return value
    arr = np.asarray(value)
    want = _expected_dtype(vi)
    if want is not None and arr.dtype != want:
        raise ModelError(f"feed {vi.name!r} has dtype {arr.dtype}, the model input expects {want}")
    if vi.shape is None:
        return arr
    if arr.ndim != len(vi.shape):
        raise ModelError(f"feed {vi.name!r} has shape {arr.shape!r}, the model input expects rank {len(vi.shape)} "
                         f"{tuple(vi.shape)!r}")
    for axis, (dim, size) in enumerate(zip(vi.shape, arr.shape)):
        if isinstance(dim, int) and dim != size:
            raise ModelError(f"feed {vi.name!r} has shape {arr.shape!r}, the model input expects {tuple(vi.shape)!r}")
        if isinstance(dim, str):
            seen = bound.setdefault(dim, (size, vi.name))
            if seen[0] != size:
                raise ModelError(f"dimension {dim!r} is {seen[0]} in feed {seen[1]!r} but {size} in feed {vi.name!r}")
    return arr


def execute(graph: Graph, feeds: Mapping[str, np.ndarray], *, outputs=None,
            keep_intermediates: bool = False) -> dict[str, np.ndarray]:
    """Run ``graph`` on ``feeds`` (batch is whatever the leading dims say).

    Feeds are checked against the declared input types (dtype, rank, fixed dims,
    consistent ``dim_param`` sizes); an initializer that is also a graph input may
    be fed to override it. ``outputs`` selects which values to return (default: the
    graph outputs); ``keep_intermediates`` returns every value computed.
    """
    from ..quant.integer_graph import IntegerGraph
    if isinstance(graph, IntegerGraph):  # exact integer path
        from .integer import execute_integer
        return execute_integer(graph, feeds, outputs=outputs, keep_intermediates=keep_intermediates)
    missing = unsupported_nodes(graph)
    if missing:
        raise UnsupportedError("golden executor has no implementation for: " + ", ".join(missing))
    env: dict[str, np.ndarray] = dict(graph.initializers)
    declared = {vi.name: vi for vi in graph.inputs}
    bound: dict[str, tuple[int, str]] = {}
    for name, value in feeds.items():
        if name in declared:
            env[name] = _check_feed(declared[name], value, bound)
        elif name in graph.overridable:
            env[name] = _check_feed(graph.value_info.get(name, ValueInfo(name)), value, bound)
        else:
            raise ModelError(f"feed {name!r} is not an input of the model (inputs: {', '.join(graph.input_names)})")
    for vi in graph.inputs:
        if vi.name not in env:
            raise ModelError(f"no value fed for model input {vi.name!r}")
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
        result = lookup(node.domain, node.op_type)(node, *args)
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
