"""Unsqueeze: insert size-1 axes at ``axes`` of the *output* (attribute before
opset 13, input from 13; negative axes count from the output's end)."""
from ._util import as_array, fail, int_list, norm_axes

__all__ = ["run"]


def run(node, x, axes=None):
    x = as_array(x)
    if node.since_version < 13:
        axes = node.attr("axes")
    if axes is None:
        raise fail(node, "missing axes")
    axes = int_list(node, axes, "axes")
    rank = x.ndim + len(axes)
    new = set(norm_axes(node, axes, rank))
    dims = iter(x.shape)
    return x.reshape(tuple(1 if i in new else next(dims) for i in range(rank)))
