"""Dense: ``act(x_flat @ W.T + bias)`` (input flattened in NHWC row-major order)."""
import numpy as np

from ...quant.integer_graph import apply_act
from ._util import exact_matmul

__all__ = ["run"]


def run(layer, x):
    x = np.asarray(x, dtype=np.int64)
    acc = exact_matmul(x.reshape(x.shape[0], -1), layer.weights) + layer.bias
    return apply_act(acc, layer.act)
