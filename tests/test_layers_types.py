"""The IntegerGraph's value types: IntType ranges and the Requant parameters' checks."""
from __future__ import annotations

import numpy as np
import pytest

from _one_layer import S4, U8
from onnx2hw import layers as ig


@pytest.mark.parametrize("bits", [0, 33, -1])
def test_inttype_rejects_bad_width(bits):
    with pytest.raises(ValueError, match=repr(bits)):
        ig.IntType(bits, True)


def test_inttype_ranges():
    assert (U8.lo, U8.hi) == (0, 255) and (S4.lo, S4.hi) == (-8, 7)
    bp = ig.IntType(1, False, bipolar=True)
    assert (bp.lo, bp.hi) == (-1, 1) and str(bp) == "bipolar"
    assert ig.int_type_for(-3, 3) == ig.IntType(3, True) and ig.int_type_for(0, 255) == U8


def test_requant_rejects_bad_parameters():
    with pytest.raises(ValueError, match="2\\*\\*32"):
        ig.Requant(np.array([2 ** 32]), np.array([3]), 0, 0, 255)
    with pytest.raises(ValueError, match="0..62"):
        ig.Requant(np.array([5]), np.array([63]), 0, 0, 255)
    with pytest.raises(ValueError, match="lo"):
        ig.Requant(np.array([5]), np.array([3]), 0, 10, 9)
