"""Mish (opset 18): ``x * tanh(softplus(x))``, softplus as :mod:`.softplus` computes it."""
import numpy as np

from ._util import as_array, float_compute

__all__ = ["run"]


def run(node, x):
    x = as_array(x)
    xf = x.astype(float_compute(x), copy=False)
    softplus = np.maximum(xf, 0) + np.log1p(np.exp(-np.abs(xf)))
    return as_array(xf * np.tanh(softplus)).astype(x.dtype, copy=False)
