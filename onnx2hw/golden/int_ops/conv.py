"""Conv (NHWC, grouped): pad with ``pad_value``, im2col, exact matmul per group, ``act``."""
import numpy as np

from ...quant.integer_graph import apply_act
from ._util import exact_matmul, pad_nhwc, windows

__all__ = ["run"]


def run(layer, x):
    x = pad_nhwc(np.asarray(x, dtype=np.int64), layer.pads, layer.pad_value)
    co, kh, kw, cg = layer.weights.shape
    cols = windows(x, (kh, kw), layer.stride)          # (N, OH, OW, kh, kw, C)
    n, oh, ow = cols.shape[:3]
    g = layer.group
    cog = co // g
    parts = []
    for i in range(g):
        xi = cols[..., i * cg:(i + 1) * cg].reshape(n * oh * ow, kh * kw * cg)
        wi = layer.weights[i * cog:(i + 1) * cog].reshape(cog, kh * kw * cg)
        parts.append(exact_matmul(xi, wi))
    acc = np.concatenate(parts, axis=1).reshape(n, oh, ow, co) + layer.bias
    return apply_act(acc, layer.act)
