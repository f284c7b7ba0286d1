"""AvgPool (NHWC): window sum (padding = ``pad_value``) + ``bias``, then the ``Requant``."""
import numpy as np

from ._util import pad_nhwc, windows

__all__ = ["run"]


def run(layer, x):
    x = pad_nhwc(np.asarray(x, dtype=np.int64), layer.pads, layer.pad_value)
    acc = windows(x, layer.kernel, layer.stride).sum(axis=(3, 4)) + layer.bias
    return layer.act(acc)
