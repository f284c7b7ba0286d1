"""IntegerGraph types, validation, scale conversion and the golden integer executor.

Expected values come from onnxruntime's integer ops (ConvInteger, MatMulInteger, MaxPool on
integers) followed by ``onnx2hw.arith`` — independent of the golden integer layers.
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from onnx import TensorProto, helper

from _oracle import run_spec
from _quant_models import cnn, mlp, quantize
from onnx2hw import golden
from onnx2hw.ir import ModelError, load
from onnx2hw import arith
from onnx2hw import layers as ig
from onnx2hw.layers._layout import flatten_perm, nhwc
from onnx2hw.layers._scale import ratio_to_multiplier_shift
from onnx2hw.quant.convert import flavour, to_integer_graph

U8, S8, S4 = ig.IntType(8, False), ig.IntType(8, True), ig.IntType(4, True)


def _ort(op, inputs: dict, out_type, **attrs):
    node = helper.make_node(op, list(inputs), ["y"], **attrs)
    tp = {np.dtype(np.uint8): TensorProto.UINT8, np.dtype(np.int8): TensorProto.INT8}
    g = helper.make_graph([node], "t", [helper.make_tensor_value_info(k, tp[v.dtype], list(v.shape))
                                        for k, v in inputs.items()],
                          [helper.make_tensor_value_info("y", out_type, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return run_spec(m, inputs)[0]


def _graph(in_spec, layers, outs=None):
    outs = outs or [layers[-1].output]
    return ig.IntegerGraph(
        inputs=(ig.InputQuant(in_spec.name, 0.1, 0, in_spec.dtype, len(in_spec.shape) == 3),),
        input_specs=(in_spec,), layers=tuple(layers),
        outputs=tuple(ig.OutputDequant(o.name, 0.5, 0, len(o.shape) == 3, TensorProto.FLOAT) for o in outs),
        output_specs=tuple(outs), source="qdq").validate()


# ---- types and scale conversion -----------------------------------------------------------------

@pytest.mark.parametrize("bits", [0, 33, -1])
def test_inttype_rejects_bad_width(bits):
    with pytest.raises(ValueError, match=repr(bits)):
        ig.IntType(bits, True)


def test_inttype_ranges():
    assert (U8.lo, U8.hi) == (0, 255) and (S4.lo, S4.hi) == (-8, 7)
    bp = ig.IntType(1, False, bipolar=True)
    assert (bp.lo, bp.hi) == (-1, 1) and str(bp) == "bipolar"
    assert ig.int_type_for(-3, 3) == ig.IntType(3, True) and ig.int_type_for(0, 255) == U8


@pytest.mark.parametrize("ratio", [1e-9, 3.7e-5, 0.0123, 0.5, 0.99999999, 1.0, 7.25, 1000.0])
def test_ratio_to_multiplier_shift_is_nearest(ratio):
    m, s = ratio_to_multiplier_shift(ratio)
    m, s = int(m[0]), int(s[0])
    assert 0 < m < 2 ** 31 and 0 <= s <= 62
    exact = Fraction(ratio) * 2 ** s
    assert abs(Fraction(m) - exact) <= Fraction(1, 2)
    if s < 62:  # the largest shift: one more would overflow the multiplier
        assert round(Fraction(ratio) * 2 ** (s + 1)) >= 2 ** 31


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf"), 2.0 ** 40, 1e-30])
def test_ratio_to_multiplier_shift_rejects(bad):
    with pytest.raises(ValueError, match="scale"):
        ratio_to_multiplier_shift(bad, "layer 'x'")


def test_requant_rejects_bad_parameters():
    with pytest.raises(ValueError, match="2\\*\\*32"):
        ig.Requant(np.array([2 ** 32]), np.array([3]), 0, 0, 255)
    with pytest.raises(ValueError, match="0..62"):
        ig.Requant(np.array([5]), np.array([63]), 0, 0, 255)
    with pytest.raises(ValueError, match="lo"):
        ig.Requant(np.array([5]), np.array([3]), 0, 10, 9)


def test_layout_helpers():
    assert nhwc((3, 4, 5)) == (4, 5, 3) and nhwc((7,)) == (7,)
    x = np.arange(2 * 3 * 4 * 5).reshape(2, 3, 4, 5)  # NCHW
    perm = flatten_perm((3, 4, 5))
    onnx_flat = x.reshape(2, -1)
    nhwc_flat = x.transpose(0, 2, 3, 1).reshape(2, -1)
    assert np.array_equal(nhwc_flat[:, perm], onnx_flat)
    assert flatten_perm((8, 1, 1)) is None


# ---- golden integer layers vs onnxruntime integer ops + arith ------------------------------------

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
    got = golden.execute(_graph(spec, [layer]), {"x": x})["y"]
    acc = _ort("MatMulInteger", {"x": x, "w": w.T.astype(np.int8)}, TensorProto.INT32).astype(np.int64) + bias
    assert np.array_equal(got, arith.requantize(acc, m, s, 7, 0, 255))


@pytest.mark.parametrize("stride,pads,group", [((1, 1), (1, 1, 1, 1), 1), ((2, 1), (0, 1, 2, 0), 1),
                                                ((1, 1), (1, 1, 1, 1), 2), ((2, 2), (0, 0, 0, 0), 4)])
def test_conv_matches_convinteger(stride, pads, group):
    rng = np.random.default_rng(1)
    cin, cout, zp = 4, 8, 9
    w = rng.integers(-100, 100, (cout, 3, 3, cin // group))     # (Cout, kh, kw, Cin/g)
    bias = rng.integers(-2000, 2000, cout)
    x = rng.integers(0, 256, (3, 7, 6, cin)).astype(np.uint8)  # NHWC
    h = (7 + pads[0] + pads[2] - 3) // stride[0] + 1
    wd = (6 + pads[1] + pads[3] - 3) // stride[1] + 1
    lo, hi = ig.accumulator_bounds(w, bias, 0, 255)
    act = ig.Requant(rng.integers(100, 200, cout), np.full(cout, 10), 3, 0, 255)
    layer = ig.Conv("conv", ("x",), ig.TensorSpec("y", (h, wd, cout), U8), w, bias, stride, pads, zp, group, (1, 1),
                    U8, S8, arith.acc_bits(int(min(lo)), int(max(hi))), act)
    got = golden.execute(_graph(ig.TensorSpec("x", (7, 6, cin), U8), [layer]), {"x": x})["y"]
    # ONNX ConvInteger pads with the input zero point and subtracts it: add zp * sum(w) back
    acc = _ort("ConvInteger", {"x": x.transpose(0, 3, 1, 2).copy(), "w": w.transpose(0, 3, 1, 2).astype(np.int8),
                               "xz": np.array(zp, np.uint8)}, TensorProto.INT32,
               pads=[pads[0], pads[1], pads[2], pads[3]], strides=list(stride), group=group)
    acc = acc.astype(np.int64).transpose(0, 2, 3, 1) + zp * w.reshape(cout, -1).sum(axis=1) + bias
    assert np.array_equal(got, act(acc))


def test_maxpool_and_avgpool():
    rng = np.random.default_rng(2)
    x = rng.integers(-128, 128, (4, 6, 6, 3)).astype(np.int8)
    spec = ig.TensorSpec("x", (6, 6, 3), S8)
    mp = ig.MaxPool("mp", ("x",), ig.TensorSpec("m", (3, 3, 3), S8), (3, 3), (2, 2), (1, 1, 1, 1))
    act = ig.Requant(np.array([7282]), np.array([16]), -3, -128, 127)  # about 1/9
    ap = ig.AvgPool("ap", ("m",), ig.TensorSpec("a", (1, 1, 3), S8), (3, 3), (1, 1), (0, 0, 0, 0), act, bias=-9 * 4)
    g = _graph(spec, [mp, ap], [mp.output, ap.output])
    got = golden.execute(g, {"x": x})
    ref_mp = _ort("MaxPool", {"x": x.transpose(0, 3, 1, 2).copy()}, TensorProto.INT8, kernel_shape=[3, 3],
                  strides=[2, 2], pads=[1, 1, 1, 1]).transpose(0, 2, 3, 1)
    assert np.array_equal(got["m"], ref_mp)
    sums = ref_mp.astype(np.int64).sum(axis=(1, 2), keepdims=True) - 36
    assert np.array_equal(got["a"], arith.requantize(sums, 7282, 16, -3, -128, 127))


def test_add_single_rounding():
    rng = np.random.default_rng(3)
    a = rng.integers(0, 256, (50, 2, 2, 3))
    b = rng.integers(0, 256, (50, 2, 2, 3))
    spec_a, spec_b = ig.TensorSpec("a", (2, 2, 3), U8), ig.TensorSpec("b", (2, 2, 3), U8)
    layer = ig.Add("add", ("a", "b"), ig.TensorSpec("y", (2, 2, 3), U8), (10, 128), (3 * 2 ** 20, 5 * 2 ** 19 + 1),
                   5, 5, 255, shift=22)
    g = ig.IntegerGraph((ig.InputQuant("a", 1.0, 0, U8, True), ig.InputQuant("b", 1.0, 0, U8, True)),
                        (spec_a, spec_b), (layer,), (ig.OutputDequant("y", 1.0, 0, True, 1),), (layer.output,),
                        "qdq").validate()
    got = golden.execute(g, {"a": a, "b": b})["y"]
    for idx in np.ndindex(*got.shape):
        v = Fraction((int(a[idx]) - 10) * (3 * 2 ** 20) + (int(b[idx]) - 128) * (5 * 2 ** 19 + 1), 2 ** 22)
        want = min(255, max(5, 5 + int(np.floor(v + Fraction(1, 2)))))  # round half up
        assert got[idx] == want


# ---- validation and executor errors ---------------------------------------------------------------

def _dense(**kw):
    w = np.array([[1, -2, 3], [4, 5, -6]])
    args = dict(name="fc", inputs=("x",), output=ig.TensorSpec("y", (2,), U8), weights=w, bias=np.array([1, 2]),
                in_type=U8, w_type=S4, acc_bits=13, act=ig.Requant(np.array([3]), np.array([4]), 0, 0, 255))
    args.update(kw)
    return ig.Dense(**args)


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
    layer = _dense(**kw)
    with pytest.raises(ModelError, match=r"Dense layer 'fc'.*" + msg.replace("(", r"\(")):
        _graph(spec, [layer], [layer.output])


def test_execute_checks_feeds():
    g = _graph(ig.TensorSpec("x", (3,), U8), [_dense()])
    with pytest.raises(ModelError, match="outside uint8"):
        golden.execute(g, {"x": np.array([[0, 1, 300]])})
    with pytest.raises(ModelError, match="integer array"):
        golden.execute(g, {"x": np.zeros((1, 3), np.float32)})
    with pytest.raises(ModelError, match="shape"):
        golden.execute(g, {"x": np.zeros((1, 4), np.uint8)})
    with pytest.raises(ModelError, match="'z' is not an input"):
        golden.execute(g, {"x": np.zeros((1, 3), np.uint8), "z": np.zeros(1)})


# ---- flavour detection -----------------------------------------------------------------------------

def test_to_integer_graph_dispatch(tmp_path):
    m = mlp(30)
    with pytest.raises(ModelError, match="onnx2hw quantize"):
        to_integer_graph(load(m))
    qdq = load(quantize(m, tmp_path, name="a.onnx"))
    qop = load(quantize(cnn(31), tmp_path, fmt="qop", name="b.onnx"))
    assert flavour(qdq) == "qdq" and to_integer_graph(qdq).source == "qdq"
    assert flavour(qop) == "qoperator" and to_integer_graph(qop).source == "qoperator"


def test_host_conversions_roundtrip(tmp_path):
    g = to_integer_graph(load(quantize(cnn(32), tmp_path)))
    x = np.random.default_rng(0).random((3, 1, 8, 8), dtype=np.float32)
    q = ig.quantize_inputs(g, {"x": x})["x"]
    assert q.shape == (3, 8, 8, 1)
    s, z = g.inputs[0].scale, g.inputs[0].zero_point
    assert np.array_equal(q[..., 0], np.clip(np.rint(x[:, 0] / np.float32(s)) + z, 0, 255))
    y = ig.dequantize_outputs(g, {"y": np.full((3, 10), g.outputs[0].zero_point + 2)})["y"]
    assert y.shape == (3, 10) and np.allclose(y, 2 * g.outputs[0].scale)
