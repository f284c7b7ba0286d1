"""Exact golden execution of an :class:`~onnx2hw.layers.IntegerGraph`: every layer through its
kind's exact integer ``reference`` (:mod:`onnx2hw.layers`).

``execute_integer(graph, int_feeds)`` takes integer feeds keyed by ``graph.input_specs``
names, shaped ``(N, *spec.shape)`` (NHWC), and returns int64 arrays keyed by
``graph.output_specs`` names. Use :func:`onnx2hw.layers.quantize_inputs` /
``dequantize_outputs`` for the host-side float conversions.
"""
from __future__ import annotations

from typing import Mapping

import numpy as np

from ..ir.errors import ModelError
from ..layers import IntegerGraph

__all__ = ["execute_integer"]


def execute_integer(graph: IntegerGraph, feeds: Mapping[str, np.ndarray], *, outputs=None,
                    keep_intermediates: bool = False) -> dict[str, np.ndarray]:
    """Run ``graph`` exactly on integer ``feeds``; values outside an input's type raise ``ModelError``."""
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
    for layer in graph.layers:
        env[layer.output.name] = layer.reference(*(env[n] for n in layer.inputs))
    if keep_intermediates:
        return env
    wanted = list(outputs) if outputs is not None else [s.name for s in graph.output_specs]
    return {name: env[name] for name in wanted}
