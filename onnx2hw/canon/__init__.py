"""Canonicalization: any exporter's graph (opset 7 and up, IR 3 and up; float, QDQ, QOperator or
QONNX) brought to the forms the layer registry matches, by general rules of graph algebra.

``canonicalize(graph) -> graph`` runs :data:`RULES` in order; each rule is a pure
``apply(graph) -> graph`` that returns its input unchanged when it does not apply. The golden
executor always runs the original model; only the hardware path (op check, import, post-training
quantization) sees the canonical one. docs/architecture.md (section 3) lists the rules.
"""
from __future__ import annotations

from ..ir.graph import Graph
from ..ir.memo import per_graph
from ..ir.simplify import simplify
from .affine import affine_maps, batch_rows, matmul_add
from .channels import channel_gathers, channel_shuffles, channel_splits, crd_into_producers
from .channels_last import channels_last
from .constants import fold_constants, literal_views, static_inputs
from .crops import crops_into_conv, crops_into_conv_transpose
from .hard_sigmoid import hard_sigmoids
from .pad_views import pads_through_views
from .pads import ceil_pools, pads_into_windows
from .prelu import prelu_sums
from .repeats import nearest_repeats
from .signals import unit_width
from .transposes import sink_transposes
from .types import traced_types
from .vector_images import vector_images

__all__ = ["canonicalize", "RULES"]

#: (name, rule) in the order they run
RULES = (
    ("static inputs", static_inputs),
    ("channels-last nodes", channels_last),
    ("channel splits", channel_splits),
    ("constant folding", fold_constants),
    ("hard sigmoids", hard_sigmoids),
    ("PReLU sums", prelu_sums),
    ("channel shuffles", channel_shuffles),
    ("channel gathers", channel_gathers),
    ("transposed-convolution crops", crops_into_conv_transpose),
    ("convolution crops", crops_into_conv),
    ("zero Pad through views", pads_through_views),
    ("zero Pad into windows", pads_into_windows),
    ("pool padding", ceil_pools),
    ("signals of unit width", unit_width),
    ("batch-merged rows", batch_rows),
    ("MatMul + Add", matmul_add),
    ("affine maps", affine_maps),
    ("CRD order into convolutions", crd_into_producers),
    ("literal views", literal_views),
    ("nearest repeats", nearest_repeats),
    ("vectors as images", vector_images),
    ("onnxslim", simplify),
    ("transposes", sink_transposes),
    ("traced types", traced_types),
)

#: passes over :data:`RULES` at most (a rule may open the way for an earlier one: a Transpose
#: pair cancelled leaves a map next to the layer it folds into)
MAX_PASSES = 4


@per_graph
def canonicalize(graph: Graph) -> Graph:
    """``graph`` in canonical form (see the module docstring): :data:`RULES` run in order until a
    pass changes nothing, so that canonicalizing a canonical graph gives it back; computed once
    per graph object."""
    for _ in range(MAX_PASSES):
        start = _shape_of(graph)
        for _name, rule in RULES:
            graph = rule(graph)
        if _shape_of(graph) == start:
            break
    return graph


def _shape_of(graph: Graph) -> tuple:
    """What a pass can change: the nodes (op, domain, values read and written) and the constants."""
    return (tuple((n.domain, n.op_type, n.inputs, n.outputs) for n in graph.nodes), tuple(sorted(graph.initializers)))
