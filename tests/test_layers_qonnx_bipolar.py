"""QONNX bipolar networks (FINN's BNN case, Brevitas w1a1/w1a2): BipolarQuant activations become
one-threshold bipolar activations, bipolar x bipolar products XNOR-popcount, 1-bit weights one
ROM bit each. Truth: the qonnx executor's outputs, written by ``tests/data/make_qonnx_expect.py``
(the Brevitas corpus models are cut before their float last layer, as that script cuts them)."""
from __future__ import annotations

import pathlib

import numpy as np
import onnx
import onnx.utils
import pytest
from onnx import helper

import onnx2hw
from onnx2hw import golden
from onnx2hw import layers as ig
from onnx2hw.build_info import build_info
from onnx2hw.driver import Accelerator
from onnx2hw.dataflow.compile import compile_pipeline
from onnx2hw.dataflow.fold import Budget
from onnx2hw.golden.integer import execute_integer
from onnx2hw.ir import load
from onnx2hw.quant.convert import to_integer_graph
from onnx2hw.rtl.accelerator import AcceleratorCore
from onnx2hw.rtl.mvu import MatrixVectorUnit
from onnx2hw.sim.model_sim import from_transfers, to_transfers
from onnx2hw.sim.pysim import run_stream

pytestmark = pytest.mark.filterwarnings("ignore:.*created but never used")

DATA = pathlib.Path(__file__).resolve().parent / "data"
CORPUS = pathlib.Path(__file__).resolve().parents[1] / "corpus"
EXPECT = np.load(DATA / "qonnx_expect.npz")
CUTS = {"tfc_w1a1": ("brevitas_tfc_w1a1_clean.onnx", "BipolarQuant_7_out0", "brevitas_tfc_w1a1.npz"),
        "cnv_w1a1": ("brevitas_cnv_w1a1_clean.onnx", "BipolarQuant_12_out0", "brevitas_cnv_w1a1.npz"),
        "cnv_w1a2": ("brevitas_cnv_w1a2_clean.onnx", "Quant_6_out0", "brevitas_cnv_w1a2.npz")}
BIG = Budget(83640, 156, 208, "LFE5U-85F")


def cut(name):
    """The corpus model cut at its last quantizer before the float last layer, and its inputs."""
    fname, tensor, npz = CUTS[name]
    m = onnx.load(CORPUS / fname)
    del m.graph.quantization_annotation[:]
    out = onnx.utils.Extractor(m).extract_model([m.graph.input[0].name], [tensor])
    io = {v.name for v in list(out.graph.input) + list(out.graph.output)}
    keep = [v for v in out.graph.value_info if v.name not in io]
    del out.graph.value_info[:]
    out.graph.value_info.extend(keep)
    return out, np.load(CORPUS / npz)["input"].astype(np.float32)


def integer_outputs(g, x):
    """The IntegerGraph's outputs, dequantized, for ``x`` fed one batch at the graph's batch size."""
    name = g.inputs[0].name
    return ig.dequantize_outputs(g, golden.execute(g, ig.quantize_inputs(g, {name: x})))[g.outputs[0].name]


@pytest.mark.parametrize("name", sorted(CUTS))
def test_brevitas_corpus_cut_equals_qonnx_executor(name):
    model, xs = cut(name)
    g = to_integer_graph(load(model))
    got = np.concatenate([integer_outputs(g, x[None]) for x in xs])
    np.testing.assert_array_equal(got, EXPECT[f"{name}/output"])
    linear = [layer for layer in g.layers if isinstance(layer, (ig.Dense, ig.Conv))]
    assert all(layer.w_type.bipolar for layer in linear)
    if name.endswith("w1a1"):    # every activation bipolar, every layer after the first XNOR
        assert all(layer.output.dtype.bipolar and layer.act.bipolar for layer in linear)
        assert all(layer.in_type.bipolar for layer in linear[1:])


@pytest.mark.parametrize("name", ["bnn_mlp", "bnn_cnn", "w1a2_quant1", "negative_bn"])
def test_bipolar_models_equal_qonnx_executor(name):
    g = to_integer_graph(load(onnx.load(DATA / f"qonnx_{name}.onnx")))
    got = integer_outputs(g, EXPECT[f"{name}/input"])
    np.testing.assert_array_equal(got, EXPECT[f"{name}/output"])


def test_bipolar_activation_is_one_exact_threshold():
    """``+1`` exactly where the real accumulator ``scale * a + bias`` is ``>= 0`` (BatchNorm folded)."""
    g = to_integer_graph(load(onnx.load(DATA / "qonnx_bnn_mlp.onnx")))
    layer = g.layers[0]
    assert layer.act.bipolar and layer.act.table.shape[1] == 1 and g.input_specs[0].dtype.bipolar
    t = layer.act.table[:, 0]
    y = layer.act(np.stack([t, t - 1]))
    assert np.all(y[0] == 1) and np.all(y[1] == -1)


def test_mvu_blocks_store_one_bit_weights():
    model, _ = cut("cnv_w1a2")
    p = compile_pipeline(to_integer_graph(load(model)), budget=BIG)
    mvus = [b for s in p.stages for b in s.blocks if b.block is MatrixVectorUnit]
    assert mvus and all(b.params["weight_bits"] == 1 and b.params["weight_bipolar"] for b in mvus)
    model, _ = cut("cnv_w1a1")
    p = compile_pipeline(to_integer_graph(load(model)), budget=BIG)
    mvus = [b for s in p.stages for b in s.blocks if b.block is MatrixVectorUnit]
    assert [b.params["bipolar"] for b in mvus] == [False] + [True] * (len(mvus) - 1)


@pytest.mark.parametrize("name,pause", [("bnn_mlp", "random"), ("bnn_cnn", "3of4"), ("negative_bn", "random")])
def test_bipolar_pipeline_bit_exact_under_backpressure(name, pause):
    """The whole accelerator (Amaranth simulator): bipolar streams in and out, random stalls."""
    g = to_integer_graph(load(onnx.load(DATA / f"qonnx_{name}.onnx")))
    p = compile_pipeline(g, budget=BIG)
    x = ig.quantize_inputs(g, {g.inputs[0].name: EXPECT[f"{name}/input"][:3]})[g.input_specs[0].name]
    want = execute_integer(g, {g.input_specs[0].name: x})[g.output_specs[0].name]
    li, lo = p.input_link, p.output_link
    out, _ = run_stream(AcceleratorCore(p), {"i": to_transfers(x, li.dst_lanes, g.input_specs[0].dtype.bipolar)},
                        {"o": lo.elements // lo.src_lanes * 3}, src_pause=pause, sink_pause=pause, seed=1,
                        check_comb=False, idle_limit=50000)
    np.testing.assert_array_equal(from_transfers(out["o"], 3, g.output_specs[0].shape,
                                                 g.output_specs[0].dtype.bipolar), want)


@pytest.mark.sim
def test_driver_decodes_a_bipolar_output():
    """The host driver (simulated board) returns what the qonnx executor computes: the output
    stream's bipolar codes (1 = +1, 0 = -1) are decoded before dequantizing."""
    g = to_integer_graph(load(onnx.load(DATA / "qonnx_bnn_mlp.onnx")))
    p = compile_pipeline(g, budget=BIG)
    x = EXPECT["bnn_mlp/input"][:3]
    with Accelerator.open(build_info(p, "ulx3s", 75e6, 3e6), "sim", pipeline=p) as acc:
        np.testing.assert_array_equal(acc.run(x), EXPECT["bnn_mlp/output"][:3])


def test_negative_batchnorm_flips_rows_and_refuses_a_requant_by_name():
    """A negative BatchNormalization scale thresholds ``-acc`` (rows negated, 4-bit weights
    widened); a wide output (multiply-and-shift) cannot take it and says so."""
    g = to_integer_graph(load(onnx.load(DATA / "qonnx_negative_bn.onnx")))
    assert g.layers[0].w_type.bipolar and g.layers[1].w_type.bits == 5
    m = onnx.load(DATA / "qonnx_negative_bn.onnx")
    last = m.graph.node[-1]
    bits = next(i for i in m.graph.initializer if i.name == last.input[3])
    bits.CopyFrom(onnx.numpy_helper.from_array(np.array(12.0, np.float32), bits.name))
    with pytest.raises(Exception, match=f"'{last.name}' \\(Quant\\): a negative rescale of the layer"):
        to_integer_graph(load(m))


def test_padding_a_bipolar_input_is_refused_by_name():
    """Zero padding cannot be streamed as a bipolar code (0 is neither -1 nor +1)."""
    from onnx import TensorProto, numpy_helper
    rng = np.random.default_rng(0)
    c = [numpy_helper.from_array(np.asarray(v, np.float32), f"c{i}") for i, v in
         enumerate([1.0, rng.normal(0, 1, (4, 2, 3, 3)), 0.5, 1.0])]
    q = "qonnx.custom_op.general"
    nodes = [helper.make_node("BipolarQuant", ["x", "c0"], ["xb"], domain=q, name="in_q"),
             helper.make_node("BipolarQuant", ["c1", "c2"], ["wb"], domain=q, name="w_q"),
             helper.make_node("Conv", ["xb", "wb"], ["y"], name="conv_pad", pads=[1, 1, 1, 1]),
             helper.make_node("BipolarQuant", ["y", "c3"], ["out"], domain=q, name="out_q")]
    g = helper.make_graph(nodes, "pad", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 6, 6])],
                          [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 4, 6, 6])], c)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid(q, 1)])
    ig_ = to_integer_graph(load(m))
    layer = ig_.layers[0]
    assert layer.in_type.bipolar and layer.output.dtype.bipolar
    assert "zero padding of a bipolar input is not supported" in layer.hardware_problem(list(ig_.input_specs))
    with pytest.raises(Exception, match="zero padding of a bipolar input"):
        compile_pipeline(ig_, budget=BIG)


@pytest.mark.sim
@pytest.mark.parametrize("name", ["tfc_w1a1", "cnv_w1a1"])
def test_brevitas_corpus_cut_simulates_bit_exact(name):
    model, xs = cut(name)
    d = onnx2hw.compile(model)
    got = d.simulate(xs[:2])
    np.testing.assert_array_equal(got[d.graph.output_names[0]], EXPECT[f"{name}/output"][:2])
