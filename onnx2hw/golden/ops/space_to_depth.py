"""SpaceToDepth: each ``blocksize x blocksize`` block of pixels becomes the channels of one pixel,
by the operator definition's reshape, transpose, reshape: in the order (block row, block column,
channel) (``mode`` DCR, the only one before opset 28) or (channel, block row, block column)
(``mode`` CRD)."""
import numpy as np

from ._util import as_array, fail

__all__ = ["run"]


def run(node, x):
    x = as_array(x)
    r = int(node.attr("blocksize", 0))
    mode = node.attr("mode", "DCR")
    mode = mode.decode() if isinstance(mode, bytes) else str(mode)
    if mode not in ("DCR", "CRD"):
        raise fail(node, f"mode {mode!r} is neither DCR nor CRD")
    if x.ndim != 4:
        raise fail(node, f"input of shape {x.shape!r} is not (N, C, H, W)")
    if r < 1:
        raise fail(node, f"blocksize {r!r} must be >= 1")
    n, c, h, w = x.shape
    if h % r or w % r:
        raise fail(node, f"height {h} and width {w} are not multiples of blocksize {r}")
    t = x.reshape(n, c, h // r, r, w // r, r).transpose((0, 3, 5, 1, 2, 4) if mode == "DCR" else (0, 1, 3, 5, 2, 4))
    return np.ascontiguousarray(t.reshape(n, c * r * r, h // r, w // r))
