"""A readable summary of a loaded model: what ``onnx2hw inspect`` prints and reports reuse."""
from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass

import numpy as np
import onnx

from .ir.errors import ModelError
from .ir.graph import Graph, Node, ValueInfo
from .ir.simplify import simplify
from .layers import support as hw_support
from .quant.partition import split

__all__ = ["ModelSummary", "summarize", "node_macs"]

_CONV = {"Conv", "ConvInteger", "QLinearConv"}
_MATMUL = {"Gemm", "MatMul", "MatMulInteger", "QLinearMatMul", "QGemm"}


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


def _weight_shape(graph: Graph, name: str):
    if name in graph.initializers:
        return graph.initializers[name].shape
    vi = graph.value_info.get(name)
    return None if vi is None or vi.shape is None else vi.shape


def node_macs(graph: Graph, node: Node) -> int | None:
    """Multiply-accumulates of one inference (batch 1) for conv/matmul-like nodes, else 0."""
    if node.op_type not in _CONV | _MATMUL:
        return 0
    out = graph.value_info.get(node.outputs[0])
    n_out = _per_sample(out.shape if out else None)
    w_index = 3 if node.op_type in ("QLinearConv", "QLinearMatMul", "QGemm") else 1
    w = _weight_shape(graph, node.inputs[w_index]) if len(node.inputs) > w_index else None
    if n_out is None or w is None or any(not isinstance(d, int) for d in w):
        return None
    if len(w) < (3 if node.op_type in _CONV else 2):  # not a weight this op can have: no count
        return None
    if node.op_type in _CONV:
        return n_out * int(np.prod(w[1:], dtype=np.int64))
    if node.op_type in ("Gemm", "QGemm"):
        k = w[1] if node.attr("transB", 0) else w[0]
        return n_out * int(k)
    return n_out * int(w[-2])  # MatMul: (..., K) x (K, N)


def _stored_bytes(a: np.ndarray) -> int:
    """Bytes as ONNX stores the tensor (4-bit types packed two per byte)."""
    if a.dtype.name in ("int4", "uint4", "float4_e2m1fn"):
        return (int(a.size) + 1) // 2
    return int(a.nbytes)


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
    layers: list  # [{"name", "op", "macs"}] for MAC-carrying nodes
    total_macs: int | None
    metadata: dict
    warnings: list
    hardware: list  # [{"op", "count", "supported", "mapping", "where"}], where: "hardware" | "host"
    #: the host/hardware partition: {"cut": tensor the hardware ends at, "nodes": host node names}
    host: dict | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def summarize(graph: Graph, path: str = "") -> ModelSummary:
    """The model as loaded; the hardware column describes the graph the hardware path takes
    (simplified, partitioned): ops the simplifier removes are listed as folded."""
    hw_graph = simplify(graph)
    try:
        parts = split(hw_graph)
    except ModelError:  # a tail the partition refuses: everything is shown as hardware
        parts = None
    tail = parts.tail if parts is not None else None
    on_host = {n.name for n in tail.nodes} if tail is not None else set()
    ops = Counter((n.domain, n.op_type) for n in hw_graph.nodes if n.name not in on_host)
    host_ops = Counter((n.domain, n.op_type) for n in hw_graph.nodes if n.name in on_host)
    gone = Counter((n.domain, n.op_type) for n in graph.nodes)
    gone.subtract(Counter((n.domain, n.op_type) for n in hw_graph.nodes))
    layers, total = [], 0
    for node in graph.nodes:
        macs = node_macs(graph, node)
        if macs != 0:
            layers.append({"name": node.name, "op": node.op_type, "macs": macs})
            total = None if macs is None or total is None else total + macs
    params = sum(int(a.size) for a in graph.initializers.values())
    nbytes = sum(_stored_bytes(a) for a in graph.initializers.values())
    hardware = []
    for (domain, op), count in sorted(ops.items(), key=lambda kv: (-kv[1], kv[0])):
        mapping = hw_support(domain, op)
        hardware.append({"op": f"{domain}::{op}" if domain else op, "count": count, "where": "hardware",
                         "supported": mapping is not None, "mapping": mapping or "not supported by the hardware path"})
    for (domain, op), count in sorted(((k, v) for k, v in gone.items() if v > 0 and k not in ops and k not in host_ops),
                                      key=lambda kv: (-kv[1], kv[0])):
        hardware.append({"op": f"{domain}::{op}" if domain else op, "count": count, "where": "hardware",
                         "supported": True, "mapping": "folded away by graph simplification (constant shapes, "
                                                       "cancelled transposes, fused bias)"})
    for (domain, op), count in sorted(host_ops.items(), key=lambda kv: (-kv[1], kv[0])):
        hardware.append({"op": f"{domain}::{op}" if domain else op, "count": count, "where": "host",
                         "supported": True, "mapping": f"on the host, after the hardware's output {parts.cut!r}"})
    producer = " ".join(p for p in (graph.producer_name, graph.producer_version) if p)
    return ModelSummary(
        path=path, ir_version=graph.ir_version, producer=producer,
        opsets={(d or "ai.onnx"): v for d, v in graph.opsets.items()},
        inputs=[_describe(v) for v in graph.inputs], outputs=[_describe(v) for v in graph.outputs],
        op_histogram=dict(Counter(n.op_type if not n.domain else f"{n.domain}::{n.op_type}" for n in graph.nodes)),
        parameters=params, parameter_bytes=nbytes, layers=layers, total_macs=total,
        metadata=dict(graph.metadata), warnings=list(graph.warnings), hardware=hardware,
        host=None if tail is None else {"cut": parts.cut, "nodes": [n.name for n in tail.nodes]},
    )
