"""Reshape.

``0`` copies the input's dimension at that position unless ``allowzero=1``
(opset 14), where it means an empty dimension; one ``-1`` is inferred. Opset < 5
takes the shape as an attribute.
"""
import numpy as np

from ._util import as_array, fail, int_list

__all__ = ["run"]


def target_shape(node, in_shape, shape, allowzero: bool) -> tuple[int, ...]:
    """The output shape of Reshape(``in_shape`` -> ``shape``), checked."""
    out = list(shape)
    if allowzero and 0 in out and -1 in out:
        raise fail(node, f"shape {tuple(shape)!r} has both 0 and -1 with allowzero=1")
    for i, d in enumerate(out):
        if d == 0 and not allowzero:
            if i >= len(in_shape):
                raise fail(node, f"shape {tuple(shape)!r} copies dimension {i} of a rank-{len(in_shape)} input")
            out[i] = in_shape[i]
        elif d < -1:
            raise fail(node, f"shape {tuple(shape)!r} has invalid dimension {d!r}")
    size = int(np.prod(in_shape, dtype=np.int64))
    if out.count(-1) > 1:
        raise fail(node, f"shape {tuple(shape)!r} has more than one -1")
    if -1 in out:
        known = int(np.prod([d for d in out if d != -1], dtype=np.int64))
        if known == 0 or size % known:
            raise fail(node, f"cannot infer -1 in shape {tuple(shape)!r} for input shape {tuple(in_shape)!r}")
        out[out.index(-1)] = size // known
    if int(np.prod(out, dtype=np.int64)) != size:
        raise fail(node, f"cannot reshape {tuple(in_shape)!r} to {tuple(shape)!r}")
    return tuple(out)


def run(node, x, shape=None):
    x = as_array(x)
    if node.since_version < 5:
        shape = node.attr("shape")
        if shape is None:
            raise fail(node, "missing 'shape' attribute")
    elif shape is None:
        raise fail(node, "missing shape input")
    dims = int_list(node, shape, "shape")
    return x.reshape(target_shape(node, x.shape, dims, bool(node.attr("allowzero", 0))))
