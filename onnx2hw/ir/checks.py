"""Consumer-checkable rules of the ONNX IR specification, on the protobuf.

These checks run before ``onnx.checker`` and hold even where it is lenient:
IR version and opset imports, op versions against the imports, attributes
(one value field matching ``type``; ``ref_attr_name`` only in functions),
operator arity with optional (``""``) and variadic inputs, SSA with
sub-graph scoping, use-before-definition, cycles and topological order
(``sort=True`` reorders the node lists in place), and typed main-graph
inputs/outputs.
"""
from __future__ import annotations

import functools
import heapq
from typing import Mapping

import onnx
from google.protobuf.descriptor import FieldDescriptor
from onnx import AttributeProto, TensorProto, TypeProto, defs

from .dtypes import elem_type_name
from .errors import ModelError
from .functions import FunctionTable, norm_domain

__all__ = ["MIN_IR_VERSION", "check_strings", "check_header", "ModelChecker", "op_schema", "known_domains"]

#: oldest IR version accepted (IR 3 introduced ``opset_import``)
MIN_IR_VERSION = 3

_A = AttributeProto
_SCALAR_FIELD = {_A.FLOAT: "f", _A.INT: "i", _A.STRING: "s", _A.TENSOR: "t", _A.GRAPH: "g",
                 _A.SPARSE_TENSOR: "sparse_tensor", _A.TYPE_PROTO: "tp"}
_LIST_FIELD = {_A.FLOATS: "floats", _A.INTS: "ints", _A.STRINGS: "strings", _A.TENSORS: "tensors",
               _A.GRAPHS: "graphs", _A.SPARSE_TENSORS: "sparse_tensors", _A.TYPE_PROTOS: "type_protos"}
_MAP_KEY_TYPES = {TensorProto.INT8, TensorProto.INT16, TensorProto.INT32, TensorProto.INT64,
                  TensorProto.UINT8, TensorProto.UINT16, TensorProto.UINT32, TensorProto.UINT64,
                  TensorProto.STRING}


def _dom(domain: str) -> str:
    return domain or "ai.onnx"


@functools.lru_cache(maxsize=None)
def known_domains() -> Mapping[str, int]:
    """Domains with operator schemas in the installed onnx -> newest opset version."""
    out: dict[str, int] = {}
    for dom, (_, high) in defs.C.schema_version_map().items():
        dom = norm_domain(dom)
        out[dom] = max(out.get(dom, 0), high)
    return out


@functools.lru_cache(maxsize=4096)
def op_schema(op_type: str, domain: str, version: int):
    """Schema of ``op_type`` in force at opset ``version`` of ``domain`` (None if none)."""
    try:
        return defs.get_schema(op_type, version, domain)
    except defs.SchemaError:
        return None


def check_strings(message, path: str = "model") -> None:
    """Every ``string`` field of the protobuf holds valid UTF-8.

    (protobuf hands back ``bytes`` for a proto2 string field that is not
    UTF-8; every later name comparison assumes ``str``.)
    """
    FD = FieldDescriptor
    for field, value in message.ListFields():
        repeated = field.label == FD.LABEL_REPEATED
        if field.type == FD.TYPE_STRING:
            for k, v in enumerate(value if repeated else (value,)):
                if not isinstance(v, str):
                    where = f"{path}.{field.name}" + (f"[{k}]" if repeated else "")
                    raise ModelError(f"{where} is not valid UTF-8: {bytes(v)[:40]!r}")
        elif field.type == FD.TYPE_MESSAGE:
            if field.message_type.GetOptions().map_entry:
                continue
            for k, v in enumerate(value if repeated else (value,)):
                check_strings(v, f"{path}.{field.name}" + (f"[{k}]" if repeated else ""))


def check_header(model: onnx.ModelProto, origin: str) -> dict[str, int]:
    """IR version, graph presence and opset imports; return domain -> version."""
    if not model.HasField("ir_version"):
        raise ModelError(f"{origin} is not an ONNX model (no ir_version)")
    if not MIN_IR_VERSION <= model.ir_version <= onnx.IR_VERSION:
        raise ModelError(f"{origin}: ir_version {model.ir_version} is outside the supported range "
                         f"{MIN_IR_VERSION}..{onnx.IR_VERSION}")
    if not model.HasField("graph"):
        raise ModelError(f"{origin} has no graph")
    if not len(model.opset_import):
        raise ModelError(f"{origin}: opset_import is empty (required since IR version 3)")
    opsets: dict[str, int] = {}
    for imp in model.opset_import:
        dom = norm_domain(imp.domain)
        if dom in opsets:
            raise ModelError(f"{origin}: domain {_dom(dom)!r} is imported twice")
        if imp.version < 1:
            raise ModelError(f"{origin}: domain {_dom(dom)!r} imported with invalid version {imp.version}")
        newest = known_domains().get(dom)
        if newest is not None and imp.version > newest:
            raise ModelError(f"{origin}: opset {imp.version} of domain {_dom(dom)!r} is newer than the "
                             f"newest this onnx knows ({newest})")
        opsets[dom] = imp.version
    return opsets


def _type_problem(tp: TypeProto, need_rank: bool) -> str | None:
    """Why ``tp`` is not a complete type (None when it is)."""
    which = tp.WhichOneof("value")
    if which is None:
        return "has no type"
    if which in ("tensor_type", "sparse_tensor_type"):
        tt = getattr(tp, which)
        if tt.elem_type == TensorProto.UNDEFINED:
            return "has no element type"
        if tt.elem_type not in TensorProto.DataType.values():
            return f"has unknown element type {tt.elem_type}"
        if need_rank and not tt.HasField("shape"):
            return "has no shape (the rank of main-graph inputs and outputs must be known)"
        for d in tt.shape.dim:
            if d.HasField("dim_value") and d.dim_value < 0:
                return f"has negative dimension {d.dim_value}"
        return None
    if which == "sequence_type":
        if not tp.sequence_type.HasField("elem_type"):
            return "is a sequence without element type"
        return _type_problem(tp.sequence_type.elem_type, False)
    if which == "optional_type":
        if not tp.optional_type.HasField("elem_type"):
            return "is an optional without element type"
        return _type_problem(tp.optional_type.elem_type, False)
    if which == "map_type":
        if tp.map_type.key_type not in _MAP_KEY_TYPES:
            return f"is a map with invalid key type {elem_type_name(tp.map_type.key_type)}"
        if not tp.map_type.HasField("value_type"):
            return "is a map without value type"
        return _type_problem(tp.map_type.value_type, False)
    return None  # opaque and future kinds: nothing checkable


def _node_label(n: onnx.NodeProto, i: int) -> str:
    return f"node {n.name!r}" if n.name else f"node #{i} ({n.op_type})"


class ModelChecker:
    """Checks one model; ``sort=True`` repairs node order in place."""

    def __init__(self, model: onnx.ModelProto, opsets: Mapping[str, int], functions: FunctionTable,
                 origin: str, sort: bool = False):
        self.model = model
        self.opsets = opsets
        self.functions = functions
        self.origin = origin
        self.sort = sort
        self.ir_version = model.ir_version
        self.used_domains: set[str] = set()

    def fail(self, where: str, message: str):
        raise ModelError(f"{self.origin}: {where}{message}")

    # -- whole model ---------------------------------------------------------------
    def run(self) -> None:
        g = self.model.graph
        for kind, values in (("input", g.input), ("output", g.output)):
            for vi in values:
                problem = _type_problem(vi.type, need_rank=True)
                if problem:
                    self.fail("", f"main-graph {kind} {vi.name!r} {problem}")
        self.graph(g, frozenset(), "", main=True, opsets=self.opsets, in_function=False)
        for fn in self.functions:
            self.function(fn)
        self.recursion()

    def recursion(self) -> None:
        """Model-local functions must not call themselves, directly or not."""
        def callees(nodes):
            for n in nodes:
                fn = self.functions.lookup(n)
                if fn is not None:
                    yield fn
                for a in n.attribute:
                    for g in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                        yield from callees(g.node)

        done: set[str] = set()

        def visit(fn, stack):
            if fn.label in stack:
                chain = " -> ".join(stack[stack.index(fn.label):] + [fn.label])
                self.fail("", f"model-local function {fn.label!r} is recursive ({chain})")
            if fn.label in done:
                return
            for callee in callees(fn.proto.node):
                visit(callee, stack + [fn.label])
            done.add(fn.label)

        for fn in self.functions:
            visit(fn, [])

    # -- one node --------------------------------------------------------------------
    def node(self, n: onnx.NodeProto, label: str, opsets: Mapping[str, int], in_function: bool) -> None:
        if not n.op_type:
            self.fail(label, " has no op_type")
        dom = norm_domain(n.domain)
        if dom not in opsets:
            self.fail(label, f" ({n.op_type}) uses domain {_dom(dom)!r}, which is not imported")
        self.used_domains.add(dom)
        seen = set()
        for a in n.attribute:
            if not a.name:
                self.fail(label, " has an attribute without a name")
            if a.name in seen:
                self.fail(label, f" has attribute {a.name!r} twice")
            seen.add(a.name)
            self.attribute(a, f"{label} attribute {a.name!r}", in_function)
        if self.functions.lookup(n) is not None:
            return
        version = opsets[dom]
        schema = op_schema(n.op_type, dom, version)
        if schema is None:
            if dom not in known_domains():
                return  # custom domain (qonnx, com.microsoft...): no schema to check against
            newest = op_schema(n.op_type, dom, known_domains()[dom])
            if newest is None:
                self.fail(label, f": operator {n.op_type!r} does not exist in domain {_dom(dom)!r}")
            self.fail(label, f": operator {n.op_type!r} first appears in opset {newest.since_version} of "
                             f"{_dom(dom)!r}, but the model imports opset {version}")
        self.arity(n, label, schema)

    def arity(self, n: onnx.NodeProto, label: str, schema) -> None:
        for kind, actual, formal, low, high in (
                ("input", n.input, schema.inputs, schema.min_input, schema.max_input),
                ("output", n.output, schema.outputs, schema.min_output, schema.max_output)):
            # trailing empty names are the same as omitting them
            count = len(actual)
            while count and not actual[count - 1]:
                count -= 1
            if len(actual) > high:
                self.fail(label, f" ({n.op_type}) has {len(actual)} {kind}s, at most {high} allowed")
            if count < low:
                self.fail(label, f" ({n.op_type}) has {count} {kind}s, at least {low} required")
            for k, name in enumerate(actual):
                if name or not formal:
                    continue
                param = formal[min(k, len(formal) - 1)]
                option = param.option
                if option == defs.OpSchema.FormalParameterOption.Single or (
                        option == defs.OpSchema.FormalParameterOption.Variadic and k < len(formal) - 1 + param.min_arity):
                    self.fail(label, f" ({n.op_type}) leaves required {kind} {k} ({param.name!r}) empty")

    def attribute(self, a: AttributeProto, where: str, in_function: bool) -> None:
        present = [f for f in _SCALAR_FIELD.values() if a.HasField(f)]
        present += [f for f in _LIST_FIELD.values() if len(getattr(a, f))]
        if a.ref_attr_name:
            if not in_function:
                self.fail(where, f" uses ref_attr_name {a.ref_attr_name!r} outside a function body")
            if present:
                self.fail(where, f" refers to {a.ref_attr_name!r} but also holds a value ({present[0]})")
            return
        if a.type == _A.UNDEFINED:
            self.fail(where, " has no type")
        expected = _SCALAR_FIELD.get(a.type) or _LIST_FIELD.get(a.type)
        if expected is None:
            self.fail(where, f" has unknown type {a.type}")
        if len(present) > 1:
            self.fail(where, f" holds more than one value ({', '.join(present)})")
        type_name = _A.AttributeType.Name(a.type)
        if present and present[0] != expected:
            self.fail(where, f" is declared {type_name} but holds field {present[0]!r}")
        if not present and a.type in _SCALAR_FIELD:
            self.fail(where, f" ({type_name}) holds no value")

    # -- graphs and scoping -------------------------------------------------------------
    def graph(self, g: onnx.GraphProto, outer: frozenset, where: str, *, main: bool,
              opsets: Mapping[str, int], in_function: bool) -> set[str]:
        """Check ``g``; return the outer-scope names it reads."""
        static: set[str] = set()
        inputs = set()
        for vi in g.input:
            if not vi.name:
                self.fail(where, "a graph input has an empty name")
            if vi.name in inputs:
                self.fail(where, f"graph input {vi.name!r} is declared twice")
            inputs.add(vi.name)
            if not main and vi.type.WhichOneof("value") is not None:
                problem = _type_problem(vi.type, need_rank=False)
                if problem:
                    self.fail(where, f"graph input {vi.name!r} {problem}")
        static |= inputs
        inits = set()
        names = [t.name for t in g.initializer] + [s.values.name for s in g.sparse_initializer]
        for name in names:
            if not name:
                self.fail(where, "an initializer has an empty name")
            if name in inits:
                self.fail(where, f"initializer {name!r} is defined twice")
            inits.add(name)
            if name in inputs and not main and self.ir_version >= 4:
                self.fail(where, f"initializer {name!r} of a sub-graph is also a sub-graph input "
                                 f"(not allowed since IR version 4)")
        static |= inits
        return self.nodes(g.node, static, outer, [vo.name for vo in g.output], where, main=main,
                          opsets=opsets, in_function=in_function)

    def nodes(self, nodes, static: set[str], outer: frozenset, outputs, where: str, *, main: bool,
              opsets: Mapping[str, int], in_function: bool, what: str = "graph") -> set[str]:
        producer: dict[str, int] = {}
        labels = [_node_label(n, i) for i, n in enumerate(nodes)]
        for i, n in enumerate(nodes):
            for o in n.output:
                if not o:
                    continue
                if o in static:
                    self.fail(where, f"{labels[i]} output {o!r} redefines a {what} input or initializer")
                if o in producer:
                    self.fail(where, f"value {o!r} is defined twice (by {labels[producer[o]]} and {labels[i]})")
                if o in outer:
                    self.fail(where, f"{labels[i]} output {o!r} shadows a value of the enclosing graph")
                producer[o] = i
        visible = frozenset(outer | static | producer.keys())
        free: set[str] = set()
        deps: list[dict[int, str]] = []
        for i, n in enumerate(nodes):
            self.node(n, where + labels[i], opsets, in_function)
            reads = [x for x in n.input if x]
            for a in n.attribute:
                subs = ([a.g] if a.HasField("g") else []) + list(a.graphs)
                for sg in subs:
                    label = f"{where}{labels[i]} attribute {a.name!r} sub-graph {sg.name!r}: "
                    reads += sorted(self.graph(sg, visible, label, main=False, opsets=opsets,
                                               in_function=in_function))
            dep: dict[int, str] = {}
            for x in reads:
                if x in producer:
                    if producer[x] == i:
                        self.fail(where, f"{labels[i]} reads its own output {x!r} (cycle)")
                    dep.setdefault(producer[x], x)
                elif x in static:
                    pass
                elif x in outer:
                    free.add(x)
                else:
                    self.fail(where, f"{labels[i]} reads {x!r}, which is not defined "
                                     f"(no {what} input, initializer or node output has that name)")
            deps.append(dep)
        seen_out = set()
        for name in outputs:
            if not name:
                self.fail(where, f"a {what} output has an empty name")
            if name in static or name in producer:
                pass
            elif not main and name in outer:
                free.add(name)
            else:
                self.fail(where, f"{what} output {name!r} is never defined")
            seen_out.add(name)
        self.order(nodes, deps, labels, where)
        return free

    def order(self, nodes, deps: list[dict[int, str]], labels: list[str], where: str) -> None:
        late = next(((i, j, x) for i, dep in enumerate(deps) for j, x in dep.items() if j > i), None)
        if late is None:
            return
        users: list[list[int]] = [[] for _ in deps]
        indegree = [len(dep) for dep in deps]
        for i, dep in enumerate(deps):
            for j in dep:
                users[j].append(i)
        ready = [i for i, d in enumerate(indegree) if d == 0]
        heapq.heapify(ready)
        order = []
        while ready:
            j = heapq.heappop(ready)
            order.append(j)
            for i in users[j]:
                indegree[i] -= 1
                if indegree[i] == 0:
                    heapq.heappush(ready, i)
        if len(order) < len(nodes):
            left = set(range(len(nodes))) - set(order)
            start = min(left)
            path, pos = [], {}
            k = start
            while k not in pos:  # every remaining node has a remaining predecessor
                pos[k] = len(path)
                path.append(k)
                k = min(j for j in deps[k] if j in left)
            cycle = path[pos[k]:] + [k]
            self.fail(where, "nodes form a cycle: " + " <- ".join(labels[c] for c in cycle))
        i, j, x = late
        if not self.sort:
            self.fail(where, f"{labels[i]} reads {x!r} before {labels[j]} defines it: nodes are not in "
                             f"topological order (load(..., sort=True) reorders them)")
        copies = []
        for k in order:
            c = onnx.NodeProto()
            c.CopyFrom(nodes[k])
            copies.append(c)
        del nodes[:]
        nodes.extend(copies)

    def function(self, fn) -> None:
        f = fn.proto
        where = f"function {fn.label!r}: "
        static = set()
        for name in f.input:
            if not name:
                self.fail(where, "an input has an empty name")
            if name in static:
                self.fail(where, f"input {name!r} is declared twice")
            static.add(name)
        declared = fn.attribute_names
        self._refs(f.node, declared, where)
        self.nodes(f.node, static, frozenset(), list(f.output), where, main=False, opsets=fn.opsets,
                   in_function=True, what="function")

    def _refs(self, nodes, declared: set[str], where: str) -> None:
        for n in nodes:
            for a in n.attribute:
                if a.ref_attr_name and a.ref_attr_name not in declared:
                    self.fail(where, f"node {n.name or n.op_type!r} attribute {a.name!r} refers to "
                                     f"{a.ref_attr_name!r}, which the function does not declare")
                for g in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                    self._refs(g.node, declared, where)
