"""Random IntegerGraphs built directly from the dataclasses (independent of the importers)."""
from __future__ import annotations

import numpy as np

from onnx2hw import arith
from onnx2hw.layers import (Add, AvgPool, Conv, Dense, InputQuant, IntegerGraph, IntType,
                                         MaxPool, OutputDequant, Requant, TensorSpec, Thresholds,
                                         accumulator_bounds)

U8, I8 = IntType(8, False), IntType(8, True)


def _acc_bits(w, b, t: IntType) -> int:
    lo, hi = accumulator_bounds(w, b, t.lo, t.hi)
    return arith.acc_bits(int(min(lo)), int(max(hi)))


def _requant(rng, channels, acc_bits, out: IntType, per_channel=True, relu=True):
    n = channels if per_channel else 1
    shift = np.full(n, max(acc_bits + 8 - out.bits, 1), np.int64)
    mult = rng.integers(1 << 6, 1 << 8, n)
    zp = out.lo if relu and not out.signed else 0
    lo = zp if relu else out.lo
    return Requant(mult, shift, zp, lo, out.hi)


def dense(rng, name, src: TensorSpec, n: int, w_type=I8, out_type=U8, act="requant"):
    k = int(np.prod(src.shape))
    w = rng.integers(w_type.lo, w_type.hi + 1, (n, k))
    b = rng.integers(-200, 200, n)
    ab = _acc_bits(w, b, src.dtype)
    if act == "thresholds":
        out_type = IntType(3, False)
        steps = (1 << out_type.bits) - 1
        base = np.sort(rng.integers(-(1 << (ab - 2)), 1 << (ab - 2), (n, steps)), axis=1)
        a = Thresholds(base, 0)
    elif act is None:
        a = None
        out_type = IntType(ab, True)
    else:
        a = _requant(rng, n, ab, out_type)
    out = TensorSpec(f"{name}_out", (n,), out_type)
    return Dense(name, (src.name,), out, w, b, src.dtype, w_type, ab, a), out


def conv(rng, name, src: TensorSpec, cout: int, k=3, stride=1, pad=1, w_type=I8, out_type=U8):
    h, w_, c = src.shape
    w = rng.integers(w_type.lo, w_type.hi + 1, (cout, k, k, c))
    b = rng.integers(-200, 200, cout)
    ab = _acc_bits(w, b, src.dtype)
    oh, ow = (h + 2 * pad - k) // stride + 1, (w_ + 2 * pad - k) // stride + 1
    out = TensorSpec(f"{name}_out", (oh, ow, cout), out_type)
    zp = int(rng.integers(src.dtype.lo, src.dtype.hi + 1))
    layer = Conv(name, (src.name,), out, w, b, (stride, stride), (pad,) * 4, zp, 1, (1, 1),
                 src.dtype, w_type, ab, _requant(rng, cout, ab, out_type))
    return layer, out


def maxpool(name, src: TensorSpec, k=2):
    h, w, c = src.shape
    out = TensorSpec(f"{name}_out", (h // k, w // k, c), src.dtype)
    return MaxPool(name, (src.name,), out, (k, k), (k, k), (0, 0, 0, 0)), out


def global_avgpool(rng, name, src: TensorSpec, out_type=U8):
    h, w, c = src.shape
    zp = 3
    area = h * w
    acc = arith.acc_bits(src.dtype.lo * area - area * zp, src.dtype.hi * area)
    rq = _requant(rng, 1, acc, out_type, per_channel=False, relu=False)
    out = TensorSpec(f"{name}_out", (1, 1, c), out_type)
    return AvgPool(name, (src.name,), out, (h, w), (1, 1), (0, 0, 0, 0), rq, bias=-area * zp), out


def add(rng, name, a: TensorSpec, b: TensorSpec, out_type=U8):
    mults = (int(rng.integers(1, 100)), int(rng.integers(1, 100)))
    out = TensorSpec(f"{name}_out", a.shape, out_type)
    return Add(name, (a.name, b.name), out, (5, 9), mults, 0, out_type.lo, out_type.hi, shift=7), out


def graph(layers, src: TensorSpec, out: TensorSpec) -> IntegerGraph:
    g = IntegerGraph(
        inputs=(InputQuant(src.name, 0.02, 0 if not src.dtype.signed else 0, src.dtype, len(src.shape) == 3),),
        input_specs=(src,), layers=tuple(layers),
        outputs=(OutputDequant(out.name, 0.1, 0, False, 1, shape=out.shape),), output_specs=(out,),
        source="qdq", model_name="test")
    return g.validate()


def mlp(seed=0, sizes=(24, 16, 12, 6), w_type=I8, act="requant"):
    rng = np.random.default_rng(seed)
    src = TensorSpec("x", (sizes[0],), U8)
    layers, t = [], src
    for i, n in enumerate(sizes[1:]):
        last = i == len(sizes) - 2
        layer, t = dense(rng, f"fc{i}", t, n, w_type=w_type, act=act if act or last else "requant")
        layers.append(layer)
    return graph(layers, src, t)


def cnn(seed=0, h=6, w=6, c=2):
    rng = np.random.default_rng(seed)
    src = TensorSpec("img", (h, w, c), U8)
    l1, t1 = conv(rng, "conv1", src, 4)
    l2, t2 = maxpool("pool1", t1)
    l3, t3 = conv(rng, "conv2", t2, 6)
    l4, t4 = global_avgpool(rng, "gap", t3)
    l5, t5 = dense(rng, "fc", t4, 5)
    return graph([l1, l2, l3, l4, l5], src, t5)


def residual(seed=0, h=4, w=4, c=4):
    rng = np.random.default_rng(seed)
    src = TensorSpec("img", (h, w, c), U8)
    l1, t1 = conv(rng, "conv1", src, 4)
    l2, t2 = conv(rng, "conv2", t1, 4)
    l3, t3 = add(rng, "add", t1, t2)
    l4, t4 = dense(rng, "fc", t3, 3)
    return graph([l1, l2, l3, l4], src, t4)
