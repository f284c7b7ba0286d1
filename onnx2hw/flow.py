"""The front half of every hardware verb: model file -> Graph -> IntegerGraph -> Pipeline."""
from __future__ import annotations

from dataclasses import dataclass
import numpy as np

from .ir import Graph, ModelError, load

__all__ = ["Prepared", "prepare", "check_ops", "integer_graph_of", "load_npz"]


@dataclass(frozen=True)
class Prepared:
    graph: Graph
    integer: "IntegerGraph"  # noqa: F821
    pipeline: "Pipeline"  # noqa: F821


def load_npz(path, graph: Graph) -> dict[str, np.ndarray]:
    """Float arrays from an ``.npz`` keyed by the model's input names (batch first), checked
    against the model's inputs (names, ranks, fixed dims, dtypes)."""
    from .quant._calib import check_feeds
    from .quant.ptq import load_calibration

    return check_feeds(load_calibration(path), graph)


def check_ops(graph: Graph) -> None:
    """Reject, before any quantization or hardware work, every node the hardware cannot map."""
    from .dataflow.support import hw_support
    from .ir import UnsupportedError

    bad = [f"{n.name} ({n.op_type})" for n in graph.nodes if hw_support(n.domain, n.op_type) is None]
    if bad:
        raise UnsupportedError(f"{len(bad)} node(s) not supported by the hardware path: {', '.join(bad)}")


def integer_graph_of(graph: Graph, calib: str | Path | None = None):
    """Import the model's quantization, or quantize a float model with ``calib`` data."""
    from .quant.convert import flavour, to_integer_graph

    if flavour(graph) == "float":
        if calib is None:
            raise ModelError("the model is not quantized: pass --calib CALIB.npz to quantize it, "
                             "or run `onnx2hw quantize` first")
        from .quant.ptq import quantize

        qdq = quantize(graph, load_npz(calib, graph), progress=True)
        graph = load(qdq)
    return to_integer_graph(graph)


def prepare(model, *, calib=None, family="ecp5", budget=None, folding=None, target_cycles=None) -> Prepared:
    """Load, quantize or import, check hardware support and compile to a pipeline."""
    from .dataflow.compile import compile_pipeline

    graph = load(model)
    check_ops(graph)
    ig = integer_graph_of(graph, calib)
    pipeline = compile_pipeline(ig, family=family, budget=budget, folding=folding, target_cycles=target_cycles)
    return Prepared(graph, ig, pipeline)
