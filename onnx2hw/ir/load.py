"""``load(path_or_model) -> Graph``: read, check and convert an ONNX model."""
from __future__ import annotations

import os
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from .errors import ModelError
from .graph import Graph, Node, ValueInfo

__all__ = ["load", "convert_graph"]

DEFAULT_DOMAINS = ("", "ai.onnx")


def _norm_domain(domain: str) -> str:
    return "" if domain in DEFAULT_DOMAINS else domain


def load(model: str | os.PathLike | bytes | onnx.ModelProto) -> Graph:
    """Load a model file (or a ``ModelProto``) into a checked :class:`Graph`."""
    base_dir = ""
    if isinstance(model, onnx.ModelProto):
        proto = model
    elif isinstance(model, bytes):
        proto = onnx.ModelProto()
        proto.ParseFromString(model)
    else:
        path = os.fspath(model)
        base_dir = os.path.dirname(os.path.abspath(path))
        with open(path, "rb") as f:
            proto = onnx.ModelProto()
            proto.ParseFromString(f.read())
    return convert_model(proto, base_dir)


def convert_model(proto: onnx.ModelProto, base_dir: str = "") -> Graph:
    opsets = {}
    for imp in proto.opset_import:
        opsets[_norm_domain(imp.domain)] = imp.version
    try:
        inferred = onnx.shape_inference.infer_shapes(proto, data_prop=True)
    except Exception:  # shape inference is a helper, not a gate
        inferred = proto
    return convert_graph(
        inferred.graph, opsets, base_dir,
        ir_version=proto.ir_version,
        producer_name=proto.producer_name,
        producer_version=proto.producer_version,
        doc_string=proto.doc_string,
        metadata={p.key: p.value for p in proto.metadata_props},
    )


def value_info(vi: onnx.ValueInfoProto) -> ValueInfo:
    t = vi.type
    which = t.WhichOneof("value")
    if which == "tensor_type" or which == "sparse_tensor_type":
        tt = getattr(t, which)
        shape = None
        if tt.HasField("shape"):
            shape = tuple(
                d.dim_value if d.HasField("dim_value") else (d.dim_param or None) if d.HasField("dim_param") else None
                for d in tt.shape.dim
            )
        kind = "tensor" if which == "tensor_type" else "sparse_tensor"
        return ValueInfo(vi.name, kind, tt.elem_type, shape)
    kinds = {"sequence_type": "sequence", "map_type": "map", "optional_type": "optional"}
    return ValueInfo(vi.name, kinds.get(which, "unknown"))


def tensor_to_array(t: onnx.TensorProto, base_dir: str = "") -> np.ndarray:
    return numpy_helper.to_array(t, base_dir)


def attr_value(a: onnx.AttributeProto, opsets, base_dir) -> Any:
    A = onnx.AttributeProto
    if a.type == A.FLOAT:
        return float(a.f)
    if a.type == A.INT:
        return int(a.i)
    if a.type == A.STRING:
        return a.s.decode("utf-8", errors="replace")
    if a.type == A.TENSOR:
        return tensor_to_array(a.t, base_dir)
    if a.type == A.GRAPH:
        return convert_graph(a.g, opsets, base_dir, subgraph=True)
    if a.type == A.FLOATS:
        return tuple(float(x) for x in a.floats)
    if a.type == A.INTS:
        return tuple(int(x) for x in a.ints)
    if a.type == A.STRINGS:
        return tuple(s.decode("utf-8", errors="replace") for s in a.strings)
    if a.type == A.TENSORS:
        return tuple(tensor_to_array(t, base_dir) for t in a.tensors)
    if a.type == A.GRAPHS:
        return tuple(convert_graph(g, opsets, base_dir, subgraph=True) for g in a.graphs)
    if a.type == A.SPARSE_TENSOR:
        return a.sparse_tensor
    if a.type == A.SPARSE_TENSORS:
        return tuple(a.sparse_tensors)
    if a.type == A.TYPE_PROTO:
        return a.tp
    if a.type == A.TYPE_PROTOS:
        return tuple(a.type_protos)
    raise ModelError(f"attribute {a.name!r} has unknown type {a.type}")


def resolve_version(op_type: str, domain: str, opsets) -> int:
    version = opsets.get(domain)
    if version is None:
        raise ModelError(f"op {op_type!r} uses domain {domain or 'ai.onnx'!r} which the model does not import")
    try:
        schema = onnx.defs.get_schema(op_type, version, domain)
    except onnx.defs.SchemaError:
        if domain == "":
            raise ModelError(f"op {op_type!r} does not exist in opset {version} of the default domain") from None
        return version  # custom domains (qonnx, com.microsoft): the imported version
    return schema.since_version


def convert_graph(g: onnx.GraphProto, opsets, base_dir="", *, subgraph=False, **meta) -> Graph:
    inits = {t.name: tensor_to_array(t, base_dir) for t in g.initializer}
    infos = {}
    for vi in list(g.value_info) + list(g.input) + list(g.output):
        infos[vi.name] = value_info(vi)
    nodes = []
    for i, n in enumerate(g.node):
        domain = _norm_domain(n.domain)
        nodes.append(Node(
            name=n.name or f"{n.op_type}_{i}",
            op_type=n.op_type,
            domain=domain,
            inputs=tuple(n.input),
            outputs=tuple(n.output),
            attrs={a.name: attr_value(a, opsets, base_dir) for a in n.attribute},
            since_version=resolve_version(n.op_type, domain, opsets),
            metadata={p.key: p.value for p in n.metadata_props},
        ))
    inputs = tuple(value_info(v) for v in g.input if v.name not in inits)
    return Graph(
        name=g.name,
        nodes=tuple(nodes),
        inputs=inputs,
        outputs=tuple(value_info(v) for v in g.output),
        initializers=inits,
        overridable=frozenset(v.name for v in g.input if v.name in inits),
        value_info=infos,
        opsets=opsets,
        **meta,
    )
