"""Golden element-wise/shape ops: opset variants the conformance suite does not
reach, exact comparisons with onnx.reference or onnxruntime, batching, and the
one-line errors for bad models."""
from __future__ import annotations

import ml_dtypes
import onnx
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from _oracle import run_spec
from onnx2hw.golden import execute
from onnx2hw.golden.ops.cast import cast_to
from onnx2hw.ir import ModelError, UnsupportedError, load

RNG = np.random.default_rng(1234)
# onnx.reference's Sigmoid overflows in exp on the extreme inputs used below (its result is still right)
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning:onnx.reference.*")


#: feed names that are op parameters (pads, shape, axes, ...): stored as initializers,
#: so shape inference can type the outputs, as in real models
PARAMS = {"p", "s", "e", "a", "t", "v", "r"}


def _model(node, feeds, opset):
    inputs = [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
              for k, v in feeds.items() if k not in PARAMS]
    inits = [numpy_helper.from_array(np.asarray(v), k) for k, v in feeds.items() if k in PARAMS]
    outputs = [helper.make_empty_tensor_value_info(o) for o in node.output if o]
    graph = helper.make_graph([node], "g", inputs, outputs, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    model = onnx.shape_inference.infer_shapes(model)  # graph outputs must be typed
    rank = np.asarray(next(iter(feeds.values()))).ndim if feeds else 0
    for out in model.graph.output:
        if not out.type.tensor_type.HasField("shape"):  # not inferred (old Slice): same rank as input
            out.type.tensor_type.shape.dim.extend([onnx.TensorShapeProto.Dimension() for _ in range(rank)])
        for d in out.type.tensor_type.shape.dim:  # onnx infers -1 for some old-opset dims
            if d.HasField("dim_value") and d.dim_value < 0:
                d.Clear()
    return model


def _raw_model(node, feeds, opset):
    """Every feed a graph input, outputs declared rank-1 of the first input's type:
    for models whose error only shows when the op runs."""
    first = next(iter(feeds.values()))
    elem = helper.np_dtype_to_tensor_dtype(np.asarray(first).dtype)
    inputs = [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(np.asarray(v).dtype),
                                            np.asarray(v).shape) for k, v in feeds.items()]
    outputs = [helper.make_tensor_value_info(o, elem, ["n"]) for o in node.output if o]
    graph = helper.make_graph([node], "g", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def _data(feeds):
    return {k: np.asarray(v) for k, v in feeds.items() if k not in PARAMS}


def _golden(model, feeds):
    feeds = _data(feeds)
    graph = load(model)
    out = execute(graph, feeds)
    return [out[n] for n in graph.output_names]


def _reference(model, feeds, engine):
    feeds = _data(feeds)
    if engine == "ort":
        return run_spec(model, feeds)
    return ReferenceEvaluator(model).run(None, feeds)


def _same(got, want, rtol=0.0):
    """Same dtype and shape; equal values (within ``rtol`` for floats if given)."""
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, g.shape, w.dtype, w.shape)
        if g.dtype.kind in "fV" and g.dtype not in (np.float16, np.float32, np.float64):
            # ml_dtypes (float8, int4, ...): compare NaN-aware via float32
            g, w = g.astype(np.float32), w.astype(np.float32)
        if rtol and g.dtype.kind == "f":
            np.testing.assert_allclose(g, w, rtol=rtol, atol=1e-30)
        else:
            np.testing.assert_array_equal(g, w)


#: ops whose float result depends on evaluation order (exp/sum): compared to 1e-6
_ROUNDING = {"Softmax", "LogSoftmax", "Sigmoid", "ReduceMean"}


X = RNG.standard_normal((2, 3, 4)).astype(np.float32)
I32 = RNG.integers(-50, 50, (3, 4)).astype(np.int32)
mk = helper.make_node

# (id, node, feeds, opset, reference engine)
CASES = [
    ("clip_v6_attrs", mk("Clip", ["x"], ["y"], min=-0.5, max=0.25), {"x": X}, 6, "ort"),
    ("clip_v13_min_only", mk("Clip", ["x", "lo"], ["y"]), {"x": X, "lo": np.float32(-0.1)}, 13, "ort"),
    ("clip_v13_max_only", mk("Clip", ["x", "", "hi"], ["y"]), {"x": I32, "hi": np.int32(7)}, 13, "ort"),
    ("pad_v2_attr", mk("Pad", ["x"], ["y"], pads=[0, 1, 2, 1, 0, 3], value=1.5), {"x": X}, 2, "ort"),
    ("pad_v2_reflect", mk("Pad", ["x"], ["y"], mode="reflect", pads=[0, 1, 2, 0, 2, 3]), {"x": X}, 2, "ort"),
    ("pad_v11_crop", mk("Pad", ["x", "p"], ["y"], mode="edge"), {"x": X, "p": np.array([0, -1, 2, 1, 1, -2])}, 11, "ort"),
    ("pad_v19_wrap", mk("Pad", ["x", "p"], ["y"], mode="wrap"), {"x": X, "p": np.array([0, 2, 1, 0, 1, 3])}, 19, "ort"),
    ("pad_v18_axes", mk("Pad", ["x", "p", "v", "a"], ["y"]),
     {"x": X, "p": np.array([1, 2, 0, 1]), "v": np.float32(-3), "a": np.array([-1, 1])}, 18, "ort"),
    ("slice_v9_attrs", mk("Slice", ["x"], ["y"], starts=[1, -3], ends=[1000, -1], axes=[2, 1]), {"x": X}, 9, "ort"),
    ("slice_v13_steps", mk("Slice", ["x", "s", "e", "a", "t"], ["y"]),
     {"x": X, "s": np.array([-1, 10]), "e": np.array([-1000, 0]), "a": np.array([2, 1]), "t": np.array([-2, -1])}, 13, "ort"),
    ("squeeze_v11_attr", mk("Squeeze", ["x"], ["y"], axes=[0, -1]), {"x": X[:1, :, :1]}, 11, "ort"),
    ("squeeze_v13_all", mk("Squeeze", ["x"], ["y"]), {"x": X[:1, :, :1]}, 13, "ort"),
    ("unsqueeze_v11_attr", mk("Unsqueeze", ["x"], ["y"], axes=[0, 4]), {"x": X}, 11, "ort"),
    ("softmax_v11_coerce", mk("Softmax", ["x"], ["y"], axis=1), {"x": X}, 11, "ort"),
    ("softmax_v11_default", mk("Softmax", ["x"], ["y"]), {"x": X}, 11, "ort"),
    ("softmax_v13_axis0", mk("Softmax", ["x"], ["y"], axis=0), {"x": X}, 13, "ort"),
    ("dropout_v12_mask", mk("Dropout", ["x", "r", "t"], ["y", "m"]),
     {"x": X, "r": np.float32(0.4), "t": np.bool_(False)}, 12, "ort"),
    ("dropout_v13_train_ratio0", mk("Dropout", ["x", "r", "t"], ["y", "m"]),
     {"x": X, "r": np.float32(0.0), "t": np.bool_(True)}, 13, "ref"),
    ("reshape_v5", mk("Reshape", ["x", "s"], ["y"]), {"x": X, "s": np.array([0, -1])}, 5, "ort"),
    ("reshape_v14_allowzero", mk("Reshape", ["x", "s"], ["y"], allowzero=1),
     {"x": np.zeros((0, 3), np.float32), "s": np.array([3, 0])}, 14, "ort"),
    ("flatten_axis0", mk("Flatten", ["x"], ["y"], axis=0), {"x": X}, 13, "ort"),
    ("flatten_axis_neg", mk("Flatten", ["x"], ["y"], axis=-1), {"x": X}, 13, "ort"),
    ("transpose_default", mk("Transpose", ["x"], ["y"]), {"x": X}, 13, "ort"),
    ("concat_neg_axis", mk("Concat", ["x", "z"], ["y"], axis=-2), {"x": X, "z": X[:, :1]}, 13, "ort"),
    ("gather_axis1_neg", mk("Gather", ["x", "i"], ["y"], axis=1), {"x": X, "i": np.array([[-1, 0], [2, -3]])}, 13, "ort"),
    ("shape_v15_slice", mk("Shape", ["x"], ["y"], start=-2, end=10), {"x": X}, 15, "ort"),
    ("argmax_ties_last", mk("ArgMax", ["x"], ["y"], axis=1, keepdims=0, select_last_index=1),
     {"x": np.array([[1, 3, 3], [2, 2, 0]], np.int32)}, 13, "ort"),
    ("argmax_ties_first", mk("ArgMax", ["x"], ["y"], axis=-1), {"x": np.array([[1, 3, 3], [2, 2, 0]], np.int32)}, 13, "ort"),
    ("reduce_mean_v13_attr", mk("ReduceMean", ["x"], ["y"], axes=[0, 2], keepdims=0), {"x": X}, 13, "ort"),
    ("reduce_mean_v18_noop", mk("ReduceMean", ["x", "a"], ["y"], noop_with_empty_axes=1),
     {"x": X, "a": np.zeros((0,), np.int64)}, 18, "ort"),
    ("reduce_mean_v18_all", mk("ReduceMean", ["x"], ["y"], keepdims=0), {"x": X}, 18, "ort"),
    ("log_softmax_v13", mk("LogSoftmax", ["x"], ["y"]), {"x": X}, 13, "ort"),
    ("log_softmax_v11_coerce", mk("LogSoftmax", ["x"], ["y"], axis=1), {"x": X}, 11, "ort"),
    ("topk_largest", mk("TopK", ["x", "k"], ["v", "i"], axis=1), {"x": X, "k": np.array([2])}, 13, "ort"),
    ("topk_smallest_ties", mk("TopK", ["x", "k"], ["v", "i"], largest=0),
     {"x": np.array([[3, 1, 1, 2], [5, 5, 0, 5]], np.int32), "k": np.array([3])}, 13, "ort"),
    ("pow_f32_sqrt", mk("Pow", ["a", "b"], ["y"]), {"a": np.abs(X) + 0.5, "b": np.float32(0.5)}, 15, "ort"),
    ("pow_int64_base", mk("Pow", ["a", "b"], ["y"]),
     {"a": np.array([-3, 2, 5, 0], np.int64), "b": np.array([3.0, 2.0, 0.0, 2.0], np.float32)}, 15, "ort"),
    ("div_int32_trunc", mk("Div", ["a", "b"], ["y"]), {"a": I32, "b": np.array([3, -4, 7, -2], np.int32)}, 14, "ort"),
    ("div_int64_trunc", mk("Div", ["a", "b"], ["y"]),
     {"a": np.array([-7, 7, -7, 7, -6], np.int64), "b": np.array([2, -2, -2, 2, 3], np.int64)}, 14, "ref"),
    ("sub_uint8_wrap", mk("Sub", ["a", "b"], ["y"]),
     {"a": np.array([0, 5, 200], np.uint8), "b": np.array([1, 10, 100], np.uint8)}, 14, "ort"),
    ("mul_int8_wrap", mk("Mul", ["a", "b"], ["y"]),
     {"a": np.array([100, -100, 3], np.int8), "b": np.array([3, 3, -3], np.int8)}, 14, "ort"),
    ("leaky_relu_f16", mk("LeakyRelu", ["x"], ["y"], alpha=0.2), {"x": X.astype(np.float16)}, 16, "ort"),
    ("sigmoid_f64_extreme", mk("Sigmoid", ["x"], ["y"]), {"x": np.array([-1000.0, -30.0, 0.0, 30.0, 1000.0])}, 13, "ref"),
    ("constant_of_shape_int32", mk("ConstantOfShape", ["s"], ["y"], value=numpy_helper.from_array(np.array([7], np.int32))),
     {"s": np.array([2, 0, 3])}, 20, "ort"),
    ("constant_of_shape_default", mk("ConstantOfShape", ["s"], ["y"]), {"s": np.array([4, 1])}, 20, "ort"),
    ("cast_f32_to_int8", mk("Cast", ["x"], ["y"], to=TensorProto.INT8), {"x": np.array([-3.7, 3.7, 100.2], np.float32)}, 13, "ort"),
    ("cast_f32_to_bool", mk("Cast", ["x"], ["y"], to=TensorProto.BOOL), {"x": np.array([0.0, -0.5, 2.0], np.float32)}, 13, "ort"),
    ("cast_int64_to_f16", mk("Cast", ["x"], ["y"], to=TensorProto.FLOAT16), {"x": np.array([-70000, 3, 2049], np.int64)}, 13, "ort"),
    ("cast_e4m3fn_sat", mk("Cast", ["x"], ["y"], to=TensorProto.FLOAT8E4M3FN),
     {"x": np.array([np.inf, -1e6, 449.0, 0.30078125, np.nan], np.float32)}, 19, "ref"),
    ("cast_e5m2_nosat", mk("Cast", ["x"], ["y"], to=TensorProto.FLOAT8E5M2, saturate=0),
     {"x": np.array([np.inf, -1e6, 57344.0, 0.1, np.nan], np.float32)}, 19, "ref"),
]


@pytest.mark.parametrize("node,feeds,opset,engine", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_op_matches_reference(node, feeds, opset, engine):
    feeds = {k: np.asarray(v) for k, v in feeds.items()}
    model = _model(node, feeds, opset)
    _same(_golden(model, feeds), _reference(model, feeds, engine), 1e-6 if node.op_type in _ROUNDING else 0.0)


def test_legacy_broadcast_add_v6():
    # neither onnxruntime nor onnx.reference implements opset-6 broadcast/axis any more
    a, b = X, RNG.standard_normal(3).astype(np.float32)
    model = _model(mk("Add", ["a", "b"], ["y"], broadcast=1, axis=1), {"a": a, "b": b}, 6)
    (y,) = _golden(model, {"a": a, "b": b})
    np.testing.assert_array_equal(y, a + b.reshape(1, 3, 1))
    c = RNG.standard_normal((3, 4)).astype(np.float32)
    model = _model(mk("Mul", ["a", "c"], ["y"], broadcast=1), {"a": a, "c": c}, 6)
    np.testing.assert_array_equal(_golden(model, {"a": a, "c": c})[0], a * c)


def test_dropout_v7_mask_has_input_type():
    model = _raw_model(mk("Dropout", ["x"], ["y", "m"], ratio=0.3), {"x": X}, 7)
    y, m = _golden(model, {"x": X})
    np.testing.assert_array_equal(y, X)
    assert m.dtype == X.dtype and m.shape == X.shape  # opset 7-9: mask is T, not bool


@pytest.mark.parametrize("kind,value,want", [
    ("value_float", 2.5, np.array(2.5, np.float32)),
    ("value_floats", [1.0, -2.0], np.array([1.0, -2.0], np.float32)),
    ("value_int", -3, np.array(-3, np.int64)),
    ("value_ints", [4, 5], np.array([4, 5], np.int64)),
    ("value", numpy_helper.from_array(np.array([[1, 2]], np.int16)), np.array([[1, 2]], np.int16)),
])
def test_constant_kinds(kind, value, want):
    node = mk("Constant", [], ["y"], **{kind: value})
    model = _model(node, {}, 13)
    (got,) = _golden(model, {})
    (ref,) = _reference(model, {}, "ort")
    _same([got], [want])
    _same([got], [ref])


def test_constant_sparse_value():
    values = numpy_helper.from_array(np.array([5.0, -1.0], np.float32), "v")
    indices = numpy_helper.from_array(np.array([1, 6], np.int64), "i")
    sparse = helper.make_sparse_tensor(values, indices, [2, 4])
    model = _model(mk("Constant", [], ["y"], sparse_value=sparse), {}, 13)
    want = np.zeros((2, 4), np.float32)  # linear indices 1 and 6 of a 2x4 tensor
    want[0, 1], want[1, 2] = 5.0, -1.0
    _same(_golden(model, {}), [want])


@pytest.mark.parametrize("mode,want", [
    # float32 inputs: 0, 2**-127 (subnormal), 0.3, 0.75, 1.0, 1.5, 3e38, inf, nan
    ("up", [0, 0, 126, 127, 127, 128, 254, 254, 255]),
    ("down", [0, 0, 125, 126, 127, 127, 254, 254, 255]),
    ("nearest", [0, 0, 125, 127, 127, 128, 254, 254, 255]),
])
def test_cast_e8m0_round_modes(mode, want):
    # E8M0 code c is 2**(c-127); expected codes worked out by hand from the spec text
    x = np.array([0.0, 2.0 ** -127, 0.3, 0.75, 1.0, 1.5, 3e38, np.inf, np.nan], np.float32)
    got = cast_to(x, TensorProto.FLOAT8E8M0, saturate=True, round_mode=mode)
    assert got.dtype == ml_dtypes.float8_e8m0fnu
    np.testing.assert_array_equal(got.view(np.uint8), np.array(want, np.uint8))


def test_cast_int4_wraps_like_conformance():
    x = np.arange(-9, 16, dtype=np.float32)
    got = cast_to(x, TensorProto.INT4)
    assert got.dtype == ml_dtypes.int4
    np.testing.assert_array_equal(got.astype(np.int8), ((x.astype(np.int64) + 8) % 16) - 8)


def test_batched_graph_equals_per_sample():
    """Leading-dim batching is vectorized and equals running each sample alone."""
    nodes = [mk("Transpose", ["x"], ["t"], perm=[0, 2, 1]), mk("Softmax", ["t"], ["s"], axis=-1),
             mk("Pad", ["s", "p"], ["q"], mode="reflect"), mk("ReduceMean", ["q"], ["m"], axes=[2], keepdims=0),
             mk("LeakyRelu", ["m"], ["y"])]
    p = numpy_helper.from_array(np.array([0, 1, 1, 0, 2, 1], np.int64), "p")
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 5])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 7])], initializer=[p])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    g = load(model)
    x = RNG.standard_normal((6, 3, 5)).astype(np.float32)
    batch = execute(g, {"x": x})["y"]
    single = np.concatenate([execute(g, {"x": x[i:i + 1]})["y"] for i in range(6)])
    np.testing.assert_array_equal(batch, single)
    np.testing.assert_allclose(batch, _reference(model, {"x": x}, "ort")[0], rtol=1e-6)


ERRORS = [
    (mk("Div", ["a", "b"], ["y"]), {"a": np.array([1, 2], np.int32), "b": np.array([1, 0], np.int32)}, 14,
     "integer division by zero"),
    (mk("Add", ["a", "b"], ["y"]), {"a": np.zeros((2, 3), np.float32), "b": np.zeros((4,), np.float32)}, 14,
     r"shapes \(2, 3\) and \(4,\) do not broadcast"),
    (mk("Reshape", ["x", "s"], ["y"]), {"x": X, "s": np.array([5, -1])}, 14, r"cannot infer -1 in shape \(5, -1\)"),
    (mk("Gather", ["x", "i"], ["y"]), {"x": X, "i": np.array([2])}, 13, r"out of range \[-2, 2\) for axis 0"),
    (mk("Squeeze", ["x", "a"], ["y"]), {"x": X, "a": np.array([1])}, 13, "cannot squeeze axis 1 of size 3"),
    (mk("Transpose", ["x"], ["y"], perm=[0, 0, 1]), {"x": X}, 13, r"perm \(0, 0, 1\) is not a permutation"),
    (mk("Slice", ["x", "s", "e", "a", "t"], ["y"]),
     {"x": X, "s": np.array([0]), "e": np.array([2]), "a": np.array([0]), "t": np.array([0])}, 13, "contain 0"),
    (mk("Cast", ["x"], ["y"], to=TensorProto.STRING), {"x": X}, 13, "strings are not supported"),
    (mk("Dropout", ["x", "r", "t"], ["y"]), {"x": X, "r": np.float32(0.5), "t": np.bool_(True)}, 13,
     "training-mode Dropout"),
    (mk("Pad", ["x", "p"], ["y"]), {"x": X, "p": np.array([0, -2, 0, 0, -2, 0])}, 13, "crop more than the 3"),
    (mk("Softmax", ["x"], ["y"], axis=3), {"x": X}, 13, "axis 3 is out of range for rank 3"),
    (mk("Concat", ["x", "z"], ["y"], axis=0), {"x": X, "z": X[:, :2]}, 13, "do not match outside axis 0"),
]


@pytest.mark.parametrize("node,feeds,opset,message", ERRORS, ids=[e[0].op_type + "_" + e[3][:20] for e in ERRORS])
def test_bad_input_gives_one_line_model_error(node, feeds, opset, message):
    feeds = {k: np.asarray(v) for k, v in feeds.items()}
    graph = load(_raw_model(node, feeds, opset))
    with pytest.raises(ModelError, match=message) as info:
        execute(graph, feeds)
    assert "\n" not in str(info.value)
    if node.op_type != "Cast":
        assert f"{node.op_type} node" in str(info.value)
    else:
        assert isinstance(info.value, UnsupportedError)


def test_execute_outputs_and_intermediates():
    nodes = [mk("Relu", ["x"], ["r"]), mk("Neg", ["r"], ["n"])]
    graph = helper.make_graph(nodes[:1] + [mk("Sigmoid", ["r"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])])
    g = load(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    x = np.array([-1.0, 0.0, 2.0], np.float32)
    assert set(execute(g, {"x": x}, keep_intermediates=True)) >= {"x", "r", "y"}
    np.testing.assert_array_equal(execute(g, {"x": x}, outputs=["r"])["r"], [0.0, 0.0, 2.0])
    with pytest.raises(ModelError, match="requested output 'nope'"):
        execute(g, {"x": x}, outputs=["nope"])
