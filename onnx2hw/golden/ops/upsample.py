"""Upsample (opsets 7 and 9; deprecated since 10): ``mode="nearest"`` only, output length
``floor(in * scale)``, source index ``floor(out_index / scale)`` (asymmetric coordinates).
Opset 7 takes the scales as an attribute, opset 9 as the second input."""
import numpy as np

from ._resize_util import resize_nearest
from ._util import as_array, fail

__all__ = ["run"]


def run(node, x, scales=None):
    x = as_array(x)
    mode = node.attr("mode", "nearest")
    mode = mode.decode() if isinstance(mode, bytes) else str(mode)
    if mode != "nearest":
        raise fail(node, f"mode {mode!r} is not supported (only nearest)")
    s = node.attr("scales") if node.since_version < 9 else scales
    if s is None:
        raise fail(node, "missing scales")
    s = np.asarray(s, np.float64).reshape(-1)
    if s.size != x.ndim or np.any(s < 1):
        raise fail(node, f"scales {s.tolist()!r} must be {x.ndim} numbers >= 1")
    out_shape = [int(np.floor(n * f)) for n, f in zip(x.shape, s)]
    return resize_nearest(x, out_shape, s.tolist(), "asymmetric", "floor")
