"""AvgPool layer kind: its exact reference is the window sum plus the bias, requantized once
(the int64 formula written here, with ``onnx2hw.arith.requantize``)."""
from __future__ import annotations

import numpy as np

from _one_layer import S8, graph_of
from onnx2hw import arith, golden
from onnx2hw import layers as ig


def test_avg_pool_requantizes_the_window_sum():
    rng = np.random.default_rng(2)
    x = rng.integers(-128, 128, (4, 3, 3, 3)).astype(np.int8)
    act = ig.Requant(np.array([7282]), np.array([16]), -3, -128, 127)  # about 1/9
    ap = ig.AvgPool("ap", ("x",), ig.TensorSpec("a", (1, 1, 3), S8), (3, 3), (1, 1), (0, 0, 0, 0), act, bias=-9 * 4)
    got = golden.execute(graph_of(ig.TensorSpec("x", (3, 3, 3), S8), [ap]), {"x": x})["a"]
    sums = x.astype(np.int64).sum(axis=(1, 2), keepdims=True) - 36
    assert np.array_equal(got, arith.requantize(sums, 7282, 16, -3, -128, 127))
