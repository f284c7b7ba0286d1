"""SpaceToDepth: each ``blocksize x blocksize`` block of pixels becomes the channels of one pixel,
by the operator definition's reshape, transpose, reshape: in the order (block row, block column,
channel) (``mode`` DCR, the only one before opset 28) or (channel, block row, block column)
(``mode`` CRD)."""
import numpy as np

from ._util import as_array, fail
from .depth_to_space import block_and_mode

__all__ = ["run"]


def run(node, x):
    x = as_array(x)
    r, mode = block_and_mode(node, x)
    n, c, h, w = x.shape
    if h % r or w % r:
        raise fail(node, f"height {h} and width {w} are not multiples of blocksize {r}")
    t = x.reshape(n, c, h // r, r, w // r, r).transpose((0, 3, 5, 1, 2, 4) if mode == "DCR" else (0, 1, 3, 5, 2, 4))
    return np.ascontiguousarray(t.reshape(n, c * r * r, h // r, w // r))
