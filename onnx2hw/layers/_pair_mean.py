"""The mean of two quantized values exactly as a QDQ graph computes it in float32.

``DequantizeLinear -> AveragePool (kernel area 2) -> QuantizeLinear`` computes, for the codes
``a, b`` of a window, ``y = Q(fl(fl(u + v) / 2))`` with ``u = fl((a - zp) * s)`` (float32, as the
ONNX spec and onnxruntime do). When the output grid is the input grid (TFLite keeps a pool's
quantization), ``(a + b) / 2`` lands on a tie for every odd sum and the float32 rounding of ``u``,
``v`` and ``u + v`` decides it: ``y`` is then no function of the integer sum ``a + b``, and the
window sum + :class:`~onnx2hw.layers.types.Requant` of :mod:`.avg_pool` is off by one step there.

``y`` is a non-decreasing function of the exact real sum ``u + v`` (each float step is
monotone), so the pool is exact when its window sums the terms

    ``E(a) = (a - zp) * K + R(a)``        (:attr:`AvgPool.terms <onnx2hw.layers.AvgPool>`, a
                                          LookupUnit in front of the window in hardware)

into a :class:`~onnx2hw.layers.types.Thresholds` activation, where ``R(a) = (u(a) - (a - zp) *
s) * 2**Q`` is the (integer, small) float32 rounding error of ``u`` on the finest grid ``2**-Q``
of ``s``, and ``K`` (a power of two above the spread of two errors) keeps the sums of different
``a + b`` apart. The thresholds are the smallest term sums that reach each output code; the
result is checked against the float32 formula for every pair of input codes, and ``None`` (the
plain window sum + Requant) is returned when that one is exact already or the check fails.
Larger windows are summed by onnxruntime with one float32 rounding per addition, in an order of
its own: they keep the plain window sum.
"""
from __future__ import annotations

import math

import numpy as np

from .. import arith
from .types import IntType, Thresholds, int_type_for

__all__ = ["float_pair_mean", "pair_mean_terms"]

#: input types with at most this many bits are tabulated (a table of every pair of codes)
MAX_BITS = 8


def float_pair_mean(a, b, s_in: float, zp_in: int, s_out: float, zp_out: int, lo: int, hi: int) -> np.ndarray:
    """``QuantizeLinear(AveragePool(DequantizeLinear(a), DequantizeLinear(b)))`` in float32 by the
    ONNX spec (round half to even), clamped to ``[lo, hi]``."""
    si, so = np.float32(s_in), np.float32(s_out)
    u = (np.asarray(a, np.int64) - zp_in).astype(np.float32) * si
    v = (np.asarray(b, np.int64) - zp_in).astype(np.float32) * si
    w = (u + v) / np.float32(2)
    return np.clip(np.rint(w / so).astype(np.int64) + zp_out, lo, hi)


def pair_mean_terms(in_type: IntType, s_in: float, zp_in: int, s_out: float, zp_out: int, lo: int, hi: int,
                    plain) -> tuple[np.ndarray, IntType, Thresholds] | None:
    """``(table E over in_type's codes, E's type, Thresholds on E(a) + E(b))`` reproducing
    :func:`float_pair_mean` for every pair of codes, or ``None`` when ``plain(a + b - 2 zp)`` (the
    window sum's Requant) already does, the input type is wider than :data:`MAX_BITS` or no
    exact encoding is found."""
    if in_type.bits > MAX_BITS or in_type.bipolar:
        return None
    codes = np.arange(in_type.lo, in_type.hi + 1, dtype=np.int64)
    a, b = np.meshgrid(codes, codes, indexing="ij")
    a, b = a.reshape(-1), b.reshape(-1)
    want = float_pair_mean(a, b, s_in, zp_in, s_out, zp_out, lo, hi)
    if np.array_equal(np.asarray(plain(a + b - 2 * zp_in), np.int64), want):
        return None
    si = float(np.float32(s_in))
    if not (si > 0 and math.isfinite(si)):
        return None
    q = 24 - math.frexp(si)[1]                   # s = m * 2**(e - 24), m < 2**24: s * 2**q and u * 2**q are integers
    d = codes - zp_in
    u = (d.astype(np.float32) * np.float32(si)).astype(np.float64)
    err = u - d * si                             # exact in float64 (both on the grid 2**-q)
    r = np.rint(err * 2.0 ** q).astype(np.int64)
    if not np.array_equal(r.astype(np.float64), err * 2.0 ** q):
        return None
    spread = 2 * int(np.abs(r).max()) + 1
    k = 1 << max(1, spread.bit_length() + 1)
    e = d * k + r
    x = e[a - in_type.lo] + e[b - in_type.lo]
    steps = hi - lo
    if steps < 1:
        return None
    table = np.empty(steps, np.int64)
    top = int(x.max()) + 1
    for j in range(steps):                       # output >= lo + j + 1 from the smallest sum reaching it
        reach = x[want >= lo + j + 1]
        table[j] = int(reach.min()) if reach.size else top
    act = Thresholds(table.reshape(1, -1), lo)
    if not np.array_equal(arith.multithreshold(x.reshape(-1, 1), act.table, lo).reshape(-1), want):
        return None
    return e, int_type_for(int(e.min()), int(e.max())), act
