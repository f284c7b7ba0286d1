"""A readable summary of a loaded model: what ``onnx2hw inspect`` prints.

The model's own facts (inputs, outputs, operators, parameters, metadata) are read off the graph
as loaded; the operator column and the MACs describe the hardware path's view of it, the
canonical graph (:func:`onnx2hw.canon.canonicalize`) with its host/hardware partition, given as a
:class:`PathView` (:mod:`onnx2hw.verdict` builds one from the front half of ``compile``).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass

import numpy as np
import onnx

from .canon import canonicalize
from .ir.errors import ModelError
from .ir.graph import Graph, Node, ValueInfo
from .ir.simplify import follow_names
from .layers import support as hw_support
from .quant.partition import split

__all__ = ["ModelSummary", "PathView", "STATUSES", "summarize", "path_view", "node_macs", "constant_nodes",
           "op_label"]

_CONV = {"Conv", "ConvInteger", "QLinearConv"}
_MATMUL = {"Gemm", "MatMul", "MatMulInteger", "QLinearMatMul", "QGemm"}
#: ops whose output depends on the shape of their input only
_SHAPE_OPS = {"Shape", "Size"}

#: the operator column's marks: op status -> what it means
STATUSES = {
    "yes": "the hardware runs it",
    "no": "not supported by the hardware path",
    "refused": "supported in general, refused in this model",
    "host": "the host runs it",
    "constant (folded)": "computes constants only: evaluated and folded by canonicalization",
    "folded": "folded into its neighbours by canonicalization",
}


def _type_name(elem_type: int) -> str:
    try:
        return onnx.helper.tensor_dtype_to_string(elem_type).removeprefix("TensorProto.").lower()
    except (KeyError, ValueError):
        return f"type{elem_type}"


def _describe(vi: ValueInfo) -> dict:
    shape = None if vi.shape is None else ["?" if d is None else d for d in vi.shape]
    kind = vi.kind if vi.kind != "tensor" else _type_name(vi.elem_type)
    return {"name": vi.name, "type": kind, "shape": shape}


def _per_sample(shape) -> int | None:
    """Elements of one sample of a batched shape (first dim = batch), None if unknown."""
    if shape is None or len(shape) < 1 or any(not isinstance(d, int) for d in shape[1:]):
        return None
    return int(np.prod(shape[1:], dtype=np.int64))


def _shape(graph: Graph, name: str):
    if name in graph.initializers:
        return graph.initializers[name].shape
    vi = graph.value_info.get(name)
    return None if vi is None or vi.shape is None else vi.shape


def node_macs(graph: Graph, node: Node) -> int | None:
    """Multiply-accumulates of one inference (batch 1) for conv/matmul-like nodes (``None``
    when the shapes it needs are unknown), else 0. A matrix product is counted from its output
    (``outputs x K``) or, when only its input's shape is known, from that (``inputs x N``)."""
    if node.op_type not in _CONV | _MATMUL:
        return 0
    w_index = 3 if node.op_type in ("QLinearConv", "QLinearMatMul", "QGemm") else 1
    w = _shape(graph, node.inputs[w_index]) if len(node.inputs) > w_index else None
    if w is None or any(not isinstance(d, int) for d in w) or len(w) < (3 if node.op_type in _CONV else 2):
        return None
    n_out = _per_sample(_shape(graph, node.outputs[0]))
    if node.op_type in _CONV:
        return None if n_out is None else n_out * int(np.prod(w[1:], dtype=np.int64))
    k, n = (w[1], w[0]) if node.op_type in ("Gemm", "QGemm") and node.attr("transB", 0) else (w[-2], w[-1])
    if n_out is not None:
        return n_out * int(k)
    if node.attr("transA", 0):
        return None
    n_in = _per_sample(_shape(graph, node.inputs[0]))
    return None if n_in is None else n_in * int(n)


def constant_nodes(graph: Graph) -> frozenset[str]:
    """Names of the nodes whose outputs do not depend on the values of the graph's inputs: they
    read initializers, other such nodes' outputs, or only the shape of a value (``Shape``,
    ``Size``). Nodes with sub-graphs are never counted."""
    data = set(graph.input_names) - set(graph.initializers)
    const = set()
    for n in graph.nodes:
        reads_data = any(i in data for i in n.inputs if i)
        if n.domain == "" and n.op_type in _SHAPE_OPS:
            reads_data = False
        if reads_data or any(isinstance(v, Graph) for v in n.attrs.values()):
            data.update(o for o in n.outputs if o)
        else:
            const.add(n.name)
    return frozenset(const)


def op_label(domain: str, op: str) -> str:
    return f"{domain}::{op}" if domain else op


def _stored_bytes(a: np.ndarray) -> int:
    """Bytes as ONNX stores the tensor (4-bit types packed two per byte)."""
    if a.dtype.name in ("int4", "uint4", "float4_e2m1fn"):
        return (int(a.size) + 1) // 2
    return int(a.nbytes)


@dataclass(frozen=True)
class PathView:
    """The hardware path's view of a model: its canonical graph, the nodes the host runs (by
    name) after the tensors ``cuts`` where the hardware ends, and the node compile refuses with
    its one-line message (``refused``: ``(node name, message)``, or ``None``)."""

    canonical: Graph
    host_nodes: tuple[str, ...] = ()
    cuts: tuple[str, ...] = ()
    refused: tuple[str, str] | None = None


def path_view(graph: Graph, host=()) -> PathView:
    """The canonical graph of ``graph`` and its partition with ``host`` (node names of either
    graph) on the host; no partition when it refuses them."""
    canonical = canonicalize(graph)
    try:
        parts = split(canonical, follow_names(graph, canonical, host))
    except ModelError:
        return PathView(canonical)
    if parts.tail is None:
        return PathView(canonical)
    return PathView(canonical, tuple(n.name for n in parts.tail.nodes), parts.cuts)


@dataclass(frozen=True)
class ModelSummary:
    path: str
    ir_version: int
    producer: str
    opsets: dict
    inputs: list
    outputs: list
    op_histogram: dict
    parameters: int
    parameter_bytes: int
    layers: list  # [{"name", "op", "macs"}] for MAC-carrying nodes of the canonical graph
    total_macs: int | None
    metadata: dict
    warnings: list
    #: [{"op", "count", "status", "supported", "mapping", "where"}]: status one of STATUSES,
    #: where "hardware" | "host" | "folded"
    hardware: list
    #: the host/hardware partition: {"cuts": tensors the hardware ends at ("cut": the first),
    #: "nodes": host node names}
    host: dict | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def _row(op: str, count: int, status: str, where: str, mapping: str) -> dict:
    supported = status not in ("no", "refused")
    return {"op": op, "count": count, "status": status, "supported": supported, "mapping": mapping, "where": where}


def _by_count(counter: Counter):
    return sorted(((k, v) for k, v in counter.items() if v > 0), key=lambda kv: (-kv[1], kv[0]))


def _operator_rows(graph: Graph, view: PathView) -> list[dict]:
    """One row per op: of the canonical graph (on the hardware, refused, or on the host), then
    of the ops canonicalization removed (constant computations, or folded into neighbours)."""
    hw_graph, on_host = view.canonical, set(view.host_nodes)
    refused = None
    if view.refused is not None:
        node = next((n for n in hw_graph.nodes + graph.nodes if n.name == view.refused[0]), None)
        refused = None if node is None else (node.domain, node.op_type)
    ops = Counter((n.domain, n.op_type) for n in hw_graph.nodes if n.name not in on_host)
    host_ops = Counter((n.domain, n.op_type) for n in hw_graph.nodes if n.name in on_host)
    kept = {n.name for n in hw_graph.nodes}
    const = constant_nodes(graph)
    gone = Counter((n.domain, n.op_type) for n in graph.nodes)
    gone.subtract(Counter((n.domain, n.op_type) for n in hw_graph.nodes))
    rows = []
    for (domain, op), count in _by_count(ops):
        mapping = hw_support(domain, op)
        if (domain, op) == refused and mapping is not None:
            rows.append(_row(op_label(domain, op), count, "refused", "hardware", view.refused[1]))
        elif mapping is not None:
            rows.append(_row(op_label(domain, op), count, "yes", "hardware", mapping))
        else:
            rows.append(_row(op_label(domain, op), count, "no", "hardware", STATUSES["no"]))
    removed = Counter({k: v for k, v in gone.items() if k not in ops and k not in host_ops})
    for (domain, op), count in _by_count(removed):
        constant = all(n.name in const and n.name not in kept for n in graph.nodes
                       if (n.domain, n.op_type) == (domain, op))
        status = "constant (folded)" if constant else "folded"
        rows.append(_row(op_label(domain, op), count, status, "folded", STATUSES[status]))
    for (domain, op), count in _by_count(host_ops):
        rows.append(_row(op_label(domain, op), count, "host", "host",
                         f"on the host, after the hardware's output {', '.join(map(repr, view.cuts))}"))
    return rows


def _macs(graph: Graph) -> tuple[list[dict], int | None]:
    layers, total = [], 0
    for node in graph.nodes:
        macs = node_macs(graph, node)
        if macs != 0:
            layers.append({"name": node.name, "op": node.op_type, "macs": macs})
            total = None if macs is None or total is None else total + macs
    return layers, total


def summarize(graph: Graph, path: str = "", view: PathView | None = None) -> ModelSummary:
    """The model as loaded; the operator column and the MACs describe ``view`` (by default
    :func:`path_view` of ``graph``)."""
    view = path_view(graph) if view is None else view
    layers, total = _macs(view.canonical)
    params = sum(int(a.size) for a in graph.initializers.values())
    nbytes = sum(_stored_bytes(a) for a in graph.initializers.values())
    producer = " ".join(p for p in (graph.producer_name, graph.producer_version) if p)
    return ModelSummary(
        path=path, ir_version=graph.ir_version, producer=producer,
        opsets={(d or "ai.onnx"): v for d, v in graph.opsets.items()},
        inputs=[_describe(v) for v in graph.inputs], outputs=[_describe(v) for v in graph.outputs],
        op_histogram=dict(Counter(op_label(n.domain, n.op_type) for n in graph.nodes)),
        parameters=params, parameter_bytes=nbytes, layers=layers, total_macs=total,
        metadata=dict(graph.metadata), warnings=list(graph.warnings), hardware=_operator_rows(graph, view),
        host=None if not view.cuts else {"cut": view.cuts[0], "cuts": list(view.cuts), "nodes": list(view.host_nodes)},
    )
