"""QOperator import: IntegerGraph (golden integer execution) vs onnxruntime on the same model."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from _oracle import run_kernels
from _paths import EXAMPLES
from _quant_models import cnn, compare_with_ort, mlp, quantize, random_inputs
from onnx2hw import golden
from onnx2hw.ir import ModelError, load
from onnx2hw import layers as ig
from onnx2hw.quant.convert import to_integer_graph
from onnx2hw.quant.import_qop import import_qop

N = 500
#: float examples -> (calibration file, test split file, input name)
FLOAT_EXAMPLES = {"digits_mlp": ("digits_calib", "digits_test", "input"),
                  "digits_cnn": ("digits_img_calib", "digits_img_test", "image"),
                  "digits_cnn_res": ("digits_img_calib", "digits_img_test", "image"),
                  "jet_mlp": ("jet_calib", "jet_test", "input")}


@pytest.mark.parametrize("fmt", ["qop", "qdq"])
@pytest.mark.parametrize("example", sorted(FLOAT_EXAMPLES))
def test_float_examples_quantized_by_onnxruntime(example, fmt, tmp_path, summary):
    """The float examples quantized by onnxruntime (QOperator and QDQ, per channel) on their
    calibration sets, imported, vs onnxruntime on the test split (+ random inputs, >= 500)."""
    calib_file, test_file, name = FLOAT_EXAMPLES[example]
    model = onnx.load(EXAMPLES / f"{example}.onnx")
    calib = np.load(EXAMPLES / f"{calib_file}.npz")[name].astype(np.float32)
    path = quantize(model, tmp_path, fmt=fmt, per_channel=True, calib=calib[:64], name=f"{example}_{fmt}.onnx")
    data = np.load(EXAMPLES / f"{test_file}.npz")
    x = data[name].astype(np.float32)
    x = np.concatenate([x, np.random.default_rng(8).random((max(100, N - len(x)), *x.shape[1:]), dtype=np.float32)])
    g = to_integer_graph(load(path))
    assert g.source == ("qoperator" if fmt == "qop" else "qdq")
    got = {}
    frac, lsb = compare_with_ort(path, g, x, name, got)
    acc = float(np.mean(got[g.outputs[0].name][:len(data["label"])].argmax(axis=1) == data["label"]))
    print(f"{example} {fmt}: identical {frac:.4f}, max {lsb:.0f} LSB over {len(x)} inputs; accuracy {acc:.4f}")
    summary(f"ort-{fmt}-{example}", f"quant {fmt} (onnxruntime-quantized) {example}: {frac:.2%} identical, "
            f"max {lsb:.0f} LSB ({len(x)} inputs), test accuracy {acc:.2%}")
    assert lsb <= 1 and frac >= 0.99

CASES = {
    "mlp-u8-pt": (lambda: mlp(10), dict()),
    "mlp-u8-pc": (lambda: mlp(11), dict(per_channel=True)),
    "cnn-u8-pt": (lambda: cnn(12), dict()),
    "cnn-u8-pc": (lambda: cnn(13), dict(per_channel=True)),
    "cnn-flatten-image": (lambda: cnn(14, flatten_image=True), dict()),
    "residual-u8": (lambda: cnn(15, residual=True), dict()),
    "residual-s8": (lambda: cnn(16, residual=True), dict(act="int8", per_channel=True)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_qop_matches_onnxruntime(case, tmp_path, summary):
    make, opts = CASES[case]
    model = make()
    path = quantize(model, tmp_path, fmt="qop", **opts)
    ops = {n.op_type for n in onnx.load(path).graph.node}
    assert ops & {"QLinearConv", "QGemm", "QLinearMatMul"}
    g = import_qop(load(path))
    assert g.source == "qoperator"
    frac, lsb = compare_with_ort(path, g, random_inputs(model, N, 98))
    print(f"{case}: ops {sorted(ops)}; identical {frac:.4f}, max diff {lsb:.0f} LSB over {N} inputs")
    summary(f"qop-{case}", f"quant QOperator {case}: {frac:.2%} identical, max {lsb:.0f} LSB ({N} inputs)")
    assert lsb <= 1 and frac >= 0.99


def _integer_model(kind: str):
    """Hand-built QuantizeLinear -> MatMulInteger/ConvInteger -> Cast -> Mul -> Add -> Relu -> QuantizeLinear."""
    rng = np.random.default_rng(5)
    if kind == "matmul":
        x_shape, w = [6], rng.integers(-60, 60, (6, 4)).astype(np.int8)
        op = helper.make_node("MatMulInteger", ["xq", "w", "xz", "wz"], ["acc"], name="mm")
        bias, y_shape = rng.normal(0, 0.2, 4).astype(np.float32), [4]
        scale = np.float32(0.02 * 0.01)
    else:
        x_shape, w = [2, 5, 5], rng.integers(-60, 60, (3, 2, 3, 3)).astype(np.int8)
        op = helper.make_node("ConvInteger", ["xq", "w", "xz", "wz"], ["acc"], name="conv", pads=[1, 1, 1, 1])
        bias, y_shape = rng.normal(0, 0.2, (3, 1, 1)).astype(np.float32), [3, 5, 5]
        scale = np.float32(0.02 * 0.01)
    inits = [numpy_helper.from_array(np.array(0.02, np.float32), "xs"),
             numpy_helper.from_array(np.array(7, np.uint8), "xz"),
             numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.array(0, np.int8), "wz"),
             numpy_helper.from_array(np.array(scale, np.float32), "s"),
             numpy_helper.from_array(bias, "b"),
             numpy_helper.from_array(np.array(0.03, np.float32), "ys"),
             numpy_helper.from_array(np.array(3, np.uint8), "yz")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"], name="qx"), op,
             helper.make_node("Cast", ["acc"], ["accf"], to=TensorProto.FLOAT, name="cast"),
             helper.make_node("Mul", ["accf", "s"], ["m"], name="mul"),
             helper.make_node("Add", ["m", "b"], ["a"], name="bias"),
             helper.make_node("Relu", ["a"], ["r"], name="relu"),
             helper.make_node("QuantizeLinear", ["r", "ys", "yz"], ["yq"], name="qy"),
             helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["y"], name="dqy")]
    g = helper.make_graph(nodes, kind, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", *x_shape])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", *y_shape])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m, full_check=True)
    return m, x_shape


@pytest.mark.parametrize("kind", ["matmul", "conv"])
def test_integer_ops_chain(kind):
    m, x_shape = _integer_model(kind)
    g = import_qop(load(m))
    assert len(g.layers) == 1 and g.layers[0].act.lo == 3  # Relu folded: clamp at the zero point
    x = np.random.default_rng(0).random((N, *x_shape), dtype=np.float32) * 4 - 1
    # onnxruntime's integer kernels: |w| <= 60, so no u8 x s8 pair sum reaches 16-bit saturation
    # (2 * 255 * 60 < 32767) on CPUs without VNNI; 1 LSB allowed for float rounding order
    ref = run_kernels(m, {"x": x})[0]
    got = ig.dequantize_outputs(g, golden.execute(g, ig.quantize_inputs(g, {"x": x})))["y"]
    diff = np.abs(np.rint(got / 0.03) - np.rint(ref / 0.03))
    print(f"{kind}Integer chain: identical {np.mean(diff == 0):.4f}, max {diff.max():.0f} LSB")
    assert diff.max() <= 1 and np.mean(diff == 0) >= 0.99


def test_integer_output_without_dequantizer():
    m, _ = _integer_model("matmul")
    del m.graph.node[-1]
    m.graph.output[0].CopyFrom(helper.make_tensor_value_info("yq", TensorProto.UINT8, ["N", 4]))
    g = import_qop(load(m))
    assert g.outputs[0].integer_output and g.output_specs[0].name == "yq"
    x = np.random.default_rng(1).random((50, 6), dtype=np.float32)
    ref = run_kernels(m, {"x": x})[0]  # as above: |w| <= 60, no saturation; 1 LSB allowed
    got = ig.dequantize_outputs(g, golden.execute(g, ig.quantize_inputs(g, {"x": x})))["yq"]
    assert np.abs(got.astype(int) - ref.astype(int)).max() <= 1


def test_unsupported_op_is_named():
    m, _ = _integer_model("matmul")
    m.graph.node[5].op_type = "Exp"
    m.graph.node[5].name = "act"
    with pytest.raises(ModelError, match=r"'act'.*Exp.*not supported"):
        import_qop(load(m))
