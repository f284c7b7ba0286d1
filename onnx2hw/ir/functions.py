"""Model-local functions (``ModelProto.functions``): lookup and inlining.

A node calls a model-local function when its ``(domain, op_type, overload)``
matches a function's ``(domain, name, overload)``. Inlining substitutes the
call's actual inputs/outputs for the formal ones, prefixes every other value
and node name with the call node's name (``<call>__<name>``, made unique),
replaces ``ref_attr_name`` attributes by the call's attribute or the
function's ``attribute_proto`` default (or drops them), and resolves the body
against the function's own ``opset_import`` (domains it does not list fall
back to the model's imports). Nested calls are inlined too; recursion is an
error.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Mapping

import onnx
from onnx import AttributeProto

from .errors import ModelError

__all__ = ["FunctionTable", "LocalFunction", "NameAllocator", "norm_domain", "expand_calls"]

DEFAULT_DOMAINS = ("", "ai.onnx")


def norm_domain(domain: str) -> str:
    """``"ai.onnx"`` and ``""`` both mean the default ONNX domain; return ``""`` for it."""
    return "" if domain in DEFAULT_DOMAINS else domain


def _label(domain: str, name: str, overload: str) -> str:
    text = f"{domain}::{name}" if domain else name
    return f"{text}[{overload}]" if overload else text


@dataclass(frozen=True)
class LocalFunction:
    proto: onnx.FunctionProto
    #: opsets in force inside the body (function imports over the model's)
    opsets: Mapping[str, int]
    label: str

    @property
    def attribute_names(self) -> set[str]:
        return set(self.proto.attribute) | {a.name for a in self.proto.attribute_proto}


class FunctionTable:
    """The model-local functions of one model, keyed by (domain, name, overload)."""

    def __init__(self, functions: Iterable[onnx.FunctionProto], model_opsets: Mapping[str, int]):
        self._table: dict[tuple[str, str, str], LocalFunction] = {}
        for f in functions:
            key = (norm_domain(f.domain), f.name, f.overload)
            label = _label(*key)
            if not f.name:
                raise ModelError("a model-local function has no name")
            if key in self._table:
                raise ModelError(f"model-local function {label!r} is defined twice")
            opsets = dict(model_opsets)
            seen = set()
            for imp in f.opset_import:
                dom = norm_domain(imp.domain)
                if dom in seen:
                    raise ModelError(f"function {label!r} imports domain {dom or 'ai.onnx'!r} twice")
                if imp.version < 1:
                    raise ModelError(f"function {label!r} imports domain {dom or 'ai.onnx'!r} "
                                     f"with invalid version {imp.version}")
                seen.add(dom)
                opsets[dom] = imp.version
            plain = set(f.attribute)
            defaults = [a.name for a in f.attribute_proto]
            clash = plain & set(defaults)
            if clash:
                raise ModelError(f"function {label!r} lists attribute {sorted(clash)[0]!r} both in "
                                 f"'attribute' and 'attribute_proto'")
            self._table[key] = LocalFunction(f, opsets, label)

    def __len__(self) -> int:
        return len(self._table)

    def __iter__(self):
        return iter(self._table.values())

    def lookup(self, node: onnx.NodeProto) -> LocalFunction | None:
        return self._table.get((norm_domain(node.domain), node.op_type, node.overload))


class NameAllocator:
    """Hands out names not used anywhere else in the model."""

    def __init__(self, used: Iterable[str] = ()):
        self.used = set(used)

    def fresh(self, base: str) -> str:
        name, i = base, 0
        while name in self.used or not name:
            i += 1
            name = f"{base}_{i}"
        self.used.add(name)
        return name


def _rename_graph(g: onnx.GraphProto, rename: Callable[[str], str],
                  substitute: Callable[[onnx.NodeProto], None]) -> None:
    for vi in list(g.input) + list(g.output) + list(g.value_info):
        vi.name = rename(vi.name)
    for t in g.initializer:
        t.name = rename(t.name)
    for s in g.sparse_initializer:
        s.values.name = rename(s.values.name)
    for n in g.node:
        n.input[:] = [rename(x) for x in n.input]
        n.output[:] = [rename(x) for x in n.output]
        substitute(n)


def instantiate(fn: LocalFunction, call: onnx.NodeProto, values: NameAllocator,
                nodes: NameAllocator) -> list[onnx.NodeProto]:
    """Body of ``fn`` specialised for ``call`` (whose name must be set and unique)."""
    f = fn.proto
    if len(call.input) > len(f.input):
        raise ModelError(f"node {call.name!r} passes {len(call.input)} inputs to function {fn.label!r}, "
                         f"which takes {len(f.input)}")
    if len(call.output) > len(f.output):
        raise ModelError(f"node {call.name!r} asks {len(call.output)} outputs of function {fn.label!r}, "
                         f"which has {len(f.output)}")
    actual: dict[str, AttributeProto] = {a.name: a for a in f.attribute_proto}
    declared = fn.attribute_names
    for a in call.attribute:
        if a.name not in declared:
            raise ModelError(f"node {call.name!r} passes attribute {a.name!r} that function "
                             f"{fn.label!r} does not declare")
        actual[a.name] = a
    prefix = call.name
    mapping: dict[str, str] = {"": ""}
    for k, formal in enumerate(f.input):
        mapping[formal] = call.input[k] if k < len(call.input) else ""
    for k, formal in enumerate(f.output):
        given = call.output[k] if k < len(call.output) else ""
        mapping[formal] = given or values.fresh(f"{prefix}__{formal}")

    def rename(name: str) -> str:
        if name not in mapping:
            mapping[name] = values.fresh(f"{prefix}__{name}")
        return mapping[name]

    def substitute(n: onnx.NodeProto) -> None:
        kept = []
        for a in n.attribute:
            if a.ref_attr_name:
                if a.ref_attr_name not in declared:
                    raise ModelError(f"function {fn.label!r}: attribute {a.name!r} refers to "
                                     f"{a.ref_attr_name!r}, which the function does not declare")
                if a.ref_attr_name in actual:
                    new = AttributeProto()
                    new.CopyFrom(actual[a.ref_attr_name])
                    new.name = a.name
                    kept.append(new)
                continue
            new = AttributeProto()
            new.CopyFrom(a)
            for g in ([new.g] if new.HasField("g") else []) + list(new.graphs):
                _rename_graph(g, rename, substitute)
            kept.append(new)
        del n.attribute[:]
        n.attribute.extend(kept)

    body = []
    for i, src in enumerate(f.node):
        n = onnx.NodeProto()
        n.CopyFrom(src)
        n.name = nodes.fresh(f"{prefix}__{src.name or f'{src.op_type}_{i}'}")
        n.input[:] = [rename(x) for x in n.input]
        n.output[:] = [rename(x) for x in n.output]
        substitute(n)
        body.append(n)
    return body


def expand_calls(nodes: Iterable[onnx.NodeProto], opsets: Mapping[str, int], table: FunctionTable,
                 values: NameAllocator, node_names: NameAllocator,
                 stack: tuple[str, ...] = ()) -> list[tuple[onnx.NodeProto, Mapping[str, int]]]:
    """Inline every call of a model-local function; return (node, opsets in force) pairs."""
    out: list[tuple[onnx.NodeProto, Mapping[str, int]]] = []
    for n in nodes:
        fn = table.lookup(n) if len(table) else None
        if fn is None:
            out.append((n, opsets))
            continue
        if fn.label in stack:
            chain = " -> ".join(stack + (fn.label,))
            raise ModelError(f"model-local function {fn.label!r} is recursive ({chain})")
        body = instantiate(fn, n, values, node_names)
        out.extend(expand_calls(body, fn.opsets, table, values, node_names, stack + (fn.label,)))
    return out
