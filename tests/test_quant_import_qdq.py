"""QDQ import: IntegerGraph (golden integer execution) vs onnxruntime on the same QDQ model."""
from __future__ import annotations

import pathlib

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from _oracle import run_spec
from _quant_models import cnn, compare_with_ort, mlp, quantize, random_inputs
from onnx2hw.ir import ModelError, load
from onnx2hw import layers as ig
from onnx2hw.quant.import_qdq import import_qdq

N = 500
EXAMPLES = pathlib.Path(__file__).resolve().parents[1] / "examples"
#: committed QDQ examples -> (test split file, input name)
QDQ_EXAMPLES = {
    "digits_mlp_int8": ("digits_test", "input"), "digits_mlp_w4a8": ("digits_test", "input"),
    "digits_cnn_int8": ("digits_img_test", "image"), "digits_cnn_w4a8": ("digits_img_test", "image"),
    "digits_cnn_res_int8": ("digits_img_test", "image"), "digits_cnn_res_w4a8": ("digits_img_test", "image"),
}


def example_inputs(test_file: str, name: str, n_random: int = 100) -> tuple[np.ndarray, np.ndarray]:
    """The example's test split plus ``n_random`` uniform random inputs (>= 500 in all), and the labels."""
    data = np.load(EXAMPLES / f"{test_file}.npz")
    x = data[name].astype(np.float32)
    extra = np.random.default_rng(7).random((max(n_random, N - len(x)), *x.shape[1:]), dtype=np.float32)
    return np.concatenate([x, extra]), data["label"]


@pytest.mark.parametrize("example", sorted(QDQ_EXAMPLES))
def test_qdq_examples_match_onnxruntime(example, summary):
    path = EXAMPLES / f"{example}.onnx"
    if not path.exists():
        pytest.fail(f"example {path} is missing (run examples/make_examples.py)")
    test_file, name = QDQ_EXAMPLES[example]
    x, labels = example_inputs(test_file, name)
    g = import_qdq(load(path))
    got = {}
    frac, lsb = compare_with_ort(str(path), g, x, name, got)
    acc = float(np.mean(got[g.outputs[0].name][:len(labels)].argmax(axis=1) == labels))
    print(f"{example}: identical {frac:.4f}, max {lsb:.0f} LSB over {len(x)} inputs; test accuracy {acc:.4f}")
    summary(f"qdq-ex-{example}", f"quant QDQ example {example}: {frac:.2%} identical, max {lsb:.0f} LSB "
            f"({len(x)} inputs), integer-graph test accuracy {acc:.2%}")
    assert lsb <= 1 and frac >= 0.99

CASES = {
    "mlp-u8-pt": (lambda: mlp(0), dict()),
    "mlp-s8-pc": (lambda: mlp(1), dict(per_channel=True, act="int8")),
    "cnn-u8-pc": (lambda: cnn(2), dict(per_channel=True)),
    "cnn-s8-pt": (lambda: cnn(3), dict(act="int8")),
    "cnn-flatten-image": (lambda: cnn(4, flatten_image=True), dict(per_channel=True)),
    "residual-u8": (lambda: cnn(5, residual=True), dict(per_channel=True)),
    "residual-s8": (lambda: cnn(6, residual=True), dict(act="int8")),
    "mlp-int4w": (lambda: mlp(7, opset=21), dict(weight="int4", per_channel=True)),
    "cnn-int4w": (lambda: cnn(8, opset=21), dict(weight="int4", per_channel=True)),
    "cnn-uint4w": (lambda: cnn(9, opset=21), dict(weight="uint4")),
    "mlp-u16-act": (lambda: mlp(10, opset=21), dict(act="uint16", per_channel=True)),
    "residual-s16-act": (lambda: cnn(11, residual=True, opset=21), dict(act="int16", weight="int8")),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_qdq_matches_onnxruntime(case, tmp_path, summary):
    make, opts = CASES[case]
    model = make()
    path = quantize(model, tmp_path, **opts)
    g = import_qdq(load(path))
    assert g.source == "qdq"
    assert g.validate() is g
    frac, lsb = compare_with_ort(path, g, random_inputs(model, N, 99))
    print(f"{case}: identical {frac:.4f}, max diff {lsb:.0f} LSB over {N} inputs")
    summary(f"qdq-{case}", f"quant QDQ {case}: {frac:.2%} identical, max {lsb:.0f} LSB ({N} inputs)")
    # onnxruntime has no integer kernels for 16-bit activations: it runs those QDQ layers in float32,
    # whose rounding error is a visible fraction of a 16-bit LSB (the integer graph is exact)
    assert lsb <= 1 and frac >= (0.98 if "16" in case else 0.99)


def test_qdq_structure(tmp_path):
    model = cnn(4, flatten_image=True)
    g = import_qdq(load(quantize(model, tmp_path, per_channel=True)))
    kinds = [type(layer).__name__ for layer in g.layers]
    assert kinds == ["Conv", "MaxPool", "Conv", "Dense"]
    conv1 = g.layers[0]
    assert conv1.weights.shape == (8, 3, 3, 1) and conv1.pad_value == g.inputs[0].zero_point
    assert g.inputs[0].nchw_to_nhwc and g.input_specs[0].shape == (8, 8, 1)
    assert conv1.act.lo == conv1.act.zero_point  # ReLU folded into the clamp (uint8, zp at relu 0)
    dense = g.layers[-1]
    assert dense.weights.shape == (10, 128) and g.output_specs[0].name == "y"
    assert conv1.w_type == ig.IntType(8, True)


def _tiny(nodes, inits, out="y"):
    g = helper.make_graph(nodes, "t", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
                          [helper.make_tensor_value_info(out, TensorProto.FLOAT, ["N", 3])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return load(m)


def _qdq_gemm(extra_nodes=(), scale=0.05, final="y_pre"):
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(np.array(0.02, np.float32), "xs"),
             numpy_helper.from_array(np.array(128, np.uint8), "xz"),
             numpy_helper.from_array(rng.integers(-50, 50, (3, 4)).astype(np.int8), "wq"),
             numpy_helper.from_array(np.array(0.01, np.float32), "ws"),
             numpy_helper.from_array(np.array(scale, np.float32), "ys"),
             numpy_helper.from_array(np.array(100, np.uint8), "yz")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"], name="qx"),
             helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"], name="dqx"),
             helper.make_node("DequantizeLinear", ["wq", "ws"], ["wd"], name="dqw"),
             helper.make_node("Gemm", ["xd", "wd"], ["g"], transB=1, name="gemm"),
             *extra_nodes,
             helper.make_node("QuantizeLinear", [final, "ys", "yz"], ["yq"], name="qy"),
             helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["y"], name="dqy")]
    return nodes, inits


def test_float_op_between_quantizers_is_named():
    nodes, inits = _qdq_gemm([helper.make_node("Sigmoid", ["g"], ["y_pre"], name="sig")])
    with pytest.raises(ModelError, match=r"'sig'.*Sigmoid"):
        import_qdq(_tiny(nodes, inits))


@pytest.mark.parametrize("bad", [0.0, -0.5, float("nan"), float("inf")])
def test_bad_scale_is_named(bad):
    nodes, inits = _qdq_gemm([helper.make_node("Relu", ["g"], ["y_pre"], name="relu")], scale=bad)
    with pytest.raises(ValueError, match=r"'qy'.*not a positive finite"):
        import_qdq(_tiny(nodes, inits))


def test_unquantized_output_is_an_error():
    nodes, inits = _qdq_gemm([helper.make_node("Relu", ["g"], ["y_pre"], name="relu")])
    nodes = nodes[:4] + [helper.make_node("Relu", ["g"], ["y"], name="relu")]
    with pytest.raises(ModelError, match="'y' is a clamped float accumulator"):
        import_qdq(_tiny(nodes, inits))


def test_clip_folds_into_clamp():
    clip = [numpy_helper.from_array(np.array(-0.5, np.float32), "lo"),
            numpy_helper.from_array(np.array(1.0, np.float32), "hi")]
    nodes, inits = _qdq_gemm([helper.make_node("Clip", ["g", "lo", "hi"], ["y_pre"], name="clip")])
    g = import_qdq(_tiny(nodes, inits + clip))
    act = g.layers[0].act
    assert (act.lo, act.hi) == (100 - 10, 100 + 20)
    # the hand-built QDQ model against the spec (onnxruntime, optimizations off)
    graph = helper.make_graph(nodes, "t", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])], inits + clip)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    x = np.random.default_rng(3).normal(0, 2, (500, 4)).astype(np.float32)
    ref = run_spec(m, {"x": x})[0]
    from onnx2hw import golden
    got = ig.dequantize_outputs(g, golden.execute(g, ig.quantize_inputs(g, {"x": x})))["y"]
    diff = np.abs(np.rint(got / 0.05) - np.rint(ref / 0.05))
    assert diff.max() <= 1 and np.mean(diff == 0) >= 0.99


@pytest.mark.parametrize("target", [[0, -1], [-1, 128], [0, 128]])
def test_reshape_as_flatten(target, tmp_path):
    model = cnn(40, flatten_image=True)
    flat = next(n for n in model.graph.node if n.op_type == "Flatten")
    flat.op_type = "Reshape"
    flat.input.append("shape")
    model.graph.initializer.append(numpy_helper.from_array(np.array(target, np.int64), "shape"))
    path = quantize(model, tmp_path, per_channel=True)
    g = import_qdq(load(path))
    frac, lsb = compare_with_ort(path, g, random_inputs(model, N, 97))
    assert lsb <= 1 and frac >= 0.99


def test_reshape_that_moves_the_batch_is_named(tmp_path):
    model = cnn(41, flatten_image=True)
    flat = next(n for n in model.graph.node if n.op_type == "Flatten")
    flat.op_type, flat.name = "Reshape", "bad_reshape"
    flat.input.append("shape")
    model.graph.initializer.append(numpy_helper.from_array(np.array([0, -1], np.int64), "shape"))
    q = onnx.load(quantize(model, tmp_path))
    for init in q.graph.initializer:
        if init.name == "shape":
            init.CopyFrom(numpy_helper.from_array(np.array([2, -1], np.int64), "shape"))
    with pytest.raises(ModelError, match="'bad_reshape'.*batch"):
        import_qdq(load(q))


def test_quantize_linear_on_a_float_weight_is_folded():
    """QuantizeLinear -> DequantizeLinear on a float initializer (weights quantized in the graph)."""
    nodes, inits = _qdq_gemm([helper.make_node("Relu", ["g"], ["y_pre"], name="relu")])
    w = np.random.default_rng(2).normal(0, 0.3, (3, 4)).astype(np.float32)
    inits = [i for i in inits if i.name != "wq"] + [numpy_helper.from_array(w, "wf"),
                                                    numpy_helper.from_array(np.array(0, np.int8), "wz")]
    nodes.insert(2, helper.make_node("QuantizeLinear", ["wf", "ws", "wz"], ["wq"], name="qw"))
    g = import_qdq(_tiny(nodes, inits))
    assert np.array_equal(g.layers[0].weights, np.clip(np.rint(w / np.float32(0.01)), -128, 127))
