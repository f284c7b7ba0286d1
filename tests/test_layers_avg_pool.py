"""AvgPool layer kind: its exact reference is the window sum plus the bias, requantized once
(the int64 formula written here, with ``onnx2hw.arith.requantize``)."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from _one_layer import S8, graph_of
from _oracle import spec_session
import onnx2hw
from onnx2hw import arith, golden
from onnx2hw.golden.integer import execute_integer
from onnx2hw.ir import load
from onnx2hw.quant import to_integer_graph
from onnx2hw import layers as ig


def test_avg_pool_requantizes_the_window_sum():
    rng = np.random.default_rng(2)
    x = rng.integers(-128, 128, (4, 3, 3, 3)).astype(np.int8)
    act = ig.Requant(np.array([7282]), np.array([16]), -3, -128, 127)  # about 1/9
    ap = ig.AvgPool("ap", ("x",), ig.TensorSpec("a", (1, 1, 3), S8), (3, 3), (1, 1), (0, 0, 0, 0), act, bias=-9 * 4)
    got = golden.execute(graph_of(ig.TensorSpec("x", (3, 3, 3), S8), [ap]), {"x": x})["a"]
    sums = x.astype(np.int64).sum(axis=(1, 2), keepdims=True) - 36
    assert np.array_equal(got, arith.requantize(sums, 7282, 16, -3, -128, 127))


def _sum_pool_into_dense_model():
    """QONNX, as Brevitas writes a model without an output quantizer on its average pool: a 4-bit
    unsigned image quantizer, GlobalAveragePool, Flatten, MatMul by 4-bit quantized weights."""
    q = "qonnx.custom_op.general"
    rng = np.random.default_rng(4)
    w = rng.integers(-7, 8, (6, 3)).astype(np.float32) * 0.25
    inits = {"s_in": np.float32(0.5), "z": np.float32(0), "b_in": np.float32(4), "w": w, "s_w": np.float32(0.25),
             "b_w": np.float32(4)}
    nodes = [helper.make_node("Quant", ["x", "s_in", "z", "b_in"], ["xq"], domain=q, signed=0, narrow=0,
                              rounding_mode="ROUND"),
             helper.make_node("GlobalAveragePool", ["xq"], ["p"]), helper.make_node("Flatten", ["p"], ["f"]),
             helper.make_node("Quant", ["w", "s_w", "z", "b_w"], ["wq"], domain=q, signed=1, narrow=1,
                              rounding_mode="ROUND"),
             helper.make_node("MatMul", ["f", "wq"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 6, 4, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])],
                          [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid(q, 1)])
    return m, w


def test_average_pool_read_by_a_dense_layer_is_its_exact_sum():
    """Without a quantizer between them, the pool hands its window sum of ``x - zp`` to the dense
    layer as a wider integer (the mean's 1/area is in that layer's scale): exact, as the NumPy
    formula of the QONNX Quant and ONNX ops says (all scales powers of two: exact in float64)."""
    m, w = _sum_pool_into_dense_model()
    x = np.random.default_rng(5).uniform(-1, 9, (8, 6, 4, 4)).astype(np.float32)
    design = onnx2hw.compile(m, board="ulx3s")
    xq = np.clip(np.rint(x / 0.5), 0, 15) * 0.5
    want = xq.astype(np.float64).mean(axis=(2, 3)) @ w.astype(np.float64)
    got = design.golden({"x": x})["y"]
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6 * np.abs(want).max())
    assert [s.op for s in design.pipeline.stages][-2:] == ["avgpool", "dense"]


@pytest.mark.sim
def test_average_pool_read_by_a_dense_layer_simulates_bit_exact():
    m, _ = _sum_pool_into_dense_model()
    x = np.random.default_rng(6).uniform(-1, 9, (4, 6, 4, 4)).astype(np.float32)
    onnx2hw.compile(m, board="ulx3s").simulate({"x": x})   # raises MismatchError unless bit-exact


# ---- every AveragePool form against onnxruntime ---------------------------------------------------

def _spec_counts(n, k, s, begin, end, include_pad, ceil):
    """ONNX AveragePool along one axis, from the spec: the window count (ceil mode rounds up, but
    a last window may not start in the end padding) and each window's divisor (positions inside
    the padded axis with ``count_include_pad``, else inside the input)."""
    span = n + begin + end - k
    out = (-(-span // s) if ceil else span // s) + 1
    if ceil and (out - 1) * s >= n + begin:
        out -= 1
    lo, hi = (-begin, n + end) if include_pad else (0, n)
    return out, np.array([min(i * s - begin + k, hi) - max(i * s - begin, lo) for i in range(out)])


def _same_pads(n, k, s, upper):
    total = max(0, (-(-n // s) - 1) * s + k - n)
    return (total // 2, total - total // 2) if upper else (total - total // 2, total // 2)


def _pool_formula(q, zp, kernel, strides, pads, include_pad, ceil):
    """``(window sum of q - zp over the image, divisor)`` per output, int64, NCHW / NCL ``q``."""
    spatial = q.shape[2:]
    d = len(spatial)
    outs, divs = [], []
    for i in range(d):
        o, c = _spec_counts(spatial[i], kernel[i], strides[i], pads[i], pads[d + i], include_pad, ceil)
        outs.append(o)
        divs.append(c)
    sums = np.zeros(q.shape[:2] + tuple(outs), np.int64)
    centred = q.astype(np.int64) - zp
    for idx in np.ndindex(*outs):
        sl = tuple(slice(max(idx[i] * strides[i] - pads[i], 0), max(min(idx[i] * strides[i] - pads[i] + kernel[i],
                                                                         spatial[i]), 0)) for i in range(d))
        sums[(...,) + idx] = centred[(...,) + sl].sum(axis=tuple(range(2, 2 + d)))
    div = divs[0] if d == 1 else np.multiply.outer(divs[0], divs[1])
    return sums, div


def _qdq_pool(op_attrs, shape, s_in, zp_in, s_out, zp_out, dt):
    """Integer model input -> DequantizeLinear -> AveragePool -> QuantizeLinear (opset 19)."""
    tp = TensorProto.UINT8 if dt == np.uint8 else TensorProto.INT8
    inits = [numpy_helper.from_array(np.float32(s_in), "si"), numpy_helper.from_array(np.array(zp_in, dt), "zi"),
             numpy_helper.from_array(np.float32(s_out), "so"), numpy_helper.from_array(np.array(zp_out, dt), "zo")]
    nodes = [helper.make_node("DequantizeLinear", ["x", "si", "zi"], ["xd"]),
             helper.make_node("AveragePool", ["xd"], ["p"], name="pool", **op_attrs),
             helper.make_node("QuantizeLinear", ["p", "so", "zo"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", tp, ["N", *shape])],
                          [helper.make_tensor_value_info("y", tp, ["N"] + [None] * len(shape))], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])
    m.ir_version = 9
    return m


def _golden_nchw(m, q):
    """The integer graph onnx2hw imports from ``m``, run by the golden executor on ``q`` (NCHW/NCL)."""
    from onnx2hw.golden.integer import execute_integer
    from onnx2hw.ir import load
    from onnx2hw.quant import to_integer_graph
    g = to_integer_graph(load(m))
    nhwc = np.moveaxis(q, 1, -1) if q.ndim == 4 else np.moveaxis(q, 1, -1)[:, None]
    y = execute_integer(g, {g.input_specs[0].name: nhwc.astype(np.int64)})[g.output_specs[0].name]
    return g, (np.moveaxis(y, -1, 1) if q.ndim == 4 else np.moveaxis(y[:, 0], -1, 1))


#: (name, input shape without batch, AveragePool attributes, what the form is)
FORMS = [
    ("keras_same_s1", (3, 7, 6), dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=0)),
    ("keras_same_k2_s1", (2, 5, 6), dict(kernel_shape=[2, 2], pads=[0, 0, 1, 1], count_include_pad=0)),
    ("keras_same_k3_s2_even", (2, 8, 8), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[0, 0, 1, 1],
                                              count_include_pad=0)),
    ("same_upper_cip0", (2, 7, 6), dict(kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_UPPER")),
    ("same_lower_cip1", (2, 7, 7), dict(kernel_shape=[2, 2], strides=[2, 2], auto_pad="SAME_LOWER",
                                        count_include_pad=1)),
    ("same_lower_cip0_s1", (2, 5, 6), dict(kernel_shape=[2, 3], auto_pad="SAME_LOWER")),
    ("asym_cip0", (2, 6, 7), dict(kernel_shape=[3, 2], strides=[1, 2], pads=[2, 0, 0, 1], count_include_pad=0)),
    ("asym_cip1", (2, 6, 7), dict(kernel_shape=[3, 2], strides=[1, 2], pads=[2, 0, 0, 1], count_include_pad=1)),
    ("ceil_k2_s2", (2, 7, 9), dict(kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1)),
    ("torch_ceil_p1_cip1", (2, 8, 8), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1,
                                           count_include_pad=1)),
    ("torch_ceil_p1_cip0", (2, 8, 8), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1,
                                           count_include_pad=0)),
    ("ceil_asym_cip1", (2, 6, 7), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 0, 0, 1], ceil_mode=1,
                                       count_include_pad=1)),
    ("ceil_valid", (2, 8, 8), dict(kernel_shape=[3, 3], strides=[2, 2], auto_pad="VALID", ceil_mode=1)),
    ("ceil_extension_2", (2, 7, 7), dict(kernel_shape=[3, 3], strides=[3, 3], ceil_mode=1, count_include_pad=1)),
    ("plain_k2_s1", (2, 5, 5), dict(kernel_shape=[2, 2], count_include_pad=0)),
    ("1d_ceil_cip1", (3, 10), dict(kernel_shape=[3], strides=[2], pads=[1, 1], ceil_mode=1, count_include_pad=1)),
    ("1d_cip0_k2", (3, 9), dict(kernel_shape=[2], pads=[1, 0], count_include_pad=0)),
    ("1d_same_upper_s2", (3, 8), dict(kernel_shape=[3], strides=[2], auto_pad="SAME_UPPER")),
    ("1d_same_stride_beyond_kernel", (3, 6), dict(kernel_shape=[2], strides=[3], auto_pad="SAME_UPPER")),
]

#: (s_in, zp_in, s_out, zp_out, dtype): a calibrated output grid, and the input's own grid
#: (TFLite keeps a pool's quantization; every even divisor then gives exact ties)
GRIDS = {"calibrated": (0.05, 7, 0.037, 3, np.uint8), "same_grid": (0.0625, -3, 0.0625, -3, np.int8)}


def _geometry(shape, attrs):
    """(kernel, strides, pads begin + end, include_pad, ceil) of ``attrs`` on ``shape``, by the spec."""
    spatial = shape[1:]
    d = len(spatial)
    kernel, strides = attrs["kernel_shape"], attrs.get("strides", [1] * d)
    auto = attrs.get("auto_pad", "NOTSET")
    if auto.startswith("SAME"):
        pb = [_same_pads(spatial[i], kernel[i], strides[i], auto == "SAME_UPPER") for i in range(d)]
        pads = [p[0] for p in pb] + [p[1] for p in pb]
    else:
        pads = attrs.get("pads", [0] * 2 * d)
    ceil = bool(attrs.get("ceil_mode", 0)) and not auto.startswith("SAME")
    return kernel, strides, pads, bool(attrs.get("count_include_pad", 0)), ceil


#: a float32 QDQ pool rounds the mean's real value ``y = sum(s * (q - zp)) / count / s_out``
#: with about a dozen float32 roundings (dequantize, the window's additions, two divisions):
#: within this relative distance of a tie it may land on either side
FLOAT32_TIE = 2e-6


@pytest.mark.parametrize("grid", list(GRIDS))
@pytest.mark.parametrize("name,shape,attrs", FORMS, ids=[f[0] for f in FORMS])
def test_every_average_pool_form_matches_onnxruntime(name, shape, attrs, grid):
    """The golden integer pool of each AveragePool form (count_include_pad 0/1, ceil-mode partial
    windows, asymmetric pads, auto_pad SAME_*/VALID, 1-D and 2-D, kernel 2/3, stride 1/2/3) on a QDQ
    model equals onnxruntime's spec-exact session, except where the exact real mean lies on (or,
    for float32, within a few roundings of) a tie: the int64 formula here gives the window sum of
    ``q - zp`` over the image positions and the spec's divisor, and the golden is that mean
    rounded to nearest away from ties.

    Ties counted over the 19 forms (6 images each, 4434 outputs per grid): on the calibrated
    grid 6 outputs differ, each within 4.3e-7 of a tie (15 outputs lie that close; float32
    rounds them either way); on the input's own grid (scale 1/16, as TFLite keeps a pool's
    quantization) 751 outputs are exact ties (even divisors), onnxruntime rounds them half to
    even and the golden's 31-bit multiplier of ``1 / divisor`` decides: 362 differ, every one a
    tie."""
    s_in, zp_in, s_out, zp_out, dt = GRIDS[grid]
    m = _qdq_pool(attrs, shape, s_in, zp_in, s_out, zp_out, dt)
    info = np.iinfo(dt)
    q = np.random.default_rng(len(name)).integers(info.min, info.max + 1, (6, *shape)).astype(dt)
    want = spec_session(m).run(None, {"x": q})[0].astype(np.int64)
    g, got = _golden_nchw(m, q)
    kernel, strides, pads, include, ceil = _geometry(shape, attrs)
    sums, div = _pool_formula(q, zp_in, kernel, strides, pads, include, ceil)
    assert got.shape == want.shape == sums.shape
    # the exact mean in output steps (float64: 1e-15 of the float32 scales' exact ratio)
    exact = sums * (np.float64(np.float32(s_in)) / np.float64(np.float32(s_out))) / div
    off = np.abs(exact - np.floor(exact) - 0.5)
    tie = off < 1e-9 * (1 + np.abs(exact))           # an exact tie (same grid: sum / divisor = k + 1/2)
    near = off < FLOAT32_TIE * (1 + np.abs(exact))   # within float32's rounding of a tie
    half_up = np.clip(np.floor(exact + 0.5).astype(np.int64) + zp_out, info.min, info.max)
    # the golden rounds the exact mean to nearest; at an exact tie its multiplier's 31-bit
    # approximation of 1 / divisor decides
    assert np.array_equal(got[~tie], half_up[~tie])
    differ = got != want
    assert np.all(near[differ]), (name, np.argwhere(differ & ~near)[:4])
    if grid == "same_grid":
        assert not (differ & ~tie).any()
    varying = len({int(v) for v in np.unique(div)}) > 1
    assert (g.layers[0].counts is not None) == varying


def test_onnx_reference_shifts_ceil_extensions_of_two_or_more():
    """A ceil-mode pool whose partial last window reaches 2 or more positions past the padded
    input (stride 3 here): onnxruntime (and PyTorch) pad only at the end, as the ONNX spec says
    ("sliding windows that would start in the right padded region are ignored" for the extra
    ones, nothing added at the start); onnx.reference's AveragePool puts half of that extension at
    the start and so moves every window. onnx2hw follows onnxruntime: its float golden and
    integer pool equal the spec formula, onnx.reference does not."""
    from onnx.reference import ReferenceEvaluator
    x = np.arange(1, 8, dtype=np.float32).reshape(1, 1, 7)
    node = helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[3], strides=[3], ceil_mode=1,
                            count_include_pad=1)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 7])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, None])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])
    sums, div = _pool_formula(x.astype(np.int64), 0, [3], [3], [0, 0], True, True)
    want = sums / div                       # windows [1 2 3] [4 5 6] [7]: 2, 5, 7
    assert np.allclose(want, [[[2, 5, 7]]])
    assert np.allclose(spec_session(m).run(None, {"x": x})[0], want)
    assert np.allclose(golden.execute(load(m), {"x": x})["y"], want)
    assert not np.allclose(ReferenceEvaluator(m).run(None, {"x": x})[0], want)


def _qlinear_pool(attrs, shape, s_in, zp_in, s_out, zp_out):
    """uint8 model input -> com.microsoft QLinearAveragePool."""
    inits = [numpy_helper.from_array(np.float32(s_in), "si"), numpy_helper.from_array(np.uint8(zp_in), "zi"),
             numpy_helper.from_array(np.float32(s_out), "so"), numpy_helper.from_array(np.uint8(zp_out), "zo")]
    node = helper.make_node("QLinearAveragePool", ["x", "si", "zi", "so", "zo"], ["y"], name="pool",
                            domain="com.microsoft", **attrs)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.UINT8, ["N", *shape])],
                          [helper.make_tensor_value_info("y", TensorProto.UINT8, ["N"] + [None] * len(shape))], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 19), helper.make_opsetid("com.microsoft", 1)])
    m.ir_version = 9
    return m


QLINEAR_FORMS = [f for f in FORMS if f[0] in ("keras_same_s1", "same_upper_cip0", "asym_cip0", "asym_cip1",
                                             "torch_ceil_p1_cip1", "torch_ceil_p1_cip0", "ceil_k2_s2")
                 and len(f[1]) == 3]


@pytest.mark.parametrize("name,shape,attrs", QLINEAR_FORMS, ids=[f[0] for f in QLINEAR_FORMS])
def test_qlinear_average_pool_forms(name, shape, attrs):
    """com.microsoft QLinearAveragePool as onnxruntime's contrib kernel defines it: the sum over
    the window's image positions divided by the kernel area when it counts padding (partial
    ceil-mode windows too, unlike AveragePool), else by the image positions. The golden equals
    that mean rounded to nearest (the int64 window sums of the formula here) away from float32
    ties, and onnxruntime's kernel at every output but float32 ties: over these 7 forms (2316
    outputs) 5 lie within float32 rounding of a tie and 1 of them differs."""
    m = _qlinear_pool(attrs, shape, 0.05, 7, 0.037, 3)
    q = np.random.default_rng(len(name)).integers(0, 256, (6, *shape)).astype(np.uint8)
    _, got = _golden_nchw(m, q)
    kernel, strides, pads, include, ceil = _geometry(shape, attrs)
    sums, div = _pool_formula(q, 7, kernel, strides, pads, include, ceil)
    if include:
        div = np.full_like(div, kernel[0] * kernel[1])
    exact = sums * (np.float64(np.float32(0.05)) / np.float64(np.float32(0.037))) / div
    near = np.abs(exact - np.floor(exact) - 0.5) < FLOAT32_TIE * (1 + np.abs(exact))
    half_up = np.clip(np.floor(exact + 0.5).astype(np.int64) + 3, 0, 255)
    assert np.array_equal(got[~near], half_up[~near])
    want = spec_session(m).run(None, {"x": q})[0].astype(np.int64)
    assert np.all(near[got != want])


def _qonnx_pool(attrs, shape, bits):
    """QONNX: an 8-bit input Quant (scale 1/8), AveragePool, an output Quant of ``bits`` (scale 1/16,
    ROUND: half to even)."""
    q = "qonnx.custom_op.general"
    inits = {"s": np.float32(0.125), "z": np.float32(0), "b": np.float32(8), "so": np.float32(0.0625),
             "bo": np.float32(bits)}
    nodes = [helper.make_node("Quant", ["x", "s", "z", "b"], ["xq"], domain=q, signed=1, narrow=0, rounding_mode="ROUND"),
             helper.make_node("AveragePool", ["xq"], ["p"], name="pool", **attrs),
             helper.make_node("Quant", ["p", "so", "z", "bo"], ["y"], domain=q, signed=1, narrow=0,
                              rounding_mode="ROUND")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", *shape])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N"] + [None] * len(shape))],
                          [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid(q, 1)])


@pytest.mark.parametrize("name", ["keras_same_s1", "torch_ceil_p1_cip0", "ceil_k2_s2", "1d_cip0_k2"])
@pytest.mark.parametrize("bits", [8, 12])
def test_qonnx_average_pool_with_varying_divisors(name, bits):
    """A QONNX average pool whose divisor varies (count_include_pad=0 with padding, ceil-mode
    partial windows) is the window sum requantized per divisor: the QONNX formula here (the mean
    of the input codes times 1/8, divided by 1/16, rounded half to even, clamped) at every output
    but exact ties, where the Requant's multiplier decides instead of half to even (a pool of one
    divisor takes exact thresholds instead). With these power-of-two scales every even divisor
    gives ties: over the 8 cases (2430 outputs) 180 outputs are exact ties and 81 of them differ
    from half to even by one step."""
    _, shape, attrs = next(f for f in FORMS if f[0] == name)
    m = _qonnx_pool(attrs, shape, bits)
    codes = np.random.default_rng(bits).integers(-128, 128, (5, *shape))
    g = to_integer_graph(load(m))
    assert g.layers[0].counts is not None
    nhwc = np.moveaxis(codes, 1, -1) if codes.ndim == 4 else np.moveaxis(codes, 1, -1)[:, None]
    y = execute_integer(g, {g.input_specs[0].name: nhwc})[g.output_specs[0].name]
    got = np.moveaxis(y, -1, 1) if codes.ndim == 4 else np.moveaxis(y[:, 0], -1, 1)
    kernel, strides, pads, include, ceil = _geometry(shape, attrs)
    sums, div = _pool_formula(codes, 0, kernel, strides, pads, include, ceil)
    exact = sums * 2.0 / div                    # (sum * 1/8 / divisor) / (1/16)
    lo, hi = arith.int_range(bits, True)
    want = np.clip(np.rint(exact), lo, hi).astype(np.int64)
    tie = exact - np.floor(exact) == 0.5
    assert np.array_equal(got[~tie], want[~tie])
    assert np.all(np.abs(got - want)[tie] <= 1)


def test_divisor_tables_are_checked():
    """A 2x3 window on a 3x3 image padded by one column each side, count_include_pad=0: the middle
    column's windows divide by 6, the others by 4 (a Requant each); the tables must agree."""
    r4, r6 = (ig.Requant(np.array([m]), np.array([20]), 0, -128, 127) for m in (1 << 18, 174763))
    spec = ig.TensorSpec("a", (2, 3, 3), S8)

    def graph(counts, acts, act=r6):
        pool = ig.AvgPool("ap", ("x",), spec, (2, 3), (1, 1), (0, 1, 0, 1), act, 0, 0, counts=counts, count_acts=acts)
        return graph_of(ig.TensorSpec("x", (3, 3, 3), S8), [pool])
    with pytest.raises(onnx2hw.ModelError, match="count_acts cover divisors \\[4\\], not the layer's \\[4, 6\\]"):
        graph(((2, 2), (2, 3, 2)), ((4, r4),))
    with pytest.raises(onnx2hw.ModelError, match="not a positive count per output row"):
        graph(((2,), (2, 3, 2)), ((4, r4), (6, r6)))
    with pytest.raises(onnx2hw.ModelError, match="the largest divisor's as act"):
        graph(((2, 2), (2, 3, 2)), ((4, r4), (6, r6)), r4)
    x = np.random.default_rng(3).integers(-128, 128, (2, 3, 3, 3))
    got = golden.execute(graph(((2, 2), (2, 3, 2)), ((4, r4), (6, r6))), {"x": x})["a"]
    sums = np.stack([np.stack([x[:, i:i + 2, max(j - 1, 0):j + 2].sum(axis=(1, 2)) for j in range(3)], 1)
                     for i in range(2)], 1)
    want = arith.requantize(sums, 1 << 18, 20, 0, -128, 127)
    want[:, :, 1] = arith.requantize(sums[:, :, 1], 174763, 20, 0, -128, 127)
    assert np.array_equal(got, want)


@pytest.mark.parametrize("attrs,match", [
    (dict(kernel_shape=[2, 2], strides=[2, 2], pads=[0, 0, 2, 2], count_include_pad=0),
     "a window lies wholly in the padding"),
    (dict(kernel_shape=[2, 2], dilations=[2, 2]), "dilations are not supported"),
    (dict(kernel_shape=[1, 1], strides=[4, 1], auto_pad="SAME_UPPER"), "auto_pad SAME_UPPER with strides \\[4, 1\\] "
     "beyond the kernel \\[1, 1\\] asks for negative padding at the start"),
    (dict(kernel_shape=[2, 2], strides=[2, 2], pads=[0, 0, 2, 0], ceil_mode=1),
     "ceil_mode=1 with pads \\[0, 0, 2, 0\\] as large as the kernel"),
])
def test_average_pool_refusals_are_one_line(attrs, match):
    m = _qdq_pool(attrs, (2, 4, 5), 0.05, 7, 0.037, 3, np.uint8)
    with pytest.raises(onnx2hw.ModelError, match=f"node 'pool' \\(AveragePool\\): {match}"):
        to_integer_graph(load(m))


def test_per_channel_output_scales_with_varying_divisors():
    """A pool read only by a model output may quantize per channel: a Requant per divisor and
    channel (DivisorRequantize's table then follows the channel fold too). Golden against
    onnxruntime's spec-exact session, differing only within float32 rounding of a tie, and the
    pipeline under random stalls equal to the golden."""
    from onnx2hw.dataflow import compile_pipeline
    from onnx2hw.rtl.accelerator import AcceleratorCore
    from onnx2hw.sim.model_sim import from_transfers, to_transfers
    from onnx2hw.sim.pysim import run_stream
    so = np.array([0.03, 0.05, 0.041, 0.07], np.float32)
    inits = [numpy_helper.from_array(np.float32(0.05), "si"), numpy_helper.from_array(np.uint8(7), "zi"),
             numpy_helper.from_array(so, "so")]
    nodes = [helper.make_node("DequantizeLinear", ["x", "si", "zi"], ["xd"]),
             helper.make_node("AveragePool", ["xd"], ["p"], name="pool", kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                              strides=[2, 2], count_include_pad=0),
             helper.make_node("QuantizeLinear", ["p", "so"], ["y"], axis=1)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.UINT8, ["N", 4, 7, 7])],
                          [helper.make_tensor_value_info("y", TensorProto.UINT8, ["N", 4, 4, 4])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])
    m.ir_version = 9
    q = np.random.default_rng(0).integers(0, 256, (3, 4, 7, 7)).astype(np.uint8)
    graph, got = _golden_nchw(m, q)
    want = spec_session(m).run(None, {"x": q})[0].astype(np.int64)
    sums, div = _pool_formula(q, 7, [3, 3], [2, 2], [1, 1, 1, 1], False, False)
    exact = sums * np.float64(np.float32(0.05)) / so.astype(np.float64).reshape(1, 4, 1, 1) / div
    near = np.abs(exact - np.floor(exact) - 0.5) < FLOAT32_TIE * (1 + np.abs(exact))
    assert np.all(near[got != want])
    p = compile_pipeline(graph, folding={"pool": (2, 2)})
    assert [b.kind for b in p.stages[0].blocks][-1] == "DivisorRequantize"
    li, lo = p.input_link, p.output_link
    xq = np.moveaxis(q, 1, -1).astype(np.int64)
    out, _ = run_stream(AcceleratorCore(p), {"i": to_transfers(xq, li.dst_lanes)}, {"o": lo.elements // lo.src_lanes * 3},
                        src_pause="random", sink_pause="random", seed=2, check_comb=False, idle_limit=1 << 20)
    hw = from_transfers(out["o"], 3, graph.output_specs[0].shape)
    assert np.array_equal(np.moveaxis(hw, -1, 1), got)


def test_random_average_pool_geometries_match_onnxruntime():
    """120 random 1-D and 2-D geometries (kernel 1..3, stride 1..3, pads below the kernel or
    auto_pad, both count_include_pad and ceil_mode settings, inputs down to one position): the
    golden equals onnxruntime's spec-exact session away from float32 ties, or the import refuses
    in one line a geometry the hardware does not take (a window larger than the padded input,
    negative SAME padding at the start); onnxruntime's own refusals are skipped."""
    import onnxruntime
    rng = np.random.default_rng(36)
    checked = 0
    for _ in range(120):
        d = int(rng.integers(1, 3))
        spatial = [int(v) for v in rng.integers(1, 8, d)]
        kernel = [int(v) for v in rng.integers(1, 4, d)]
        attrs = dict(kernel_shape=kernel, strides=[int(v) for v in rng.integers(1, 4, d)],
                     count_include_pad=int(rng.integers(0, 2)), ceil_mode=int(rng.integers(0, 2)))
        auto = str(rng.choice(["NOTSET", "NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"]))
        if auto == "NOTSET":
            attrs["pads"] = [int(rng.integers(0, k)) for k in kernel * 2]
        else:
            attrs["auto_pad"] = auto
        shape = (2, *spatial)
        m = _qdq_pool(attrs, shape, 0.05, 7, 0.037, 3, np.uint8)
        q = rng.integers(0, 256, (2, *shape)).astype(np.uint8)
        try:
            want = spec_session(m).run(None, {"x": q})[0].astype(np.int64)
        except (onnxruntime.capi.onnxruntime_pybind11_state.RuntimeException,
                onnxruntime.capi.onnxruntime_pybind11_state.Fail):
            continue
        try:
            _, got = _golden_nchw(m, q)
        except onnx2hw.ModelError as e:
            assert str(e).count("\n") == 0 and ("does not fit" in str(e) or "negative padding" in str(e)), str(e)
            continue
        kernel, strides, pads, include, ceil = _geometry(shape, attrs)
        sums, div = _pool_formula(q, 7, kernel, strides, pads, include, ceil)
        exact = sums * (np.float64(np.float32(0.05)) / np.float64(np.float32(0.037))) / div
        near = np.abs(exact - np.floor(exact) - 0.5) < FLOAT32_TIE * (1 + np.abs(exact))
        assert got.shape == want.shape and np.all(near[got != want]), attrs
        checked += 1
    assert checked >= 90
