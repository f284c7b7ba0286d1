"""Softplus: ``log(exp(x) + 1)``, in a form that does not overflow (``max(x, 0) + log1p(exp(-|x|))``)."""
import numpy as np

from ._util import as_array, float_compute

__all__ = ["run"]


def run(node, x):
    x = as_array(x)
    xf = x.astype(float_compute(x), copy=False)
    return as_array(np.maximum(xf, 0) + np.log1p(np.exp(-np.abs(xf)))).astype(x.dtype, copy=False)
