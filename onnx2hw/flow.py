"""The front half of every hardware verb: model file -> Graph -> IntegerGraph -> Pipeline."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .ir import Graph, ModelError, load

__all__ = ["Prepared", "prepare", "check_ops", "integer_graph_of", "load_npz"]


@dataclass(frozen=True)
class Prepared:
    graph: Graph
    integer: "IntegerGraph"  # noqa: F821
    pipeline: "Pipeline"  # noqa: F821


def load_npz(path, graph: Graph) -> dict[str, np.ndarray]:
    """An ``.npz`` keyed by the model's input names (batch first), checked against the graph."""
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {k: data[k] for k in data.files}
    except (OSError, ValueError) as exc:
        raise ModelError(f"{path}: cannot read as .npz ({exc})") from None
    names = list(graph.input_names)
    missing = [n for n in names if n not in arrays]
    if missing:
        raise ModelError(f"{path}: no array for model input {missing[0]!r} (has: {', '.join(arrays) or 'nothing'})")
    extra = [k for k in arrays if k not in names]
    if extra:
        raise ModelError(f"{path}: array {extra[0]!r} is not a model input (inputs: {', '.join(names)})")
    for vi in graph.inputs:
        a = arrays[vi.name]
        if vi.shape is not None and a.ndim != len(vi.shape):
            raise ModelError(f"{path}: {vi.name!r} has rank {a.ndim}, the model expects {len(vi.shape)}")
        if vi.shape is not None:
            for axis, (got, want) in enumerate(zip(a.shape, vi.shape)):
                if isinstance(want, int) and axis > 0 and got != want:
                    raise ModelError(f"{path}: {vi.name!r} has shape {a.shape}, the model expects {tuple(vi.shape)}")
    return arrays


def check_ops(graph: Graph) -> None:
    """Reject, before any quantization or hardware work, every node the hardware cannot map."""
    from .dataflow.support import hw_support
    from .ir import UnsupportedError

    bad = [f"{n.name} ({n.op_type})" for n in graph.nodes if hw_support(n.domain, n.op_type) is None]
    if bad:
        raise UnsupportedError(f"{len(bad)} node(s) not supported by the hardware path: {', '.join(bad)}")


def integer_graph_of(graph: Graph, calib: str | Path | None = None):
    """Import the model's quantization, or quantize a float model with ``calib`` data."""
    from .quant.convert import is_float_model, to_integer_graph

    if is_float_model(graph):
        if calib is None:
            raise ModelError("the model is not quantized: pass --calib CALIB.npz to quantize it, "
                             "or run `onnx2hw quantize` first")
        from .quant.ptq import quantize_graph

        qdq = quantize_graph(graph, load_npz(calib, graph))
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
