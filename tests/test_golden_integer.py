"""The golden integer executor (``onnx2hw.golden.integer``) checks its feeds: range, dtype, shape
and names, each with one message."""
from __future__ import annotations

import numpy as np
import pytest

from _one_layer import U8, graph_of, small_dense
from onnx2hw import golden
from onnx2hw import layers as ig
from onnx2hw.ir import ModelError


def test_execute_checks_feeds():
    g = graph_of(ig.TensorSpec("x", (3,), U8), [small_dense()])
    with pytest.raises(ModelError, match="outside uint8"):
        golden.execute(g, {"x": np.array([[0, 1, 300]])})
    with pytest.raises(ModelError, match="integer array"):
        golden.execute(g, {"x": np.zeros((1, 3), np.float32)})
    with pytest.raises(ModelError, match="shape"):
        golden.execute(g, {"x": np.zeros((1, 4), np.uint8)})
    with pytest.raises(ModelError, match="'z' is not an input"):
        golden.execute(g, {"x": np.zeros((1, 3), np.uint8), "z": np.zeros(1)})
