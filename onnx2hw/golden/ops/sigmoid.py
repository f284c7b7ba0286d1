"""Sigmoid: ``1 / (1 + exp(-x))``, in a form that does not overflow.

Narrow floats are computed in float32 and rounded once (see ``_util.float_compute``).
"""
import numpy as np

from ._util import as_array, float_compute

__all__ = ["run"]


def run(node, x):
    x = as_array(x)
    xf = x.astype(float_compute(x), copy=False)
    e = np.exp(-np.abs(xf))  # in (0, 1]: never overflows
    one = np.ones((), dtype=xf.dtype)
    out = np.where(xf >= 0, one / (one + e), e / (one + e))
    return as_array(out).astype(x.dtype, copy=False)
