"""Lookup layer kind: Sigmoid / Tanh / LeakyRelu of a quantized tensor, tabulated per input integer.
Exact against onnxruntime's spec-exact session on the QDQ model, bit-exact in hardware."""
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from _branch_models import const, qdq, qdq_model
from _oracle import lsb_apart, run_spec
from onnx2hw import golden
from _pysim_check import assert_hardware_is_golden
from onnx2hw.dataflow import compile_pipeline
from onnx2hw.golden.integer import execute_integer
from onnx2hw.ir import ModelError, UnsupportedError, load
from onnx2hw.layers import IntType, TensorSpec, dequantize_outputs, quantize_inputs
from onnx2hw.layers.lookup import Lookup
from onnx2hw.quant import quantize, to_integer_graph
from onnx2hw.rtl.accelerator import AcceleratorCore
from onnx2hw.sim.model_sim import from_transfers, to_transfers
from onnx2hw.sim.pysim import run_stream


def _float_mlp():
    """Gemm(8->12) + Sigmoid + Gemm(12->6) + Tanh + Gemm(6->4) + LeakyRelu(0.1)."""
    rng = np.random.default_rng(7)
    inits, nodes, x = [], [], "x"
    for i, (a, b, act, attrs) in enumerate(((8, 12, "Sigmoid", {}), (12, 6, "Tanh", {}),
                                            (6, 4, "LeakyRelu", {"alpha": 0.1}))):
        inits += [numpy_helper.from_array(rng.normal(0, 1.5 / np.sqrt(a), (b, a)).astype(np.float32), f"w{i}"),
                  numpy_helper.from_array(rng.normal(0, 0.3, b).astype(np.float32), f"b{i}")]
        nodes.append(helper.make_node("Gemm", [x, f"w{i}", f"b{i}"], [f"h{i}"], transB=1, name=f"fc{i}"))
        x = "y" if i == 2 else f"a{i}"
        nodes.append(helper.make_node(act, [f"h{i}"], [x], name=f"act{i}", **attrs))
    g = helper.make_graph(nodes, "acts", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.fixture(scope="module")
def quantized():
    x = np.random.default_rng(0).normal(0, 1, (128, 8)).astype(np.float32)
    q = quantize(_float_mlp(), {"x": x})
    return q, to_integer_graph(load(q)), x


def test_activations_become_exact_tables(quantized):
    q, igraph, x = quantized
    tables = [layer for layer in igraph.layers if isinstance(layer, Lookup)]
    assert [t.name for t in tables] == ["act0", "act1", "act2"]
    for t in tables:
        assert len(t.table) == 256 and np.all(np.diff(t.table) >= 0)  # 8-bit inputs; monotone functions
    want = run_spec(q, {"x": x})[0]
    got = dequantize_outputs(igraph, golden.execute(igraph, quantize_inputs(igraph, {"x": x})))["y"]
    lsb = lsb_apart(got, want, igraph.outputs[0].scale)
    assert lsb.max() <= 1 and np.mean(lsb == 0) >= 0.99, (lsb.max(), np.mean(lsb == 0))


def test_lookups_in_hardware_are_bit_exact(quantized):
    _, igraph, _ = quantized
    p = compile_pipeline(igraph)
    assert [s.op for s in p.stages] == ["dense", "lookup"] * 3
    assert all(s.blocks[0].kind == "LookupUnit" for s in p.stages if s.op == "lookup")
    spec = igraph.input_specs[0]
    n = 6
    xq = np.random.default_rng(3).integers(spec.dtype.lo, spec.dtype.hi + 1, (n,) + spec.shape)
    want = execute_integer(igraph, {spec.name: xq})[igraph.output_specs[0].name]
    li, lo = p.input_link, p.output_link
    out, _ = run_stream(AcceleratorCore(p), {"i": to_transfers(xq, li.dst_lanes)}, {"o": lo.elements // lo.src_lanes * n},
                        src_pause="random", sink_pause="random", seed=4, check_comb=False, idle_limit=1 << 20)
    np.testing.assert_array_equal(from_transfers(out["o"], n, igraph.output_specs[0].shape), want)


def test_wide_input_is_refused_naming_the_layer():
    t16 = IntType(16, True)
    layer = Lookup("wide", ("x",), TensorSpec("y", (4,), IntType(8, True)), np.zeros(1 << 16, np.int64), t16.lo)
    layer.validate([TensorSpec("x", (4,), t16)])
    assert "16-bit input" in layer.hardware_problem([TensorSpec("x", (4,), t16)])


def test_table_must_cover_the_input_type():
    layer = Lookup("short", ("x",), TensorSpec("y", (4,), IntType(8, False)), np.zeros(255, np.int64), 0)
    with pytest.raises(ModelError, match="does not cover input type uint8"):
        layer.validate([TensorSpec("x", (4,), IntType(8, False))])


# ---- more activations: PRelu, Selu, Elu, HardSigmoid, HardSwish, Softplus, Mish, Relu/Clip of a tensor ----

_MORE = (("PRelu", {}), ("Selu", {}), ("Elu", {"alpha": 0.7}), ("HardSigmoid", {"alpha": 0.25, "beta": 0.45}),
         ("HardSwish", {}), ("Softplus", {}), ("Mish", {}))


def _float_chain(acts=_MORE, slope=np.float32(0.2)):
    """Gemm(8->8) + act, for each act, + Gemm(8->4): every activation tabulated from a fresh grid."""
    rng = np.random.default_rng(11)
    inits, nodes, x = [numpy_helper.from_array(np.asarray(slope, np.float32), "slope")], [], "x"
    for i, (act, attrs) in enumerate(acts):
        inits += [numpy_helper.from_array(rng.normal(0, 1.5 / np.sqrt(8), (8, 8)).astype(np.float32), f"w{i}"),
                  numpy_helper.from_array(rng.normal(0, 0.3, 8).astype(np.float32), f"b{i}")]
        nodes.append(helper.make_node("Gemm", [x, f"w{i}", f"b{i}"], [f"h{i}"], transB=1, name=f"fc{i}"))
        ins = [f"h{i}", "slope"] if act == "PRelu" else [f"h{i}"]
        nodes.append(helper.make_node(act, ins, [f"a{i}"], name=f"act{i}", **attrs))
        x = f"a{i}"
    inits += [numpy_helper.from_array(rng.normal(0, 0.5, (4, 8)).astype(np.float32), "wo"),
              numpy_helper.from_array(np.zeros(4, np.float32), "bo")]
    nodes.append(helper.make_node("Gemm", [x, "wo", "bo"], ["y"], transB=1, name="fco"))
    g = helper.make_graph(nodes, "acts2", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)


def test_more_activations_become_exact_tables():
    x = np.random.default_rng(0).normal(0, 1, (128, 8)).astype(np.float32)
    q = quantize(_float_chain(), {"x": x})
    igraph = to_integer_graph(load(q))
    assert [t.name for t in igraph.layers if isinstance(t, Lookup)] == [f"act{i}" for i in range(len(_MORE))]
    # every table entry is the spec's QuantizeLinear(op(DequantizeLinear(q))): the whole chain then
    # matches onnxruntime's spec session up to the dense layers' one-step rounding differences
    want = run_spec(q, {"x": x})[0]
    got = dequantize_outputs(igraph, golden.execute(igraph, quantize_inputs(igraph, {"x": x})))["y"]
    lsb = lsb_apart(got, want, igraph.outputs[0].scale)
    assert lsb.max() <= 1 and np.mean(lsb == 0) >= 0.99, (lsb.max(), np.mean(lsb == 0))
    p = compile_pipeline(igraph)
    assert [s.op for s in p.stages].count("lookup") == len(_MORE)


@pytest.mark.parametrize("op, attrs, fn", [
    ("Selu", {}, lambda v: np.float32(1.05070102214813232421875) * np.where(
        v > 0, v, np.float32(1.67326319217681884765625) * np.expm1(np.minimum(v, 0)))),
    ("HardSwish", {}, lambda v: v * np.clip(v / np.float32(6) + np.float32(0.5), 0, 1)),
    ("Softplus", {}, lambda v: np.log1p(np.exp(v.astype(np.float64))).astype(np.float32)),
    ("Mish", {}, lambda v: (v * np.tanh(np.log1p(np.exp(v.astype(np.float64))))).astype(np.float32)),
    ("Clip", {"bounds": (0.0, 6.0)}, lambda v: np.clip(v, 0, 6)),
    ("Relu", {}, lambda v: np.maximum(v, 0)),
])
def test_table_entries_are_the_quantized_function(op, attrs, fn):
    """DQ -> op -> Q on its own (nothing to fold into): each table entry against the formula of the
    spec in float, within one step where float32 evaluation order could tip a rounding."""
    nodes, inits = [], []
    _, xd = qdq(nodes, inits, "x", "x", 0.05, 100)
    ins = [xd]
    if "bounds" in attrs:
        inits += [const("lo", np.float32(attrs["bounds"][0])), const("hi", np.float32(attrs["bounds"][1]))]
        ins += ["lo", "hi"]
    nodes.append(helper.make_node(op, ins, ["a"], name="act"))
    _, yd = qdq(nodes, inits, "a", "y", 0.03, 20)
    nodes.append(helper.make_node("Identity", [yd], ["out"], name="out"))
    m = qdq_model(nodes, inits, (6,), "out", (6,), opset=18)
    igraph = to_integer_graph(load(m))
    (layer,) = igraph.layers
    assert isinstance(layer, Lookup)
    v = (np.arange(256) - 100).astype(np.float32) * np.float32(0.05)
    want = np.clip(np.rint(fn(v).astype(np.float32) / np.float32(0.03)) + 20, 0, 255)
    assert np.abs(layer.table - want).max() <= 1 and np.mean(layer.table == want) >= 0.98
    # and exactly what onnxruntime's spec session computes for every input code
    codes = (np.arange(256, dtype=np.float32) - 100) * np.float32(0.05)
    got = dequantize_outputs(igraph, golden.execute(igraph, quantize_inputs(igraph, {"x": np.repeat(
        codes[:, None], 6, axis=1)})))["out"]
    np.testing.assert_array_equal(got, run_spec(m, {"x": np.repeat(codes[:, None], 6, axis=1)})[0])


def test_per_channel_prelu_is_one_table_per_channel_and_bit_exact():
    slope = np.linspace(-0.3, 0.4, 8).astype(np.float32)
    x = np.random.default_rng(0).normal(0, 1, (128, 8)).astype(np.float32)
    q = quantize(_float_chain(acts=(("PRelu", {}),), slope=slope), {"x": x})
    igraph = to_integer_graph(load(q))
    (table,) = [layer for layer in igraph.layers if isinstance(layer, Lookup)]
    assert table.table.shape == (8, 256)
    want = run_spec(q, {"x": x})[0]
    got = dequantize_outputs(igraph, golden.execute(igraph, quantize_inputs(igraph, {"x": x})))["y"]
    lsb = lsb_apart(got, want, igraph.outputs[0].scale)
    assert lsb.max() <= 1 and np.mean(lsb == 0) >= 0.99, (lsb.max(), np.mean(lsb == 0))
    p = compile_pipeline(igraph, folding={"act0": (2, 2)})
    assert_hardware_is_golden(p, 5, input_seed=3, seed=4)


def test_prelu_slope_varying_within_a_channel_is_refused():
    nodes, inits = [], []
    _, xd = qdq(nodes, inits, "x", "x", 0.05, 100)
    inits.append(const("slope", np.linspace(0.1, 0.3, 2 * 3 * 4).astype(np.float32).reshape(2, 3, 4)))
    nodes.append(helper.make_node("PRelu", [xd, "slope"], ["a"], name="act"))
    _, yd = qdq(nodes, inits, "a", "y", 0.03, 20)
    nodes.append(helper.make_node("Identity", [yd], ["out"], name="out"))
    m = qdq_model(nodes, inits, (2, 3, 4), "out", (2, 3, 4), opset=17)
    with pytest.raises(UnsupportedError, match=r"node 'act' \(PRelu\): PRelu with a parameter 'slope' .* varies within"):
        to_integer_graph(load(m))


def test_image_prelu_with_a_slope_per_channel_matches_onnxruntime():
    """torch's PReLU(C) exports the slope as (C, 1, 1): one table per channel of the image."""
    nodes, inits = [], []
    _, xd = qdq(nodes, inits, "x", "x", 0.05, 100)
    inits.append(const("slope", np.array([0.1, -0.25], np.float32).reshape(2, 1, 1)))
    nodes.append(helper.make_node("PRelu", [xd, "slope"], ["a"], name="act"))
    _, yd = qdq(nodes, inits, "a", "y", 0.03, 60)
    nodes.append(helper.make_node("Identity", [yd], ["out"], name="out"))
    m = qdq_model(nodes, inits, (2, 3, 4), "out", (2, 3, 4), opset=17)
    igraph = to_integer_graph(load(m))
    (layer,) = igraph.layers
    assert layer.table.shape == (2, 256)
    x = np.random.default_rng(1).uniform(-5, 8, (32, 2, 3, 4)).astype(np.float32)
    got = dequantize_outputs(igraph, golden.execute(igraph, quantize_inputs(igraph, {"x": x})))["out"]
    np.testing.assert_array_equal(got, run_spec(m, {"x": x})[0])
