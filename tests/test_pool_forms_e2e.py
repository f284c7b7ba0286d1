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

Each model has weights of its own seed, so the roundings do not depend on what ran before. With
them no output lies on a rounding tie. A pool the quantizer gives its input's grid (its
calibrated range is its input's when a window of one position passes values through) has exact
ties at even divisors, which onnxruntime's float32 rounds one way or the other: those are
counted in
:func:`test_pool_on_its_input_grid_differs_from_onnxruntime_only_at_ties`.
"""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from _canon_models import model
from _oracle import spec_session
import onnx2hw
from onnx2hw.quant import ptq


def _weights(seed):
    """``w(*shape)``: weights from a generator of this model's own (the same model whatever tests
    ran before, so the same roundings)."""
    rng = np.random.default_rng(seed)
    return lambda *shape: (rng.standard_normal(shape) * 0.3).astype(np.float32)


def _keras_same():
    w = _weights(1)
    nodes = [helper.make_node("Conv", ["x", "W", "b"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("AveragePool", ["r"], ["p"], kernel_shape=[3, 3], strides=[2, 2], pads=[0, 0, 1, 1],
                              count_include_pad=0),
             helper.make_node("Conv", ["p", "W2", "b2"], ["c2"]), helper.make_node("Relu", ["c2"], ["r2"]),
             helper.make_node("AveragePool", ["r2"], ["p2"], kernel_shape=[2, 2], auto_pad="SAME_UPPER"),
             helper.make_node("Flatten", ["p2"], ["f"]), helper.make_node("Gemm", ["f", "Wd", "bd"], ["y"], transB=1)]
    return model(nodes, ("x", ["N", 3, 8, 8]), ("y", ["N", 4]),
                 {"W": w(6, 3, 3, 3), "b": w(6), "W2": w(5, 6, 1, 1), "b2": w(5), "Wd": w(4, 80), "bd": w(4)})


def _torch_ceil():
    w = _weights(2)
    nodes = [helper.make_node("Conv", ["x", "W", "b"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("AveragePool", ["r"], ["p"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
                              ceil_mode=1, count_include_pad=1),
             helper.make_node("AveragePool", ["p"], ["p2"], kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1,
                              count_include_pad=0),
             helper.make_node("Flatten", ["p2"], ["f"]), helper.make_node("Gemm", ["f", "Wd", "bd"], ["y"], transB=1)]
    return model(nodes, ("x", ["N", 2, 8, 8]), ("y", ["N", 3]),
                 {"W": w(4, 2, 3, 3), "b": w(4), "Wd": w(3, 36), "bd": w(3)})


def _max_pools():
    w = _weights(3)
    nodes = [helper.make_node("Conv", ["x", "W", "b"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 0, 0, 2],
                              ceil_mode=1),
             helper.make_node("MaxPool", ["p"], ["p2"], kernel_shape=[2, 2], auto_pad="SAME_LOWER"),
             helper.make_node("MaxPool", ["p2"], ["p3"], kernel_shape=[3, 2], strides=[2, 2], auto_pad="SAME_UPPER"),
             helper.make_node("MaxPool", ["p3"], ["p4"], kernel_shape=[2, 2], pads=[0, 1, 1, 0]),
             helper.make_node("Flatten", ["p4"], ["f"]), helper.make_node("Gemm", ["f", "Wd", "bd"], ["y"], transB=1)]
    return model(nodes, ("x", ["N", 2, 9, 8]), ("y", ["N", 3]),
                 {"W": w(4, 2, 3, 3), "b": w(4), "Wd": w(3, 24), "bd": w(3)})


def _torch_1d(seed=4):
    """Conv1d, then AvgPool1d(3, 2, padding=1, ceil_mode=True, count_include_pad=False) on 10 -> 6
    (a partial last window) and MaxPool1d(2, ceil_mode=True) on 6 -> 3."""
    w = _weights(seed)
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


def test_pool_on_its_input_grid_differs_from_onnxruntime_only_at_ties():
    """The 1-D model with the weights of seed 11: the quantizer gives the average pool its input's
    scale (the ceil-mode last window holds one position), so windows of two positions land on
    exact ties for odd sums: 31 of 480 outputs. The golden rounds them half to even (the
    multiplier 1/2 is exact, QuantizeLinear rounds half to even); onnxruntime's float32 does not
    see an exact tie (each dequantized value and their sum are rounded to float32) and rounds 15
    of them down, 16 up, whatever the parity. The pool's integer output (golden) against
    onnxruntime's on the quantizer's QDQ model: 4 differ, each an exact tie (the int64 window sum
    over its divisor is k + 1/2) that onnxruntime rounds to the odd neighbour."""
    from onnx import TensorProto, numpy_helper
    from onnx2hw.golden.integer import execute_integer
    m = _torch_1d(seed=11)
    x = _data((3, 10), 0)
    q = ptq.quantize(m, {"x": x})
    init = {i.name: numpy_helper.to_array(i) for i in q.graph.initializer}
    assert init["r_scale"] == init["p_scale"] and init["r_zero_point"] == init["p_zero_point"] == 0
    q.graph.output.extend([helper.make_tensor_value_info(n, TensorProto.UINT8, None) for n in ("r_quantized",
                                                                                               "p_quantized")])
    r, want = (v.astype(np.int64) for v in spec_session(q).run(["r_quantized", "p_quantized"], {"x": x[:16]}))
    design = onnx2hw.compile(m, board="ulx3s", calib={"x": x})
    g = design.integer
    got = execute_integer(g, {g.input_specs[0].name: design.quantize({"x": x[:16]})}, keep_intermediates=True)
    got = np.moveaxis(got["p_quantized"][:, 0], -1, 1)
    # k3 s2 pads 1, ceil_mode, count_include_pad=0 on 10 positions: 6 windows
    bounds = [(max(2 * i - 1, 0), min(2 * i + 2, 10)) for i in range(6)]
    twice = np.stack([2 * r[:, :, a:b].sum(axis=2) for a, b in bounds], axis=2)
    div = np.array([b - a for a, b in bounds])
    tie = twice % (2 * div) == div                      # sum / divisor = k + 1/2 exactly
    k = twice // (2 * div)                              # floor(sum / divisor)
    differ = got != want
    assert tie.sum() == 31 and np.count_nonzero(want[tie] == k[tie]) == 15
    assert differ.sum() == 4 and np.all(tie[differ])
    # the golden's exact multiplier of 1/2 rounds half to even; onnxruntime's float32 (the
    # rounding of each dequantized value decides, see layers/_pair_mean) the other way there
    assert np.array_equal(got[tie], k[tie] + k[tie] % 2)
    assert np.array_equal(want[differ] + got[differ], 2 * k[differ] + 1) and np.all(want[differ] % 2 == 1)


def _po2_pools():
    """QDQ on power-of-two scales: ``Q -> DQ -> AveragePool 2x2 s2 (ceil mode, padding not
    counted; 5x5 -> 3x3: divisors 4, 2 and 1) -> Q -> DQ -> AveragePool 2x2 s2 (3x3 -> 2x2: 4, 2,
    1) -> Q -> DQ`` on the input's grid, the second pool onto a grid twice as fine."""
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
             helper.make_node("AveragePool", ["xd"], ["p"], kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1),
             helper.make_node("QuantizeLinear", ["p", "s", "z"], ["pq"]),
             helper.make_node("DequantizeLinear", ["pq", "s", "z"], ["pd"]),
             helper.make_node("AveragePool", ["pd"], ["p2"], kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1),
             helper.make_node("QuantizeLinear", ["p2", "s2", "z2"], ["yq"]),
             helper.make_node("DequantizeLinear", ["yq", "s2", "z2"], ["y"])]
    consts = {"s": np.float32(2.0 ** -4), "z": np.int8(0), "s2": np.float32(2.0 ** -5), "z2": np.int8(-3)}
    return model(nodes, ("x", ["N", 3, 5, 5]), ("y", ["N", 3, 2, 2]), consts)


def _po2_expected(x):
    """The model in int64 from the spec: codes ``q = clamp(round_half_even(x / s))``, each pool
    ``round_half_even(window sum / count)`` (ceil-mode extensions not counted), the second onto
    ``s / 2``: ``round_half_even(2 * sum / count) - 3``; returns (first pool codes, output codes)."""
    def rne(num, den):                   # round half to even of num / den, den > 0, in integers
        k, r = np.floor_divide(num, den), np.mod(num, den)
        return k + ((2 * r > den) | ((2 * r == den) & (k % 2 == 1)))

    def pool(q, num_scale):
        n, c, h, w = q.shape
        oh, ow = -(-h // 2), -(-w // 2)
        out = np.empty((n, c, oh, ow), np.int64)
        for i in range(oh):
            for j in range(ow):
                win = q[:, :, 2 * i:2 * i + 2, 2 * j:2 * j + 2]
                out[:, :, i, j] = rne(num_scale * win.sum(axis=(2, 3)), win.shape[2] * win.shape[3])
        return out
    q = np.clip(np.rint(x * 16).astype(np.int64), -128, 127)     # x / 2**-4, rint: half to even
    p = np.clip(pool(q, 1), -128, 127)
    return p, np.clip(pool(p, 2) - 3, -128, 127)


def test_pools_on_power_of_two_scales_round_ties_to_even_as_onnxruntime():
    """On power-of-two scales onnxruntime's float32 is exact (small multiples of 2**-5), so its
    QuantizeLinear sees the exact ties of sum / count and rounds them half to even; so does the
    golden (the multipliers 1/4, 1/2, 1 and 2/4, 2/2, 2 are exact): equal on every output, and
    to the int64 formula of the spec. Both pools' divisors vary (DivisorRequantize, ties even)."""
    x = np.round(_data((3, 5, 5), 5) * 48) / 16                   # ties of x / s too
    x = x.astype(np.float32)
    m = _po2_pools()
    p, want = _po2_expected(x.astype(np.float64))
    design = onnx2hw.compile(m, board="ulx3s")
    blocks = [b for s in design.pipeline.stages for b in s.blocks if b.kind == "DivisorRequantize"]
    assert len(blocks) == 2 and all(b.params["ties"] == "even" for b in blocks)
    got = design.golden({"x": x})["y"]
    ort = spec_session(m).run(None, {"x": x})[0]
    np.testing.assert_array_equal(ort, (want + 3).astype(np.float32) * np.float32(2.0 ** -5))
    np.testing.assert_array_equal(got, ort)
    # the sample exercises ties in both pools, and half up would differ on them
    q = np.clip(np.rint(x * 16).astype(np.int64), -128, 127)
    ties1 = sum(int(np.count_nonzero(2 * q[:, :, a:a + 2, b:b + 2].sum(axis=(2, 3)) % 8 == 4))
                for a in (0, 2) for b in (0, 2))
    assert ties1 > 20


@pytest.mark.sim
def test_pools_on_power_of_two_scales_simulate_bit_exact():
    x = (np.round(_data((3, 5, 5), 6) * 48) / 16).astype(np.float32)
    onnx2hw.compile(_po2_pools(), board="ulx3s").simulate({"x": x[:8]})   # MismatchError unless exact



def test_rescale_after_a_pool_of_varying_divisors_joins_its_requantizations():
    """QDQ: ``DQ -> AveragePool (ceil_mode partial windows, counting padding) -> Mul by a positive
    per-channel constant -> Q``: the Mul is folded into each divisor's requantization, as after
    any other pool (no layer of its own); golden against onnxruntime's spec session, which agrees
    but where its float32 lands on the other side of a rounding tie than the exact value: each
    such output is checked to lie within 1e-4 of a tie (one of 1600 here)."""
    k = np.array([0.53, 1.37, 2.11, 0.29], np.float32).reshape(1, 4, 1, 1)
    nodes = [helper.make_node("QuantizeLinear", ["x", "s_in", "z_in"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s_in", "z_in"], ["xd"]),
             helper.make_node("AveragePool", ["xd"], ["p"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
                              ceil_mode=1, count_include_pad=1),
             helper.make_node("Mul", ["p", "k"], ["m"]),
             helper.make_node("QuantizeLinear", ["m", "s_out", "z_out"], ["yq"]),
             helper.make_node("DequantizeLinear", ["yq", "s_out", "z_out"], ["y"])]
    consts = {"s_in": np.float32(0.05), "z_in": np.uint8(3), "k": k, "s_out": np.float32(0.031), "z_out": np.uint8(5)}
    m = model(nodes, ("x", ["N", 4, 8, 8]), ("y", ["N", 4, 5, 5]), consts)
    x = (_data((4, 8, 8), 2) * 3).astype(np.float32)
    design = onnx2hw.compile(m, board="ulx3s")
    ops = [b.kind for s in design.pipeline.stages for b in s.blocks]
    assert "DivisorRequantize" in ops and "mul" not in [s.op for s in design.pipeline.stages]
    want = spec_session(m).run(None, {"x": x[:16]})[0]
    got = design.golden({"x": x[:16]})["y"]
    # the exact value before rounding: windows [2i-1, 2i+2) clipped to the padded rows [-1, 9),
    # padding counted (real 0), the partial last window's extension not
    xq = np.clip(np.rint(x[:16] / np.float32(0.05)) + 3, 0, 255) - 3
    pad = np.pad(xq, ((0, 0), (0, 0), (1, 1), (1, 1)))
    span = [(max(2 * i, 0), min(2 * i + 3, 10)) for i in range(5)]
    v = np.array([[[[pad[n, c, a:b, e:f].sum() / ((b - a) * (f - e)) for e, f in span] for a, b in span]
                   for c in range(4)] for n in range(16)]) * 0.05 * k.astype(np.float64) / np.float32(0.031)
    differ = got != want
    assert differ.sum() <= 1 and np.all(np.abs(v[differ] - np.floor(v[differ]) - 0.5) < 1e-4)
    assert np.array_equal(got[~differ], want[~differ])
