"""QONNX Quant on layer outputs with every rounding mode qonnx defines, narrow ranges, per-channel
scales, and FINN's MultiThreshold: the IntegerGraph and the golden float execution both equal the
qonnx executor's outputs (written by ``tests/data/make_qonnx_expect.py``); rounding and the
MultiThreshold formula are also checked against int64 / exact formulas written here from
qonnx's definitions (``qonnx.custom_op.general.intquant.resolve_rounding_mode``,
``multithreshold.multithreshold``)."""
from __future__ import annotations

import pathlib

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnx2hw import arith, golden
from onnx2hw import layers as ig
from onnx2hw.dataflow.compile import compile_pipeline
from onnx2hw.dataflow.fold import Budget
from onnx2hw.golden.integer import execute_integer
from onnx2hw.ir import ModelError, load
from onnx2hw.quant.convert import to_integer_graph
from onnx2hw.rtl.accelerator import AcceleratorCore
from onnx2hw.sim.model_sim import from_transfers, to_transfers
from onnx2hw.sim.pysim import run_stream

pytestmark = pytest.mark.filterwarnings("ignore:.*created but never used")

DATA = pathlib.Path(__file__).resolve().parent / "data"
EXPECT = np.load(DATA / "qonnx_expect.npz")
MODES = ("ROUND", "HALF_EVEN", "CEIL", "FLOOR", "UP", "DOWN", "HALF_UP", "HALF_DOWN")
ROUNDING = [f"round_{m.lower()}" for m in MODES] + ["round_half_up_unsigned"]
TRUNC = ["trunc_v1_floor", "trunc_v1_round", "trunc_v2_floor", "trunc_v2_ceil"]
PER_CHANNEL = ["per_channel_thresholds", "per_channel_requant", "per_channel_conv"]
MULTI = ["multithreshold_finn", "multithreshold_qonnx"]
BIG = Budget(83640, 156, 208, "LFE5U-85F")
QONNX = "qonnx.custom_op.general"


def _model(name):
    return load(onnx.load(DATA / f"qonnx_{name}.onnx"))


def _integer(g, x):
    return ig.dequantize_outputs(g, golden.execute(g, ig.quantize_inputs(g, {g.inputs[0].name: x})))[
        g.outputs[0].name]


@pytest.mark.parametrize("name", ROUNDING + PER_CHANNEL + MULTI + TRUNC)
def test_integer_graph_and_golden_equal_qonnx_executor(name):
    graph = _model(name)
    x, want = EXPECT[f"{name}/input"], EXPECT[f"{name}/output"]
    np.testing.assert_array_equal(golden.execute(graph, {"x": x})[graph.output_names[0]], want)
    g = to_integer_graph(graph)
    np.testing.assert_array_equal(_integer(g, x), want)


def test_rounding_cases_have_ties_and_take_the_expected_path():
    """The rounding models really hit ties (real outputs on half LSBs), and only an unsigned
    HALF_UP output uses the multiply-and-shift Requant (its ties are all non-negative)."""
    for name in ROUNDING:
        g = to_integer_graph(_model(name))
        layer = g.layers[0]
        want = ig.Requant if name == "round_half_up_unsigned" else ig.Thresholds
        assert isinstance(layer.act, want), name
    x = EXPECT["round_round/input"].astype(np.float64)
    w = _model("round_round").initializers
    assert any(np.any(np.abs(np.asarray(v)) > 0) for v in w.values())
    # x on a 1/16 grid, weights on 1/16: the real output is k/256 = (k/2) output LSBs of 1/128
    frac = (EXPECT["round_floor/output"] * 128) % 1
    assert np.all(frac == 0)
    diff = EXPECT["round_ceil/output"] != EXPECT["round_floor/output"]
    assert diff.any() and (EXPECT["round_half_up/output"] != EXPECT["round_half_down/output"]).any()
    assert (EXPECT["round_half_even/output"] != EXPECT["round_half_up/output"]).any()


def _qonnx_formula(x, mode):
    """qonnx's resolve_rounding_mode, written out (exact on these dyadic values)."""
    return {"ROUND": np.round, "HALF_EVEN": np.round, "CEIL": np.ceil, "FLOOR": np.floor,
            "UP": lambda v: np.sign(v) * np.ceil(np.abs(v)), "DOWN": np.fix,
            "HALF_UP": lambda v: np.sign(v) * np.floor(np.abs(v) + 0.5),
            "HALF_DOWN": lambda v: np.sign(v) * np.ceil(np.abs(v) - 0.5)}[mode](x)


@pytest.mark.parametrize("mode", MODES)
def test_qonnx_round_equals_qonnx_definition(mode):
    x = np.arange(-400, 401) / 8.0           # every eighth: ties, quarters, integers, zero
    np.testing.assert_array_equal(arith.qonnx_round(x, mode), _qonnx_formula(x, mode))
    np.testing.assert_array_equal(arith.qonnx_round(x, mode.lower()), _qonnx_formula(x, mode))


def test_brevitas_round_to_zero_is_truncation_and_unknown_modes_are_named():
    x = np.arange(-40, 41) / 4.0
    np.testing.assert_array_equal(arith.qonnx_round(x, "ROUND_TO_ZERO"), np.trunc(x))
    with pytest.raises(ValueError, match="unknown rounding_mode 'STOCHASTIC'"):
        arith.qonnx_round(x, "STOCHASTIC")


def test_per_channel_quantizers_keep_their_channel_scales():
    g = to_integer_graph(_model("per_channel_requant"))
    act = g.layers[0].act
    assert isinstance(act, ig.Requant) and act.channels == 6
    np.testing.assert_array_equal(np.asarray(g.outputs[0].scale), 2.0 ** -np.arange(3, 9))
    g = to_integer_graph(_model("per_channel_thresholds"))
    np.testing.assert_array_equal(np.asarray(g.outputs[0].zero_point), np.arange(6))


@pytest.mark.parametrize("name", ["per_channel_requant", "per_channel_thresholds", "multithreshold_finn"])
def test_pipeline_bit_exact_under_backpressure(name):
    """The hardware of these layers against the golden integer graph (itself equal to qonnx)."""
    g = to_integer_graph(_model(name))
    p = compile_pipeline(g, budget=BIG)
    x = ig.quantize_inputs(g, {g.inputs[0].name: EXPECT[f"{name}/input"][:4]})[g.input_specs[0].name]
    want = execute_integer(g, {g.input_specs[0].name: x})[g.output_specs[0].name]
    li, lo = p.input_link, p.output_link
    out, _ = run_stream(AcceleratorCore(p), {"i": to_transfers(x, li.dst_lanes)}, {"o": lo.elements // lo.src_lanes * 4},
                        src_pause="random", sink_pause="random", seed=3, check_comb=False, idle_limit=20000)
    np.testing.assert_array_equal(from_transfers(out["o"], 4, g.output_specs[0].shape), want)


def test_per_channel_scales_feeding_a_layer_are_refused_by_name():
    m = onnx.load(DATA / "qonnx_per_channel_thresholds.onnx")
    out = m.graph.output[0].name
    w = numpy_helper.from_array(np.full((6, 3), 0.25, np.float32), "w2")
    m.graph.initializer.append(w)
    m.graph.node.append(helper.make_node("MatMul", [out, "w2"], ["y2"], name="next_layer"))
    del m.graph.output[:]
    m.graph.output.append(helper.make_tensor_value_info("y2", TensorProto.FLOAT, [64, 3]))
    with pytest.raises(ModelError, match="per-channel activation scales can only feed a model output, not node "
                                         "'next_layer' \\(MatMul\\)"):
        to_integer_graph(load(m))


def _mt_model(thresholds, out_scale, out_bias, layout=None, domain="finn.custom_op.general"):
    """Quant(x, 1, 4 bits unsigned) @ integer weights -> MultiThreshold."""
    rng = np.random.default_rng(5)
    w = rng.integers(-3, 4, (5, 4)).astype(np.float32)
    inits = [numpy_helper.from_array(np.asarray(v, np.float32), n) for n, v in
             (("s", 1.0), ("z", 0.0), ("b4", 4.0), ("b3", 3.0), ("w", w), ("t", thresholds))]
    attrs = dict(out_dtype="INT4", out_scale=out_scale, out_bias=out_bias)
    if layout:
        attrs["data_layout"] = layout
    nodes = [helper.make_node("Quant", ["x", "s", "z", "b4"], ["xq"], domain=QONNX, name="xq", signed=0),
             helper.make_node("Quant", ["w", "s", "z", "b3"], ["wq"], domain=QONNX, name="wq", signed=1),
             helper.make_node("MatMul", ["xq", "wq"], ["acc"], name="mm"),
             helper.make_node("MultiThreshold", ["acc", "t"], ["y"], domain=domain, name="mt", **attrs)]
    g = helper.make_graph(nodes, "mt", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [32, 5])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [32, 4])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid(QONNX, 1),
                                            helper.make_opsetid(domain, 1)])
    return load(m), w.astype(np.int64)


def test_multithreshold_one_step_is_a_bipolar_activation():
    """``out_scale = 2, out_bias = -1`` with one threshold: y = +-1 = 2 * (acc >= T) - 1 (int64 formula)."""
    t = np.array([[-3.5], [0.0], [2.0], [6.5]])
    graph, w = _mt_model(t, 2.0, -1.0)
    g = to_integer_graph(graph)
    assert g.layers[0].output.dtype.bipolar and g.layers[0].act.bipolar
    xi = np.random.default_rng(6).integers(0, 16, (32, 5))
    acc = xi @ w
    want = (2 * (acc >= t[:, 0]) - 1).astype(np.float32)
    np.testing.assert_array_equal(_integer(g, xi.astype(np.float32)), want)
    np.testing.assert_array_equal(golden.execute(graph, {"x": xi.astype(np.float32)})["y"], want)


def test_multithreshold_formula_with_unsorted_rows_and_global_thresholds():
    """One threshold row for all channels, not sorted: y = out_scale * count(acc >= T) + out_bias."""
    t = np.array([[4.0, -2.0, 9.0]])
    graph, w = _mt_model(t, 0.5, 1.0)
    xi = np.random.default_rng(7).integers(0, 16, (32, 5))
    acc = xi @ w
    want = (0.5 * (acc[..., None] >= t[0]).sum(-1) + 1.0).astype(np.float32)
    np.testing.assert_array_equal(golden.execute(graph, {"x": xi.astype(np.float32)})["y"], want)
    np.testing.assert_array_equal(_integer(to_integer_graph(graph), xi.astype(np.float32)), want)


@pytest.mark.parametrize("kw,match", [
    (dict(out_scale=0.5, out_bias=0.25), "out_bias / out_scale = 0.5 is not an integer"),
    (dict(out_scale=-1.0, out_bias=0.0), "out_scale -1.0 must be positive"),
    (dict(out_scale=1.0, out_bias=0.0, layout="NWC"), "data_layout 'NWC' is not supported"),
])
def test_multithreshold_refusals_are_named(kw, match):
    graph, _ = _mt_model(np.zeros((4, 2)), **kw)
    with pytest.raises(ModelError, match=f"'mt' \\(MultiThreshold\\): {match}"):
        to_integer_graph(graph)
