"""ConstantOfShape: a tensor of shape ``input`` filled with the one-element ``value``
attribute (default float32 0). Exporters use it for weights and zero states."""
import numpy as np

from ._util import fail, int_list

__all__ = ["run"]


def run(node, shape):
    dims = int_list(node, shape, "shape")
    if any(d < 0 for d in dims):
        raise fail(node, f"shape {dims!r} has a negative dimension")
    value = node.attr("value")
    value = np.zeros(1, np.float32) if value is None else np.asarray(value)
    if value.size != 1:
        raise fail(node, f"value must have one element, got shape {value.shape!r}")
    return np.full(dims, value.reshape(()), dtype=value.dtype)
