"""The IntegerGraph's host conversions (``onnx2hw.layers.graph``): float inputs quantized onto the
input grid in stream (NHWC) order, integer outputs dequantized."""
from __future__ import annotations

import numpy as np

from _quant_models import cnn, quantize
from onnx2hw import layers as ig
from onnx2hw.ir import load
from onnx2hw.quant.convert import to_integer_graph


def test_host_conversions_roundtrip(tmp_path):
    g = to_integer_graph(load(quantize(cnn(32), tmp_path)))
    x = np.random.default_rng(0).random((3, 1, 8, 8), dtype=np.float32)
    q = ig.quantize_inputs(g, {"x": x})["x"]
    assert q.shape == (3, 8, 8, 1)
    s, z = g.inputs[0].scale, g.inputs[0].zero_point
    assert np.array_equal(q[..., 0], np.clip(np.rint(x[:, 0] / np.float32(s)) + z, 0, 255))
    y = ig.dequantize_outputs(g, {"y": np.full((3, 10), g.outputs[0].zero_point + 2)})["y"]
    assert y.shape == (3, 10) and np.allclose(y, 2 * g.outputs[0].scale)
