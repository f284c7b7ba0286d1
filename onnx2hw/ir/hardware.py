"""What in a loaded :class:`Graph` the hardware path cannot build.

The IR front end loads every valid ONNX model; the integer dataflow
hardware path only handles dense numeric tensors in straight-line graphs.
"""
from __future__ import annotations

from onnx import SparseTensorProto, TensorProto

from .dtypes import HARDWARE_ELEM_TYPES, elem_type_name
from .graph import Graph

__all__ = ["hardware_issues", "CONTROL_FLOW_OPS", "NON_TENSOR_OPS"]

CONTROL_FLOW_OPS = frozenset({"If", "Loop", "Scan"})

#: default-domain ops whose inputs or outputs are sequences, maps or optionals
NON_TENSOR_OPS = frozenset({
    "SequenceConstruct", "SequenceEmpty", "SequenceInsert", "SequenceErase", "SequenceAt",
    "SequenceLength", "SequenceMap", "SplitToSequence", "ConcatFromSequence",
    "Optional", "OptionalGetElement", "OptionalHasElement",
})


def _value_issue(name: str, vi) -> str | None:
    if vi.kind in ("sequence", "map", "optional"):
        article = "an" if vi.kind == "optional" else "a"
        return f"value {name!r} is {article} {vi.kind}; the hardware path supports only dense tensors"
    if vi.kind == "sparse_tensor":
        return f"value {name!r} is a sparse tensor; the hardware path supports only dense tensors"
    if vi.kind == "unknown":
        return f"value {name!r} has no known type; the hardware path needs typed dense tensors"
    if vi.elem_type == TensorProto.STRING:
        return f"value {name!r} is a string tensor; the hardware path supports only numeric tensors"
    if vi.elem_type and vi.elem_type not in HARDWARE_ELEM_TYPES:
        return (f"value {name!r} has element type {elem_type_name(vi.elem_type)}, "
                f"which the hardware path does not support")
    return None


def _holds(value, cls) -> bool:
    return isinstance(value, cls) or (isinstance(value, tuple) and any(isinstance(x, cls) for x in value))


def hardware_issues(graph: Graph) -> list[str]:
    """One message per value or node the hardware path cannot build.

    Reports sequences, maps, optionals, string, complex and other
    non-hardware element types, sparse tensors (initializers, values and
    attributes) and control flow (``If``/``Loop``/``Scan`` or any node with a
    sub-graph). Sub-graphs are not searched: their node is already reported.
    An empty list means nothing blocks the hardware path at IR level.
    """
    issues: list[str] = []
    seen: set[str] = set()
    for name in sorted(graph.sparse_initializers):
        issues.append(f"initializer {name!r} is a sparse tensor; the hardware path supports only dense tensors")
        seen.add(name)
    ordered = [vi.name for vi in graph.inputs] + sorted(graph.value_info) + [vi.name for vi in graph.outputs]
    for name in ordered:
        if name in seen:
            continue
        seen.add(name)
        vi = graph.value_info.get(name)
        if vi is None:
            continue
        issue = _value_issue(name, vi)
        if issue:
            issues.append(issue)
    for node in graph.nodes:
        label = f"node {node.name!r} ({node.op_type})"
        has_graph = any(_holds(v, Graph) for v in node.attrs.values())
        if node.domain == "" and node.op_type in CONTROL_FLOW_OPS or has_graph:
            issues.append(f"{label} is control flow (sub-graphs); the hardware path supports only "
                          f"straight-line graphs")
        if node.domain == "" and node.op_type in NON_TENSOR_OPS:
            issues.append(f"{label} works on sequences or optionals; the hardware path supports only "
                          f"dense tensors")
        for key, value in node.attrs.items():
            if _holds(value, SparseTensorProto):
                issues.append(f"{label} attribute {key!r} is a sparse tensor; the hardware path supports "
                              f"only dense tensors")
    return issues
