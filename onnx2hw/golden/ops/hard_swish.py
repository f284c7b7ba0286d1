"""HardSwish: ``x * max(0, min(1, x / 6 + 0.5))`` (HardSigmoid with alpha 1/6, beta 0.5)."""
import numpy as np

from ._util import as_array, float_compute

__all__ = ["run"]


def run(node, x):
    x = as_array(x)
    xf = x.astype(float_compute(x), copy=False)
    alpha, beta = np.asarray(1 / 6, xf.dtype), np.asarray(0.5, xf.dtype)
    one, zero = np.ones((), xf.dtype), np.zeros((), xf.dtype)
    return as_array(xf * np.maximum(zero, np.minimum(one, alpha * xf + beta))).astype(x.dtype, copy=False)
