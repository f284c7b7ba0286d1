"""Post-training quantization (onnx2hw.quant.ptq): QDQ structure, validity, onnxruntime and re-import."""
from __future__ import annotations


import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from _oracle import lsb_apart, run_kernels, run_spec
from _paths import EXAMPLES
from onnx2hw.golden import execute
from onnx2hw.ir import ModelError, UnsupportedError, load
from onnx2hw import layers as ig
from onnx2hw.quant.convert import to_integer_graph
from onnx2hw.quant.ptq import quantize

EX = EXAMPLES
EXAMPLES = {  # model -> (calibration file, test file)
    "digits_mlp": ("digits_calib", "digits_test"),
    "digits_cnn": ("digits_img_calib", "digits_img_test"),
    "digits_cnn_res": ("digits_img_calib", "digits_img_test"),
    "jet_mlp": ("jet_calib", "jet_test"),
}
CONFIGS = {  # id -> quantize() options
    "w8a8": dict(weight_bits=8, act_bits=8),
    "w8a8-pc": dict(weight_bits=8, act_bits=8, per_channel=True),
    "w4a8-pc": dict(weight_bits=4, act_bits=8, per_channel=True),
    "w8a8-pct": dict(weight_bits=8, act_bits=8, method="percentile"),
    "w4a4-pc": dict(weight_bits=4, act_bits=4, per_channel=True),
}


def _npz(name):
    return dict(np.load(EX / f"{name}.npz"))




def _test_feed(name):
    t = _npz(EXAMPLES[name][1])
    key = next(k for k in t if k != "label")
    return key, t[key][:128]


@pytest.fixture(scope="module")
def quantized():
    cache = {}

    def get(name, cfg):
        if (name, cfg) not in cache:
            cache[name, cfg] = quantize(str(EX / f"{name}.onnx"), _npz(EXAMPLES[name][0]), **CONFIGS[cfg])
        return cache[name, cfg]
    return get


@pytest.mark.parametrize("cfg", CONFIGS)
@pytest.mark.parametrize("name", EXAMPLES)
def test_qdq_is_valid_runs_and_reimports_exactly(name, cfg, quantized, record_property, summary):
    model = quantized(name, cfg)
    onnx.checker.check_model(model, full_check=True)
    opset = next(o.version for o in model.opset_import if o.domain == "")
    four = CONFIGS[cfg]["weight_bits"] == 4 or CONFIGS[cfg]["act_bits"] == 4
    assert opset == (21 if four else 17)  # examples are opset 17; 4-bit types need 21
    key, x = _test_feed(name)
    y_ort = run_spec(model, {key: x})[0]
    if CONFIGS[cfg]["act_bits"] == 8 or "cnn" not in name:
        # it also runs with onnxruntime's default graph optimizations (QDQ fused into integer
        # kernels; 4-bit activations into a Conv are the exception: onnxruntime fuses them into a
        # QLinearConv that rejects uint4). Its values are not compared: on x86 CPUs without VNNI
        # those kernels saturate 16-bit pair sums, so they depend on the CPU.
        y_opt = run_kernels(model, {key: x})[0]
        assert y_opt.shape == y_ort.shape and np.isfinite(y_opt).all()
    # re-import through the QDQ importer and run the exact integer graph
    igraph = to_integer_graph(load(model))
    assert igraph.source == "qdq"
    y_int = ig.dequantize_outputs(igraph, execute(igraph, ig.quantize_inputs(igraph, {key: x})))["logits"]
    out = igraph.outputs[0]
    lsb = lsb_apart(y_int, y_ort, out.scale)
    same = float(np.mean(lsb == 0))
    record_property("identical_fraction", same)
    record_property("max_lsb", float(lsb.max()))
    summary(f"ptq-reimport-{name}-{cfg}", f"onnx2hw quantize {name:15s} {cfg:9s} golden IntegerGraph vs onnxruntime: "
            f"{100 * same:6.2f}% identical outputs, max {lsb.max():.0f} LSB")
    assert lsb.max() <= 1 and same >= 0.99, (same, lsb.max())
    # the float golden executor on the QDQ model agrees with onnxruntime too
    y_gold = execute(load(model), {key: x})["logits"]
    assert lsb_apart(y_gold, y_ort, out.scale).max() <= 1



def test_reimport_is_deterministic(tmp_path, quantized):
    a = quantized("digits_cnn_res", "w4a8-pc")
    b = quantize(str(EX / "digits_cnn_res.onnx"), _npz("digits_img_calib"), **CONFIGS["w4a8-pc"])
    assert a.SerializeToString() == b.SerializeToString()
    path = tmp_path / "q.onnx"
    onnx.save(a, path)
    g1, g2 = to_integer_graph(load(path)), to_integer_graph(load(a))
    assert [type(layer).__name__ for layer in g1.layers] == ["Conv", "MaxPool", "Conv", "Add", "Conv", "AvgPool", "Dense"]
    assert _same(g1.layers, g2.layers) and _same(g1.inputs, g2.inputs) and _same(g1.outputs, g2.outputs)


def _same(a, b) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.array_equal(np.asarray(a), np.asarray(b))
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if hasattr(a, "__dataclass_fields__"):
        return type(a) is type(b) and all(_same(getattr(a, f), getattr(b, f)) for f in a.__dataclass_fields__)
    return a == b


def _inits(model):
    return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}


@pytest.mark.parametrize("per_channel", [False, True])
@pytest.mark.parametrize("wbits", [8, 4])
def test_weight_and_bias_encoding(wbits, per_channel, quantized):
    cfg = {(8, False): "w8a8", (8, True): "w8a8-pc", (4, True): "w4a8-pc"}.get((wbits, per_channel))
    if cfg is None:
        model = quantize(str(EX / "digits_cnn.onnx"), _npz("digits_img_calib"), weight_bits=4, per_channel=False)
    else:
        model = quantized("digits_cnn", cfg)
    inits = _inits(model)
    types = {t.name: t.data_type for t in model.graph.initializer}
    qmax = (1 << (wbits - 1)) - 1
    by_out = {n.output[0]: n for n in model.graph.node}
    layers = [n for n in model.graph.node if n.op_type in ("Conv", "Gemm")]
    assert len(layers) == 3
    for node in layers:
        x_dq, w_dq, b_dq = (by_out[i] for i in node.input)
        assert x_dq.op_type == w_dq.op_type == b_dq.op_type == "DequantizeLinear"
        w, ws = inits[w_dq.input[0]], inits[w_dq.input[1]]
        assert types[w_dq.input[0]] == (TensorProto.INT8 if wbits == 8 else TensorProto.INT4)
        assert np.abs(w).max() <= qmax and np.abs(w).max() >= qmax // 2  # narrow range, well used
        assert ws.shape == ((w.shape[0],) if per_channel else ())
        b, bs = inits[b_dq.input[0]], inits[b_dq.input[1]]
        assert types[b_dq.input[0]] == TensorProto.INT32
        s_in = inits[x_dq.input[1]]
        np.testing.assert_array_equal(bs, (s_in * ws).astype(np.float32))  # float32 product, exactly
        assert np.all(np.abs(b.astype(np.int64)) < 2**31)


def test_relu_is_fused_before_the_quantizer(quantized):
    model = quantized("digits_cnn_res", "w8a8")
    readers = {}
    for n in model.graph.node:
        for i in n.input:
            readers.setdefault(i, []).append(n.op_type)
    for n in model.graph.node:
        if n.op_type in ("Conv", "Add") and readers[n.output[0]] == ["Relu"]:
            relu = next(m for m in model.graph.node if m.input and m.input[0] == n.output[0])
            assert readers[relu.output[0]] == ["QuantizeLinear"]
    relus = [n for n in model.graph.node if n.op_type == "Relu"]
    assert len(relus) == 3
    # ReLU outputs are unsigned with zero point 0; the residual conv output (pre-Add) is signed
    inits = _inits(model)
    zps = {n.input[0]: inits[n.input[2]] for n in model.graph.node if n.op_type == "QuantizeLinear"}
    for r in relus:
        assert zps[r.output[0]].dtype == np.uint8 and zps[r.output[0]] == 0
    assert zps["res_conv_out"].dtype == np.int8


def _tiny_model(nodes, inits, x_shape, y_shape, opset=13):
    g = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)],
                          [numpy_helper.from_array(np.asarray(v, np.float32) if np.asarray(v).dtype.kind == "f"
                                                   else np.asarray(v), k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    onnx.checker.check_model(m, full_check=True)
    return m


def _float_vs_quant(model, x, calib, **kw):
    q = quantize(model, {"x": calib}, **kw)
    onnx.checker.check_model(q, full_check=True)
    y_f = run_spec(model, {"x": x})[0]
    y_q = run_spec(q, {"x": x})[0]
    return q, y_f, y_q


def test_batchnorm_folding_and_op_coverage():
    """Conv -> BN -> Clip(0, 6) -> AveragePool -> Identity -> Conv -> BN -> Relu -> MaxPool -> Reshape ->
    Gemm(transB=0, alpha, beta) -> BN -> Relu -> MatMul -> Relu: close to float, no BN left."""
    rng = np.random.default_rng(1)
    c = lambda *s: rng.standard_normal(s).astype(np.float32) * 0.3  # noqa: E731
    bn = lambda n, ch: {f"{n}.s": 1 + 0.2 * c(ch), f"{n}.b": c(ch), f"{n}.m": c(ch),  # noqa: E731
                        f"{n}.v": 0.5 + np.abs(c(ch))}
    inits = {"w1": c(4, 2, 3, 3), "b1": c(4), "w2": c(6, 4, 3, 3), "g": c(24, 5), "gb": c(5), "mm": c(5, 3),
             "lo": np.float32(0), "hi": np.float32(6), "shape": np.array([0, -1], np.int64),
             **bn("bn1", 4), **bn("bn2", 6), **bn("bn3", 5)}
    mk = helper.make_node
    nodes = [mk("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             mk("BatchNormalization", ["c1", "bn1.s", "bn1.b", "bn1.m", "bn1.v"], ["n1"], name="bn1"),
             mk("Clip", ["n1", "lo", "hi"], ["r1"], name="clip1"),
             mk("AveragePool", ["r1"], ["p1"], name="avg", kernel_shape=[2, 2], strides=[1, 1]),
             mk("Identity", ["p1"], ["p1i"], name="ident"),
             mk("Conv", ["p1i", "w2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
             mk("BatchNormalization", ["c2", "bn2.s", "bn2.b", "bn2.m", "bn2.v"], ["n2"], name="bn2"),
             mk("Relu", ["n2"], ["r2"], name="relu2"),
             mk("MaxPool", ["r2"], ["p2"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
             mk("Reshape", ["p2", "shape"], ["f"], name="reshape"),
             mk("Gemm", ["f", "g", "gb"], ["d"], name="fc", alpha=0.5, beta=2.0),
             mk("BatchNormalization", ["d", "bn3.s", "bn3.b", "bn3.m", "bn3.v"], ["n3"], name="bn3"),
             mk("Relu", ["n3"], ["r3"], name="relu3"),
             mk("MatMul", ["r3", "mm"], ["m"], name="mm"),
             mk("Relu", ["m"], ["y"], name="relu_out")]
    model = _tiny_model(nodes, inits, ["N", 2, 5, 5], ["N", 3])
    x = rng.standard_normal((64, 2, 5, 5)).astype(np.float32)
    q, y_f, y_q = _float_vs_quant(model, x, x, weight_bits=8, per_channel=True)
    ops = [n.op_type for n in q.graph.node]
    assert "BatchNormalization" not in ops and "Identity" not in ops
    assert ops.count("Conv") == 2 and ops.count("Gemm") == 1 and ops.count("MatMul") == 1
    err = np.abs(y_f - y_q).max() / np.abs(y_f).max()
    assert err < 0.05, err
    # the MatMul weight is quantized per output column (axis 1)
    dq = {n.output[0]: n for n in q.graph.node}
    mm = next(n for n in q.graph.node if n.op_type == "MatMul")
    assert [a.i for a in dq[mm.input[1]].attribute if a.name == "axis"] == [1]


def test_percentile_ranges_are_within_minmax():
    rng = np.random.default_rng(2)
    model = _tiny_model([helper.make_node("Gemm", ["x", "w", "b"], ["y"], name="fc", transB=1)],
                        {"w": rng.standard_normal((4, 8)), "b": np.zeros(4)}, ["N", 8], ["N", 4])
    x = rng.standard_normal((4000, 8)).astype(np.float32)
    x[0, 0] = 1000.0  # one outlier
    scales = {}
    for method in ("minmax", "percentile"):
        q = quantize(model, {"x": x}, method=method)
        scales[method] = float(_inits(q)["x_scale"])
    assert scales["minmax"] == pytest.approx(1000.0 / 127, rel=1e-6)
    assert scales["percentile"] < scales["minmax"] / 50


def test_tiny_dead_channel_and_large_bias_stay_representable():
    rng = np.random.default_rng(3)
    w = rng.standard_normal((4, 8)).astype(np.float32)
    w[1] = 1e-12  # a dead unit
    b = np.array([0.1, 5.0, -0.2, 0.0], np.float32)
    model = _tiny_model([helper.make_node("Gemm", ["x", "w", "b"], ["y"], name="fc", transB=1)],
                        {"w": w, "b": b}, ["N", 8], ["N", 4])
    x = rng.standard_normal((256, 8)).astype(np.float32)
    q, y_f, y_q = _float_vs_quant(model, x, x, per_channel=True)
    dq = {n.output[0]: n for n in q.graph.node}
    gemm = next(n for n in q.graph.node if n.op_type == "Gemm")
    ws = _inits(q)[dq[gemm.input[1]].input[1]]
    assert ws[1] >= ws.max() / 2**10
    assert np.abs(y_f - y_q).max() < 0.05 * np.abs(y_f).max()
    igraph = to_integer_graph(load(q))
    assert igraph.layers[0].acc_bits <= 32


def test_all_zero_calibration_is_rejected_naming_the_tensor():
    model = onnx.load(EX / "digits_mlp.onnx")
    with pytest.raises(ModelError, match=r"'input' is zero for every calibration sample"):
        quantize(model, {"input": np.zeros((10, 64), np.float32)})


@pytest.mark.parametrize("op", ["Sin", "Exp"])
def test_unsupported_layer_names_the_node(op):
    rng = np.random.default_rng(4)
    model = _tiny_model([helper.make_node("Gemm", ["x", "w", "b"], ["h"], name="fc", transB=1),
                         helper.make_node(op, ["h"], ["y"], name="bad_act")],
                        {"w": rng.standard_normal((4, 8)), "b": np.zeros(4)}, ["N", 8], ["N", 4])
    with pytest.raises(UnsupportedError, match=rf"node 'bad_act' \({op}\) is not supported"):
        quantize(model, {"x": np.ones((4, 8), np.float32)})


def test_batchnorm_of_the_model_input_alone_is_a_diagonal_dense_layer():
    """A normalization of the model input that no layer after it can take in is a layer of its own
    (onnx2hw.canon.affine: a Gemm with the weight diag(k)); the quantized model computes it within
    two output steps of the float one."""
    rng = np.random.default_rng(3)
    bn = {"s": rng.uniform(0.5, 2, 8), "b": rng.standard_normal(8), "m": rng.standard_normal(8),
          "v": rng.uniform(0.5, 2, 8)}
    model = _tiny_model([helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], name="bn0")],
                        bn, ["N", 8], ["N", 8])
    x = rng.standard_normal((32, 8)).astype(np.float32)
    q = quantize(model, {"x": x})
    assert "Gemm" in [n.op_type for n in q.graph.node]
    want = run_spec(model, {"x": x})[0]
    got = run_spec(q, {"x": x})[0]
    step = float(np.ptp(want)) / 255
    assert np.abs(got - want).max() <= 2 * step


def test_constant_add_after_an_activation_folds_into_the_next_layer():
    """Between two dense layers, after an activation, a constant Add folds into the next layer's
    bias (onnx2hw.canon.affine: b' = b + c W); one right after a layer folds into its bias."""
    rng = np.random.default_rng(5)
    model = _tiny_model([helper.make_node("Gemm", ["x", "w", "b"], ["g"], name="fc", transB=1),
                         helper.make_node("Relu", ["g"], ["h"], name="relu"),
                         helper.make_node("Add", ["h", "c"], ["a"], name="add_const"),
                         helper.make_node("Gemm", ["a", "w2"], ["y"], name="fc2", transB=1)],
                        {"w": rng.standard_normal((4, 8)), "b": np.zeros(4), "c": np.arange(4.0),
                         "w2": rng.standard_normal((4, 4))}, ["N", 8], ["N", 4])
    q = quantize(model, {"x": rng.standard_normal((16, 8)).astype(np.float32)})
    gemms = [n for n in q.graph.node if n.op_type == "Gemm"]
    assert [n.name for n in gemms] == ["fc", "fc2"]


def test_quantized_model_is_rejected():
    with pytest.raises(ModelError, match="already quantized"):
        quantize(str(EX / "digits_mlp_int8.onnx"), _npz("digits_calib"))


@pytest.mark.parametrize("kw", [dict(weight_bits=3), dict(weight_bits=16), dict(act_bits=2), dict(act_bits=True),
                                dict(method="entropy")])
def test_bad_options(kw):
    with pytest.raises(ValueError, match="must be one of"):
        quantize(str(EX / "digits_mlp.onnx"), _npz("digits_calib"), **kw)


def test_committed_qdq_examples_are_current():
    """examples/*_int8 / *_w4a8 are what `onnx2hw quantize --per-channel` writes today."""
    for name in ("digits_mlp", "digits_cnn", "digits_cnn_res"):
        for tag, wbits in (("int8", 8), ("w4a8", 4)):
            fresh = quantize(str(EX / f"{name}.onnx"), _npz(EXAMPLES[name][0]), weight_bits=wbits, per_channel=True)
            committed = onnx.load(EX / f"{name}_{tag}.onnx")
            assert _inits(fresh).keys() == _inits(committed).keys()
            for k, v in _inits(fresh).items():
                np.testing.assert_array_equal(v, _inits(committed)[k], err_msg=f"{name}_{tag}: {k}")


def test_two_inputs_and_batch_mismatch():
    rng = np.random.default_rng(6)
    g = helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["s"], name="add"),
         helper.make_node("Gemm", ["s", "w", "bias"], ["y"], name="fc", transB=1)], "two",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["N", 8]) for n in ("a", "b")],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])],
        [numpy_helper.from_array(rng.standard_normal((3, 8)).astype(np.float32), "w"),
         numpy_helper.from_array(np.zeros(3, np.float32), "bias")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    a, b = rng.standard_normal((2, 64, 8)).astype(np.float32)
    q = quantize(model, {"a": a, "b": b})
    y_f = run_spec(model, {"a": a, "b": b})[0]
    y_q = run_spec(q, {"a": a, "b": b})[0]
    assert np.abs(y_f - y_q).max() < 0.05 * np.abs(y_f).max()
    with pytest.raises(ModelError, match="disagree on the number of samples"):
        quantize(model, {"a": a, "b": b[:10]})


def test_progress_bar_appears_only_when_calibration_is_slow():
    from onnx2hw.quant.calib import _Progress

    fast = _Progress(100, True, after=1e9)
    fast.update(50)
    assert fast.bar is None
    off = _Progress(100, False, after=0.0)
    off.update(50)
    assert off.bar is None
    slow = _Progress(100, True, after=0.0)
    slow.update(50)
    assert slow.bar is not None
    slow.close()


@pytest.mark.parametrize("layer", ["gemm", "conv"])
def test_keras_batchnorm_as_mul_and_add_folds_into_the_layer(layer):
    """tf2onnx writes Keras' BatchNormalization after a Dense/Conv as Mul(scale) then
    Add(shift) of per-channel constants: both fold into the layer (no Mul/Add in the QDQ model),
    and the integer graph equals onnxruntime (optimizations off) on that QDQ model."""
    rng = np.random.default_rng(9)
    if layer == "gemm":
        nodes = [helper.make_node("Gemm", ["x", "w", "b"], ["g"], name="fc", transB=1)]
        inits = {"w": rng.standard_normal((6, 8)), "b": rng.standard_normal(6),
                 "m": rng.uniform(-2, 2, 6), "c": rng.standard_normal((1, 6))}
        xs, ys = ["N", 8], ["N", 6]
        x = rng.standard_normal((32, 8)).astype(np.float32)
    else:
        nodes = [helper.make_node("Conv", ["x", "w", "b"], ["g"], name="conv", pads=[1, 1, 1, 1])]
        inits = {"w": rng.standard_normal((6, 2, 3, 3)), "b": rng.standard_normal(6),
                 "m": rng.uniform(-2, 2, (6, 1, 1)), "c": rng.standard_normal((1, 6, 1, 1))}
        xs, ys = ["N", 2, 5, 5], ["N", 6, 5, 5]
        x = rng.standard_normal((32, 2, 5, 5)).astype(np.float32)
    nodes += [helper.make_node("Mul", ["g", "m"], ["s"], name="bn_mul"),
              helper.make_node("Add", ["s", "c"], ["t"], name="bn_add"),
              helper.make_node("Relu", ["t"], ["y"], name="relu")]
    model = _tiny_model(nodes, inits, xs, ys)
    q, y_f, y_q = _float_vs_quant(model, x, x)
    assert not {"Mul", "Add"} & {n.op_type for n in q.graph.node}
    g = to_integer_graph(load(q))
    xi = ig.quantize_inputs(g, {"x": x})
    got = ig.dequantize_outputs(g, execute(g, xi))["y"]
    np.testing.assert_array_equal(got, y_q)
    assert np.abs(y_q - y_f).max() < 0.05 * np.abs(y_f).max()


def test_a_constant_along_width_is_not_folded_as_per_channel():
    """(C,) against a Conv's (N, C, H, W) output broadcasts along W, not channels: not folded."""
    rng = np.random.default_rng(1)
    model = _tiny_model([helper.make_node("Conv", ["x", "w", "b"], ["g"], name="conv"),
                         helper.make_node("Add", ["g", "c"], ["a"], name="add_w"),
                         helper.make_node("Relu", ["a"], ["y"], name="relu")],
                        {"w": rng.standard_normal((3, 1, 1, 1)), "b": np.zeros(3), "c": rng.standard_normal(4)},
                        ["N", 1, 4, 4], ["N", 3, 4, 4])
    with pytest.raises(UnsupportedError, match="'add_w'"):
        quantize(model, {"x": rng.standard_normal((8, 1, 4, 4)).astype(np.float32)})


@pytest.mark.parametrize("factor, fused", [([0.5, 2.0, 4.0], True), (3.0, True), ([0.5, -2.0, 4.0], False)])
def test_a_positive_rescale_after_a_matmul_shares_its_quantizer(factor, fused):
    """MatMul -> Mul(constant) -> Relu: a positive scalar or per-channel factor joins the MatMul's
    unit (no quantizer between; the importer folds it into the requantization scale), any other
    factor is a unit of its own; the integer graph equals onnxruntime on the QDQ written."""
    rng = np.random.default_rng(3)
    model = _tiny_model([helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
                         helper.make_node("Mul", ["h", "k"], ["s"], name="rescale"),
                         helper.make_node("Relu", ["s"], ["y"], name="relu")],
                        {"w": rng.standard_normal((8, 3)), "k": np.asarray(factor, np.float32)}, ["N", 8], ["N", 3])
    x = rng.standard_normal((32, 8)).astype(np.float32)
    q, y_f, y_q = _float_vs_quant(model, x, x)
    reader = {i: n.op_type for n in q.graph.node for i in n.input}
    assert reader["h_preact"] == "Mul" if fused else reader["h"] == "QuantizeLinear"
    g = to_integer_graph(load(q))
    got = ig.dequantize_outputs(g, execute(g, ig.quantize_inputs(g, {"x": x})))["y"]
    assert lsb_apart(got, y_q, g.outputs[0].scale).max() <= 1


def test_an_opset7_upsample_is_written_as_resize_and_a_linear_one_is_refused():
    rng = np.random.default_rng(6)
    x = rng.standard_normal((16, 2, 3, 3)).astype(np.float32)
    model = _tiny_model([helper.make_node("Upsample", ["x"], ["u"], name="up", scales=[1.0, 1.0, 2.0, 2.0]),
                         helper.make_node("Relu", ["u"], ["y"], name="relu")], {}, ["N", 2, 3, 3], ["N", 2, 6, 6],
                        opset=7)
    q, y_f, y_q = _float_vs_quant(model, x, x)
    resize = next(n for n in q.graph.node if n.op_type == "Resize")
    assert "Upsample" not in {n.op_type for n in q.graph.node}
    np.testing.assert_array_equal(_inits(q)[resize.input[2]], [1, 1, 2, 2])
    assert np.abs(y_q - y_f).max() < 0.02 * np.abs(y_f).max()
    model = _tiny_model([helper.make_node("Upsample", ["x", "s"], ["y"], name="up_lin", mode="linear")],
                        {"s": np.asarray([1, 1, 2, 2], np.float32)}, ["N", 2, 3, 3], ["N", 2, 6, 6], opset=9)
    with pytest.raises(UnsupportedError, match=r"^node 'up_lin' \(Upsample\): mode 'linear' is not supported"):
        quantize(model, {"x": x})
