"""Types of values that shape inference left unknown (outputs of QONNX ops, files without
``value_info``), read off a run of the graph (:mod:`onnx2hw.canon.trace`)."""
from __future__ import annotations

import dataclasses

from ..ir.graph import Graph
from .trace import trace

__all__ = ["traced_types"]


def _known(vi) -> bool:
    return vi is not None and vi.kind == "tensor" and vi.elem_type != 0 and vi.shape is not None


def traced_types(graph: Graph) -> Graph:
    missing = [o for n in graph.nodes for o in n.outputs if o and not _known(graph.value_info.get(o))]
    if not missing:
        return graph
    t = trace(graph)
    if t is None:
        return graph
    info = dict(graph.value_info)
    for name in missing:
        vi = t.value_info(name)
        if vi is not None:
            info[name] = vi
    outputs = tuple(info.get(v.name, v) if not _known(v) else v for v in graph.outputs)
    return dataclasses.replace(graph, value_info=info, outputs=outputs)
