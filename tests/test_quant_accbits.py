"""Accumulator widths: the derived width never overflows for any input in range, and one bit
less overflows for the extreme input of the same weights (hypothesis property test)."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto

from onnx2hw import golden
from onnx2hw import arith
from onnx2hw import layers as ig


@st.composite
def dense_case(draw):
    in_bits = draw(st.integers(1, 16))
    in_signed = draw(st.booleans())
    w_bits = draw(st.integers(2, 16))
    n = draw(st.integers(1, 4))
    k = draw(st.integers(1, 24))
    wt = ig.IntType(w_bits, True)
    w = np.array(draw(st.lists(st.integers(wt.lo, wt.hi), min_size=n * k, max_size=n * k))).reshape(n, k)
    bias = np.array(draw(st.lists(st.integers(-(2 ** 20), 2 ** 20), min_size=n, max_size=n)))
    seed = draw(st.integers(0, 2 ** 32 - 1))
    return ig.IntType(in_bits, in_signed), wt, w, bias, seed


def _fits(acc, bits):
    return np.all(acc >= -(1 << (bits - 1))) and np.all(acc <= (1 << (bits - 1)) - 1)


@settings(max_examples=300, deadline=None)
@given(dense_case())
def test_acc_bits_is_tight(case):
    in_type, w_type, w, bias, seed = case
    lo, hi = ig.accumulator_bounds(w, bias, in_type.lo, in_type.hi)
    bits = arith.acc_bits(int(min(lo)), int(max(hi)))
    spec = ig.TensorSpec("x", (w.shape[1],), in_type)
    out_type = ig.int_type_for(min(lo), max(hi)) if bits <= 16 else None
    # execute the raw accumulator through the golden Dense layer (act=None) when it fits a tensor type,
    # else compute it with Python integers
    rng = np.random.default_rng(seed)
    x = rng.integers(in_type.lo, in_type.hi + 1, (64, w.shape[1]))
    extreme_hi = np.where(w > 0, in_type.hi, in_type.lo)   # per output row: the maximizing input
    extreme_lo = np.where(w > 0, in_type.lo, in_type.hi)
    xs = np.concatenate([x, extreme_hi, extreme_lo])
    if out_type is not None:
        layer = ig.Dense("fc", ("x",), ig.TensorSpec("y", (w.shape[0],), out_type), w, bias, in_type, w_type, bits, None)
        g = ig.IntegerGraph((ig.InputQuant("x", 1.0, 0, in_type, False),), (spec,), (layer,),
                            (ig.OutputDequant("y", 1.0, 0, False, TensorProto.FLOAT),), (layer.output,), "qdq")
        acc = golden.execute(g.validate(), {"x": xs})["y"]
    else:
        acc = xs.astype(object) @ w.T.astype(object) + bias.astype(object)
    assert _fits(acc, bits)                       # never overflows for inputs in range
    if bits > 1:                                  # one bit less: the extreme input overflows
        rows = np.arange(w.shape[0])
        ext = np.concatenate([acc[64 + rows, rows], acc[64 + w.shape[0] + rows, rows]])
        assert not _fits(ext, bits - 1)
