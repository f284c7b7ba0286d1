"""Elu: ``alpha * (exp(x) - 1)`` for ``x < 0``, ``x`` otherwise (alpha 1.0 by default)."""
import numpy as np

from ._util import as_array, float_compute

__all__ = ["run"]


def run(node, x):
    x = as_array(x)
    xf = x.astype(float_compute(x), copy=False)
    alpha = np.asarray(node.attr("alpha", 1.0), dtype=xf.dtype)
    return as_array(np.where(xf < 0, alpha * np.expm1(np.minimum(xf, 0)), xf)).astype(x.dtype, copy=False)
