"""``load(model) -> Graph``: read, check, inline and convert an ONNX model.

Steps: read the file (or take the ``ModelProto``/bytes), check the header
(IR version, opset imports), inline external data safely
(:mod:`.external`), check the IR rules (:mod:`.checks`; ``sort=True``
repairs node order), run ``onnx.checker`` and shape inference on the result,
inline model-local functions (:mod:`.functions`) and convert to the frozen
:class:`~onnx2hw.ir.graph.Graph`. Every failure is a one-line
:class:`ModelError` that starts with the file name (or ``<ModelProto>``).
"""
from __future__ import annotations

import dataclasses
import os
import stat
from collections import Counter
from typing import Any, Mapping

import onnx
from onnx import AttributeProto, TensorProto, helper

from .checks import ModelChecker, check_header, check_strings, op_schema
from .dtypes import check_tensor, sparse_to_dense, tensor_to_array
from .errors import ModelError
from .external import inline_external_data, iter_tensors
from .functions import FunctionTable, NameAllocator, expand_calls, norm_domain
from .graph import Graph, Node, ValueInfo
from .names import is_c90_identifier

__all__ = ["load", "value_info"]

#: refuse model files larger than protobuf can parse (2 GiB)
MAX_MODEL_BYTES = (1 << 31) - 1


def _read_file(path: str) -> bytes:
    try:
        st = os.stat(path)
    except OSError as exc:
        raise ModelError(f"{path}: cannot read model file ({exc.strerror})") from None
    if stat.S_ISDIR(st.st_mode):
        raise ModelError(f"{path}: is a directory, not an ONNX model file")
    if not stat.S_ISREG(st.st_mode):
        raise ModelError(f"{path}: is not a regular file")
    if st.st_size > MAX_MODEL_BYTES:
        raise ModelError(f"{path}: {st.st_size} bytes is larger than a protobuf model can be (2 GiB)")
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise ModelError(f"{path}: cannot read model file ({exc.strerror})") from None
    if not data:
        raise ModelError(f"{path}: file is empty")
    return data


def _parse(data: bytes, origin: str) -> onnx.ModelProto:
    proto = onnx.ModelProto()
    try:
        proto.ParseFromString(data)
    except Exception as exc:  # noqa: BLE001 - DecodeError and friends
        raise ModelError(f"{origin}: not a valid ONNX protobuf (truncated or corrupt file?): "
                         f"{type(exc).__name__}: {exc}") from None
    return proto


def load(model: str | os.PathLike | bytes | onnx.ModelProto, *, sort: bool = False,
         base_dir: str | os.PathLike | None = None) -> Graph:
    """Load an ONNX model into a checked, frozen :class:`Graph`.

    Parameters
    ----------
    model
        A file path, the serialized bytes, or a ``ModelProto`` (not modified).
    sort
        Repair node lists that are not in topological order (cycles remain an error).
    base_dir
        Folder that external tensor data is relative to. Defaults to the
        model file's folder; required for in-memory models with external data.

    Raises
    ------
    ModelError
        One line naming the file and the node/value at fault, for every bad input.
    """
    folder = None if base_dir is None else os.fspath(base_dir)
    if isinstance(model, onnx.ModelProto):
        origin, proto = "<ModelProto>", model
    elif isinstance(model, (bytes, bytearray, memoryview)):
        origin = "<bytes>"
        if not len(model):
            raise ModelError("<bytes>: empty input, not an ONNX model")
        proto = _parse(bytes(model), origin)
    elif isinstance(model, (str, os.PathLike)):
        origin = os.fspath(model)
        if not isinstance(origin, str):
            origin = os.fsdecode(origin)
        data = _read_file(origin)
        if folder is None:
            folder = os.path.dirname(os.path.abspath(origin))
        proto = _parse(data, origin)
    else:
        raise TypeError(f"load() takes a path, bytes or onnx.ModelProto, not {type(model).__name__!r}")
    try:
        return _load(proto, origin, folder, sort)
    except ModelError as exc:
        msg = str(exc)
        if msg.startswith(origin):
            raise
        raise ModelError(f"{origin}: {msg}") from None
    except RecursionError:
        raise ModelError(f"{origin}: model nests sub-graphs or functions too deeply") from None
    except MemoryError:
        raise ModelError(f"{origin}: model is too large to load into memory") from None
    except Exception as exc:  # noqa: BLE001 - a loader bug must still be one line for the user
        raise ModelError(f"{origin}: internal error while loading: {type(exc).__name__}: {exc}") from exc


def _load(proto: onnx.ModelProto, origin: str, folder: str | None, sort: bool) -> Graph:
    check_strings(proto)
    warnings: list[str] = []
    work = onnx.ModelProto()
    work.CopyFrom(proto)
    _accept_qonnx_domains(work, warnings)
    opsets = check_header(work, origin)
    if len(work.training_info):
        warnings.append(f"training_info ({len(work.training_info)} entries) is ignored")
        work.ClearField("training_info")
    _normalize_domains(work)
    table = FunctionTable(work.functions, opsets)
    inline_external_data(work, folder)
    ModelChecker(work, opsets, table, origin, sort=sort).run()
    for tensor, where in iter_tensors(work):
        check_tensor(tensor, where)
    try:
        onnx.checker.check_model(work)
    except Exception as exc:  # noqa: BLE001 - ValidationError, or any C++ error
        raise ModelError(f"{origin}: onnx.checker: {exc}") from None
    try:
        inferred = onnx.shape_inference.infer_shapes(work, check_type=False, strict_mode=False,
                                                     data_prop=True)
    except Exception as exc:  # noqa: BLE001 - inference is a helper, not a gate
        warnings.append(f"shape inference failed ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})")
        inferred = work
    conv = _Converter(inferred, opsets, table, warnings)
    graph = conv.graph(inferred.graph, opsets, main=True, declared=work.graph)
    conv.finish_warnings()
    metadata = conv.props(proto.metadata_props, "model")
    return dataclasses.replace(
        graph, metadata=metadata, warnings=tuple(warnings), ir_version=proto.ir_version,
        producer_name=proto.producer_name, producer_version=proto.producer_version,
        doc_string=proto.doc_string or graph.doc_string)


#: the domain of the QONNX ops (Quant, BipolarQuant, Trunc, ...); FINN's older name for it; and
#: the name older Brevitas exports used
QONNX_DOMAIN, FINN_DOMAIN, BREVITAS_DOMAIN = "qonnx.custom_op.general", "finn.custom_op.general", "onnx.brevitas"


def _accept_qonnx_domains(model: onnx.ModelProto, warnings: list[str]) -> None:
    """Accept QONNX models as exporters have written them, with one warning each: nodes in the
    older ``onnx.brevitas`` domain are read in the QONNX domain, and a QONNX/FINN domain that
    nodes use but ``opset_import`` lacks is imported (version 1)."""
    old = [n for n in model.graph.node if n.domain == BREVITAS_DOMAIN]
    for n in old:
        n.domain = QONNX_DOMAIN
    if old:
        keep = [imp for imp in model.opset_import if imp.domain != BREVITAS_DOMAIN]
        if not any(imp.domain == QONNX_DOMAIN for imp in keep):
            keep.append(helper.make_opsetid(QONNX_DOMAIN, 1))
        del model.opset_import[:]
        model.opset_import.extend(keep)
        warnings.append(f"{len(old)} node(s) in the older domain {BREVITAS_DOMAIN!r} are read in {QONNX_DOMAIN!r}")
    imported = {imp.domain for imp in model.opset_import}
    for dom in (QONNX_DOMAIN, FINN_DOMAIN):
        users = sum(n.domain == dom for n in model.graph.node)
        if users and dom not in imported:
            model.opset_import.append(helper.make_opsetid(dom, 1))
            warnings.append(f"domain {dom!r} is used by {users} node(s) but missing from opset_import "
                            f"(as some QONNX exports write it); imported as version 1")


def _normalize_domains(model: onnx.ModelProto) -> None:
    """Spell the default domain ``""`` everywhere (onnx.checker treats ``"ai.onnx"`` as another domain)."""
    def nodes(ns):
        for n in ns:
            if n.domain == "ai.onnx":
                n.domain = ""
            for a in n.attribute:
                for g in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                    nodes(g.node)

    for imports in [model.opset_import] + [f.opset_import for f in model.functions]:
        for imp in imports:
            if imp.domain == "ai.onnx":
                imp.domain = ""
    for f in model.functions:
        if f.domain == "ai.onnx":
            f.domain = ""
        nodes(f.node)
    nodes(model.graph.node)


def _datatypes(g: onnx.GraphProto, where: str) -> dict[str, str]:
    """The graph's FINN datatype annotations: ``quantization_annotation`` entries keyed
    ``finn_datatype`` (tensor name -> datatype name, e.g. ``"BIPOLAR"``, ``"INT8"``), as QONNX's
    ``ModelWrapper.set_tensor_datatype`` writes them. A tensor annotated twice with different
    datatypes is refused (QONNX itself refuses a tensor annotated twice)."""
    out: dict[str, str] = {}
    for ann in g.quantization_annotation:
        for entry in ann.quant_parameter_tensor_names:
            value = entry.value.strip()
            if entry.key != "finn_datatype" or not ann.tensor_name or not value:
                continue
            if out.get(ann.tensor_name, value) != value:
                raise ModelError(f"{where}: tensor {ann.tensor_name!r} is annotated with two FINN datatypes "
                                 f"({out[ann.tensor_name]!r} and {value!r})")
            out[ann.tensor_name] = value
    return out


def _dim(d) -> int | str | None:
    if d.HasField("dim_value"):
        return int(d.dim_value)
    if d.HasField("dim_param") and d.dim_param:
        return d.dim_param
    return None


def value_info(vi: onnx.ValueInfoProto) -> ValueInfo:
    """Convert a ``ValueInfoProto`` (kinds: tensor, sparse_tensor, sequence, map, optional, unknown)."""
    t = vi.type
    which = t.WhichOneof("value")
    if which in ("tensor_type", "sparse_tensor_type"):
        tt = getattr(t, which)
        shape = tuple(_dim(d) for d in tt.shape.dim) if tt.HasField("shape") else None
        kind = "tensor" if which == "tensor_type" else "sparse_tensor"
        return ValueInfo(vi.name, kind, tt.elem_type, shape)
    kinds = {"sequence_type": "sequence", "map_type": "map", "optional_type": "optional"}
    return ValueInfo(vi.name, kinds.get(which, "unknown"))


def _check_schema_attributes(n: onnx.NodeProto, schema, where: str) -> None:
    """Attribute names, types and presence against the operator schema.

    ``onnx.checker`` does this before inlining; nodes that come out of a
    model-local function only get their attribute values here.
    """
    given = set()
    for a in n.attribute:
        spec = schema.attributes.get(a.name)
        if spec is None:
            raise ModelError(f"{where} ({n.op_type}): the operator has no attribute {a.name!r}")
        if int(spec.type) != a.type:
            raise ModelError(f"{where} ({n.op_type}) attribute {a.name!r} is "
                             f"{AttributeProto.AttributeType.Name(a.type)}, the operator expects {spec.type.name}")
        given.add(a.name)
    for name, spec in schema.attributes.items():
        if spec.required and name not in given:
            raise ModelError(f"{where} ({n.op_type}) lacks required attribute {name!r}")


def _all_names(model: onnx.ModelProto) -> tuple[set[str], set[str]]:
    """(value names, explicit node names) used anywhere in the model."""
    values: set[str] = set()
    nodes: set[str] = set()

    def node_list(ns):
        for n in ns:
            values.update(n.input)
            values.update(n.output)
            if n.name:
                nodes.add(n.name)
            for a in n.attribute:
                for g in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                    graph(g)

    def graph(g):
        values.update(v.name for v in list(g.input) + list(g.output) + list(g.value_info))
        values.update(t.name for t in g.initializer)
        values.update(s.values.name for s in g.sparse_initializer)
        node_list(g.node)

    graph(model.graph)
    for f in model.functions:
        values.update(f.input)
        values.update(f.output)
        node_list(f.node)
    values.discard("")
    return values, nodes


class _Converter:
    def __init__(self, model: onnx.ModelProto, opsets, table: FunctionTable, warnings: list[str]):
        self.table = table
        self.warnings = warnings
        values, node_names = _all_names(model)
        self.values = NameAllocator(values)
        self.node_names = NameAllocator(node_names)
        self.claimed: set[str] = set()
        self.bad_names: list[str] = []
        self.bad_seen: set[str] = set()

    def note_name(self, name: str) -> None:
        if name and name not in self.bad_seen and not is_c90_identifier(name):
            self.bad_seen.add(name)
            self.bad_names.append(name)

    def finish_warnings(self) -> None:
        if self.bad_names:
            shown = ", ".join(repr(n) for n in self.bad_names[:5])
            more = f" and {len(self.bad_names) - 5} more" if len(self.bad_names) > 5 else ""
            self.warnings.append(f"{len(self.bad_names)} names are not C90 identifiers ({shown}{more}); "
                                 f"map them with onnx2hw.ir.Sanitizer for HDL")

    def props(self, entries, where: str) -> dict[str, str]:
        out: dict[str, str] = {}
        for p in entries:
            if p.key in out:
                self.warnings.append(f"{where} metadata key {p.key!r} appears twice; the last value is kept")
            out[p.key] = p.value
        return out

    def name_nodes(self, nodes) -> None:
        for i, n in enumerate(nodes):
            if n.name and n.name not in self.claimed:
                self.claimed.add(n.name)
                continue
            if n.name:
                new = self.node_names.fresh(n.name)
                self.warnings.append(f"node name {n.name!r} is used twice; the second is renamed {new!r}")
            else:
                new = self.node_names.fresh(f"{n.op_type or 'node'}_{i}")
            self.claimed.add(new)
            n.name = new

    def graph(self, g: onnx.GraphProto, opsets: Mapping[str, int], *, main: bool,
              declared: onnx.GraphProto | None = None) -> Graph:
        where = "graph " + repr(g.name) if g.name else "main graph" if main else "a sub-graph"
        if not g.name:
            self.warnings.append(f"{where} has no name")
        self.note_name(g.name)
        self.name_nodes(g.node)
        for n in g.node:
            self.note_name(n.name)
        expanded = expand_calls(g.node, opsets, self.table, self.values, self.node_names)
        inits: dict[str, Any] = {}
        infos: dict[str, ValueInfo] = {}
        for t in g.initializer:
            inits[t.name] = tensor_to_array(t, f"initializer {t.name!r}")
            infos[t.name] = ValueInfo(t.name, "tensor", t.data_type, tuple(int(d) for d in t.dims))
        sparse = set()
        for s in g.sparse_initializer:
            name = s.values.name
            inits[name] = sparse_to_dense(s, f"sparse initializer {name!r}")
            infos[name] = ValueInfo(name, "sparse_tensor", s.values.data_type, tuple(int(d) for d in s.dims))
            sparse.add(name)
        io = declared if declared is not None else g
        for vi in list(g.value_info) + list(g.output) + list(io.input) + list(io.output):
            if vi.name:
                infos[vi.name] = value_info(vi)
                for d in infos[vi.name].shape or ():
                    if isinstance(d, str):
                        self.note_name(d)
        nodes = []
        for n, node_opsets in expanded:
            nodes.append(self.node(n, node_opsets))
        for name in infos:
            self.note_name(name)
        defined = set(inits) | {v.name for v in io.input}
        used: set[str] = set()
        for node in nodes:
            defined.update(node.outputs)
            used.update(node.inputs)
            for value in node.attrs.values():
                for sub in (value if isinstance(value, tuple) else (value,)):
                    if isinstance(sub, Graph):
                        used |= sub.outer_scope
        used.update(v.name for v in io.output)
        outer = frozenset(used - defined - {""}) if not main else frozenset()
        return Graph(
            name=g.name,
            nodes=tuple(nodes),
            inputs=tuple(value_info(v) for v in io.input if v.name not in inits),
            outputs=tuple(value_info(v) for v in io.output),
            initializers=inits,
            overridable=frozenset(v.name for v in io.input if v.name in inits),
            value_info=infos,
            opsets=dict(opsets),
            doc_string=g.doc_string,
            outer_scope=outer,
            sparse_initializers=frozenset(sparse),
            graph_metadata=self.props(g.metadata_props, where),
            datatypes=_datatypes(io, where),
        )

    def node(self, n: onnx.NodeProto, opsets: Mapping[str, int]) -> Node:
        dom = norm_domain(n.domain)
        version = opsets[dom]
        schema = op_schema(n.op_type, dom, version)
        where = f"node {n.name!r}"
        for x in list(n.input) + list(n.output):
            self.note_name(x)
        if schema is not None:
            _check_schema_attributes(n, schema, where)
        return Node(
            name=n.name,
            op_type=n.op_type,
            domain=dom,
            inputs=tuple(n.input),
            outputs=tuple(n.output),
            attrs={a.name: self.attr(a, opsets, f"{where} attribute {a.name!r}") for a in n.attribute},
            since_version=schema.since_version if schema is not None else version,
            metadata=self.props(n.metadata_props, where),
        )

    def attr(self, a: AttributeProto, opsets, where: str) -> Any:
        A = AttributeProto
        if a.type == A.FLOAT:
            return float(a.f)
        if a.type == A.INT:
            return int(a.i)
        if a.type == A.STRING:
            return a.s.decode("utf-8", errors="replace")
        if a.type == A.TENSOR:
            return tensor_to_array(a.t, where)
        if a.type == A.GRAPH:
            return self.graph(a.g, opsets, main=False)
        if a.type == A.FLOATS:
            return tuple(float(x) for x in a.floats)
        if a.type == A.INTS:
            return tuple(int(x) for x in a.ints)
        if a.type == A.STRINGS:
            return tuple(s.decode("utf-8", errors="replace") for s in a.strings)
        if a.type == A.TENSORS:
            return tuple(tensor_to_array(t, where) for t in a.tensors)
        if a.type == A.GRAPHS:
            return tuple(self.graph(g, opsets, main=False) for g in a.graphs)
        if a.type == A.SPARSE_TENSOR:
            sparse_to_dense(a.sparse_tensor, where)  # validate; the proto is kept
            return a.sparse_tensor
        if a.type == A.SPARSE_TENSORS:
            for s in a.sparse_tensors:
                sparse_to_dense(s, where)
            return tuple(a.sparse_tensors)
        if a.type == A.TYPE_PROTO:
            return a.tp
        if a.type == A.TYPE_PROTOS:
            return tuple(a.type_protos)
        raise ModelError(f"{where} has unknown type {a.type}")
