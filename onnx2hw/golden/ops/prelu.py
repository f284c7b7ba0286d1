"""PRelu: ``x`` if ``x >= 0`` else ``slope * x``, ``slope`` broadcast unidirectionally to ``x``
(opset 7 on); before opset 7 a 1-D slope of ``C`` values is per channel (axis 1)."""
import numpy as np

from ._util import as_array, fail, float_compute

__all__ = ["run"]


def run(node, x, slope):
    x, slope = as_array(x), as_array(slope)
    if node.since_version < 7 and slope.ndim == 1 and slope.size > 1 and x.ndim >= 2 and slope.size == x.shape[1]:
        slope = slope.reshape((-1,) + (1,) * (x.ndim - 2))
    try:
        np.broadcast_to(slope, x.shape)
    except ValueError:
        raise fail(node, f"slope of shape {slope.shape!r} does not broadcast to input {x.shape!r}") from None
    ct = float_compute(x) if x.dtype.kind == "f" else x.dtype
    xf, sf = x.astype(ct, copy=False), slope.astype(ct, copy=False)
    return as_array(np.where(xf < 0, xf * sf, xf)).astype(x.dtype, copy=False)
