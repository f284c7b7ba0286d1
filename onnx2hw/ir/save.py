"""``to_model(graph) -> onnx.ModelProto``: a loaded :class:`Graph` written back as ONNX.

Used for the small graphs the compiler derives from a model (the host tail a build keeps, see
:mod:`onnx2hw.quant.partition`); the result passes ``onnx.checker`` and loads back with
:func:`onnx2hw.ir.load` into an equal graph. Sub-graph, sparse and type-proto attributes are not
written (no derived graph has them): they raise :class:`~onnx2hw.ir.errors.ModelError`.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import AttributeProto, helper, numpy_helper

from .errors import ModelError
from .graph import Graph, Node, ValueInfo

__all__ = ["to_model"]


def _value_info(vi: ValueInfo) -> onnx.ValueInfoProto:
    if vi.kind != "tensor":
        raise ModelError(f"value {vi.name!r}: a {vi.kind} value cannot be written")
    return helper.make_tensor_value_info(vi.name, vi.elem_type, None if vi.shape is None else list(vi.shape))


def _attr_type(node: Node, name: str, opset: int) -> int | None:
    """The attribute's declared type from the op schema (``None`` for ops onnx does not know)."""
    try:
        schema = onnx.defs.get_schema(node.op_type, opset, node.domain)
    except Exception:  # noqa: BLE001 - SchemaError: a custom domain (com.microsoft, QONNX)
        return None
    a = schema.attributes.get(name)
    return None if a is None else int(a.type)


def _attribute(node: Node, name: str, value, opset: int) -> AttributeProto:
    where = f"node {node.name!r} attribute {name!r}"
    if isinstance(value, (Graph, onnx.SparseTensorProto, onnx.TypeProto)) or (
            isinstance(value, tuple) and any(isinstance(v, (Graph, onnx.SparseTensorProto, onnx.TypeProto))
                                             for v in value)):
        raise ModelError(f"{where}: {type(value).__name__} attributes cannot be written")
    if isinstance(value, np.ndarray):
        return helper.make_attribute(name, numpy_helper.from_array(value))
    if isinstance(value, tuple) and value and isinstance(value[0], np.ndarray):
        return helper.make_attribute(name, [numpy_helper.from_array(v) for v in value])
    kind = _attr_type(node, name, opset)
    if kind == AttributeProto.FLOATS or (kind is None and isinstance(value, tuple) and
                                         any(isinstance(v, float) for v in value)):
        return helper.make_attribute(name, [float(v) for v in value], attr_type=AttributeProto.FLOATS)
    if kind == AttributeProto.FLOAT:
        return helper.make_attribute(name, float(value), attr_type=AttributeProto.FLOAT)
    if isinstance(value, tuple) and not value:
        return helper.make_attribute(name, [], attr_type=kind if kind is not None else AttributeProto.INTS)
    return helper.make_attribute(name, list(value) if isinstance(value, tuple) else value)


def to_model(graph: Graph) -> onnx.ModelProto:
    """``graph`` (a main graph, not a sub-graph) as a checked ``ModelProto``."""
    opsets = dict(graph.opsets)
    nodes = []
    for n in graph.nodes:
        proto = helper.make_node(n.op_type, list(n.inputs), list(n.outputs), name=n.name, domain=n.domain)
        proto.attribute.extend(_attribute(n, k, v, opsets.get(n.domain, 1)) for k, v in n.attrs.items())
        nodes.append(proto)
    inits = [numpy_helper.from_array(np.asarray(v), k) for k, v in graph.initializers.items()]
    known = set(graph.input_names) | set(graph.output_names)
    value_info = [_value_info(v) for k, v in graph.value_info.items()
                  if k not in known and v.kind == "tensor" and v.elem_type]
    g = helper.make_graph(nodes, graph.name or "graph", [_value_info(v) for v in graph.inputs],
                          [_value_info(v) for v in graph.outputs], inits, value_info=value_info)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid(d, v) for d, v in sorted(opsets.items())],
                              producer_name="onnx2hw")
    model.ir_version = max(int(graph.ir_version or 0), 7)
    try:
        onnx.checker.check_model(model)
    except Exception as exc:  # noqa: BLE001 - a bug in this writer, reported as one line
        raise ModelError(f"internal error: graph {graph.name!r} written back fails onnx.checker: {exc}") from None
    return model
