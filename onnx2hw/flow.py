"""The front half of every hardware path: model -> Graph -> IntegerGraph -> Pipeline.

:func:`onnx2hw.compile` (:mod:`onnx2hw.design`) is the public entry point; the functions here
are its steps, also used by the simulated transport of the driver and by the benchmarks.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import numpy as np

from .dataflow.compile import compile_pipeline
from .dataflow.pipeline import Pipeline
from .ir import Graph, ModelError, UnsupportedError, load
from .canon import canonicalize
from .ir.simplify import follow_names
from .layers import IntegerGraph
from .layers import support as hw_support
from .protocol import LinkFormat
from .quant.calib import check_feeds, load_npz as read_npz
from .quant.convert import flavour, to_integer_graph
from .quant.import_qonnx import needs_calibration, quantize_float_inputs
from .quant.partition import split
from .quant.ptq import quantize

__all__ = ["fold_for_board", "link_rate", "link_format_of", "check_ops", "integer_graph_of", "load_npz",
           "load_graph"]


def load_npz(path, graph: Graph, what: str = "input") -> dict[str, np.ndarray]:
    """Float arrays from an ``.npz`` keyed by the model's input names (batch first), checked
    against the model's inputs (names, ranks, fixed dims, dtypes, finite values); ``what`` names
    the data in errors."""
    return check_feeds(read_npz(path, what), graph, what)


def _feeds(data, graph: Graph) -> dict[str, np.ndarray]:
    """Float arrays keyed by input name from an ``.npz`` path or a mapping of arrays, checked."""
    if isinstance(data, Mapping):
        return check_feeds(data, graph)
    return load_npz(data, graph, "calibration")


def check_ops(graph: Graph) -> None:
    """Reject, before any quantization or hardware work, every node the hardware cannot map."""
    bad = [f"{n.name} ({n.op_type})" for n in graph.nodes if hw_support(n.domain, n.op_type) is None]
    if bad:
        raise UnsupportedError(f"{len(bad)} node(s) not supported by the hardware path: {', '.join(bad)}")


def integer_graph_of(graph: Graph, calib=None, host=()) -> IntegerGraph:
    """The hardware's exact integer graph with the host's tail (:mod:`onnx2hw.quant.partition`;
    ``host`` names nodes moved to the host): the model's quantization imported, or a float
    model quantized with ``calib`` data (an ``.npz`` path or a mapping of input name to float
    array, batch first); in a QONNX model, ``calib`` also gives the input quantizer of a float
    model input that a layer reads (:func:`onnx2hw.quant.import_qonnx.quantize_float_inputs`).
    Every node the hardware cannot map is refused before any work."""
    simple = canonicalize(graph)  # the hardware path's view (the golden keeps running the original)
    host = follow_names(graph, simple, host)
    graph = simple
    parts = split(graph, host)
    check_ops(parts.core)
    kind = flavour(graph)
    if kind == "float":
        if calib is None:
            raise ModelError("the model is not quantized: pass --calib CALIB.npz to quantize it, "
                             "or run `onnx2hw quantize` first")
        parts = split(load(quantize(graph, _feeds(calib, graph), progress=True, host=host)), host)
    elif kind == "qonnx" and calib is not None and needs_calibration(parts.core):
        parts = replace(parts, core=quantize_float_inputs(parts.core, _feeds(calib, graph), progress=True))
    ig = to_integer_graph(parts.core)
    if not ig.layers:
        raise UnsupportedError("no layer of the model is left for the hardware: its quantized core is only the "
                               "input quantizer and what the host runs after it (a model needs at least one layer "
                               "the hardware maps: a Conv, Gemm/MatMul, pool, Add, ...)")
    return replace(ig, tail=parts.tail)


def load_graph(model) -> Graph:
    """A checked :class:`Graph` from a path, serialized bytes, ``ModelProto`` or a ``Graph``."""
    return model if isinstance(model, Graph) else load(model)


def link_format_of(pipeline: Pipeline) -> LinkFormat:
    """The byte layout of one inference of ``pipeline`` on the host link: its input tensors one
    after the other, then (the other way) its output tensors (one each: the tensor itself)."""
    return LinkFormat.of_parts(pipeline.input_parts, pipeline.output_parts,
                               in_lanes=pipeline.input_link.dst_lanes, out_lanes=pipeline.output_link.src_lanes)


def link_rate(pipeline: Pipeline, baud: float) -> tuple[int, float]:
    """(bytes per inference on the busier direction of the host link, inferences/s a UART at
    ``baud`` carries: 10 bits per byte, frame headers not counted)."""
    fmt = link_format_of(pipeline)
    per = max(fmt.in_bytes, fmt.out_bytes)
    return per, baud / 10 / per


def fold_for_board(ig: IntegerGraph, *, family: str, budget, clock_hz: float, baud: float, folding=None,
                   target_cycles=None, fastest: bool = False) -> tuple[Pipeline, float | None]:
    """(pipeline, link rate it was folded for or ``None``): the folding ``synth`` builds.

    ``fastest``: the most parallel folding within ``budget``. Without that, an explicit
    ``folding`` or ``target_cycles``, the pipeline is folded for the rate the host link carries
    at ``baud`` (no use in hardware faster than its link, unless inputs come from on-chip
    memory as in a self-test build): the most parallel folding within ``budget`` is compiled
    first, then the fewest resources that keep up with the link at ``clock_hz``.
    """
    def compile_(target):
        return compile_pipeline(ig, family=family, budget=budget, folding=folding, target_cycles=target)

    if folding is not None or target_cycles is not None or fastest:
        return compile_(target_cycles), None
    widest = compile_(None)
    _, rate = link_rate(widest, baud)
    target = max(widest.ii, int(clock_hz / rate))
    return compile_(target), rate
