"""onnx2hw.canon.prelu: ``Relu(x) + k * Relu(-x)`` (and ``Relu(x) - a * Relu(-x)``) is
``PRelu(x, -k)`` (``PRelu(x, a)``), as tf2onnx writes Keras' ``PReLU``; onnxruntime with
optimizations off computes the same function from both graphs. End to end: quantized by onnx2hw,
the golden against onnxruntime's spec session on the QDQ model, the hardware simulated bit-exact."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper as h

import onnx2hw
from _canon_models import assert_same_function, model, ops, w
from _oracle import spec_session
from onnx2hw.canon import canonicalize
from onnx2hw.canon.prelu import prelu_sums
from onnx2hw.ir import load
from onnx2hw.quant import ptq


def _keras_prelu(op="Add", swap=False, k=None, extra_reader=False):
    """Conv -> [Relu(c), Mul(Relu(Neg(c)), k)] -> op -> Conv; ``k`` per channel ``(1, 4, 1, 1)``."""
    k = -np.abs(w(1, 4, 1, 1)) - 0.05 if k is None else k
    mul_in = ["kk", "rn"] if swap else ["rn", "kk"]
    add_in = ["m", "rp"] if swap and op == "Add" else ["rp", "m"]
    nodes = [h.make_node("Conv", ["x", "W1"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             h.make_node("Relu", ["c"], ["rp"]), h.make_node("Neg", ["c"], ["n"]), h.make_node("Relu", ["n"], ["rn"]),
             h.make_node("Mul", mul_in, ["m"]), h.make_node(op, add_in, ["p"]),
             h.make_node("Conv", ["p", "W2"], ["y"], kernel_shape=[1, 1])]
    if extra_reader:
        nodes[-1] = h.make_node("Conv", ["p", "W2"], ["y0"], kernel_shape=[1, 1])
        nodes.append(h.make_node("Add", ["y0", "rn_sum"], ["y"]))
        nodes.insert(-1, h.make_node("ReduceSum", ["rn"], ["rn_sum"], keepdims=1))
    return model(nodes, ("x", ["N", 3, 5, 5]), ("y", ["N", 2, 5, 5]), {"W1": w(4, 3, 3, 3), "W2": w(2, 4, 1, 1), "kk": k})


FORMS = {"add": _keras_prelu, "add_swapped": lambda: _keras_prelu(swap=True),
         "sub": lambda: _keras_prelu("Sub", k=np.abs(w(1, 4, 1, 1)) + 0.05),
         "scalar": lambda: _keras_prelu(k=np.array(-0.2, np.float32))}


@pytest.mark.parametrize("name", list(FORMS))
def test_sum_of_halves_is_prelu(name):
    m = FORMS[name]()
    g = prelu_sums(load(m))
    assert ops(g) == ["Conv", "PRelu", "Conv"]
    assert_same_function(m, g)
    assert_same_function(m, canonicalize(load(m)))


def test_negative_half_read_elsewhere_stays():
    m = _keras_prelu(extra_reader=True)
    assert "PRelu" not in ops(prelu_sums(load(m)))


@pytest.mark.sim
def test_keras_prelu_from_float_matches_onnxruntime_and_simulates():
    m = _keras_prelu()
    x = np.random.default_rng(5).standard_normal((24, 3, 5, 5)).astype(np.float32)
    design = onnx2hw.compile(m, board="ulx3s", calib={"x": x})
    want = spec_session(ptq.quantize(m, {"x": x})).run(None, {"x": x[:8]})[0]
    np.testing.assert_allclose(design.golden({"x": x[:8]})["y"], want, rtol=0, atol=1e-6 * np.abs(want).max())
    design.simulate({"x": x[:2]})   # MismatchError unless bit-exact against the golden
