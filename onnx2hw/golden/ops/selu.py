"""Selu: ``gamma * (alpha * (exp(x) - 1))`` for ``x <= 0``, ``gamma * x`` otherwise
(alpha 1.67326319217681884765625, gamma 1.05070102214813232421875 by default)."""
import numpy as np

from ._util import as_array, float_compute

__all__ = ["run"]


def run(node, x):
    x = as_array(x)
    xf = x.astype(float_compute(x), copy=False)
    alpha = np.asarray(node.attr("alpha", 1.67326319217681884765625), dtype=xf.dtype)
    gamma = np.asarray(node.attr("gamma", 1.05070102214813232421875), dtype=xf.dtype)
    neg = alpha * np.expm1(np.minimum(xf, 0))
    return as_array(gamma * np.where(xf > 0, xf, neg)).astype(x.dtype, copy=False)
