"""Cross-check the golden element-wise/shape ops with onnxruntime on randomized
single-op models (seeded shapes, attributes and data; batch 1 and batch 4 on a
symbolic leading dim ``N``). Integer and data-movement results must be identical;
floats computed through exp/tanh/sums agree to 1e-5 relative."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from _oracle import run_spec
from onnx2hw.golden import execute
from onnx2hw.ir import load

mk = helper.make_node
ROUNDED = {"Sigmoid", "Tanh", "Softmax", "ReduceMean"}


def _shape(rng, n, rank, lo=1, hi=5):
    return (n,) + tuple(int(d) for d in rng.integers(lo, hi + 1, rank - 1))


def _float(rng, shape, dtype=np.float32, scale=3.0):
    return (rng.standard_normal(shape) * scale).astype(dtype)


def _ints(rng, shape, dtype, lo=-20, hi=20):
    info = np.iinfo(dtype)
    return rng.integers(max(lo, info.min), min(hi, info.max) + 1, shape).astype(dtype)


def _data(rng, shape, dtype):
    return _float(rng, shape, dtype) if np.dtype(dtype).kind == "f" else _ints(rng, shape, dtype)


def _axes_subset(rng, rank, allow_empty=False):
    k = int(rng.integers(0 if allow_empty else 1, rank + 1))
    return sorted(int(a) for a in rng.choice(rank, k, replace=False))


def _neg(rng, axes, rank):
    """Randomly express some axes as negative."""
    return [a - rank if rng.random() < 0.5 else a for a in axes]


# Each generator: (rng, n) -> (node, data inputs {name: array, first dim n}, params {name: array}, opset)
def g_binary(rng, n):
    op = str(rng.choice(["Add", "Sub", "Mul", "Div"]))
    dtype = rng.choice([np.float32, np.float64, np.int32, np.int64])
    rank = int(rng.integers(2, 5))
    a_shape = _shape(rng, n, rank)
    b_shape = tuple(d if rng.random() < 0.6 else 1 for d in a_shape)[int(rng.integers(0, rank)):]
    a, b = _data(rng, a_shape, dtype), _data(rng, b_shape, dtype)
    if op == "Div" and b.dtype.kind == "i":
        b[b == 0] = 3
    if rng.random() < 0.5:  # broadcast the other way round
        return mk(op, ["b", "a"], ["y"]), {"a": a, "b": b}, {}, 14
    return mk(op, ["a", "b"], ["y"]), {"a": a, "b": b}, {}, 14


def g_wrap(rng, n):
    op = str(rng.choice(["Add", "Sub", "Mul"]))
    dtype = rng.choice([np.int32, np.int64])
    info = np.iinfo(dtype)
    shape = _shape(rng, n, 2)
    a = rng.integers(info.min, info.max, shape, dtype=dtype)
    b = rng.integers(info.min, info.max, shape, dtype=dtype)
    return mk(op, ["a", "b"], ["y"]), {"a": a, "b": b}, {}, 14


def _unary(op):
    def gen(rng, n):
        dtype = rng.choice([np.float32, np.float64])
        attrs = {"alpha": float(rng.uniform(0.001, 0.5))} if op == "LeakyRelu" else {}
        x = _float(rng, _shape(rng, n, int(rng.integers(1, 5))), dtype, scale=8.0)
        return mk(op, ["x"], ["y"], **attrs), {"x": x}, {}, 14 if op == "Relu" else 16 if op == "LeakyRelu" else 13
    gen.__name__ = "g_" + op.lower()
    return gen


def g_clip(rng, n):
    x = _float(rng, _shape(rng, n, 3))
    lo, hi = sorted(rng.standard_normal(2).astype(np.float32))
    if rng.random() < 0.4:
        return mk("Clip", ["x"], ["y"], min=float(lo), max=float(hi)), {"x": x}, {}, 6
    dtype = rng.choice([np.float32, np.int32, np.int64, np.int8, np.uint8])
    x = _data(rng, x.shape, dtype)
    inputs, params = ["x"], {}
    for name, v in (("lo", lo), ("hi", hi)):
        if rng.random() < 0.75:
            params[name] = np.array(v * 5 if dtype != np.float32 else v).astype(dtype)
            inputs.append(name)
        else:
            inputs.append("")
    while inputs and inputs[-1] == "":
        inputs.pop()
    return mk("Clip", inputs, ["y"]), {"x": x}, params, 13


def g_softmax(rng, n):
    rank = int(rng.integers(2, 5))
    x = _float(rng, _shape(rng, n, rank), scale=5.0)
    axis = int(rng.integers(-rank, rank))
    opset = int(rng.choice([11, 13]))
    return mk("Softmax", ["x"], ["y"], axis=axis), {"x": x}, {}, opset


def g_flatten(rng, n):
    rank = int(rng.integers(1, 5))
    x = _float(rng, _shape(rng, n, rank))
    return mk("Flatten", ["x"], ["y"], axis=int(rng.integers(-rank, rank + 1))), {"x": x}, {}, 13


def g_reshape(rng, n):
    x = _float(rng, _shape(rng, n, 3))
    target = [0, -1] if rng.random() < 0.5 else [n * x.shape[1], 0 if False else -1]
    if rng.random() < 0.3:
        target = [-1]
    return mk("Reshape", ["x", "s"], ["y"]), {"x": x}, {"s": np.array(target, np.int64)}, 14


def g_transpose(rng, n):
    rank = int(rng.integers(1, 6))
    x = _ints(rng, _shape(rng, n, rank, 1, 3), np.int64)
    attrs = {"perm": [int(p) for p in rng.permutation(rank)]} if rng.random() < 0.8 else {}
    return mk("Transpose", ["x"], ["y"], **attrs), {"x": x}, {}, 13


def g_squeeze(rng, n):
    rank = int(rng.integers(2, 5))
    shape = tuple(1 if (i > 0 and rng.random() < 0.5) else d for i, d in enumerate(_shape(rng, n, rank)))
    x = _float(rng, shape)
    ones = [i for i, d in enumerate(shape) if d == 1 and i > 0]
    axes = _neg(rng, [a for a in ones if rng.random() < 0.7], rank)
    if rng.random() < 0.5:
        return mk("Squeeze", ["x"], ["y"], **({"axes": axes} if axes else {})), {"x": x}, {}, 11
    return (mk("Squeeze", ["x", "a"] if axes else ["x"], ["y"]), {"x": x},
            {"a": np.array(axes, np.int64)} if axes else {}, 13)


def g_unsqueeze(rng, n):
    rank = int(rng.integers(1, 4))
    x = _float(rng, _shape(rng, n, rank))
    out_rank = rank + int(rng.integers(1, 3))
    axes = _neg(rng, sorted(int(a) for a in rng.choice(np.arange(1, out_rank), out_rank - rank, replace=False)),
                out_rank)
    if rng.random() < 0.5:
        return mk("Unsqueeze", ["x"], ["y"], axes=axes), {"x": x}, {}, 11
    return mk("Unsqueeze", ["x", "a"], ["y"]), {"x": x}, {"a": np.array(axes, np.int64)}, 13


def g_concat(rng, n):
    rank = int(rng.integers(1, 4))
    base = _shape(rng, n, rank)
    axis = int(rng.integers(-rank, rank))
    k = int(rng.integers(1, 4))
    data = {}
    for i in range(k):
        shape = list(base)
        if axis % rank != 0:
            shape[axis] = int(rng.integers(1, 4))
        data[f"x{i}"] = _ints(rng, tuple(shape), np.int32)
    return mk("Concat", list(data), ["y"], axis=axis), data, {}, 13


def g_pad(rng, n):
    rank = int(rng.integers(2, 5))
    x = _float(rng, _shape(rng, n, rank, 2, 5))
    mode = str(rng.choice(["constant", "reflect", "edge", "wrap"]))
    axes = [a for a in range(1, rank) if rng.random() < 0.8] or [rank - 1]
    lim = {a: x.shape[a] - 1 for a in axes}
    crop = -1 if mode in ("constant", "edge") else 0  # reflect/wrap limits apply after cropping
    pads = [int(rng.integers(crop, lim[a] + 1)) for a in axes] + \
           [int(rng.integers(0, lim[a] + 1)) for a in axes]
    params = {"p": np.array(pads, np.int64)}
    inputs = ["x", "p"]
    if mode == "constant":
        params["v"] = np.array(rng.standard_normal(), np.float32)
        inputs.append("v")
    else:
        inputs.append("")
    params["a"] = np.array(_neg(rng, axes, rank), np.int64)
    inputs.append("a")
    return mk("Pad", inputs, ["y"], mode=mode), {"x": x}, params, 19


def g_pad_old(rng, n):
    rank = int(rng.integers(2, 4))
    x = _float(rng, _shape(rng, n, rank, 2, 5))
    pads = [0] + [int(rng.integers(0, min(3, d))) for d in x.shape[1:]]  # reflect: pad < dim
    pads = pads + [0] + [int(rng.integers(0, min(3, d))) for d in x.shape[1:]]
    mode = str(rng.choice(["constant", "reflect", "edge"]))
    if rng.random() < 0.5:
        return mk("Pad", ["x"], ["y"], mode=mode, pads=pads, value=1.25), {"x": x}, {}, 2
    return mk("Pad", ["x", "p"], ["y"], mode=mode), {"x": x}, {"p": np.array(pads, np.int64)}, 11


def g_constant(rng, n):
    value = _data(rng, _shape(rng, n, 2), rng.choice([np.float32, np.int64, np.int8]))
    return mk("Constant", [], ["y"], value=numpy_helper.from_array(value)), {}, {}, 13


def g_identity(rng, n):
    return mk("Identity", ["x"], ["y"]), {"x": _ints(rng, _shape(rng, n, 3), np.int16)}, {}, 16


def g_dropout(rng, n):
    x = _float(rng, _shape(rng, n, 3))
    params = {"r": np.array(rng.uniform(0, 0.9), np.float32), "t": np.array(False)}
    outputs = ["y", "m"] if rng.random() < 0.5 else ["y"]
    return mk("Dropout", ["x", "r", "t"], outputs), {"x": x}, params, 13


_CASTABLE = [np.float32, np.float64, np.float16, np.int8, np.uint8, np.int16, np.int32, np.int64, np.bool_]
_F8 = {TensorProto.FLOAT8E4M3FN: ml_dtypes.float8_e4m3fn, TensorProto.FLOAT8E5M2: ml_dtypes.float8_e5m2,
       TensorProto.BFLOAT16: ml_dtypes.bfloat16}


def g_cast(rng, n):
    shape = _shape(rng, n, 2, 2, 6)
    src, dst = rng.choice(_CASTABLE), rng.choice(_CASTABLE)
    if np.dtype(src).kind == "b":
        x = rng.random(shape) < 0.5
    elif np.dtype(src).kind == "f":
        x = _float(rng, shape, src, scale=40.0)
        if np.dtype(dst).kind in "iu":  # float -> int out of range is undefined: stay inside
            info = np.iinfo(dst)
            x = np.clip(x, info.min, info.max).astype(src)
    else:
        x = _ints(rng, shape, src, -300, 300)
    return mk("Cast", ["x"], ["y"], to=helper.np_dtype_to_tensor_dtype(np.dtype(dst))), {"x": x}, {}, 13


def g_cast_narrow_float(rng, n):
    """float32/float16 -> float8 (saturating) or bfloat16, over many magnitudes."""
    shape = _shape(rng, n, 2, 2, 6)
    to = int(rng.choice(list(_F8)))
    x = rng.standard_normal(shape) * 10.0 ** rng.integers(-3, 6, shape)
    with np.errstate(over="ignore"):  # large values become inf in float16: also a case
        x = x.astype(np.float32 if rng.random() < 0.7 else np.float16)
    # cast back to float32 (exact) as onnxruntime cannot return float8e5m2/bfloat16 arrays
    return [mk("Cast", ["x"], ["t"], to=to), mk("Cast", ["t"], ["y"], to=TensorProto.FLOAT)], {"x": x}, {}, 19


def g_shape(rng, n):
    rank = int(rng.integers(1, 5))
    x = _float(rng, _shape(rng, n, rank))
    attrs = {}
    if rng.random() < 0.7:
        attrs = {"start": int(rng.integers(-rank - 1, rank + 1)), "end": int(rng.integers(-rank - 1, rank + 2))}
    return mk("Shape", ["x"], ["y"], **attrs), {"x": x}, {}, 15


def g_gather(rng, n):
    rank = int(rng.integers(1, 4))
    x = _float(rng, _shape(rng, n, rank, 1, 5))
    axis = int(rng.integers(-rank, rank))
    dim = x.shape[axis]
    idx = rng.integers(-dim, dim, tuple(int(d) for d in rng.integers(1, 4, int(rng.integers(0, 3)))))
    return (mk("Gather", ["x", "i"], ["y"], axis=axis), {"x": x},
            {"i": idx.astype(rng.choice([np.int32, np.int64]))}, 13)


def g_slice(rng, n):
    rank = int(rng.integers(1, 5))
    x = _ints(rng, _shape(rng, n, rank, 1, 7), np.int32)
    axes = list(rng.permutation(rank)[: int(rng.integers(1, rank + 1))])
    starts, ends, steps = [], [], []
    for a in axes:
        d = x.shape[a]
        step = int(rng.choice([1, 1, 2, 3, -1, -2]))
        starts.append(int(rng.choice([rng.integers(-d - 2, d + 3), 2**62 if step < 0 else -2**62])))
        ends.append(int(rng.choice([rng.integers(-d - 2, d + 3), -2**62 if step < 0 else 2**62])))
        steps.append(step)
    params = {"s": np.array(starts, np.int64), "e": np.array(ends, np.int64),
              "a": np.array(_neg(rng, [int(a) for a in axes], rank), np.int64), "t": np.array(steps, np.int64)}
    return mk("Slice", ["x", "s", "e", "a", "t"], ["y"]), {"x": x}, params, 13


def g_argmax(rng, n):
    rank = int(rng.integers(1, 4))
    x = _ints(rng, _shape(rng, n, rank), np.int32, -3, 3).astype(rng.choice([np.int32, np.float32]))  # ties
    attrs = {"axis": int(rng.integers(-rank, rank)), "keepdims": int(rng.integers(0, 2)),
             "select_last_index": int(rng.integers(0, 2))}
    return mk("ArgMax", ["x"], ["y"], **attrs), {"x": x}, {}, 13


def g_reduce_mean(rng, n):
    rank = int(rng.integers(1, 5))
    x = _float(rng, _shape(rng, n, rank))
    axes = _neg(rng, _axes_subset(rng, rank, allow_empty=True), rank)
    keepdims = int(rng.integers(0, 2))
    if rng.random() < 0.5:
        return mk("ReduceMean", ["x"], ["y"], keepdims=keepdims, **({"axes": axes} if axes else {})), {"x": x}, {}, 13
    noop = int(rng.integers(0, 2))
    return (mk("ReduceMean", ["x", "a"], ["y"], keepdims=keepdims, noop_with_empty_axes=noop), {"x": x},
            {"a": np.array(axes, np.int64)}, 18)


GENERATORS = {f.__name__[2:]: f for f in (
    g_binary, g_wrap, _unary("Relu"), _unary("LeakyRelu"), _unary("Sigmoid"), _unary("Tanh"), g_clip, g_softmax, g_flatten, g_reshape, g_transpose, g_squeeze, g_unsqueeze,
    g_concat, g_pad, g_pad_old, g_constant, g_identity, g_dropout, g_cast, g_cast_narrow_float, g_shape, g_gather, g_slice,
    g_argmax, g_reduce_mean)}
SEEDS = range(8)


def _model(node, data, params, opset, symbolic=True):
    """Single-node (or short chain) model; data inputs have a symbolic leading dim ``N`` (except the
    broadcast operand ``b``) unless that leaves the output rank unknown."""
    def vi(name, arr):
        dims = list(arr.shape)
        if symbolic and dims and name != "b":
            dims[0] = "N"
        return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(arr.dtype), dims)
    inits = [numpy_helper.from_array(v, k) for k, v in params.items()]
    nodes = node if isinstance(node, list) else [node]
    graph = helper.make_graph(nodes, "g", [vi(k, v) for k, v in data.items()],
                              [helper.make_empty_tensor_value_info(o) for o in nodes[-1].output], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    model = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    if symbolic and any(not o.type.tensor_type.HasField("shape") for o in model.graph.output):
        return _model(node, data, params, opset, symbolic=False)  # e.g. Squeeze without axes
    return model


@pytest.mark.parametrize("n", [1, 4])
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("op", list(GENERATORS))
def test_matches_onnxruntime(op, seed, n):
    rng = np.random.default_rng([seed, sum(map(ord, op))])
    node, data, params, opset = GENERATORS[op](rng, n)
    model = _model(node, data, params, opset)
    want = run_spec(model, data)
    graph = load(model)
    out = execute(graph, data)
    got = [out[name] for name in graph.output_names]
    for g, w in zip(got, want, strict=True):
        if g.dtype in (ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2) and w.dtype == np.uint8:
            g = g.view(np.uint8)  # onnxruntime returns float8 tensors as their raw bytes
        assert g.dtype == w.dtype and g.shape == w.shape, (node, g.dtype, g.shape, w.dtype, w.shape)
        if g.dtype == ml_dtypes.bfloat16:
            g, w = g.astype(np.float32), w.astype(np.float32)
        if not isinstance(node, list) and node.op_type in ROUNDED:
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-7, err_msg=str(node))
        else:
            np.testing.assert_array_equal(g, w, err_msg=str(node))
