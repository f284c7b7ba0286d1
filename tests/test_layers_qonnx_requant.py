"""A QONNX Quant of a tensor already quantized onto another grid (Brevitas' QuantIdentity after a
QuantReLU before a concatenation): Quant(8 bits, input) -> Quant(4 bits, another scale) ->
Conv -> Quant. The expectation is qonnx's Quant and Conv written here in NumPy (float32 Quant
as qonnx's executor computes it; the convolution in int64 on the codes, exact since every
scale after the requantization is a power of two)."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnx2hw
from onnx2hw import golden
from onnx2hw import layers as ig
from onnx2hw.ir import ModelError, load
from onnx2hw.layers.lookup import Lookup
from onnx2hw.layers.mul import Mul
from onnx2hw.quant.convert import to_integer_graph

pytestmark = pytest.mark.filterwarnings("ignore:.*created but never used")

QONNX = "qonnx.custom_op.general"
S_MID = 0.25                # the requantized grid (4-bit signed)
S_W, S_OUT = 0.25, 0.25      # weights (4-bit narrow) and output (8-bit signed)
RNG = np.random.default_rng(36)
W = RNG.integers(-7, 8, (4, 3, 3, 3))


def _qonnx_quant(x, scale, zp, bits, signed=True, narrow=False, mode="ROUND"):
    """qonnx's ``quant`` (float32): clamp(x / scale + zp) then round, as codes (ROUND: half even)."""
    y = np.asarray(x, np.float32) / np.float32(scale) + np.float32(zp)
    lo = -(2 ** (bits - 1)) + narrow if signed else 0
    hi = 2 ** (bits - 1) - 1 if signed else 2 ** bits - 1 - narrow
    y = np.clip(y, np.float32(lo), np.float32(hi))
    r = {"ROUND": np.round, "FLOOR": np.floor,
         "HALF_UP": lambda v: np.sign(v) * np.floor(np.abs(v) + np.float32(0.5))}[mode](y)
    return r.astype(np.int64)


def _model(s_in, mode="ROUND", mid_bits=4):
    inits = {"s_in": s_in, "s_mid": S_MID, "s_w": S_W, "s_out": S_OUT, "z": 0.0, "b8": 8.0, "b4": 4.0,
             "b_mid": float(mid_bits), "w": (W * S_W).astype(np.float32)}
    nodes = [helper.make_node("Quant", ["x", "s_in", "z", "b8"], ["x8"], domain=QONNX, name="qin"),
             helper.make_node("Quant", ["x8", "s_mid", "z", "b_mid"], ["x4"], domain=QONNX, name="requant",
                              rounding_mode=mode),
             helper.make_node("Quant", ["w", "s_w", "z", "b4"], ["wq"], domain=QONNX, name="qw", narrow=1),
             helper.make_node("Conv", ["x4", "wq"], ["c"], name="conv", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Quant", ["c", "s_out", "z", "b8"], ["y"], domain=QONNX, name="qout")]
    g = helper.make_graph(nodes, "requant", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 6, 6])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4, 6, 6])],
                          [numpy_helper.from_array(np.asarray(v, np.float32), n) for n, v in inits.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid(QONNX, 1)])


def _expected(x, s_in, mode="ROUND"):
    """The model by qonnx's formulas: the codes of the requantized tensor, and the output."""
    q8 = _qonnx_quant(x, s_in, 0, 8)
    x8 = q8.astype(np.float32) * np.float32(s_in)             # qonnx's dequantized Quant output
    q4 = _qonnx_quant(x8, S_MID, 0, 4, mode=mode)
    p = np.pad(q4, ((0, 0), (0, 0), (1, 1), (1, 1)))
    acc = np.zeros((x.shape[0], 4, 6, 6), np.int64)
    for i in range(3):
        for j in range(3):
            acc += np.einsum("nchw,oc->nohw", p[:, :, i:i + 6, j:j + 6], W[:, :, i, j])
    real = acc * (S_MID * S_W)                                # exact: S_MID and S_W are powers of two
    return q4, _qonnx_quant(real, S_OUT, 0, 8).astype(np.float32) * np.float32(S_OUT)


def _x(n, seed):
    return (np.random.default_rng(seed).standard_normal((n, 3, 6, 6)) * 2).astype(np.float32)


def _integer(g, x):
    return ig.dequantize_outputs(g, golden.execute(g, ig.quantize_inputs(g, {"x": x})))["y"]


@pytest.mark.parametrize("s_in,mode,layer,ties", [
    (0.0371, "ROUND", Mul, 0),          # 0.0371 / 0.25: no input code lands on a half
    (0.0371, "HALF_UP", Mul, 0),
    (2.0 ** -5, "HALF_UP", Lookup, 32),  # ratio 1/8: ties; half up rounds the negative ones away from zero
    (2.0 ** -5, "ROUND", Mul, 32),       # ... and ROUND breaks them to even, as the exact multiplier's
                                         # Requantize does (ties="even")
    (2.0 ** -5, "FLOOR", Lookup, 32),
])
def test_requantization_equals_qonnx(s_in, mode, layer, ties):
    s_in = float(np.float32(s_in))
    graph = load(_model(s_in, mode))
    g = to_integer_graph(graph)
    req = [lay for lay in g.layers if lay.name == "requant"]
    assert len(req) == 1 and isinstance(req[0], layer)
    if layer is Mul:   # half to even where the quantizer rounds so: s_in / 0.25 is a multiplier exactly
        assert req[0].act.ties == ("even" if mode == "ROUND" else "up")
    x = _x(64, 1)
    q4, want = _expected(x, s_in, mode)
    np.testing.assert_array_equal(golden.execute(graph, {"x": x})["y"], want)
    np.testing.assert_array_equal(_integer(g, x), want)
    # ties: input codes whose requantized value (float32, as qonnx) is exactly k + 1/2
    codes = np.arange(-128, 128)
    v = (codes.astype(np.float32) * np.float32(s_in)) / np.float32(S_MID)
    assert int(np.count_nonzero(v - np.floor(v) == 0.5)) == ties
    assert q4.min() < 0 < q4.max()


def test_requantization_with_a_mode_a_multiplier_cannot_give_on_a_wide_input_is_refused():
    """A 12-bit tensor requantized onto a grid 8x coarser with HALF_DOWN: its ties differ from the
    multiply-and-shift's, and a table of 4096 entries is not made."""
    m = _model(2.0 ** -5, "HALF_DOWN", mid_bits=12)
    m.graph.node[0].input[3] = "b_mid"                       # a 12-bit input quantizer
    m.graph.node[1].input[3] = "b8"                          # requantized onto 8 bits
    with pytest.raises(ModelError, match=r"node 'requant' \(Quant\): requantizing this 12-bit tensor: a "
                                         r"multiply-and-shift \(round half up\) differs from rounding_mode HALF_DOWN"):
        to_integer_graph(load(m))


@pytest.mark.sim
@pytest.mark.parametrize("s_in", [0.0371, 2.0 ** -5])
def test_requantization_simulates_bit_exact(s_in):
    s_in = float(np.float32(s_in))
    x = _x(3, 2)
    design = onnx2hw.compile(_model(s_in), board="ulx3s")
    _, want = _expected(x, s_in)
    np.testing.assert_array_equal(design.golden({"x": x})["y"], want)
    np.testing.assert_array_equal(design.simulate({"x": x})["y"], want)   # MismatchError unless bit-exact
