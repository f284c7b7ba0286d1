"""Helpers shared by the driver tests: random integer inputs of a graph, its golden outputs."""
import numpy as np

from onnx2hw.golden.integer import execute_integer


def golden(g, x):
    """The integer graph's exact outputs for integer inputs ``x``."""
    return execute_integer(g, {g.input_specs[0].name: x})[g.output_specs[0].name]


def random_inputs(g, n, seed):
    """``n`` random inferences over the whole input type of ``g``."""
    spec = g.input_specs[0]
    return np.random.default_rng(seed).integers(spec.dtype.lo, spec.dtype.hi + 1, (n,) + spec.shape)
