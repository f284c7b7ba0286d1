"""A real scale ratio as an integer multiplier and shift (``onnx2hw.layers._scale``)."""
from __future__ import annotations

from fractions import Fraction

import pytest

from onnx2hw.layers._scale import ratio_to_multiplier_shift


@pytest.mark.parametrize("ratio", [1e-9, 3.7e-5, 0.0123, 0.5, 0.99999999, 1.0, 7.25, 1000.0])
def test_ratio_to_multiplier_shift_is_nearest(ratio):
    m, s = ratio_to_multiplier_shift(ratio)
    m, s = int(m[0]), int(s[0])
    assert 0 < m < 2 ** 31 and 0 <= s <= 62
    exact = Fraction(ratio) * 2 ** s
    assert abs(Fraction(m) - exact) <= Fraction(1, 2)
    if s < 62:  # the largest shift: one more would overflow the multiplier
        assert round(Fraction(ratio) * 2 ** (s + 1)) >= 2 ** 31


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf"), 2.0 ** 40, 1e-30])
def test_ratio_to_multiplier_shift_rejects(bad):
    with pytest.raises(ValueError, match="scale"):
        ratio_to_multiplier_shift(bad, "layer 'x'")
