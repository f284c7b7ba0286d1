"""ConvInteger: exact ``conv(x - x_zero_point, w - w_zero_point)`` as int32.

Accumulated exactly (float64 BLAS when every dot product is provably exact, int64
otherwise), then wrapped to int32 like a 32-bit accumulator.
"""
from __future__ import annotations

import numpy as np

from ._conv_util import conv_integer_acc

__all__ = ["run"]


def run(node, x, w, x_zero_point=None, w_zero_point=None):
    return conv_integer_acc(node, x, x_zero_point, w, w_zero_point).astype(np.int32)
