"""Relu: ``max(x, 0)``."""
import numpy as np

from ._util import as_array

__all__ = ["run"]


def run(node, x):
    x = as_array(x)
    return as_array(np.maximum(x, np.zeros((), dtype=x.dtype)))
