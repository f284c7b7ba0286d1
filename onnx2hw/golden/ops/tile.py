"""Tile: ``input`` repeated ``repeats[a]`` times along each axis ``a`` (``np.tile``)."""
import numpy as np

from ._util import as_array, fail

__all__ = ["run"]


def run(node, x, repeats):
    x = as_array(x)
    reps = np.asarray(repeats).reshape(-1)
    if reps.dtype.kind not in "iu" or reps.size != x.ndim or np.any(reps < 0):
        raise fail(node, f"repeats {reps.tolist()!r} must be {x.ndim} non-negative integers (one per axis)")
    return np.tile(x, [int(r) for r in reps])
