"""Transpose by ``perm`` (default: reverse the axes)."""
import numpy as np

from ._util import as_array, fail

__all__ = ["run"]


def run(node, x):
    x = as_array(x)
    perm = node.attr("perm")
    if perm is None:
        perm = tuple(range(x.ndim))[::-1]
    perm = tuple(int(p) + (x.ndim if int(p) < 0 else 0) for p in perm)
    if sorted(perm) != list(range(x.ndim)):
        raise fail(node, f"perm {tuple(node.attr('perm'))!r} is not a permutation of {x.ndim} axes")
    return np.transpose(x, perm)
