"""LeakyRelu: ``x`` if ``x >= 0`` else ``alpha * x`` (alpha default 0.01)."""
import numpy as np

from ._util import as_array

__all__ = ["run"]


def run(node, x):
    x = as_array(x)
    alpha = np.asarray(node.attr("alpha", 0.01), dtype=x.dtype)
    return as_array(np.where(x < 0, x * alpha, x).astype(x.dtype, copy=False))
