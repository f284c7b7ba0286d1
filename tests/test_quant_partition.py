"""The host/hardware partition (onnx2hw.quant.partition): where real exports are cut, that the
host tail round-trips through a build description, and that the golden flow with the tail
returns what the model returns (ONNX semantics checked against onnxruntime / the exporters)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnx2hw
from _oracle import run_kernels, run_spec
from _paths import ROOT
from onnx2hw.build_info import build_info, host_tail
from onnx2hw.flow import integer_graph_of
from onnx2hw.golden import run_node
from onnx2hw.golden.host import execute_batched, model_outputs
from onnx2hw.golden.integer import execute_integer
from onnx2hw.ir import ModelError, Node, UnsupportedError, load
from onnx2hw.ir.save import to_model
from onnx2hw.layers import quantize_inputs
from onnx2hw.quant.partition import split
from onnx2hw.quant.ptq import quantize
from onnx2hw.report import make_report, render_html
from onnx2hw.boards import get_board

CORPUS = ROOT / "corpus"


def _data(name):
    with np.load(CORPUS / f"{name}.npz") as d:
        return {k: d[k] for k in d.files}


def _golden_flow(ig, feeds):
    """The integer core on the host's quantized inputs, then dequantizer and host tail."""
    return model_outputs(ig, execute_integer(ig, quantize_inputs(ig, feeds)))


@pytest.mark.parametrize("file, cut, host_ops", [
    ("torch_mlp_softmax_ts_dyn.onnx", "/net/net.4/Gemm_output_0", ["Softmax"]),
    ("ort_mlp_softmax_qdq.onnx", "/net/net.4/Gemm_output_0_DequantizeLinear_Output", ["Softmax", "QuantizeLinear", "DequantizeLinear"]),
    ("ort_mlp_softmax_qop.onnx", "/net/net.4/Gemm_output_0_quantized", ["QLinearSoftmax", "DequantizeLinear"]),
    ("brevitas_tfc_w2a2_clean.onnx", "Gemm_3_out0", ["Sub", "Div", "Mul", "Add"]),
    ("torch_mlp_sigmoid_ts_dyn.onnx", None, ["Sigmoid"]),
])
def test_where_real_exports_are_cut(file, cut, host_ops):
    parts = split(load(CORPUS / file))
    assert [n.op_type for n in parts.tail.nodes] == host_ops
    if cut is not None:
        assert parts.cut == cut
    assert parts.core.output_names == (parts.cut,)
    assert not {n.name for n in parts.core.nodes} & {n.name for n in parts.tail.nodes}


def test_a_model_ending_in_its_quantizer_keeps_no_tail():
    parts = split(load(ROOT / "examples" / "digits_mlp_int8.onnx"))
    assert parts.tail is None and parts.cut is None


def _chain(*ops, inits=()):
    """x -> Gemm -> ops... -> y (float, 8 features)."""
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Gemm", ["x", "w"], ["t0"], name="fc", transB=1)]
    for i, (op, extra, attrs) in enumerate(ops):
        nodes.append(helper.make_node(op, [f"t{i}", *extra], [f"t{i + 1}"], name=f"n{i}", **attrs))
    nodes[-1].output[0] = "y"
    init = [numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32), "w"), *inits]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8])], init)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_forced_host_nodes_and_errors():
    c = numpy_helper.from_array(np.ones(8, np.float32), "c")
    model = load(_chain(("Relu", [], {}), ("Add", ["c"], {}), ("Softmax", [], {}), inits=[c]))
    assert [n.name for n in split(model).tail.nodes] == ["n1", "n2"]
    assert [n.name for n in split(model, ["n0"]).tail.nodes] == ["n0", "n1", "n2"]
    with pytest.raises(ModelError, match="--host names no node of the model: 'nope'"):
        split(model, ["nope"])
    with pytest.raises(UnsupportedError, match="leaves nothing for the hardware"):
        split(model, ["fc"])


def test_a_forced_tail_may_read_several_tensors():
    """Each tensor the host part reads is an output of the hardware, in the order it is first read."""
    c = numpy_helper.from_array(np.ones(8, np.float32), "c")
    model = _chain(("Relu", [], {}), inits=[c])
    g = model.graph
    g.node.append(helper.make_node("Add", ["t0", "y"], ["z"], name="both"))
    g.node.append(helper.make_node("Softmax", ["z"], ["s"], name="sm"))
    del g.output[:]
    g.output.append(helper.make_tensor_value_info("s", TensorProto.FLOAT, ["N", 8]))
    graph = load(model)
    assert [n.name for n in split(graph).tail.nodes] == ["sm"]   # the two-input Add stays in hardware
    parts = split(graph, ["both"])
    assert [n.name for n in parts.tail.nodes] == ["both", "sm"]
    assert parts.cuts == ("t0", "y") and parts.cut == "t0"
    assert parts.core.output_names == ("t0", "y") and parts.tail.output_names == ("s",)


def test_host_tail_round_trips_through_the_build_description():
    ig = integer_graph_of(load(CORPUS / "brevitas_tfc_w2a2_clean.onnx"))
    info = build_info(onnx2hw.dataflow.compile_pipeline(ig), "ulx3s", 25e6, 3e6)
    back = host_tail(info["quant"])
    assert [n.op_type for n in back.nodes] == [n.op_type for n in ig.tail.nodes]
    x = np.random.default_rng(1).standard_normal((5, 10)).astype(np.float32)
    np.testing.assert_array_equal(execute_batched(back, {"Gemm_3_out0": x})["global_out"],
                                  execute_batched(ig.tail, {"Gemm_3_out0": x})["global_out"])
    bad = dict(info["quant"], tail=dict(info["quant"]["tail"], onnx="bm9wZQ=="))
    with pytest.raises(ValueError, match="host tail"):
        host_tail(bad)


def test_to_model_writes_back_what_it_read():
    graph = load(CORPUS / "ort_mlp_softmax_qop.onnx")
    again = load(to_model(graph))
    assert [(n.op_type, n.domain, dict(n.attrs)) for n in again.nodes] == \
        [(n.op_type, n.domain, dict(n.attrs)) for n in graph.nodes]
    assert again.initializers.keys() == graph.initializers.keys()


def test_brevitas_float_last_layer_streams_its_accumulator():
    """TFC-w2a2: the hardware ends at the last Gemm's integer accumulator; dequantized and
    through TensorNorm on the host, the result is what Brevitas computed in torch."""
    ig = integer_graph_of(load(CORPUS / "brevitas_tfc_w2a2_clean.onnx"))
    spec, dq = ig.output_specs[0], ig.outputs[0]
    assert ig.layers[-1].act is None and spec.dtype.signed and spec.dtype.bits == ig.layers[-1].acc_bits
    assert np.asarray(dq.scale).shape == (10,)
    d = _data("brevitas_tfc_w2a2")
    y = _golden_flow(ig, {"global_in": d["input"].astype(np.float32)})["global_out"]
    np.testing.assert_allclose(y, d["output"], rtol=1e-5, atol=1e-5 * np.abs(d["output"]).max())


def test_fixed_batch_tail_takes_any_number_of_samples():
    d = _data("torch_mlp_softmax")
    x = d["input"].astype(np.float32)
    ig = integer_graph_of(load(CORPUS / "torch_mlp_softmax_ts_b3.onnx"), {"input": x})
    assert ig.tail.inputs[0].shape[0] == 3
    y = _golden_flow(ig, {"input": x[:7]})["output"]
    assert y.shape == (7, 10)
    np.testing.assert_allclose(y.sum(axis=1), 1.0, rtol=1e-6)
    np.testing.assert_allclose(y, d["output"][:7], atol=0.02)


def test_quantized_model_keeps_its_float_tail_and_matches_onnxruntime(tmp_path):
    """``onnx2hw quantize`` of a model with a Softmax head writes the head after the quantized
    core; the golden flow equals onnxruntime (optimizations off) on that QDQ model."""
    d = _data("torch_mlp_softmax")
    x = d["input"].astype(np.float32)
    qdq = quantize(str(CORPUS / "torch_mlp_softmax_ts_dyn.onnx"), {"input": x})
    assert [n.op_type for n in qdq.graph.node][-1] == "Softmax"
    onnx.checker.check_model(qdq)
    ig = integer_graph_of(load(qdq))
    want = run_spec(qdq, {"input": x})[0]
    got = _golden_flow(ig, {"input": x})["output"]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


def test_ort_qdq_softmax_head_against_onnxruntime():
    """ORT's own QDQ export: DQ -> Softmax -> Q -> DQ on the host; one output code of tolerance
    for onnxruntime's Softmax (its exp is not NumPy's)."""
    x = _data("torch_mlp_softmax")["input"].astype(np.float32)
    model = onnx.load(CORPUS / "ort_mlp_softmax_qdq.onnx")
    ig = integer_graph_of(load(model))
    want = run_spec(model, {"input": x})[0]
    got = _golden_flow(ig, {"input": x})["output"]
    step = float(numpy_helper.to_array(next(t for t in model.graph.initializer if t.name == "output_scale")))
    assert np.abs(got - want).max() <= step * 1.001
    assert np.mean(got == want) > 0.99


@pytest.mark.sim
def test_design_simulate_and_driver_return_the_models_outputs():
    """Simulated hardware + host tail = the golden flow, bit for bit; the driver (simulated
    board, tail from the build description) returns the same."""
    d = _data("torch_mlp_softmax")
    x = d["input"].astype(np.float32)
    design = onnx2hw.compile(str(CORPUS / "ort_mlp_softmax_qop.onnx"))
    y = design.simulate({"input": x[:16]})["output"]
    np.testing.assert_array_equal(y, _golden_flow(design.integer, {"input": x[:16]})["output"])
    with onnx2hw.driver.Accelerator.open(design, "sim", baud=design.clock_hz / 4) as acc:
        assert acc.output_names == ("output",)
        np.testing.assert_array_equal(acc.run(x[:3]), y[:3])


@pytest.mark.parametrize("dtype, opset", [(np.uint8, 13), (np.int8, 13), (np.uint8, 12)])
def test_golden_qlinear_softmax_against_onnxruntime(dtype, opset):
    """com.microsoft QLinearSoftmax (the QOperator export's head): the golden's definition
    (dequantize, Softmax, quantize) within one output code of onnxruntime's table kernel."""
    rng = np.random.default_rng(3)
    info = np.iinfo(dtype)
    x = rng.integers(info.min, info.max + 1, (64, 10)).astype(dtype)
    zp_x, zp_y = np.array(3 if dtype == np.uint8 else -2, dtype), np.array(0 if dtype == np.uint8 else -128, dtype)
    xs, ys = np.float32(0.07), np.float32(1 / 256)
    node = helper.make_node("QLinearSoftmax", ["x", "xs", "xz", "ys", "yz"], ["y"], domain="com.microsoft",
                            opset=opset, axis=-1 if opset >= 13 else 1)
    inits = [numpy_helper.from_array(np.asarray(v), n) for n, v in
             (("xs", xs), ("xz", zp_x), ("ys", ys), ("yz", zp_y))]
    onnx_type = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", onnx_type, ["N", 10])],
                          [helper.make_tensor_value_info("y", onnx_type, ["N", 10])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid("com.microsoft", 1)])
    want = run_kernels(m, {"x": x})[0]   # com.microsoft: onnxruntime's kernel is its only spec
    ours = run_node(Node("q", "QLinearSoftmax", "com.microsoft", ("x", "xs", "xz", "ys", "yz"), ("y",),
                         {"opset": opset, "axis": -1 if opset >= 13 else 1}), x, xs, zp_x, ys, zp_y)[0]
    assert ours.dtype == want.dtype
    assert np.abs(ours.astype(np.int64) - want.astype(np.int64)).max() <= 1


def test_report_shows_the_host_part():
    ig = integer_graph_of(load(CORPUS / "brevitas_tfc_w2a2_clean.onnx"))
    p = onnx2hw.dataflow.compile_pipeline(ig)
    board = get_board("ulx3s")
    r = make_report(model="tfc", board=board, pipeline=p, clock_mhz=75.0, fmax_mhz=80.0, util={}, times={},
                    baud=3e6, link_bytes=64)
    assert r["host"]["cut"] == "Gemm_3_out0" and [n["op"] for n in r["host"]["nodes"]] == ["Sub", "Div", "Mul", "Add"]
    assert "On the host</b>, after the hardware’s output Gemm_3_out0: Sub_1 (Sub)" in render_html(r)
