"""Golden com.microsoft quantized ops (onnxruntime's QOperator contrib ops).

These ops have no specification but onnxruntime's, so onnxruntime's kernels are the reference,
within a stated tolerance: 1 LSB on quantized outputs (their float32 evaluation order is an
implementation detail) and never on 8-bit products, which CPUs without VNNI saturate in 16-bit
pair sums. QGemm's exact expectation is the int64 formula of its contrib doc, written below.
"""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from _oracle import lsb_apart, run_kernels
from _quant_models import cnn, mlp, quantize, random_inputs
from onnx2hw import golden
from onnx2hw.ir import load

MS = "com.microsoft"
NP2TP = {np.uint8: TensorProto.UINT8, np.int8: TensorProto.INT8, np.float32: TensorProto.FLOAT,
         np.int32: TensorProto.INT32}


def _run_both(op, inputs: dict, consts: dict, out_type, **attrs):
    """One-node model: ``inputs`` fed at run time, ``consts`` as initializers (order = op inputs)."""
    names = list(inputs) + list(consts)
    order = attrs.pop("_order", names)
    node = helper.make_node(op, order, ["y"], domain=MS, name="op", **attrs)
    g = helper.make_graph(
        [node], "t",
        [helper.make_tensor_value_info(k, NP2TP[v.dtype.type], list(v.shape)) for k, v in inputs.items()],
        [helper.make_tensor_value_info("y", out_type, None)],
        [numpy_helper.from_array(v, k) for k, v in consts.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)])
    m.ir_version = 8
    ref = run_kernels(m, inputs)[0]
    m.graph.output[0].CopyFrom(helper.make_tensor_value_info("y", out_type, list(ref.shape)))
    got = golden.execute(load(m), inputs)["y"]
    return ref, got


def _within_one_lsb(got, ref):
    """Same dtype and shape, every element within 1 LSB and at least 99 % identical."""
    assert got.dtype == ref.dtype and got.shape == ref.shape
    diff = np.abs(got.astype(np.int64) - ref.astype(np.int64))
    assert diff.max() <= 1 and np.mean(diff == 0) >= 0.99, f"{np.mean(diff != 0):.3%} differ, max {diff.max()}"


def _q(rng, shape, dt):
    info = np.iinfo(dt)
    return rng.integers(info.min, info.max + 1, shape).astype(dt)


def _s(v):
    return np.array(v, np.float32)


@pytest.mark.parametrize("dt", [np.uint8, np.int8])
@pytest.mark.parametrize("trans_b,per_col,with_c,with_y", [(1, 0, 1, 1), (0, 1, 1, 1), (1, 1, 0, 1), (1, 0, 1, 0)])
def test_qgemm(dt, trans_b, per_col, with_c, with_y):
    rng = np.random.default_rng(1)
    m, k, n = 7, 33, 6
    a = _q(rng, (m, k), dt)
    b = _q(rng, (n, k) if trans_b else (k, n), np.int8)
    consts = {"as": _s(0.013), "az": np.array(3 if dt == np.uint8 else -2, dt), "b": b,
              "bs": (rng.random(n).astype(np.float32) * 0.01 + 0.001) if per_col else _s(0.004),
              "bz": np.zeros(n if per_col else (), np.int8)}
    if with_c:
        consts["c"] = rng.integers(-3000, 3000, n).astype(np.int32)
    order = ["a", "as", "az", "b", "bs", "bz", "c" if with_c else ""]
    if with_y:
        consts.update(ys=_s(0.05), yz=np.array(120 if dt == np.uint8 else 5, dt))
        order += ["ys", "yz"]
    ref, got = _run_both("QGemm", {"a": a}, consts, NP2TP[dt] if with_y else TensorProto.FLOAT,
                         _order=order, transB=trans_b, alpha=0.75)
    # the contrib doc's formula: exact int64 accumulator, one float32 multiplier, round half to even
    bt = (b.T if trans_b else b).astype(np.int64)
    acc = (a.astype(np.int64) - int(consts["az"])) @ bt + (consts["c"] if with_c else 0)
    mult = np.float32(0.75) * consts["as"] * consts["bs"]
    if with_y:
        info = np.iinfo(dt)
        want = np.clip(np.rint(acc.astype(np.float32) * (mult / consts["ys"])).astype(np.int64) + int(consts["yz"]),
                       info.min, info.max).astype(dt)
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, acc.astype(np.float32) * mult, rtol=1e-6)
    if dt == np.int8:  # s8 x s8 kernels form no saturating u8 x s8 pair sums: within 1 LSB on any CPU
        if with_y:
            _within_one_lsb(got, ref)
        else:
            np.testing.assert_allclose(got, ref, rtol=1e-6)


@pytest.mark.parametrize("dt", [np.uint8, np.int8])
@pytest.mark.parametrize("shape_a,shape_b", [((2, 5, 4, 4), (2, 5, 4, 4)), ((2, 5, 4, 4), (5, 1, 1)),
                                             ((2, 5, 4, 4), ()), ((5, 1, 1), (2, 5, 4, 4)), ((), (3, 7)),
                                             ((1, 1, 4, 4), (2, 5, 4, 4))])
def test_qlinear_add(dt, shape_a, shape_b):
    rng = np.random.default_rng(2)
    a, b = _q(rng, shape_a, dt), _q(rng, shape_b, dt)
    zp = (lambda v: np.array(v, dt))
    ref, got = _run_both("QLinearAdd", {"a": a, "b": b},
                         {"as": _s(0.021), "az": zp(7), "bs": _s(0.037), "bz": zp(-3 if dt == np.int8 else 200),
                          "cs": _s(0.05), "cz": zp(10)},
                         NP2TP[dt], _order=["a", "as", "az", "b", "bs", "bz", "cs", "cz"])
    _within_one_lsb(got, ref)


@pytest.mark.parametrize("dt", [np.uint8, np.int8])
@pytest.mark.parametrize("hw", [(4, 4), (7, 5), (1, 1)])
def test_qlinear_global_average_pool(dt, hw):
    rng = np.random.default_rng(3)
    x = _q(rng, (3, 6, *hw), dt)
    ref, got = _run_both("QLinearGlobalAveragePool", {"x": x},
                         {"xs": _s(0.03), "xz": np.array(5, dt), "ys": _s(0.011), "yz": np.array(9, dt)},
                         NP2TP[dt], channels_last=0)
    _within_one_lsb(got, ref)


@pytest.mark.parametrize("dt", [np.uint8, np.int8])
@pytest.mark.parametrize("attrs", [dict(kernel_shape=[2, 2], strides=[2, 2]),
                                   dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=1),
                                   dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=0),
                                   dict(kernel_shape=[3, 2], strides=[2, 1]),
                                   dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1),
                                   dict(kernel_shape=[2, 3], auto_pad="SAME_UPPER", strides=[2, 2]),
                                   dict(kernel_shape=[2, 2], channels_last=1)])
def test_qlinear_average_pool(dt, attrs):
    rng = np.random.default_rng(4)
    x = _q(rng, (2, 3, 6, 6), dt)
    ref, got = _run_both("QLinearAveragePool", {"x": x},
                         {"xs": _s(0.03), "xz": np.array(5, dt), "ys": _s(0.02), "yz": np.array(-4 if dt == np.int8 else 4, dt)},
                         NP2TP[dt], **attrs)
    _within_one_lsb(got, ref)


@pytest.mark.parametrize("dt", [np.uint8, np.int8])
def test_qlinear_concat(dt):
    rng = np.random.default_rng(5)
    a, b = _q(rng, (2, 3, 4), dt), _q(rng, (2, 5, 4), dt)
    ys, yz = _s(0.05), np.array(3, dt)
    ref, got = _run_both("QLinearConcat", {"a": a, "b": b},
                         {"ys": ys, "yz": yz, "as": _s(0.02), "az": np.array(1, dt)},
                         NP2TP[dt], _order=["ys", "yz", "a", "as", "az", "b", "ys", "yz"], axis=1)
    _within_one_lsb(got, ref)


@pytest.mark.parametrize("model", ["mlp", "residual"])
def test_qoperator_models_in_golden_float_executor(model, tmp_path):
    """Whole QOperator models (QuantizeLinear, QLinearConv, QGemm, QLinearAdd, ...) through the golden
    graph executor match onnxruntime's kernels within 1 LSB (>= 99 % identical)."""
    m = mlp(20) if model == "mlp" else cnn(21, residual=True)
    path = quantize(m, tmp_path, fmt="qop")
    x = random_inputs(m, 200, 5)
    # 7-bit weights (see _quant_models.quantize): the kernels cannot saturate on any CPU
    ref = run_kernels(path, {"x": x})[0]
    got = golden.execute(load(path), {"x": x})["y"]
    q = onnx.load(path)
    dq = q.graph.node[-1]
    assert dq.op_type == "DequantizeLinear"
    scale = float(next(numpy_helper.to_array(i) for i in q.graph.initializer if i.name == dq.input[1]))
    lsb = lsb_apart(got, ref, scale)
    assert lsb.max() <= 1 and np.mean(lsb == 0) >= 0.99, (lsb.max(), np.mean(lsb == 0))
