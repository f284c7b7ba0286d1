"""MaxPool (NHWC): integer maximum over each window; padded positions never win."""
import numpy as np

from ._util import pad_nhwc, windows

__all__ = ["run"]


def run(layer, x):
    x = np.asarray(x, dtype=np.int64)
    x = pad_nhwc(x, layer.pads, np.iinfo(np.int64).min)
    return windows(x, layer.kernel, layer.stride).max(axis=(3, 4))
