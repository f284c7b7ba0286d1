"""Lookup layer kind: Sigmoid / Tanh / LeakyRelu of a quantized tensor, tabulated per input integer.
Exact against onnxruntime's spec-exact session on the QDQ model, bit-exact in hardware."""
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from _oracle import lsb_apart, run_spec
from onnx2hw import golden
from onnx2hw.dataflow import compile_pipeline
from onnx2hw.golden.integer import execute_integer
from onnx2hw.ir import ModelError, load
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
