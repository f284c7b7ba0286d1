"""ConvInteger: exact ``conv(x - x_zero_point, w - w_zero_point)`` as int32.

Accumulated exactly (float32 or float64 BLAS when every partial sum provably fits
the mantissa, int64 otherwise), then wrapped to int32 like a 32-bit accumulator.
"""
from __future__ import annotations

from ._conv_util import conv_integer_acc
from ._quant_util import to_int32

__all__ = ["run"]


def run(node, x, w, x_zero_point=None, w_zero_point=None):
    return to_int32(conv_integer_acc(node, x, x_zero_point, w, w_zero_point))
