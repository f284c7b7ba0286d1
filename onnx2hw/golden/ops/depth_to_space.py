"""DepthToSpace (opset 1; ``mode`` DCR or CRD from opset 11, DCR before): the channels of each
pixel spread over a ``blocksize x blocksize`` block of pixels, by the operator definition's
reshape, transpose, reshape."""
import numpy as np

from ._util import as_array, fail

__all__ = ["run", "block_and_mode"]


def block_and_mode(node, x, dcr_only: bool = False) -> tuple[int, str]:
    """``(blocksize, mode)`` of a DepthToSpace or SpaceToDepth ``node`` on the 4-D ``x``, checked
    (``dcr_only``: an opset whose operator has no ``mode``)."""
    r = int(node.attr("blocksize", 0))
    mode = node.attr("mode", "DCR")
    mode = "DCR" if dcr_only else mode.decode() if isinstance(mode, bytes) else str(mode)
    if x.ndim != 4:
        raise fail(node, f"input of shape {x.shape!r} is not (N, C, H, W)")
    if r < 1:
        raise fail(node, f"blocksize {r!r} must be >= 1")
    if mode not in ("DCR", "CRD"):
        raise fail(node, f"mode {mode!r} is neither DCR nor CRD")
    return r, mode


def run(node, x):
    x = as_array(x)
    r, mode = block_and_mode(node, x, dcr_only=node.since_version < 11)
    n, c, h, w = x.shape
    if c % (r * r):
        raise fail(node, f"{c} channels are not a multiple of blocksize^2 = {r * r}")
    if mode == "DCR":
        t = x.reshape(n, r, r, c // (r * r), h, w).transpose(0, 3, 4, 1, 5, 2)
    else:
        t = x.reshape(n, c // (r * r), r, r, h, w).transpose(0, 1, 4, 2, 5, 3)
    return np.ascontiguousarray(t.reshape(n, c // (r * r), h * r, w * r))
