"""HardSigmoid: ``max(0, min(1, alpha * x + beta))`` (alpha 0.2, beta 0.5 by default)."""
import numpy as np

from ._util import as_array, float_compute

__all__ = ["run"]


def run(node, x):
    x = as_array(x)
    xf = x.astype(float_compute(x), copy=False)
    alpha = np.asarray(node.attr("alpha", 0.2), dtype=xf.dtype)
    beta = np.asarray(node.attr("beta", 0.5), dtype=xf.dtype)
    one, zero = np.ones((), xf.dtype), np.zeros((), xf.dtype)
    return as_array(np.maximum(zero, np.minimum(one, alpha * xf + beta))).astype(x.dtype, copy=False)
