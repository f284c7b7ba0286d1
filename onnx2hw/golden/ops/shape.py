"""Shape as int64, optionally sliced by ``start``/``end`` (opset 15; clamped to the rank)."""
import numpy as np

from ._util import as_array

__all__ = ["run"]


def run(node, x):
    shape = as_array(x).shape
    start, end = node.attr("start", 0), node.attr("end")
    return np.array(shape[slice(start, end)], dtype=np.int64)
