"""Depthwise and grouped convolution (Conv with group > 1) in every flavour: QDQ graphs built with
onnx.helper against onnxruntime's spec-exact session and an int64 formula of the accumulator,
QLinearConv (QOperator) against the spec-exact QDQ twin, QONNX average pools (depthwise convs with
thresholds) against the QONNX float semantics, a float depthwise-separable net through
``onnx2hw.compile(..., calib=...)``; the hardware bit-exact under random backpressure."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnx2hw
from _oracle import lsb_apart, run_spec
from _sim_fixtures import require_simulator
from onnx2hw import golden
from _pysim_check import assert_hardware_is_golden
from onnx2hw.dataflow import compile_pipeline
from onnx2hw.ir import UnsupportedError, load
from onnx2hw.layers import Conv, IntType, dequantize_outputs, quantize_inputs
from onnx2hw.layers.types import acc_bits_for
from onnx2hw.quant import quantize, to_integer_graph
from test_quant_import_qonnx import _Q, qonnx_cnn

SX, ZX, SY, ZY = 0.02, 7, 0.05, 120


def _arr(name, a):
    return numpy_helper.from_array(np.asarray(a), name)


def qdq_conv(c, mult, group, kernel, *, strides=None, pads=None, seed=0, relu=False, per_channel=True):
    """x -> Q/DQ (uint8) -> Conv(group) with int8 weights (DQ, per channel) and int32 bias (DQ)
    -> [Relu] -> Q/DQ (uint8). ``kernel`` of one entry: a 1-D convolution on (N, C, 9)."""
    rng = np.random.default_rng(seed)
    cout = c * mult
    cg = c // group
    spatial = (9,) if len(kernel) == 1 else (7, 6)
    wq = rng.integers(-127, 128, (cout, cg) + tuple(kernel)).astype(np.int8)
    sw = (rng.uniform(0.002, 0.01, cout) if per_channel else np.float32(0.006)).astype(np.float32)
    bq = rng.integers(-2000, 2000, cout).astype(np.int32)
    sb = (np.float32(SX) * sw).astype(np.float32).reshape(-1)
    inits = [_arr("sx", np.float32(SX)), _arr("zx", np.uint8(ZX)), _arr("sy", np.float32(SY)), _arr("zy", np.uint8(ZY)),
             _arr("wq", wq), _arr("sw", sw), _arr("bq", bq), _arr("sb", sb)]
    attrs = dict(group=group, kernel_shape=list(kernel))
    if strides:
        attrs["strides"] = list(strides)
    if pads:
        attrs["pads"] = list(pads)
    nodes = [helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"], name="qx"),
             helper.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["xd"], name="dqx"),
             helper.make_node("DequantizeLinear", ["wq", "sw"], ["w"], name="dqw", axis=0),
             helper.make_node("DequantizeLinear", ["bq", "sb"], ["b"], name="dqb", axis=0),
             helper.make_node("Conv", ["xd", "w", "b"], ["conv"], name="conv", **attrs)]
    last = "conv"
    if relu:
        nodes.append(helper.make_node("Relu", ["conv"], ["relu"], name="relu"))
        last = "relu"
    nodes += [helper.make_node("QuantizeLinear", [last, "sy", "zy"], ["yq"], name="qy"),
              helper.make_node("DequantizeLinear", ["yq", "sy", "zy"], ["y"], name="dqy")]
    p2 = list(pads or [0] * 2 * len(kernel))
    st = list(strides or [1] * len(kernel))
    out = [(d + p2[i] + p2[i + len(kernel)] - kernel[i]) // st[i] + 1 for i, d in enumerate(spatial)]
    g = helper.make_graph(nodes, "gconv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", c, *spatial])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", cout, *out])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m, full_check=True)
    return m, (wq, bq)


def _inputs(model, n, seed):
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim[1:]]
    return np.random.default_rng(seed).uniform(-0.3, 4.5, (n, *shape)).astype(np.float32)


def _accumulator_formula(xq, wq, bq, group, strides, pads):
    """int64 grouped convolution of the uint8 codes ``xq`` (N, C, H, W) from the ONNX definition:
    ``sum (x - zx) * w + b`` with the input padded by its zero point (a real 0)."""
    n, c, h, w = xq.shape
    co, cg, kh, kw = wq.shape
    t, l, b, r = pads
    xp = np.full((n, c, h + t + b, w + l + r), ZX, np.int64)
    xp[:, :, t:t + h, l:l + w] = xq
    xp -= ZX
    oh, ow = (h + t + b - kh) // strides[0] + 1, (w + l + r - kw) // strides[1] + 1
    y = np.zeros((n, co, oh, ow), np.int64)
    cog = co // group
    for o in range(co):
        g = o // cog
        for i in range(kh):
            for j in range(kw):
                patch = xp[:, g * cg:(g + 1) * cg, i:i + strides[0] * (oh - 1) + 1:strides[0],
                           j:j + strides[1] * (ow - 1) + 1:strides[1]]
                y[:, o] += np.einsum("nchw,c->nhw", patch, wq[o, :, i, j].astype(np.int64))
        y[:, o] += bq[o]
    return y


def _hardware_equals_golden(igraph, n=3, seed=4, folding=None):
    """Simulate the whole pipeline (Amaranth simulator, random stalls both sides) on random codes
    and compare with the golden integer executor."""
    p = compile_pipeline(igraph, folding=folding)
    assert_hardware_is_golden(p, n, input_seed=seed, seed=seed)
    return p


QDQ_CASES = {   # (c, mult, group, kernel, strides, pads, relu)
    "depthwise-3x3-p1": (6, 1, 6, (3, 3), None, (1, 1, 1, 1), True),
    "depthwise-3x3-s2-asym": (4, 1, 4, (3, 3), (2, 2), (1, 0, 0, 1), False),
    "depthwise-mult2-2x3": (3, 2, 3, (2, 3), None, (0, 1, 1, 1), False),
    "grouped-2": (6, 1, 2, (3, 3), None, (1, 1, 1, 1), True),
    "grouped-3-mult2": (6, 2, 3, (1, 3), (1, 2), None, False),
    "depthwise-1d-k5": (4, 1, 4, (5,), None, (2, 2), True),
}


@pytest.mark.parametrize("case", sorted(QDQ_CASES))
def test_qdq_grouped_conv_matches_onnxruntime_and_formula(case):
    c, mult, group, kernel, strides, pads, relu = QDQ_CASES[case]
    model, (wq, bq) = qdq_conv(c, mult, group, kernel, strides=strides, pads=pads, relu=relu, seed=len(case))
    x = _inputs(model, 200, 1)
    g = to_integer_graph(load(model))
    [layer] = [lay for lay in g.layers if isinstance(lay, Conv)]
    assert layer.group == group
    # the onnxruntime spec session (DequantizeLinear -> float Conv -> QuantizeLinear)
    want = run_spec(model, {"x": x})[0]
    got = dequantize_outputs(g, golden.execute(g, quantize_inputs(g, {"x": x})))["y"]
    assert got.shape == want.shape
    lsb = lsb_apart(got, want, SY)
    assert lsb.max() <= 1 and np.mean(lsb == 0) >= 0.99, (lsb.max(), np.mean(lsb == 0))
    # the accumulator, exactly: the layer without its activation vs the int64 formula
    xq = np.clip(np.rint(x / np.float32(SX)) + ZX, 0, 255).astype(np.int64)
    one_d = len(kernel) == 1
    s2 = (1,) + tuple(strides or (1,)) if one_d else tuple(strides or (1, 1))
    p2 = (0, pads[0], 0, pads[1]) if one_d else tuple(pads or (0, 0, 0, 0))
    w4 = wq[:, :, None, :] if one_d else wq
    x4 = xq[:, :, None, :] if one_d else xq
    raw = Conv(**{**layer.__dict__, "act": None}).reference(np.moveaxis(x4, 1, -1))
    np.testing.assert_array_equal(np.moveaxis(raw, -1, 1), _accumulator_formula(x4, w4, bq, group, s2, p2))


@pytest.mark.parametrize("case", ["depthwise-3x3-s2-asym", "depthwise-mult2-2x3", "grouped-2", "depthwise-1d-k5"])
def test_grouped_conv_in_hardware_is_bit_exact(case):
    c, mult, group, kernel, strides, pads, relu = QDQ_CASES[case]
    model, _ = qdq_conv(c, mult, group, kernel, strides=strides, pads=pads, relu=relu, seed=len(case))
    g = to_integer_graph(load(model))
    p = _hardware_equals_golden(g)
    [stage] = [s for s in p.stages if s.op == "conv"]
    unit = stage.blocks[1].kind
    assert unit == ("MatrixVectorUnit" if case.startswith("grouped") else "DepthwiseUnit")


@pytest.mark.parametrize("pe", [1, 2, 4])
def test_depthwise_foldings_are_bit_exact(pe):
    model, _ = qdq_conv(4, 1, 4, (3, 3), pads=(1, 1, 1, 1), relu=True, seed=3)
    g = to_integer_graph(load(model))
    [layer] = g.layers
    ins = [g.input_specs[0]]
    assert layer.fold_options(ins) == [(1, 1), (2, 2), (4, 4)]
    assert layer.cycles(ins, 1, 1) == 4 * layer.cycles(ins, 4, 4) == 7 * 6 * 9 * 4
    p = _hardware_equals_golden(g, folding={layer.name: (pe, pe)})
    assert p.stages[0].multipliers == pe


def test_depthwise_multiplier_foldings():
    model, _ = qdq_conv(3, 2, 3, (2, 3), pads=(0, 1, 1, 1), seed=5)
    g = to_integer_graph(load(model))
    [layer] = g.layers
    assert layer.fold_options([g.input_specs[0]]) == [(2, 1), (6, 3)]
    _hardware_equals_golden(g, folding={layer.name: (6, 3)})


def test_qlinear_conv_with_group_matches_its_qdq_twin():
    """QOperator: QLinearConv(group) equals, by the spec, DequantizeLinear -> Conv -> QuantizeLinear."""
    qdq, (wq, bq) = qdq_conv(6, 1, 6, (3, 3), pads=(1, 1, 1, 1), seed=11)
    nodes = [helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"], name="qx"),
             helper.make_node("QLinearConv", ["xq", "sx", "zx", "wq", "sw", "zw", "sy", "zy", "bq"], ["yq"],
                              name="conv", group=6, kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("DequantizeLinear", ["yq", "sy", "zy"], ["y"], name="dqy")]
    inits = [i for i in qdq.graph.initializer if i.name in ("sx", "zx", "sy", "zy", "wq", "sw", "bq")]
    inits.append(_arr("zw", np.zeros(6, np.int8)))
    gr = helper.make_graph(nodes, "qop", list(qdq.graph.input), list(qdq.graph.output), inits)
    qop = helper.make_model(gr, opset_imports=[helper.make_opsetid("", 17)])
    qop.ir_version = 8
    onnx.checker.check_model(qop, full_check=True)
    x = _inputs(qdq, 200, 2)
    g = to_integer_graph(load(qop))
    assert g.source == "qoperator" and g.layers[0].group == 6
    want = run_spec(qdq, {"x": x})[0]
    got = dequantize_outputs(g, golden.execute(g, quantize_inputs(g, {"x": x})))["y"]
    lsb = lsb_apart(got, want, SY)
    assert lsb.max() <= 1 and np.mean(lsb == 0) >= 0.99, (lsb.max(), np.mean(lsb == 0))
    _hardware_equals_golden(g, n=2)


def test_qonnx_average_pools_run_as_depthwise_units():
    """QONNX: an AveragePool and a GlobalAveragePool with 4-/8-bit output quantizers import as
    depthwise convolutions with thresholds; the golden equals the QONNX float semantics and the
    hardware equals the golden."""
    q = _Q(3)
    x = q.quant("x", 1 / 256, 8)
    y = q.quant(q.op("Relu", [q.op("Conv", [x, q.wquant((4, 1, 3, 3), 4), q.const(q.rng.normal(0, 0.1, 4))],
                                   pads=[1, 1, 1, 1])]), 0.125, 4)
    y = q.quant(q.op("AveragePool", [y], kernel_shape=[2, 2], strides=[2, 2]), 0.125, 4)
    y = q.quant(q.op("GlobalAveragePool", [y]), 1 / 32, 8)
    f = q.op("Flatten", [y])
    out = q.quant(q.op("Gemm", [f, q.wquant((3, 4), 4), q.const(q.rng.normal(0, 0.1, 3))], transB=1), 1 / 16, 8,
                  signed=True)
    model = q.model(out, [1, 8, 8], [3])
    graph = load(model)
    g = to_integer_graph(graph)
    pools = [lay for lay in g.layers if isinstance(lay, Conv) and lay.depthwise]
    assert len(pools) == 2 and all(np.all(lay.weights == 1) for lay in pools)
    x = np.random.default_rng(0).random((64, 1, 8, 8), dtype=np.float32)
    ref = golden.execute(graph, {"x": x})["y"]
    got = dequantize_outputs(g, golden.execute(g, quantize_inputs(g, {"x": x})))["y"]
    np.testing.assert_array_equal(np.rint(got * 16), np.rint(ref * 16))
    p = _hardware_equals_golden(g, n=2)
    assert sum(s.blocks[1].kind == "DepthwiseUnit" for s in p.stages if s.op == "conv") == 2


@pytest.mark.parametrize("bits", [4, 8])
def test_qonnx_depthwise_and_grouped_convs(bits):
    """QONNX (Brevitas QuantConv2d with groups): a depthwise conv with a channel multiplier and a
    grouped conv, Quant-ized weights and activations (output quantizers become thresholds);
    the golden equals the QONNX float semantics and the hardware equals the golden."""
    q = _Q(5 + bits)
    x = q.quant("x", 1 / 256, 8)
    y = q.quant(q.op("Relu", [q.op("Conv", [x, q.wquant((4, 1, 3, 3), bits), q.const(q.rng.normal(0, 0.1, 4))],
                                   pads=[1, 1, 1, 1])]), 0.125, bits)
    y = q.quant(q.op("Relu", [q.op("Conv", [y, q.wquant((8, 1, 3, 3), bits), q.const(q.rng.normal(0, 0.1, 8))],
                                   pads=[1, 1, 1, 1], strides=[2, 2], group=4)]), 0.125, bits)
    y = q.quant(q.op("Relu", [q.op("Conv", [y, q.wquant((4, 4, 1, 1), bits), q.const(q.rng.normal(0, 0.1, 4))],
                                   group=2)]), 0.125, bits)
    out = q.quant(q.op("Gemm", [q.op("Flatten", [y]), q.wquant((3, 64), bits), q.const(q.rng.normal(0, 0.1, 3))],
                       transB=1), 1 / 16, 8, signed=True)
    graph = load(q.model(out, [1, 8, 8], [3]))
    g = to_integer_graph(graph)
    convs = [lay for lay in g.layers if isinstance(lay, Conv)]
    assert [c.group for c in convs] == [1, 4, 2] and convs[1].depthwise and convs[1].multiplier == 2
    x = np.random.default_rng(0).random((64, 1, 8, 8), dtype=np.float32)
    ref = golden.execute(graph, {"x": x})["y"]
    got = dequantize_outputs(g, golden.execute(g, quantize_inputs(g, {"x": x})))["y"]
    np.testing.assert_array_equal(np.rint(got * 16), np.rint(ref * 16))
    p = _hardware_equals_golden(g, n=2)
    assert [s.blocks[1].kind for s in p.stages if s.op == "conv"] == ["MatrixVectorUnit", "DepthwiseUnit",
                                                                      "MatrixVectorUnit"]
    assert p.stages[1].blocks[2].kind == "Thresholds"   # QONNX <= 8-bit outputs with a float bias


def test_qonnx_cnn_with_global_pool_compiles():
    """The QONNX CNN of the import tests (its GlobalAveragePool + 8-bit Quant is a depthwise conv)
    now compiles to hardware and is bit-exact."""
    g = to_integer_graph(load(qonnx_cnn(1, 4)))
    _hardware_equals_golden(g, n=2)


def dsnet(seed=0):
    """A float depthwise-separable net on (N, 1, 8, 8): stem conv, depthwise 3x3/s2 + pointwise
    1x1 (MobileNet block), a grouped 3x3 conv (group 4), global average pool, Gemm."""
    rng = np.random.default_rng(seed)

    def init(name, shape, std):
        return numpy_helper.from_array(rng.normal(0, std, shape).astype(np.float32), name)
    inits = [init("w0", (8, 1, 3, 3), 0.4), init("b0", (8,), 0.1), init("w1", (8, 1, 3, 3), 0.4),
             init("b1", (8,), 0.1), init("w2", (16, 8, 1, 1), 0.3), init("b2", (16,), 0.1),
             init("w3", (16, 4, 3, 3), 0.2), init("b3", (16,), 0.1), init("w4", (10, 16), 0.25),
             init("b4", (10,), 0.1)]
    n = [helper.make_node("Conv", ["x", "w0", "b0"], ["c0"], pads=[1, 1, 1, 1], name="stem"),
         helper.make_node("Relu", ["c0"], ["r0"], name="relu0"),
         helper.make_node("Conv", ["r0", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], group=8, strides=[2, 2], name="dw1"),
         helper.make_node("Clip", ["c1", "lo", "hi"], ["r1"], name="relu6"),
         helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], name="pw1"),
         helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
         helper.make_node("Conv", ["r2", "w3", "b3"], ["c3"], pads=[1, 1, 1, 1], group=4, name="gconv"),
         helper.make_node("Relu", ["c3"], ["r3"], name="relu3"),
         helper.make_node("GlobalAveragePool", ["r3"], ["g"], name="gap"),
         helper.make_node("Flatten", ["g"], ["f"], name="flat"),
         helper.make_node("Gemm", ["f", "w4", "b4"], ["y"], transB=1, name="fc")]
    inits += [numpy_helper.from_array(np.float32(0), "lo"), numpy_helper.from_array(np.float32(6), "hi")]
    g = helper.make_graph(n, "dsnet", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 10])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m, full_check=True)
    return m


@pytest.fixture(scope="module")
def dsnet_design():
    rng = np.random.default_rng(1)
    return onnx2hw.compile(dsnet(), calib={"x": rng.random((32, 1, 8, 8), dtype=np.float32)}, target_cycles=1200)


def test_float_depthwise_separable_net_compiles(dsnet_design):
    stages = {s.name: s for s in dsnet_design.pipeline.stages}
    assert [b.kind for b in stages["dw1"].blocks] == ["SlidingWindow", "DepthwiseUnit", "Requantize"]
    assert stages["gconv"].blocks[1].kind == "MatrixVectorUnit"
    layers = {lay.name: lay for lay in dsnet_design.integer.layers}
    assert layers["dw1"].group == 8 and layers["gconv"].group == 4
    assert dsnet_design.pipeline.ii <= 1200
    _hardware_equals_golden(dsnet_design.integer, n=2, folding=dsnet_design.pipeline.folding)


def test_depthwise_separable_net_in_lut_products_is_golden(dsnet_design):
    """The same folding with every layer's products flipped to the other style (depthwise,
    grouped, dense and 1x1 convolutions): the whole pipeline, stalled, against the golden."""
    fold = {k: (v[0], v[1], "lut" if v[2] == "dsp" else "dsp") if len(v) == 3 else v
            for k, v in dsnet_design.pipeline.folding.items()}
    assert sum(len(v) == 3 for v in fold.values()) >= 4
    p = _hardware_equals_golden(dsnet_design.integer, n=2, folding=fold)
    assert {s.layer: s.mul for s in p.stages if s.mul} == {k: v[2] for k, v in fold.items() if len(v) == 3}
    units = [(s.mul, b) for s in p.stages for b in s.blocks if b.kind in ("MatrixVectorUnit", "DepthwiseUnit")]
    assert len(units) == len([v for v in fold.values() if len(v) == 3])
    assert all((b.cost.dsp == 0) == (mul == "lut") for mul, b in units)


@pytest.mark.sim
def test_float_depthwise_separable_net_simulates_bit_exact(dsnet_design):
    require_simulator("verilator")
    x = np.random.default_rng(2).random((4, 1, 8, 8), dtype=np.float32)
    y = dsnet_design.simulate({"x": x})["y"]   # raises unless bit-exact against the golden
    want = dequantize_outputs(dsnet_design.integer,
                              golden.execute(dsnet_design.integer, quantize_inputs(dsnet_design.integer, {"x": x})))
    np.testing.assert_array_equal(y, want["y"])


def test_grouped_conv_with_bipolar_weights_in_hardware():
    """Weights of +-1 (1-bit bipolar, e.g. a QONNX BipolarQuant) in a grouped conv: 2-bit signed
    products, bit-exact; a depthwise conv of bipolar inputs is refused naming the group."""
    model, _ = qdq_conv(4, 1, 2, (3, 3), pads=(1, 1, 1, 1), seed=2)
    g = to_integer_graph(load(model))
    [layer] = g.layers
    w = np.where(layer.weights >= 0, 1, -1)
    pm = Conv(**{**layer.__dict__, "weights": w, "w_type": IntType(1, False, bipolar=True),
                 "acc_bits": acc_bits_for(w, layer.bias, layer.in_type)})
    pm.validate(list(g.input_specs))
    _hardware_equals_golden(type(g)(**{**g.__dict__, "layers": (pm,)}), n=2)
    for pads, why in (((0, 0, 0, 0), "depthwise convolution (group=4) of bipolar inputs"),
                      ((1, 1, 1, 1), "zero padding of a bipolar input is not supported")):
        dw, _ = qdq_conv(4, 1, 4, (3, 3), pads=pads, seed=2)
        [layer] = to_integer_graph(load(dw)).layers
        bip = Conv(**{**layer.__dict__, "in_type": IntType(1, False, bipolar=True),
                      "weights": np.where(layer.weights >= 0, 1, -1), "w_type": IntType(1, False, bipolar=True)})
        assert why in bip.hardware_problem(list(g.input_specs))


@pytest.mark.parametrize("fold", [(1, 1), (3, 3), (6, 1), (2, 3)])
def test_grouped_conv_foldings_are_bit_exact(fold):
    """group 3, 9 -> 18 channels (3 in, 6 out per group): pe over a group's outputs, simd over a
    group's input channels; each group reads only its own window."""
    model, _ = qdq_conv(9, 2, 3, (2, 3), pads=(1, 0, 0, 1), seed=8)
    g = to_integer_graph(load(model))
    [layer] = g.layers
    ins = [g.input_specs[0]]
    assert (6, 3) in layer.fold_options(ins) and (12, 1) not in layer.fold_options(ins)
    oh, ow, _ = layer.output.shape
    macs = 18 * (2 * 3) * 3      # per output pixel: Cout * kh * kw * Cin/group
    assert layer.cycles(ins, *fold) == max(7 * 6 * 9 // fold[1], oh * ow * macs // (fold[0] * fold[1]))
    p = _hardware_equals_golden(g, n=2, folding={layer.name: fold})
    assert p.stages[0].multipliers == fold[0] * fold[1]


def _reduce_mean_net(keepdims, axes=(2, 3)):
    """Depthwise Conv + Relu + ReduceMean (opset 18, axes as an input: what torch's dynamo exporter
    writes for adaptive_avg_pool2d(x, 1)) [+ Flatten] + Gemm."""
    rng = np.random.default_rng(9)
    k = 4 if tuple(axes) == (2, 3) else 36
    inits = [numpy_helper.from_array(rng.normal(0, 0.4, (4, 1, 3, 3)).astype(np.float32), "w1"),
             numpy_helper.from_array(rng.normal(0, 0.1, 4).astype(np.float32), "b1"),
             numpy_helper.from_array(np.array(axes, np.int64), "axes"),
             numpy_helper.from_array(rng.normal(0, 0.5, (3, k)).astype(np.float32), "w2"),
             numpy_helper.from_array(rng.normal(0, 0.1, 3).astype(np.float32), "b2")]
    n = [helper.make_node("Conv", ["x", "w1", "b1"], ["c"], pads=[1, 1, 1, 1], group=4, name="dw"),
         helper.make_node("Relu", ["c"], ["r"], name="relu"),
         helper.make_node("ReduceMean", ["r", "axes"], ["m"], keepdims=keepdims, name="mean")]
    src = "m"
    if keepdims or k != 4:
        n.append(helper.make_node("Flatten", ["m"], ["f"], name="flat"))
        src = "f"
    n.append(helper.make_node("Gemm", [src, "w2", "b2"], ["y"], transB=1, name="fc"))
    g = helper.make_graph(n, "rmean", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4, 6, 6])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 8
    onnx.checker.check_model(m, full_check=True)
    return m


@pytest.mark.parametrize("keepdims", [1, 0])
def test_reduce_mean_over_space_is_a_global_average_pool(keepdims):
    x = np.random.default_rng(3).random((200, 4, 6, 6), dtype=np.float32)
    q = quantize(_reduce_mean_net(keepdims), {"x": x[:64]})
    g = to_integer_graph(load(q))
    assert [type(lay).__name__ for lay in g.layers] == ["Conv", "AvgPool", "Dense"]
    want = run_spec(q, {"x": x})[0]
    got = dequantize_outputs(g, golden.execute(g, quantize_inputs(g, {"x": x})))["y"]
    lsb = lsb_apart(got, want, g.outputs[0].scale)
    assert lsb.max() <= 1 and np.mean(lsb == 0) >= 0.99, (lsb.max(), np.mean(lsb == 0))
    _hardware_equals_golden(g, n=2)


def test_reduce_mean_over_channels_is_refused_in_one_line():
    x = np.random.default_rng(3).random((16, 4, 6, 6), dtype=np.float32)
    m = _reduce_mean_net(1, axes=(1,))
    with pytest.raises(UnsupportedError, match=r"node 'mean' \(ReduceMean\): .*only the reduction over the spatial axes"):
        to_integer_graph(load(quantize(m, {"x": x})))
