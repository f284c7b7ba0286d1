"""LeakyRelu: ``x`` if ``x >= 0`` else ``alpha * x`` (alpha default 0.01).

Narrow floats are computed in float32 and rounded once (as onnxruntime does), so
``alpha`` is not first rounded to float16.
"""
import numpy as np

from ._util import as_array, float_compute

__all__ = ["run"]


def run(node, x):
    x = as_array(x)
    xf = x.astype(float_compute(x), copy=False)
    alpha = np.asarray(node.attr("alpha", 0.01), dtype=xf.dtype)
    return as_array(np.where(xf < 0, xf * alpha, xf)).astype(x.dtype, copy=False)
