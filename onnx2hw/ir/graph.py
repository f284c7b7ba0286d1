"""Typed, frozen boundary types of the IR front end.

A :class:`Graph` is what every later stage consumes. It is built only by
:func:`onnx2hw.ir.load`; it never holds file handles or build paths.

Conventions
-----------
* ``Node.inputs``/``Node.outputs`` keep ONNX's empty name ``""`` for an omitted
  optional input/output.
* ``Node.attrs`` holds Python values: ``int``, ``float``, ``str`` (decoded UTF-8),
  ``np.ndarray`` (tensor attributes), :class:`Graph` (sub-graphs), tuples of those,
  or the raw ``onnx.TypeProto`` / ``SparseTensorProto`` for the rare kinds.
* ``Graph.initializers`` holds every initializer as a NumPy array (int4/uint4,
  float8 and bfloat16 as ``ml_dtypes`` arrays, as ``onnx.numpy_helper.to_array``
  returns them; sparse initializers densified and listed in
  ``Graph.sparse_initializers``). An initializer that is also a graph
  input is a constant whose value a feed may override (``Graph.overridable``).
* ``Graph.inputs`` lists only the real run-time inputs (graph inputs that have no
  initializer); ``Graph.outputs`` the graph outputs.
* ``Graph.datatypes`` holds the graph's ``quantization_annotation`` entries keyed
  ``finn_datatype`` (tensor name -> a FINN/QONNX datatype name such as ``"BIPOLAR"``,
  ``"INT8"``, ``"UINT4"``, ``"FLOAT32"``), as the loader found them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping

import numpy as np

__all__ = ["ValueInfo", "Node", "Graph", "Dim"]

#: A dimension: a concrete size, a symbolic ``dim_param`` name, or ``None`` (unknown).
Dim = int | str | None


def _frozen(mapping: Mapping | None) -> Mapping:
    return MappingProxyType(dict(mapping or {}))


@dataclass(frozen=True)
class ValueInfo:
    """Type of one value.

    ``kind`` is ``"tensor"``, ``"sparse_tensor"``, ``"sequence"``, ``"map"``,
    ``"optional"`` or ``"unknown"``. For tensors ``elem_type`` is the
    ``onnx.TensorProto`` data type number and ``shape`` is a tuple of :data:`Dim`
    (``None`` when the rank is unknown).
    """

    name: str
    kind: str = "tensor"
    elem_type: int = 0
    shape: tuple[Dim, ...] | None = None

    @property
    def rank(self) -> int | None:
        return None if self.shape is None else len(self.shape)


@dataclass(frozen=True)
class Node:
    name: str
    op_type: str
    domain: str  # "" for the default ONNX domain ("ai.onnx" is normalised to "")
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attrs: Mapping[str, Any] = field(default_factory=dict)
    #: opset version of the operator definition in force (resolved by the loader)
    since_version: int = 0
    metadata: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self):
        object.__setattr__(self, "attrs", _frozen(self.attrs))
        object.__setattr__(self, "metadata", _frozen(self.metadata))

    def attr(self, name: str, default: Any = None) -> Any:
        return self.attrs.get(name, default)


@dataclass(frozen=True)
class Graph:
    name: str
    nodes: tuple[Node, ...]
    inputs: tuple[ValueInfo, ...]
    outputs: tuple[ValueInfo, ...]
    initializers: Mapping[str, np.ndarray] = field(default_factory=dict)
    #: names of initializers that are also graph inputs (a feed may override them)
    overridable: frozenset[str] = frozenset()
    #: every known value type: inputs, outputs, value_info and inferred shapes
    value_info: Mapping[str, ValueInfo] = field(default_factory=dict)
    #: domain -> imported opset version ("" is the default ONNX domain)
    opsets: Mapping[str, int] = field(default_factory=dict)
    ir_version: int = 0
    producer_name: str = ""
    producer_version: str = ""
    doc_string: str = ""
    metadata: Mapping[str, str] = field(default_factory=dict)
    #: non-fatal findings of the loader (non-C90 names, ignored training_info, ...)
    warnings: tuple[str, ...] = ()
    #: names of outer-scope values a sub-graph reads (empty for the main graph)
    outer_scope: frozenset[str] = frozenset()
    #: initializers that were stored as sparse tensors (densified in ``initializers``)
    sparse_initializers: frozenset[str] = frozenset()
    #: ``GraphProto.metadata_props`` (``metadata`` holds the model's)
    graph_metadata: Mapping[str, str] = field(default_factory=dict)
    #: tensor name -> FINN datatype name (``quantization_annotation``, key ``finn_datatype``)
    datatypes: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self):
        for name in ("initializers", "value_info", "opsets", "metadata", "graph_metadata", "datatypes"):
            object.__setattr__(self, name, _frozen(getattr(self, name)))

    @property
    def input_names(self) -> tuple[str, ...]:
        return tuple(v.name for v in self.inputs)

    @property
    def output_names(self) -> tuple[str, ...]:
        return tuple(v.name for v in self.outputs)

    def producer_of(self) -> dict[str, Node]:
        """Map each value name to the node that defines it."""
        return {o: n for n in self.nodes for o in n.outputs if o}
