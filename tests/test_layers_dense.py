"""Dense layer kind: its exact reference against onnxruntime's MatMulInteger (spec-exact session)
followed by ``onnx2hw.arith``, and its validation's messages."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto

from _one_layer import S4, U8, graph_of, ort_op, small_dense
from onnx2hw import arith, golden
from onnx2hw import layers as ig
from onnx2hw.ir import ModelError


@pytest.mark.parametrize("per_channel", [False, True])
def test_dense_matches_matmulinteger(per_channel):
    rng = np.random.default_rng(0)
    w = rng.integers(-8, 8, (5, 12))
    bias = rng.integers(-500, 500, 5)
    x = rng.integers(0, 256, (40, 12)).astype(np.uint8)
    lo, hi = ig.accumulator_bounds(w, bias, 0, 255)
    m = rng.integers(1000, 5000, 5 if per_channel else 1)
    s = np.full_like(m, 16)
    act = ig.Requant(m, s, 7, 0, 255)
    spec = ig.TensorSpec("x", (12,), U8)
    out = ig.TensorSpec("y", (5,), U8)
    layer = ig.Dense("fc", ("x",), out, w, bias, U8, S4, arith.acc_bits(int(min(lo)), int(max(hi))), act)
    got = golden.execute(graph_of(spec, [layer]), {"x": x})["y"]
    acc = ort_op("MatMulInteger", {"x": x, "w": w.T.astype(np.int8)}, TensorProto.INT32).astype(np.int64) + bias
    assert np.array_equal(got, arith.requantize(acc, m, s, 7, 0, 255))


@pytest.mark.parametrize("kw,msg", [
    (dict(acc_bits=12), "acc_bits 12 != 13"),
    (dict(w_type=ig.IntType(2, True)), "outside w_type int2"),
    (dict(inputs=("nope",)), "'nope' is not defined"),
    (dict(bias=np.array([1, 2, 3])), "bias shape"),
    (dict(output=ig.TensorSpec("y", (3,), U8)), "output shape"),
    (dict(act=ig.Requant(np.array([3]), np.array([4]), 0, -5, 255)), "outside output type"),
])
def test_validate_names_the_problem(kw, msg):
    spec = ig.TensorSpec("x", (3,), U8)
    layer = small_dense(**kw)
    with pytest.raises(ModelError, match=r"Dense layer 'fc'.*" + msg.replace("(", r"\(")):
        graph_of(spec, [layer], [layer.output])
