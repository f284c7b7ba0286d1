"""Exact golden execution of an :class:`~onnx2hw.layers.IntegerGraph`: every layer through its
kind's exact integer ``reference`` (:mod:`onnx2hw.layers`).

``execute_integer(graph, int_feeds)`` takes integer feeds keyed by ``graph.input_specs``
names, shaped ``(N, *spec.shape)`` (NHWC), and returns int64 arrays keyed by
``graph.output_specs`` names. Use :func:`onnx2hw.layers.quantize_inputs` /
``dequantize_outputs`` for the host-side float conversions.

Every layer kind's reference works on a whole batch at once (convolutions as im2col and one
float BLAS GEMM when that is exact: :mod:`onnx2hw.layers._exact`). Large batches run in chunks
of samples (``chunk``; by default as many as fit :data:`CHUNK_BYTES` of working memory), so the
im2col copies stay small; every sample is computed independently, so the chunking never
changes a result.
"""
from __future__ import annotations

from typing import Mapping

import numpy as np

from ..ir.errors import ModelError
from ..layers import IntegerGraph

__all__ = ["execute_integer", "default_chunk", "CHUNK_BYTES"]

#: working memory a chunk of samples may take (im2col copies and temporaries, estimated)
CHUNK_BYTES = 1 << 26
#: bytes per element of the largest tensor a sample's working set is counted as (a 3x3 im2col
#: copy in float64 is 72 bytes per output element, plus the accumulator and its requantization)
_BYTES_PER_ELEMENT = 128


def default_chunk(graph: IntegerGraph) -> int:
    """Samples per chunk so that one chunk's working memory stays near :data:`CHUNK_BYTES`."""
    sizes = [int(np.prod(s.shape)) for s in graph.input_specs]
    sizes += [int(np.prod(layer.output.shape)) for layer in graph.layers]
    return max(1, CHUNK_BYTES // (max(sizes, default=1) * _BYTES_PER_ELEMENT))


def execute_integer(graph: IntegerGraph, feeds: Mapping[str, np.ndarray], *, outputs=None,
                    keep_intermediates: bool = False, chunk: int | None = None) -> dict[str, np.ndarray]:
    """Run ``graph`` exactly on integer ``feeds``; values outside an input's type raise ``ModelError``.

    ``chunk``: samples computed together (default :func:`default_chunk`); the result does not
    depend on it.
    """
    env: dict[str, np.ndarray] = {}
    names = {s.name: s for s in graph.input_specs}
    for name, value in feeds.items():
        if name not in names:
            raise ModelError(f"feed {name!r} is not an input of the integer graph (inputs: {', '.join(names)})")
    batch = None
    for spec in graph.input_specs:
        if spec.name not in feeds:
            raise ModelError(f"no value fed for integer input {spec.name!r}")
        x = np.asarray(feeds[spec.name])
        if x.dtype.kind not in "iub":
            raise ModelError(f"feed {spec.name!r} must be an integer array, not {x.dtype}")
        x = x.astype(np.int64)
        if x.shape[1:] != spec.shape:
            raise ModelError(f"feed {spec.name!r} has shape {x.shape!r}, expected (N, {', '.join(map(str, spec.shape))})")
        if x.size and (x.min() < spec.dtype.lo or x.max() > spec.dtype.hi):
            raise ModelError(f"feed {spec.name!r} has values outside {spec.dtype} [{spec.dtype.lo}, {spec.dtype.hi}]")
        if batch is not None and x.shape[0] != batch:
            raise ModelError(f"feed {spec.name!r} has batch {x.shape[0]}, other inputs {batch}")
        batch = x.shape[0]
        env[spec.name] = x
    if chunk is None:
        chunk = default_chunk(graph)
    if isinstance(chunk, bool) or not isinstance(chunk, (int, np.integer)) or chunk < 1:
        raise ValueError(f"chunk must be a positive number of samples, not {chunk!r}")
    wanted = list(outputs) if outputs is not None else [s.name for s in graph.output_specs]
    if batch <= chunk:
        return _run(graph, env, wanted, keep_intermediates)
    parts = [_run(graph, {k: v[i:i + chunk] for k, v in env.items()}, wanted, keep_intermediates)
             for i in range(0, batch, chunk)]
    return {name: np.concatenate([p[name] for p in parts]) for name in parts[0]}


def _run(graph: IntegerGraph, env: dict[str, np.ndarray], wanted, keep_intermediates: bool) -> dict[str, np.ndarray]:
    """Every layer in order on the samples of ``env`` (the graph's inputs, checked)."""
    for layer in graph.layers:
        env[layer.output.name] = layer.reference(*(env[n] for n in layer.inputs))
    if keep_intermediates:
        return env
    return {name: env[name] for name in wanted}
