"""The host's side of a partitioned model: the hardware's integer results -> the model's outputs.

``model_outputs(ig, results)`` dequantizes (:class:`~onnx2hw.layers.OutputDequant`) and runs the
host tail (``IntegerGraph.tail``, see :mod:`onnx2hw.quant.partition`) with the golden executor,
so the golden flow, ``sim --output``, :meth:`onnx2hw.Design.simulate` and the driver all return
what the ONNX model returns, computed the same way.
"""
from __future__ import annotations

from typing import Mapping

import numpy as np

from ..ir.errors import ModelError
from ..ir.graph import Graph
from ..layers import IntegerGraph, dequantize_outputs
from .execute import execute

__all__ = ["model_outputs", "run_tail", "execute_batched", "fixed_batch", "batches"]


def fixed_batch(graph: Graph) -> int | None:
    """The batch size the graph's inputs fix (their first dim, when a number), else ``None``;
    a graph whose inputs fix different batch sizes is refused."""
    sizes = {vi.shape[0] for vi in graph.inputs if vi.shape and isinstance(vi.shape[0], int) and vi.shape[0] > 0}
    if len(sizes) > 1:
        raise ModelError(f"the model's inputs fix different batch sizes {sorted(sizes)!r}")
    return sizes.pop() if sizes else None


def batches(feeds: Mapping[str, np.ndarray], size: int, *, fill: bool):
    """``(chunk, real)`` for consecutive runs of ``size`` samples of ``feeds``; with ``fill`` a
    short last chunk is filled with copies of its last sample (``real`` counts the genuine ones),
    as a model that fixes its batch size needs."""
    n = next(iter(feeds.values())).shape[0]
    for start in range(0, n, size):
        chunk = {k: v[start:start + size] for k, v in feeds.items()}
        real = next(iter(chunk.values())).shape[0]
        if fill and real < size:
            chunk = {k: np.concatenate([v, np.repeat(v[-1:], size - real, axis=0)]) for k, v in chunk.items()}
        yield chunk, real


def execute_batched(graph: Graph, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """:func:`execute` for any number of samples: a graph that fixes its batch size is run one
    batch at a time (:func:`batches`; the results of fill samples are dropped). For graphs whose
    samples do not interact (every op but a batch-axis reduction)."""
    fixed = fixed_batch(graph)
    n = next(iter(feeds.values())).shape[0]
    if not fixed or fixed == n:
        return execute(graph, feeds)
    parts = [{k: np.asarray(v)[:real] for k, v in execute(graph, chunk).items()}
             for chunk, real in batches(feeds, fixed, fill=True)]
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def run_tail(tail: Graph | None, outputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The model's outputs from the dequantized hardware outputs (by ONNX name): those ``tail``
    computes from the ones it reads, and the hardware outputs it does not read, as they are."""
    if tail is None:
        return dict(outputs)
    read = set(tail.input_names)
    results = execute_batched(tail, {vi.name: outputs[vi.name] for vi in tail.inputs})
    return {**results, **{k: v for k, v in outputs.items() if k not in read}}


def model_outputs(ig: IntegerGraph, results: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The integer results of ``ig`` (by output spec name) -> the model's outputs by name."""
    return run_tail(ig.tail, dequantize_outputs(ig, results))
