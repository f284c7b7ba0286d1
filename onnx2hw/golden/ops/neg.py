"""Neg: ``-x`` (integers wrap as two's complement, as ONNX's reference does)."""
import numpy as np

from ._util import as_array

__all__ = ["run"]


def run(node, x):
    x = as_array(x)
    with np.errstate(over="ignore"):
        return as_array(np.negative(x))
