"""onnx2hw.canon.signals: a 1-D signal written as an image of unit width (tf2onnx's
MaxPooling1D / Conv1D as QKeras' converter writes them: (N, C, L, 1), kernel (k, 1)) becomes the
H = 1 image the importers hold signals as (onnxruntime with optimizations off as the oracle)."""
import numpy as np
from onnx import helper as h

from _canon_models import assert_same_function, model, ops, w
from onnx2hw.canon import canonicalize
from onnx2hw.canon.signals import unit_width
from onnx2hw.ir import load


def _unit_width_model():
    nodes = [h.make_node("Unsqueeze", ["x"], ["u"], axes=[3]),
             h.make_node("Conv", ["u", "W"], ["c"], kernel_shape=[3, 1], pads=[1, 0, 1, 0], strides=[2, 1]),
             h.make_node("Relu", ["c"], ["r"]),
             h.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 1], strides=[2, 1]),
             h.make_node("Squeeze", ["p"], ["y"], axes=[3])]
    return model(nodes, ("x", ["N", 3, 16]), ("y", ["N", 4, 4]), {"W": w(4, 3, 3, 1)}, opset=11)


def test_window_ops_on_unit_width_turn_to_unit_height():
    m = _unit_width_model()
    g = unit_width(load(m))
    assert [n.attrs.get("kernel_shape") for n in g.nodes if n.op_type in ("Conv", "MaxPool")] == [(1, 3), (1, 2)]
    assert_same_function(m, g)
    g = canonicalize(load(m))
    assert ops(g) == ["Reshape", "Conv", "Relu", "MaxPool", "Reshape"]
    assert_same_function(m, g)


def test_a_real_image_is_left_alone():
    nodes = [h.make_node("Conv", ["x", "W"], ["y"], kernel_shape=[3, 1])]
    m = model(nodes, ("x", ["N", 2, 6, 5]), ("y", ["N", 3, 4, 5]), {"W": w(3, 2, 3, 1)})
    assert ops(unit_width(load(m))) == ["Conv"]
