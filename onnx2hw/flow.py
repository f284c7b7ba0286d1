"""The front half of every hardware verb: model file -> Graph -> IntegerGraph -> Pipeline."""
from __future__ import annotations

from dataclasses import dataclass
import numpy as np

from .ir import Graph, ModelError, load

__all__ = ["Prepared", "prepare", "prepare_for_board", "link_rate", "check_ops", "integer_graph_of", "load_npz"]


@dataclass(frozen=True)
class Prepared:
    graph: Graph
    integer: "IntegerGraph"  # noqa: F821
    pipeline: "Pipeline"  # noqa: F821
    #: inferences/s of the host link when the folding was chosen to match it, else ``None``
    link_fold_rate: float | None = None


def load_npz(path, graph: Graph) -> dict[str, np.ndarray]:
    """Float arrays from an ``.npz`` keyed by the model's input names (batch first), checked
    against the model's inputs (names, ranks, fixed dims, dtypes)."""
    from .quant._calib import check_feeds
    from .quant.ptq import load_calibration

    return check_feeds(load_calibration(path), graph)


def check_ops(graph: Graph) -> None:
    """Reject, before any quantization or hardware work, every node the hardware cannot map."""
    from .layers import support as hw_support
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


def _load_integer(model, calib) -> tuple[Graph, "IntegerGraph"]:  # noqa: F821
    graph = load(model)
    check_ops(graph)
    return graph, integer_graph_of(graph, calib)


def prepare(model, *, calib=None, family="ecp5", budget=None, folding=None, target_cycles=None) -> Prepared:
    """Load, quantize or import, check hardware support and compile to a pipeline."""
    from .dataflow.compile import compile_pipeline

    graph, ig = _load_integer(model, calib)
    pipeline = compile_pipeline(ig, family=family, budget=budget, folding=folding, target_cycles=target_cycles)
    return Prepared(graph, ig, pipeline)


def link_rate(pipeline, baud: float) -> tuple[int, float]:
    """(bytes per inference on the busier direction of the host link, inferences/s a UART at
    ``baud`` carries: 10 bits per byte, frame headers not counted)."""
    from .driver.protocol import link_format

    fmt = link_format(pipeline.describe())
    per = max(fmt.in_bytes, fmt.out_bytes)
    return per, baud / 10 / per


def prepare_for_board(model, *, family: str, budget, clock_hz: float, baud: float, calib=None, folding=None,
                      target_cycles=None) -> Prepared:
    """The design ``synth`` builds (and ``sim`` simulates) for a board.

    Without an explicit ``folding`` or ``target_cycles`` the pipeline is folded for the rate the
    host link carries at ``baud`` (no use in hardware faster than its link): the most parallel
    folding within ``budget`` is compiled first, then the fewest resources that keep up with
    the link at ``clock_hz``. The model is loaded and quantized once.
    """
    from .dataflow.compile import compile_pipeline

    graph, ig = _load_integer(model, calib)

    def compile_(target):
        return compile_pipeline(ig, family=family, budget=budget, folding=folding, target_cycles=target)

    if folding is not None or target_cycles is not None:
        return Prepared(graph, ig, compile_(target_cycles))
    widest = compile_(None)
    _, rate = link_rate(widest, baud)
    target = max(widest.ii, int(clock_hz / rate))
    return Prepared(graph, ig, compile_(target), link_fold_rate=rate)
