"""Conv layer kind: its exact reference against onnxruntime's ConvInteger (spec-exact session)
followed by ``onnx2hw.arith``, over strides, asymmetric pads and groups."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto

from _one_layer import S8, U8, graph_of, ort_op
from onnx2hw import arith, golden
from onnx2hw import layers as ig


@pytest.mark.parametrize("stride,pads,group", [((1, 1), (1, 1, 1, 1), 1), ((2, 1), (0, 1, 2, 0), 1),
                                                ((1, 1), (1, 1, 1, 1), 2), ((2, 2), (0, 0, 0, 0), 4)])
def test_conv_matches_convinteger(stride, pads, group):
    rng = np.random.default_rng(1)
    cin, cout, zp = 4, 8, 9
    w = rng.integers(-100, 100, (cout, 3, 3, cin // group))     # (Cout, kh, kw, Cin/g)
    bias = rng.integers(-2000, 2000, cout)
    x = rng.integers(0, 256, (3, 7, 6, cin)).astype(np.uint8)  # NHWC
    h = (7 + pads[0] + pads[2] - 3) // stride[0] + 1
    wd = (6 + pads[1] + pads[3] - 3) // stride[1] + 1
    lo, hi = ig.accumulator_bounds(w, bias, 0, 255)
    act = ig.Requant(rng.integers(100, 200, cout), np.full(cout, 10), 3, 0, 255)
    layer = ig.Conv("conv", ("x",), ig.TensorSpec("y", (h, wd, cout), U8), w, bias, stride, pads, zp, group, (1, 1),
                    U8, S8, arith.acc_bits(int(min(lo)), int(max(hi))), act)
    got = golden.execute(graph_of(ig.TensorSpec("x", (7, 6, cin), U8), [layer]), {"x": x})["y"]
    # ONNX ConvInteger pads with the input zero point and subtracts it: add zp * sum(w) back
    acc = ort_op("ConvInteger", {"x": x.transpose(0, 3, 1, 2).copy(), "w": w.transpose(0, 3, 1, 2).astype(np.int8),
                                 "xz": np.array(zp, np.uint8)}, TensorProto.INT32,
                 pads=[pads[0], pads[1], pads[2], pads[3]], strides=list(stride), group=group)
    acc = acc.astype(np.int64).transpose(0, 2, 3, 1) + zp * w.reshape(cout, -1).sum(axis=1) + bias
    assert np.array_equal(got, act(acc))
