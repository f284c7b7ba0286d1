"""onnx2hw.canon.hard_sigmoid: ``c * Clip(a*x + b, 0, hi)`` with ``c*hi == 1`` is
``HardSigmoid(alpha=a*c, beta=b*c)``; onnxruntime with every optimization off computes the same
function from both graphs (float32 rounding of ``a*c``, ``b*c`` within 1e-5 of the output's
magnitude). End to end: Keras ``hard_swish`` as tf2onnx writes it (``x * (Clip(x + 3, 0, 6) *
1/6)`` after a Conv, Transposes around it), quantized by onnx2hw's post-training quantizer: the
golden against onnxruntime's spec session on the QDQ model, the hardware simulated bit-exact."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper as h, numpy_helper as nh

import onnx2hw
from _canon_models import assert_same_function, model, ops, w
from _oracle import spec_session
from onnx2hw.canon import canonicalize
from onnx2hw.canon.hard_sigmoid import hard_sigmoids
from onnx2hw.ir import load
from onnx2hw.quant import ptq

F = np.float32


def _chain(shift=("Add", 3.0), scale=None, clip=(0.0, 6.0), out=("Mul", 1 / 6), swish=True, opset=13,
           const_first=False):
    """Conv 3 -> 4 (3x3, pad 1) on (N, 3, 6, 6), then ``[Mul(scale)] -> shift -> Clip(clip) ->
    out`` on its output (each part optional), times the Conv's output when ``swish``."""
    nodes = [h.make_node("Conv", ["x", "W", "b"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])]
    inits = {"W": w(4, 3, 3, 3), "b": w(4)}
    cur = "c"

    def step(op, k, name):
        nonlocal cur
        inits[name] = np.array(k, F).reshape((1, 1, 1, 1) if name == "k_shift" else ())
        ins = [name, cur] if const_first and op in ("Add", "Mul") else [cur, name]
        nodes.append(h.make_node(op, ins, [name + "_out"]))
        cur = name + "_out"

    if scale is not None:
        step("Mul", scale, "k_scale")
    if shift is not None:
        step(shift[0], shift[1], "k_shift")
    if opset < 11:
        nodes.append(h.make_node("Clip", [cur], ["cl"], min=clip[0], max=clip[1]))
    else:
        inits.update(lo=np.array(clip[0], F), hi=np.array(clip[1], F))
        nodes.append(h.make_node("Clip", [cur, "lo", "hi"], ["cl"]))
    cur = "cl"
    if out is not None:
        step(out[0], out[1], "k_out")
    if swish:
        nodes.append(h.make_node("Mul", ["c", cur], ["hs"]))
        cur = "hs"
    nodes.append(h.make_node("Relu", [cur], ["y"]))
    return model(nodes, ("x", ["N", 3, 6, 6]), ("y", ["N", 4, 6, 6]), inits, opset=opset)


def _scaled_after_product(k=("Div", 6.0)):
    """PyTorch's hand-written hard swish ``c * relu6(c + 3) / 6``: the scaling after the product."""
    m = _chain(out=None)
    nodes = list(m.graph.node)
    nodes[-1:] = [h.make_node(k[0], ["hs", "k_post"], ["hs_scaled"]), h.make_node("Relu", ["hs_scaled"], ["y"])]
    del m.graph.node[:]
    m.graph.node.extend(nodes)
    m.graph.initializer.append(nh.from_array(np.array(k[1], F), "k_post"))
    return m


FOLDS = {
    "torch_hand_written_swish": _scaled_after_product,
    "torch_hand_written_swish_mul": lambda: _scaled_after_product(("Mul", 1 / 6)),
    "keras_hard_swish": lambda: _chain(),
    "keras_hard_sigmoid": lambda: _chain(swish=False),
    "constants_first": lambda: _chain(const_first=True),
    "div_by_6": lambda: _chain(out=("Div", 6.0)),
    "sub": lambda: _chain(shift=("Sub", -3.0)),
    "scaled_input": lambda: _chain(scale=0.2, shift=("Add", 0.5), clip=(0.0, 1.0), out=None),
    "clip_attributes": lambda: _chain(opset=9),
}


@pytest.mark.parametrize("name", list(FOLDS))
def test_clamp_is_hard_sigmoid(name):
    m = FOLDS[name]()
    g = hard_sigmoids(load(m))
    assert "HardSigmoid" in ops(g) and "Clip" not in ops(g)
    assert_same_function(m, g)
    assert_same_function(m, canonicalize(load(m)))


STAYS = {
    "no_shift": lambda: _chain(shift=None),
    "lo_not_zero": lambda: _chain(clip=(-1.0, 6.0)),
    "not_unit": lambda: _chain(out=("Mul", 0.2)),
    "no_scaling": lambda: _chain(out=None),
    "product_not_unit": lambda: _scaled_after_product(("Div", 5.0)),
}


@pytest.mark.parametrize("name", list(STAYS))
def test_clamp_stays(name):
    """Without the shift, with a lower bound other than 0, or with ``c*hi != 1``: the Clip stays
    (the function is the same)."""
    m = STAYS[name]()
    g = hard_sigmoids(load(m))
    assert ops(g) == ops(load(m))
    assert_same_function(m, canonicalize(load(m)))


def test_shift_read_twice_stays():
    """The shifted value read by another node too: nothing is replaced."""
    m = _chain(swish=False)
    nodes = list(m.graph.node)
    nodes[-1] = h.make_node("Add", ["k_out_out", "k_shift_out"], ["y"])
    del m.graph.node[:]
    m.graph.node.extend(nodes)
    assert ops(hard_sigmoids(load(m))) == ops(load(m))


# ---- end to end ----------------------------------------------------------------------------------

def _keras_hard_swish():
    """tf2onnx's Keras Conv2D(4, 3, padding="same") -> hard_swish -> GlobalAveragePooling2D ->
    Dense(5, use_bias=False) on an (N, 6, 6, 3) image."""
    nodes = [h.make_node("Transpose", ["x"], ["t"], perm=[0, 3, 1, 2]),
             h.make_node("Conv", ["t", "W", "b"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             h.make_node("Add", ["c", "three"], ["a"]), h.make_node("Clip", ["a", "lo", "hi"], ["cl"]),
             h.make_node("Mul", ["cl", "sixth"], ["hsig"]), h.make_node("Mul", ["c", "hsig"], ["hs"]),
             h.make_node("GlobalAveragePool", ["hs"], ["gap"]),
             h.make_node("Squeeze", ["gap", "axes"], ["sq"]), h.make_node("MatMul", ["sq", "Wd"], ["y"])]
    inits = {"W": w(4, 3, 3, 3) * 3, "b": w(4), "three": np.full((1, 1, 1, 1), 3, F), "lo": np.array(0, F),
             "hi": np.array(6, F), "sixth": np.array(1 / 6, F), "axes": np.array([2, 3], np.int64), "Wd": w(4, 5)}
    return model(nodes, ("x", ["N", 6, 6, 3]), ("y", ["N", 5]), inits)


def _data(n, seed):
    return np.random.default_rng(seed).standard_normal((n, 6, 6, 3)).astype(F)


def test_keras_hard_swish_from_float():
    m, x = _keras_hard_swish(), _data(32, 0)
    design = onnx2hw.compile(m, board="ulx3s", calib={"x": x})
    want = spec_session(ptq.quantize(m, {"x": x})).run(None, {"x": x[:8]})[0]
    got = design.golden({"x": x[:8]})["y"]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6 * np.abs(want).max())


@pytest.mark.sim
def test_keras_hard_swish_simulates_bit_exact():
    x = _data(16, 1)
    design = onnx2hw.compile(_keras_hard_swish(), board="ulx3s", calib={"x": x})
    design.simulate({"x": x[:3]})   # MismatchError unless bit-exact against the golden


@pytest.mark.sim
def test_torch_hand_written_hard_swish_from_float_and_simulated():
    """``c * relu6(c + 3) / 6`` after a Conv, quantized by onnx2hw's post-training quantizer: the
    golden equals onnxruntime's spec session on the QDQ model, the hardware the golden."""
    m = _scaled_after_product()
    x = np.random.default_rng(2).standard_normal((32, 3, 6, 6)).astype(F) * 2
    design = onnx2hw.compile(m, board="ulx3s", calib={"x": x})
    want = spec_session(ptq.quantize(m, {"x": x})).run(None, {"x": x[:8]})[0]
    np.testing.assert_allclose(design.golden({"x": x[:8]})["y"], want, rtol=0, atol=1e-6 * np.abs(want).max())
    design.simulate({"x": x[:3]})   # MismatchError unless bit-exact against the golden
