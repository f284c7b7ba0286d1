"""Golden ConvTranspose against onnxruntime (optimizations off) and, without groups or
output_shape (where onnx.reference's own code fails), onnx's reference evaluator: float32 models, compared within float32 rounding (the golden sums in
float64 and rounds once)."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from _oracle import reference, run_spec
from onnx2hw import golden
from onnx2hw.ir import load

CASES = [   # (input (N, C, *spatial), weight (C, M/g, *kernel), attributes)
    ((2, 3, 4, 5), (3, 2, 3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 1])),
    ((1, 2, 3, 3), (2, 4, 4, 4), dict(strides=[2, 2], pads=[1, 1, 1, 1])),
    ((1, 4, 3, 4), (4, 1, 3, 2), dict(strides=[3, 1], group=4, pads=[0, 1, 2, 0])),
    ((2, 4, 3, 3), (4, 3, 2, 2), dict(strides=[2, 2], group=2)),
    ((1, 3, 7), (3, 2, 3), dict(strides=[2], pads=[1, 0], output_padding=[1])),
    ((1, 2, 4, 4), (2, 3, 3, 3), dict(strides=[2, 1], dilations=[2, 3], pads=[1, 2, 0, 1])),
    ((1, 2, 3, 3), (2, 2, 3, 3), dict(strides=[2, 2], auto_pad="SAME_UPPER")),
    ((1, 2, 3, 3), (2, 2, 3, 3), dict(strides=[2, 2], auto_pad="SAME_LOWER")),
    ((1, 2, 3, 3), (2, 2, 3, 3), dict(strides=[2, 2], output_shape=[6, 7])),
    ((1, 2, 5, 5), (2, 2, 2, 2), dict(pads=[2, 2, 2, 2])),       # more padding than kernel: cropped
]


def _model(xs, ws, attrs):
    """One ConvTranspose node whose input, weight and bias are graph inputs."""
    shapes = {"x": xs, "w": ws, "b": (ws[1] * attrs.get("group", 1),)}
    g = helper.make_graph([helper.make_node("ConvTranspose", list(shapes), ["y"], name="ct", **attrs)], "t",
                          [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(s)) for n, s in shapes.items()],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None] * len(xs))])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("xs,ws,attrs", CASES)
def test_conv_transpose_matches_onnxruntime(xs, ws, attrs):
    rng = np.random.default_rng(len(xs) + sum(ws))
    group = attrs.get("group", 1)
    feeds = {"x": rng.standard_normal(xs).astype(np.float32), "w": rng.standard_normal(ws).astype(np.float32),
             "b": rng.standard_normal(ws[1] * group).astype(np.float32)}
    m = _model(xs, ws, attrs)
    got = golden.execute(load(m), feeds)["y"]
    want = run_spec(m, feeds)[0]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    if group == 1 and "output_shape" not in attrs:   # onnx.reference's grouped and output_shape paths fail
        np.testing.assert_allclose(got, reference(m, feeds)[0], rtol=1e-5, atol=1e-5)
