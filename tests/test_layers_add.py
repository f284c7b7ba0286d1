"""Add layer kind: two inputs on their own grids are rescaled, summed and rounded once (half up),
against the exact rational sum computed with ``fractions``."""
from __future__ import annotations

from fractions import Fraction

import numpy as np

from _one_layer import U8
from onnx2hw import golden
from onnx2hw import layers as ig


def test_add_single_rounding():
    rng = np.random.default_rng(3)
    a = rng.integers(0, 256, (50, 2, 2, 3))
    b = rng.integers(0, 256, (50, 2, 2, 3))
    spec_a, spec_b = ig.TensorSpec("a", (2, 2, 3), U8), ig.TensorSpec("b", (2, 2, 3), U8)
    layer = ig.Add("add", ("a", "b"), ig.TensorSpec("y", (2, 2, 3), U8), (10, 128), (3 * 2 ** 20, 5 * 2 ** 19 + 1),
                   5, 5, 255, shift=22)
    g = ig.IntegerGraph((ig.InputQuant("a", 1.0, 0, U8, True), ig.InputQuant("b", 1.0, 0, U8, True)),
                        (spec_a, spec_b), (layer,), (ig.OutputDequant("y", 1.0, 0, True, 1),), (layer.output,),
                        "qdq").validate()
    got = golden.execute(g, {"a": a, "b": b})["y"]
    for idx in np.ndindex(*got.shape):
        v = Fraction((int(a[idx]) - 10) * (3 * 2 ** 20) + (int(b[idx]) - 128) * (5 * 2 ** 19 + 1), 2 ** 22)
        want = min(255, max(5, 5 + int(np.floor(v + Fraction(1, 2)))))  # round half up
        assert got[idx] == want
