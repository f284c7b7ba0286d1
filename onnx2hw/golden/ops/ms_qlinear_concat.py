"""com.microsoft QLinearConcat: inputs ``(y_scale, y_zp, x0, s0, z0, x1, s1, z1, ...)``; each
input is requantized to the output grid, ``rint(float32(x - z) * (s / y_scale)) + y_zp``
(an input whose scale and zero point equal the output's is copied), then concatenated on ``axis``."""
from __future__ import annotations

import numpy as np

from ._quant_util import rint_clip, zero_point
from ._util import fail, norm_axis

__all__ = ["run"]


def run(node, y_scale, y_zero_point, *triples):
    if len(triples) % 3 or not triples:
        raise fail(node, f"expects (tensor, scale, zero point) triples after y_scale/y_zero_point, got {len(triples)} inputs")
    sy = np.float32(np.asarray(y_scale).reshape(()))
    zy = zero_point(y_zero_point).reshape(())
    out_dtype = np.asarray(y_zero_point).dtype
    parts = []
    for x, s, z in zip(triples[0::3], triples[1::3], triples[2::3]):
        s = np.float32(np.asarray(s).reshape(()))
        z = zero_point(z).reshape(())
        if s == sy and z == zy:
            parts.append(x.astype(out_dtype))
        else:
            parts.append(rint_clip((x.astype(np.int64) - z).astype(np.float32) * (s / sy), zy, out_dtype))
    axis = norm_axis(node, int(node.attr("axis")), parts[0].ndim)
    return np.concatenate(parts, axis=axis)
