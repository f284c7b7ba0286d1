"""Golden compute and quantization ops cross-checked on seeded, randomized single-op models:
exact for integer outputs, 1e-5 relative for floats.

The oracle is onnxruntime with graph optimizations off (``_oracle.spec_session``), except for the
integer-kernel ops (ConvInteger, QLinearConv, MatMulInteger, QLinearMatMul), whose onnxruntime
results depend on the CPU (16-bit saturating pair sums without VNNI): those are checked against
``onnx.reference``."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from _oracle import reference, run_spec
from onnx2hw.golden import execute
from onnx2hw.ir import load

OPSET = 21


def _tensor_type(a: np.ndarray) -> int:
    return helper.np_dtype_to_tensor_dtype(a.dtype)


def make_model(op, inputs, consts, out_types, opset=OPSET, **attrs):
    """Single-node model: ``inputs`` (name -> array) are graph inputs, ``consts``
    (name -> array or None for an omitted optional input) initializers, in that order."""
    names = list(inputs) + list(consts)
    node = helper.make_node(op, [n if (n in inputs or consts[n] is not None) else "" for n in names],
                            [f"y{i}" for i in range(len(out_types))], **attrs)
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info(n, _tensor_type(a), a.shape) for n, a in inputs.items()],
        [helper.make_tensor_value_info(f"y{i}", t, None) for i, t in enumerate(out_types)],
        [numpy_helper.from_array(a, n) for n, a in consts.items() if a is not None])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    model = onnx.shape_inference.infer_shapes(model, strict_mode=True)  # output shapes: the loader wants ranks
    onnx.checker.check_model(model)
    return model


def with_casts(model, out_to=None, in_from=None):
    """The model for ORT when its Python API cannot pass a type (int4, float8):
    each output cast to ``out_to`` and/or the first input fed as ``in_from`` and cast
    to its declared type inside the graph."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    if out_to is not None:
        for o in g.output:
            g.node.append(helper.make_node("Cast", [o.name], [o.name + "_c"], to=out_to))
            o.name += "_c"
            o.type.tensor_type.elem_type = out_to
    if in_from is not None:
        x = g.input[0]
        g.node.insert(0, helper.make_node("Cast", [x.name + "_c"], [x.name], to=x.type.tensor_type.elem_type))
        x.name += "_c"
        x.type.tensor_type.elem_type = in_from
    return m


def run_both(model, feeds, ort_model=None, ort_feeds=None, oracle="ort"):
    if oracle == "reference":
        want = reference(model, feeds)
    else:
        want = run_spec(ort_model or model, ort_feeds or feeds)
    got = execute(load(model), feeds)
    return [got[o.name] for o in model.graph.output], want


def check(model, feeds, exact=False, rtol=1e-5, atol=1e-6, ort_model=None, ort_feeds=None, oracle="ort"):
    got, want = run_both(model, feeds, ort_model, ort_feeds, oracle)
    if ort_model is not None:  # values compared after ORT's cast
        got = [g.astype(np.asarray(w).dtype) for g, w in zip(got, want)]
    assert len(got) == len(want)
    for g, w in zip(got, want):
        w = np.asarray(w)
        assert g.shape == w.shape, (g.shape, w.shape)
        assert np.dtype(g.dtype) == np.dtype(w.dtype), (g.dtype, w.dtype)
        if exact:
            np.testing.assert_array_equal(g.astype(np.float64), w.astype(np.float64))
        else:
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol, atol=atol)


def rand(rng, shape, dtype=np.float32):
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    info = ml_dtypes.iinfo(dtype)
    return rng.integers(int(info.min), int(info.max) + 1, size=shape).astype(dtype)


# --------------------------------------------------------------------------- conv

def conv_case(seed):
    """Random conv geometry: rank, kernel, strides, dilations, pads or auto_pad, group."""
    rng = np.random.default_rng(seed)
    d = [1, 2, 2, 2, 3][seed % 5]
    n = [1, 3][seed % 2]
    group = [1, 1, 2, "dw"][seed % 4]
    cg = int(rng.integers(1, 4))
    c = cg * (2 if group == 2 else 1) if group != "dw" else int(rng.integers(2, 5))
    group = c if group == "dw" else group
    m = group * int(rng.integers(1, 4))
    kernel = tuple(int(k) for k in rng.integers(1, 4, size=d))
    strides = tuple(int(s) for s in rng.integers(1, 3, size=d))
    dil = tuple(int(x) for x in rng.integers(1, 3, size=d))
    spatial = tuple(int(s) for s in rng.integers(5, 9, size=d)) if d < 3 else (5, 6, 5)
    attrs = dict(kernel_shape=kernel, strides=strides, dilations=dil, group=group)
    mode = seed % 4
    if mode == 1:
        attrs["auto_pad"] = "SAME_UPPER"
        attrs.pop("dilations")  # ORT rejects SAME with dilations > 1
    elif mode == 2:
        attrs["auto_pad"] = "SAME_LOWER"
        attrs.pop("dilations")
    elif mode == 3:
        attrs["auto_pad"] = "VALID"
    else:
        attrs["pads"] = tuple(int(p) for p in rng.integers(0, 3, size=2 * d))
    return rng, n, c, m, group, kernel, spatial, attrs


@pytest.mark.parametrize("seed", range(24))
def test_conv(seed):
    rng, n, c, m, group, kernel, spatial, attrs = conv_case(seed)
    x = rand(rng, (n, c) + spatial)
    w = rand(rng, (m, c // group) + kernel)
    b = rand(rng, (m,)) if seed % 3 else None
    model = make_model("Conv", {"x": x}, {"w": w, "b": b}, [TensorProto.FLOAT], **attrs)
    check(model, {"x": x}, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("wtype", [np.uint8, np.int8])
def test_conv_integer(seed, wtype):
    rng, n, c, m, group, kernel, spatial, attrs = conv_case(seed)
    x = rand(rng, (n, c) + spatial, np.uint8)
    w = rand(rng, (m, c // group) + kernel, wtype)
    xz = np.array(rng.integers(0, 256), dtype=np.uint8)
    wz = np.array(rng.integers(-10, 10) % 256 if wtype == np.uint8 else rng.integers(-10, 10), dtype=wtype)
    model = make_model("ConvInteger", {"x": x}, {"w": w, "xz": xz, "wz": wz}, [TensorProto.INT32], **attrs)
    check(model, {"x": x}, exact=True, oracle="reference")


@pytest.mark.parametrize("seed", range(16))
@pytest.mark.parametrize("xtype", [np.uint8, np.int8])
def test_qlinear_conv(seed, xtype):
    rng, n, c, m, group, kernel, spatial, attrs = conv_case(seed)
    x = rand(rng, (n, c) + spatial, xtype)
    w = rand(rng, (m, c // group) + kernel, np.int8)
    per_channel = seed % 2 == 0
    xs = np.array(rng.uniform(0.01, 0.05), dtype=np.float32)
    xz = np.array(rng.integers(-20, 20) + (128 if xtype == np.uint8 else 0), dtype=xtype)
    ws = rng.uniform(0.005, 0.03, size=(m,) if per_channel else ()).astype(np.float32)
    wz = np.zeros((m,) if per_channel else (), dtype=np.int8)
    ys = np.array(rng.uniform(0.02, 0.3), dtype=np.float32)
    yz = np.array(rng.integers(-20, 20) + (128 if xtype == np.uint8 else 0), dtype=xtype)
    b = rng.integers(-2000, 2000, size=(m,)).astype(np.int32) if seed % 3 else None
    consts = {"xs": xs, "xz": xz, "w": w, "ws": ws, "wz": wz, "ys": ys, "yz": yz, "b": b}
    model = make_model("QLinearConv", {"x": x}, consts, [_tensor_type(yz)], **attrs)
    # truth: onnx.reference's ConvInteger for the exact accumulator (its QLinearConv mishandles
    # 1-D and 3-D convs), then the spec's requantization written out below
    acc = reference(make_model("ConvInteger", {"x": x}, {"w": w, "xz": xz}, [TensorProto.INT32], **attrs),
                    {"x": x})[0].astype(np.int64)
    if b is not None:
        acc += b.reshape((-1,) + (1,) * (x.ndim - 2))
    want = qlinear_requant(acc, xs, ws, ys, yz, x.ndim - 2)
    got = execute(load(model), {"x": x})["y0"]
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


def qlinear_requant(acc, xs, ws, ys, yz, spatial):
    """QLinearConv's output from its exact int32 accumulator: ``saturate(rint(float32(acc) *
    (x_scale * w_scale / y_scale)) + y_zero_point)``, multiplier in float32 in that order
    (per output channel for a 1-D ``w_scale``), rounding half to even."""
    mult = (np.float32(xs) * np.asarray(ws, np.float32).reshape(-1)) / np.float32(ys)
    mult = mult.reshape((-1,) + (1,) * spatial) if mult.size > 1 else mult.reshape(())
    info = np.iinfo(np.asarray(yz).dtype)
    y = np.rint(acc.astype(np.float32) * mult).astype(np.int64) + int(yz)
    return np.clip(y, info.min, info.max).astype(np.asarray(yz).dtype)


# ------------------------------------------------------------------------- matmul

MATMUL_SHAPES = [((3, 4), (4, 5)), ((2, 3, 4), (4, 6)), ((4,), (4, 3)), ((3, 4), (4,)), ((4,), (4,)),
                 ((2, 1, 3, 4), (5, 4, 2)), ((256, 64), (64, 10)), ((1, 7), (7, 1))]


@pytest.mark.parametrize("shapes", MATMUL_SHAPES)
def test_matmul(shapes):
    rng = np.random.default_rng(len(shapes[0]) * 10 + shapes[0][-1])
    a, b = rand(rng, shapes[0]), rand(rng, shapes[1])
    check(make_model("MatMul", {"a": a}, {"b": b}, [TensorProto.FLOAT]), {"a": a})


# onnxruntime rejects a per-column zero point for a batched (rank > 2) B
@pytest.mark.parametrize("shapes, zp", [(s, zp) for s in MATMUL_SHAPES if len(s[0]) >= 2 and len(s[1]) >= 2
                                        for zp in ("none", "tensor", "column") if zp != "column" or len(s[1]) == 2])
@pytest.mark.parametrize("types", [(np.uint8, np.uint8), (np.uint8, np.int8), (np.int8, np.int8)])
def test_matmul_integer(shapes, types, zp):
    rng = np.random.default_rng(7 + shapes[0][-1])
    a, b = rand(rng, shapes[0], types[0]), rand(rng, shapes[1], types[1])
    consts = {"b": b}
    if zp != "none":
        consts["az"] = np.array(rng.integers(0, 100), dtype=types[0])
        ncol = shapes[1][-1]
        consts["bz"] = rand(rng, (ncol,) if zp == "column" else (), types[1])
    check(make_model("MatMulInteger", {"a": a}, consts, [TensorProto.INT32]), {"a": a}, exact=True,
          oracle="reference")


@pytest.mark.parametrize("shapes", [s for s in MATMUL_SHAPES if len(s[0]) >= 2 and len(s[1]) >= 2])
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("seed", range(3))
def test_qlinear_matmul(shapes, dtype, seed):
    rng = np.random.default_rng(seed * 100 + shapes[0][-1])
    a, b = rand(rng, shapes[0], dtype), rand(rng, shapes[1], dtype)
    off = 128 if dtype == np.uint8 else 0
    consts = {"as": np.array(rng.uniform(0.01, 0.1), np.float32), "az": np.array(off + rng.integers(-9, 9), dtype),
              "b": b, "bs": np.array(rng.uniform(0.01, 0.1), np.float32),
              "bz": np.array(off + rng.integers(-9, 9), dtype),
              "ys": np.array(rng.uniform(0.05, 2.0), np.float32), "yz": np.array(off + rng.integers(-9, 9), dtype)}
    model = make_model("QLinearMatMul", {"a": a}, consts, [_tensor_type(a)])
    check(model, {"a": a}, exact=True, oracle="reference")


@pytest.mark.parametrize("seed", range(16))
def test_gemm(seed):
    rng = np.random.default_rng(seed)
    m, k, n = (int(v) for v in rng.integers(1, 9, size=3))
    if seed % 4 == 0:
        m = 256
    ta, tb = seed % 2, (seed // 2) % 2
    a = rand(rng, (k, m) if ta else (m, k))
    b = rand(rng, (n, k) if tb else (k, n))
    cshape = [None, (), (n,), (1, n), (m, 1), (m, n)][seed % 6]
    c = None if cshape is None else rand(rng, cshape)
    attrs = dict(transA=ta, transB=tb)
    if seed % 3 == 1:
        attrs.update(alpha=float(rng.uniform(-2, 2)), beta=float(rng.uniform(-2, 2)))
    model = make_model("Gemm", {"a": a}, {"b": b, "c": c}, [TensorProto.FLOAT], **attrs)
    check(model, {"a": a}, atol=1e-5)


# -------------------------------------------------------------------------- pools

def pool_case(seed, allow_dilation=True):
    rng = np.random.default_rng(1000 + seed)
    d = [2, 2, 1, 3][seed % 4]
    n = [1, 4][seed % 2]
    c = int(rng.integers(1, 4))
    kernel = tuple(int(k) for k in rng.integers(1, 4, size=d))
    spatial = tuple(int(s) for s in rng.integers(5, 10, size=d))
    attrs = dict(kernel_shape=kernel, strides=tuple(int(s) for s in rng.integers(1, 4, size=d)))
    mode = (seed // 4) % 3
    if mode == 0:
        attrs["pads"] = tuple(int(min(p, k - 1)) for p, k in zip(rng.integers(0, 3, size=2 * d), kernel + kernel))
        attrs["ceil_mode"] = int(seed % 3 == 0)
        if allow_dilation and seed % 5 == 0:
            attrs["dilations"] = tuple(int(x) for x in rng.integers(1, 3, size=d))
    elif mode == 1:
        attrs["auto_pad"] = ["SAME_UPPER", "SAME_LOWER"][seed % 2]
    else:
        attrs["auto_pad"] = "VALID"
        attrs["ceil_mode"] = int(seed % 2)
    return rng, (n, c) + spatial, attrs


@pytest.mark.parametrize("seed", range(30))
@pytest.mark.parametrize("dtype", [np.float32, np.uint8, np.int8])
def test_max_pool(seed, dtype):
    rng, shape, attrs = pool_case(seed)
    x = rand(rng, shape, dtype)
    with_indices = dtype == np.float32
    if with_indices:
        attrs["storage_order"] = seed % 2
    outs = [_tensor_type(x)] + ([TensorProto.INT64] if with_indices else [])
    model = make_model("MaxPool", {"x": x}, {}, outs, **attrs)
    check(model, {"x": x}, exact=True)


@pytest.mark.parametrize("seed", range(30))
@pytest.mark.parametrize("include_pad", [0, 1])
def test_average_pool(seed, include_pad):
    rng, shape, attrs = pool_case(seed)
    x = rand(rng, shape)
    model = make_model("AveragePool", {"x": x}, {}, [TensorProto.FLOAT], count_include_pad=include_pad, **attrs)
    check(model, {"x": x})


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
@pytest.mark.parametrize("shape", [(1, 3, 5), (4, 2, 6, 7), (2, 3, 2, 3, 4)])
def test_global_pool(op, shape):
    rng = np.random.default_rng(sum(shape))
    x = rand(rng, shape)
    check(make_model(op, {"x": x}, {}, [TensorProto.FLOAT]), {"x": x})


@pytest.mark.parametrize("shape", [(1, 3, 5), (8, 4, 6, 7), (2, 3, 2, 3, 4), (5, 6)])
def test_batch_normalization(shape):
    rng = np.random.default_rng(len(shape))
    x = rand(rng, shape)
    c = shape[1]
    consts = {"s": rand(rng, (c,)), "b": rand(rng, (c,)), "mean": rand(rng, (c,)),
              "var": rng.uniform(0.1, 2.0, size=(c,)).astype(np.float32)}
    check(make_model("BatchNormalization", {"x": x}, consts, [TensorProto.FLOAT], epsilon=1e-3), {"x": x})


# ------------------------------------------------------------------- quantization

QTYPES = [np.uint8, np.int8, np.uint16, np.int16, ml_dtypes.int4, ml_dtypes.uint4]


def q_params(rng, x_shape, layout, qtype, axis=1, block=2):
    info = ml_dtypes.iinfo(np.dtype(qtype))
    if layout == "tensor":
        pshape = ()
    elif layout == "axis":
        pshape = (x_shape[axis],)
    else:
        pshape = tuple(-(-s // block) if i == axis else s for i, s in enumerate(x_shape))
    scale = rng.uniform(0.002, 0.1, size=pshape).astype(np.float32)
    zp = rng.integers(int(info.min), int(info.max) + 1, size=pshape).astype(qtype)
    return scale, zp


@pytest.mark.parametrize("qtype", QTYPES)
@pytest.mark.parametrize("layout", ["tensor", "axis", "blocked"])
@pytest.mark.parametrize("batch", [1, 5])
def test_quantize_linear(qtype, layout, batch):
    rng = np.random.default_rng(QTYPES.index(qtype) * 10 + batch)
    x = (rng.standard_normal((batch, 6, 5)) * 2).astype(np.float32)
    x.flat[:8] = [0.5, -0.5, 1.5, -2.5, 0.0, 3.0, -3.0, 100.0]  # ties and saturation
    scale, zp = q_params(rng, x.shape, layout, qtype)
    if layout == "tensor":
        scale[...] = 0.5  # make the ties exact: x / 0.5 lands on .0 and .5 multiples
    attrs = {"axis": 1}
    if layout == "blocked":
        attrs["block_size"] = 2
    model = make_model("QuantizeLinear", {"x": x}, {"s": scale, "z": zp}, [_tensor_type(zp)], **attrs)
    narrow = np.dtype(qtype).itemsize == 1 and np.dtype(qtype).kind not in "iu"
    check(model, {"x": x}, exact=True, ort_model=with_casts(model, out_to=TensorProto.INT8) if narrow else None)


@pytest.mark.parametrize("output_dtype", [TensorProto.UINT8, TensorProto.INT8, TensorProto.INT4])
def test_quantize_linear_output_dtype(output_dtype):
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((3, 4)) * 4).astype(np.float32)
    model = make_model("QuantizeLinear", {"x": x}, {"s": np.array(0.25, np.float32)}, [output_dtype],
                       output_dtype=output_dtype)
    narrow = output_dtype == TensorProto.INT4
    check(model, {"x": x}, exact=True, ort_model=with_casts(model, out_to=TensorProto.INT8) if narrow else None)


@pytest.mark.parametrize("saturate", [0, 1])
@pytest.mark.parametrize("ftype", [TensorProto.FLOAT8E4M3FN, TensorProto.FLOAT8E5M2])
def test_quantize_linear_float8(saturate, ftype):
    x = np.array([0.0, 0.3, -1.7, 3.14159, 500.0, -1e6, 1e-3, 60000.0, -448.0, 449.0], np.float32)
    zp = np.zeros((), dtype=helper.tensor_dtype_to_np_dtype(ftype))
    model = make_model("QuantizeLinear", {"x": x}, {"s": np.array(0.5, np.float32), "z": zp}, [ftype],
                       saturate=saturate)
    got, want = run_both(model, {"x": x}, with_casts(model, out_to=TensorProto.FLOAT))
    np.testing.assert_array_equal(got[0].astype(np.float32), np.asarray(want[0]).astype(np.float32))


@pytest.mark.parametrize("qtype", QTYPES + [np.int32])
@pytest.mark.parametrize("layout", ["tensor", "axis", "blocked"])
def test_dequantize_linear(qtype, layout):
    rng = np.random.default_rng(QTYPES.index(qtype) if qtype in QTYPES else 99)
    if qtype == np.int32:
        x = rng.integers(-2**20, 2**20, size=(4, 6, 3)).astype(np.int32)
    else:
        x = rand(rng, (4, 6, 3), qtype)
    if qtype == np.int32:
        scale = q_params(rng, x.shape, layout, np.int8)[0]
        zp = np.zeros(scale.shape, np.int32)
    else:
        scale, zp = q_params(rng, x.shape, layout, qtype)
    attrs = {"axis": 1}
    if layout == "blocked":
        attrs["block_size"] = 2
    model = make_model("DequantizeLinear", {"x": x}, {"s": scale, "z": zp}, [TensorProto.FLOAT], **attrs)
    if x.dtype.kind in "iu":
        check(model, {"x": x}, exact=True)
    else:  # int4/uint4: ORT is fed int8 and casts inside the graph
        raw = x.astype(np.int8)
        check(model, {"x": x}, exact=True, ort_model=with_casts(model, in_from=TensorProto.INT8),
              ort_feeds={"x_c": raw})


# ------------------------------------------------------------------ float16 paths

@pytest.mark.parametrize("qtype", [np.uint8, np.int8])
def test_quantize_dequantize_float16(qtype):
    rng = np.random.default_rng(11)
    x = (rng.standard_normal((3, 4, 5)) * 3).astype(np.float16)
    scale, zp = q_params(rng, x.shape, "axis", qtype)
    scale = scale.astype(np.float16)
    q = make_model("QuantizeLinear", {"x": x}, {"s": scale, "z": zp}, [_tensor_type(zp)], axis=1)
    check(q, {"x": x}, exact=True)
    xq = rand(rng, x.shape, qtype)
    dq = make_model("DequantizeLinear", {"x": xq}, {"s": scale, "z": zp}, [TensorProto.FLOAT16], axis=1)
    check(dq, {"x": xq}, exact=True)


@pytest.mark.parametrize("op", ["MatMul", "Gemm", "Conv", "AveragePool", "MaxPool", "GlobalAveragePool"])
def test_float16(op):
    rng = np.random.default_rng(12)
    attrs, consts = {}, {}
    if op in ("MatMul", "Gemm"):
        x = rand(rng, (6, 8), np.float16)
        consts["w"] = rand(rng, (8, 5), np.float16)
    else:
        x = rand(rng, (2, 3, 7, 6), np.float16)
        if op == "Conv":
            consts["w"] = rand(rng, (4, 3, 3, 3), np.float16)
            attrs["pads"] = (1, 1, 1, 1)
        elif op != "GlobalAveragePool":
            attrs = dict(kernel_shape=(2, 3), strides=(2, 1))
    model = make_model(op, {"x": x}, consts, [TensorProto.FLOAT16], **attrs)
    check(model, {"x": x}, rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("bias_bits", [10, 27])
def test_qlinear_conv_wide_accumulator(bias_bits):
    """64 channels x 3x3 taps: 8-bit dot products beyond float32's exact range (the
    float64 accumulation path); a 27-bit bias forces it too."""
    rng = np.random.default_rng(bias_bits)
    x = rand(rng, (2, 64, 6, 6), np.uint8)
    w = rand(rng, (8, 64, 3, 3), np.int8)
    consts = {"xs": np.array(0.02, np.float32), "xz": np.array(7, np.uint8), "w": w,
              "ws": rng.uniform(1e-4, 1e-3, size=(8,)).astype(np.float32), "wz": np.zeros((8,), np.int8),
              "ys": np.array(0.5, np.float32), "yz": np.array(128, np.uint8),
              "b": rng.integers(-(1 << bias_bits), 1 << bias_bits, size=(8,)).astype(np.int32)}
    model = make_model("QLinearConv", {"x": x}, consts, [TensorProto.UINT8], pads=(1, 1, 1, 1))
    check(model, {"x": x}, exact=True, oracle="reference")
    ci = make_model("ConvInteger", {"x": x}, {"w": w, "xz": consts["xz"]}, [TensorProto.INT32], pads=(1, 1, 1, 1))
    check(ci, {"x": x}, exact=True, oracle="reference")
