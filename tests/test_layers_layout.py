"""NCHW <-> NHWC helpers (``onnx2hw.layers._layout``): the stream's channels-last order."""
from __future__ import annotations

import numpy as np

from onnx2hw.layers._layout import flatten_perm, nhwc


def test_layout_helpers():
    assert nhwc((3, 4, 5)) == (4, 5, 3) and nhwc((7,)) == (7,)
    x = np.arange(2 * 3 * 4 * 5).reshape(2, 3, 4, 5)  # NCHW
    perm = flatten_perm((3, 4, 5))
    onnx_flat = x.reshape(2, -1)
    nhwc_flat = x.transpose(0, 2, 3, 1).reshape(2, -1)
    assert np.array_equal(nhwc_flat[:, perm], onnx_flat)
    assert flatten_perm((8, 1, 1)) is None
