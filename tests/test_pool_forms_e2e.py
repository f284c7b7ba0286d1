"""Pools in the forms exporters write, end to end: float models built here, quantized by onnx2hw's
post-training quantizer; the golden against onnxruntime's spec-exact session on the QDQ model the
quantizer writes (within 1e-6 of the output's magnitude: the same integers, dequantized in float32
by onnxruntime), and the compiled design simulated bit-exact against the golden.

* Keras ``AveragePooling2D(padding="same")`` as tf2onnx writes it: explicit, asymmetric ``pads``
  with ``count_include_pad=0``, and ``auto_pad=SAME_UPPER``: edge and corner windows divide by
  the positions inside the image.
* PyTorch ``AvgPool2d(ceil_mode=True)`` on odd maps, counting padding (the default) and not:
  partial last windows (8 -> 5 -> 3) divide by the positions inside the padded image (or the image).
* A 1-D PyTorch ``AvgPool1d(ceil_mode=True, count_include_pad=False)`` and ``MaxPool1d(ceil_mode=True)``.
* MaxPool with asymmetric pads, ``auto_pad=SAME_UPPER``/``SAME_LOWER`` and ``ceil_mode=1`` with
  asymmetric pads.
"""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from _canon_models import model, w
from _oracle import spec_session
import onnx2hw
from onnx2hw.quant import ptq


def _keras_same():
    nodes = [helper.make_node("Conv", ["x", "W", "b"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("AveragePool", ["r"], ["p"], kernel_shape=[3, 3], strides=[2, 2], pads=[0, 0, 1, 1],
                              count_include_pad=0),
             helper.make_node("Conv", ["p", "W2", "b2"], ["c2"]), helper.make_node("Relu", ["c2"], ["r2"]),
             helper.make_node("AveragePool", ["r2"], ["p2"], kernel_shape=[2, 2], auto_pad="SAME_UPPER"),
             helper.make_node("Flatten", ["p2"], ["f"]), helper.make_node("Gemm", ["f", "Wd", "bd"], ["y"], transB=1)]
    return model(nodes, ("x", ["N", 3, 8, 8]), ("y", ["N", 4]),
                 {"W": w(6, 3, 3, 3), "b": w(6), "W2": w(5, 6, 1, 1), "b2": w(5), "Wd": w(4, 80), "bd": w(4)})


def _torch_ceil():
    nodes = [helper.make_node("Conv", ["x", "W", "b"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("AveragePool", ["r"], ["p"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
                              ceil_mode=1, count_include_pad=1),
             helper.make_node("AveragePool", ["p"], ["p2"], kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1,
                              count_include_pad=0),
             helper.make_node("Flatten", ["p2"], ["f"]), helper.make_node("Gemm", ["f", "Wd", "bd"], ["y"], transB=1)]
    return model(nodes, ("x", ["N", 2, 8, 8]), ("y", ["N", 3]),
                 {"W": w(4, 2, 3, 3), "b": w(4), "Wd": w(3, 36), "bd": w(3)})


def _max_pools():
    nodes = [helper.make_node("Conv", ["x", "W", "b"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 0, 0, 2],
                              ceil_mode=1),
             helper.make_node("MaxPool", ["p"], ["p2"], kernel_shape=[2, 2], auto_pad="SAME_LOWER"),
             helper.make_node("MaxPool", ["p2"], ["p3"], kernel_shape=[3, 2], strides=[2, 2], auto_pad="SAME_UPPER"),
             helper.make_node("MaxPool", ["p3"], ["p4"], kernel_shape=[2, 2], pads=[0, 1, 1, 0]),
             helper.make_node("Flatten", ["p4"], ["f"]), helper.make_node("Gemm", ["f", "Wd", "bd"], ["y"], transB=1)]
    return model(nodes, ("x", ["N", 2, 9, 8]), ("y", ["N", 3]),
                 {"W": w(4, 2, 3, 3), "b": w(4), "Wd": w(3, 24), "bd": w(3)})


def _torch_1d():
    """Conv1d, then AvgPool1d(3, 2, padding=1, ceil_mode=True, count_include_pad=False) on 10 -> 6
    (a partial last window) and MaxPool1d(2, ceil_mode=True) on 6 -> 3."""
    nodes = [helper.make_node("Conv", ["x", "W", "b"], ["c"], pads=[1, 1]), helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("AveragePool", ["r"], ["p"], kernel_shape=[3], strides=[2], pads=[1, 1], ceil_mode=1,
                              count_include_pad=0),
             helper.make_node("MaxPool", ["p"], ["p2"], kernel_shape=[2], strides=[2], ceil_mode=1),
             helper.make_node("Flatten", ["p2"], ["f"]), helper.make_node("Gemm", ["f", "Wd", "bd"], ["y"], transB=1)]
    return model(nodes, ("x", ["N", 3, 10]), ("y", ["N", 3]),
                 {"W": w(5, 3, 3), "b": w(5), "Wd": w(3, 15), "bd": w(3)})


MODELS = {"keras_same_avg": (_keras_same, (3, 8, 8)), "torch_ceil_avg": (_torch_ceil, (2, 8, 8)),
          "max_pools": (_max_pools, (2, 9, 8)), "torch_1d": (_torch_1d, (3, 10))}


def _data(shape, seed):
    return np.random.default_rng(seed).standard_normal((32, *shape)).astype(np.float32)


@pytest.mark.parametrize("name", list(MODELS))
def test_golden_matches_the_quantized_model(name):
    make, shape = MODELS[name]
    m, x = make(), _data(shape, 0)
    design = onnx2hw.compile(m, board="ulx3s", calib={"x": x})
    want = spec_session(ptq.quantize(m, {"x": x})).run(None, {"x": x[:16]})[0]
    np.testing.assert_allclose(design.golden({"x": x[:16]})["y"], want, rtol=0, atol=1e-6 * np.abs(want).max())
    pools = [s for s in design.pipeline.stages if "pool" in s.op]
    blocks = [b.kind for s in pools for b in s.blocks]
    assert len(pools) == {"max_pools": 4}.get(name, 2)
    # every average pool's window count varies at the edges: one DivisorRequantize each
    assert blocks.count("DivisorRequantize") == {"max_pools": 0, "torch_1d": 1}.get(name, 2)


@pytest.mark.sim
@pytest.mark.parametrize("name", list(MODELS))
def test_pools_simulate_bit_exact(name):
    make, shape = MODELS[name]
    x = _data(shape, 1)
    onnx2hw.compile(make(), board="ulx3s", calib={"x": x}).simulate({"x": x[:6]})   # MismatchError unless exact
