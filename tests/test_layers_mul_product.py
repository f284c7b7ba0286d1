"""Mul of two quantized tensors: squeeze-and-excitation gating (a per-channel gate broadcast over
the pixels), spatial gating (a per-pixel gate broadcast over the channels), SiLU
``x * sigmoid(x)`` and ``x * hardsigmoid(x)`` (one table), the product of two
branches, int8 and uint8 operands. Truth: onnxruntime's spec-exact session on the QDQ graphs (within one
output step where the float32 product and the 31-bit multiplier round differently; counted),
the int64 formula written here for the node's reference, the spec's QLinearMul formula for the
golden op; bit-exact hardware under random backpressure."""
import numpy as np
import pytest
from onnx import TensorProto, helper

import onnx2hw
from _branch_models import const, qdq, qdq_model
from _oracle import kernel_session, lsb_apart, run_spec, spec_session
from _pysim_check import assert_hardware_is_golden
from onnx2hw import golden
from onnx2hw.dataflow import compile_pipeline
from onnx2hw.ir import ModelError, UnsupportedError, load
from onnx2hw.layers import IntType, Requant, TensorSpec, dequantize_outputs, quantize_inputs
from onnx2hw.layers.mul import Mul
from onnx2hw.quant import ptq, quantize, to_integer_graph

pytestmark = pytest.mark.filterwarnings("ignore::amaranth.hdl._ir.UnusedElaboratable")

SHAPE = (4, 5, 6)
RNG = np.random.default_rng(36)
W1 = RNG.integers(-90, 90, (2, 4, 1, 1))
W2 = RNG.integers(-90, 90, (4, 2, 1, 1))
W3 = RNG.integers(-60, 60, (4, 4, 3, 3))
TYPES = {"u8": (np.uint8, 128), "s8": (np.int8, 0)}


def _weights(nodes, inits, name, w):
    inits += [const(f"{name}_q", w, np.int8), const(f"{name}_s", np.float32(0.01)), const(f"{name}_z", 0, np.int8)]
    nodes.append(helper.make_node("DequantizeLinear", [f"{name}_q", f"{name}_s", f"{name}_z"], [name],
                                  name=f"{name}_DQ"))
    return name


def _model(kind, a="u8", gate="u8", out="s8"):
    """QDQ model: ``x`` (a's type) times a second tensor made from it (``kind``), quantized to out's type."""
    nodes, inits = [], []
    at, az = TYPES[a]
    gt = TYPES[gate][0]
    _, xd = qdq(nodes, inits, "x", "x", 0.02, az, at)
    gscale, gzp = (1 / 255, 0) if gt == np.uint8 else (1 / 127, 0)
    if kind == "silu":
        nodes.append(helper.make_node("Sigmoid", [xd], ["g"], name="sigmoid"))
    elif kind == "hardsigmoid":
        nodes.append(helper.make_node("HardSigmoid", [xd], ["g"], name="hsig", alpha=1 / 6, beta=0.5))
    elif kind == "se":
        nodes.append(helper.make_node("GlobalAveragePool", [xd], ["p"], name="gap"))
        _, pd = qdq(nodes, inits, "p", "pq", 0.01, 0, np.int8)
        nodes += [helper.make_node("Conv", [pd, _weights(nodes, inits, "w1", W1)], ["h"], name="fc1"),
                  helper.make_node("Relu", ["h"], ["hr"], name="relu")]
        _, hd = qdq(nodes, inits, "hr", "hq", 0.004, 0, np.uint8)
        nodes.append(helper.make_node("Conv", [hd, _weights(nodes, inits, "w2", W2)], ["e"], name="fc2"))
        _, ed = qdq(nodes, inits, "e", "eq", 0.03, 0, np.int8)
        nodes.append(helper.make_node("HardSigmoid", [ed], ["g"], name="hsig", alpha=1 / 6, beta=0.5))
    elif kind in ("spatial", "spatial_rev"):   # sigmoid of a one-channel conv of x: a per-pixel gate
        nodes.append(helper.make_node("Conv", [xd, _weights(nodes, inits, "w3", W3[:1])], ["c1"], name="conv",
                                      pads=[1, 1, 1, 1]))
        _, cd = qdq(nodes, inits, "c1", "c1q", 0.047, 0, np.int8)
        nodes.append(helper.make_node("Sigmoid", [cd], ["g"], name="sigmoid"))
    elif kind in ("branches", "conv"):   # tanh(x) times maxpool(x), or conv(x) times x
        if kind == "branches":
            nodes.append(helper.make_node("MaxPool", [xd], ["mp"], name="pool", kernel_shape=[3, 3],
                                          pads=[1, 1, 1, 1]))
            _, xd = qdq(nodes, inits, "mp", "mpq", 0.02, az, at)
            nodes.append(helper.make_node("Tanh", ["x_dq"], ["g"], name="tanh"))
            gscale, gzp = (1 / 127, 0) if gt == np.int8 else (2 / 255, 128)
        else:
            nodes.append(helper.make_node("Conv", [xd, _weights(nodes, inits, "w3", W3)], ["g"], name="conv",
                                          pads=[1, 1, 1, 1]))
            gscale, gzp = 0.05, (128 if gt == np.uint8 else 0)
    _, gd = qdq(nodes, inits, "g", "gq", gscale, gzp, gt)
    nodes.append(helper.make_node("Mul", [xd, gd] if kind not in ("conv", "spatial_rev") else [gd, xd], ["m"],
                                  name="mul"))
    ot, oz = TYPES[out]
    _, yd = qdq(nodes, inits, "m", "y", 0.06 if kind == "conv" else 0.012, oz, ot)
    nodes.append(helper.make_node("Identity", [yd], ["out"], name="out"))
    return qdq_model(nodes, inits, SHAPE, "out", SHAPE)


def _x(n=48, seed=8, shape=SHAPE):
    return np.random.default_rng(seed).uniform(-2.6, 2.6, (n,) + shape).astype(np.float32)


def _compare(m, n=48, shape=SHAPE):
    """Golden of the integer graph against onnxruntime's spec session: at most one output step
    apart, at least 99 % equal. Returns the integer graph."""
    ig = to_integer_graph(load(m))
    got = dequantize_outputs(ig, golden.execute(ig, quantize_inputs(ig, {"x": _x(n, shape=shape)})))["out"]
    want = run_spec(m, {"x": _x(n, shape=shape)})[0]
    scale = float(np.asarray(ig.outputs[0].scale).reshape(-1)[0])
    lsb = lsb_apart(got, want, scale)
    assert lsb.max() <= 1 and np.mean(lsb == 0) >= 0.99, (lsb.max(), np.mean(lsb == 0))
    return ig


@pytest.mark.parametrize("kind", ["se", "silu", "hardsigmoid", "branches", "spatial", "spatial_rev"])
@pytest.mark.parametrize("a,gate,out", [("u8", "u8", "s8"), ("s8", "s8", "u8"), ("u8", "s8", "u8"),
                                        ("s8", "u8", "s8")])
def test_product_matches_onnxruntime(kind, a, gate, out):
    """A product layer (SE: a per-channel gate; spatial: a per-pixel gate, either operand order);
    ``x * f(x)`` with ``f`` a table of ``x``: one
    table of ``x`` (the Lookup of ``f`` composed with the product)."""
    ig = _compare(_model(kind, a, gate, out))
    mul = [layer for layer in ig.layers if isinstance(layer, Mul)]
    if kind in ("silu", "hardsigmoid"):
        assert not mul and [layer.kind() for layer in ig.layers] == ["lookup"]
        assert ig.layers[0].inputs == (ig.input_specs[0].name,) and ig.layers[0].name == "mul"
        return
    assert len(mul) == 1 and mul[0].product
    specs = ig.specs()
    ins = [specs[t] for t in mul[0].inputs]
    assert mul[0].gate(ins) == (SHAPE[0] if kind == "se" else None)
    assert mul[0].pixel_gate(ins) == kind.startswith("spatial")
    if kind.startswith("spatial"):
        assert ins[0].name == "x" and ins[1].shape == SHAPE[1:] + (1,)


def test_function_read_elsewhere_stays_beside_the_table():
    """``x * sigmoid(x) + sigmoid(x)``: the product is a table of ``x``; the sigmoid's table stays
    for the Add. Against onnxruntime and bit-exact in hardware."""
    nodes, inits = [], []
    _, xd = qdq(nodes, inits, "x", "x", 0.02, 128)
    nodes.append(helper.make_node("Sigmoid", [xd], ["g"], name="sigmoid"))
    _, gd = qdq(nodes, inits, "g", "gq", 1 / 255, 0)
    nodes.append(helper.make_node("Mul", [gd, xd], ["m"], name="mul"))
    _, md = qdq(nodes, inits, "m", "mq", 0.012, 128)
    nodes.append(helper.make_node("Add", [md, gd], ["s"], name="add"))
    _, yd = qdq(nodes, inits, "s", "y", 0.015, 0, np.int8)
    nodes.append(helper.make_node("Identity", [yd], ["out"], name="out"))
    ig = _compare(qdq_model(nodes, inits, SHAPE, "out", SHAPE))
    assert [(layer.name, layer.kind()) for layer in ig.layers] == [("sigmoid", "lookup"), ("mul", "lookup"),
                                                                   ("add", "add")]
    assert_hardware_is_golden(compile_pipeline(ig), 2)


@pytest.mark.parametrize("kind", ["se", "branches", "conv", "spatial", "spatial_rev"])
def test_product_hardware_is_bit_exact(kind):
    ig = to_integer_graph(load(_model(kind)))
    p = compile_pipeline(ig)
    stage = next(s for s in p.stages if s.layer == "mul")
    assert [b.kind for b in stage.blocks] == ["ProductUnit", "Requantize"]
    assert_hardware_is_golden(p, 3, input_seed=3, seed=6)


@pytest.mark.parametrize("mul", ["dsp", "lut"])
def test_product_hardware_with_lanes_is_bit_exact(mul):
    ig = to_integer_graph(load(_model("se", "s8", "u8", "s8")))
    p = compile_pipeline(ig, folding={"mul": (2, 2, mul)})
    stage = next(s for s in p.stages if s.layer == "mul")
    assert stage.in_lanes == (2, 2) and stage.mul == mul and stage.blocks[0].cost.dsp == (2 if mul == "dsp" else 0)
    assert_hardware_is_golden(p, 3, input_seed=5, seed=7)


@pytest.mark.parametrize("mul,lanes", [("dsp", 2), ("lut", 4)])
def test_pixel_gate_hardware_with_lanes_is_bit_exact(mul, lanes):
    """``a`` in ``lanes`` lanes, the per-pixel gate in one lane (a width converter in front)."""
    ig = to_integer_graph(load(_model("spatial_rev", "s8", "u8", "s8")))
    p = compile_pipeline(ig, folding={"mul": (lanes, lanes, mul)})
    stage = next(s for s in p.stages if s.layer == "mul")
    assert stage.in_lanes == (lanes, 1) and stage.blocks[0].params["pixel_channels"] == SHAPE[0]
    assert stage.cycles == int(np.prod(SHAPE)) // lanes
    assert_hardware_is_golden(p, 3, input_seed=5, seed=7)


def test_pixel_gate_of_a_signal_is_bit_exact():
    """A signal ``(N, 4, 12)`` times the sigmoid of a one-channel Conv1d of it, ``(N, 1, 12)``:
    against onnxruntime's spec session and bit-exact in hardware."""
    shape = (4, 12)
    nodes, inits = [], []
    _, xd = qdq(nodes, inits, "x", "x", 0.02, 128)
    nodes.append(helper.make_node("Conv", [xd, _weights(nodes, inits, "w", W3[:1, :, 0])], ["c"], name="conv",
                                  pads=[1, 1]))
    # (0.047: the conv's requantization ratio 0.0002 / 0.047 has no exact ties, which float32 and the
    # exact half-up rounding would break differently, the sigmoid amplifying the step)
    _, cd = qdq(nodes, inits, "c", "cq", 0.047, 0, np.int8)
    nodes.append(helper.make_node("Sigmoid", [cd], ["g"], name="sigmoid"))
    _, gd = qdq(nodes, inits, "g", "gq", 1 / 255, 0)
    nodes.append(helper.make_node("Mul", [gd, xd], ["m"], name="mul"))
    _, yd = qdq(nodes, inits, "m", "y", 0.012, 0, np.int8)
    nodes.append(helper.make_node("Identity", [yd], ["out"], name="out"))
    ig = _compare(qdq_model(nodes, inits, shape, "out", shape), shape=shape)
    mul = next(layer for layer in ig.layers if isinstance(layer, Mul))
    specs = ig.specs()
    assert mul.pixel_gate([specs[t] for t in mul.inputs])
    assert_hardware_is_golden(compile_pipeline(ig, folding={"mul": (2, 2)}), 2)


def test_pixel_gate_reference_is_the_integer_formula():
    """(a - za) * (g - zg), the gate of each pixel broadcast over its channels, requantized half up."""
    m, s = 1395864371, 40
    layer = Mul("m", ("a", "g"), TensorSpec("y", (2, 3, 4), IntType(8, True)), 128, Requant([m], [s], -3, -128, 127),
                other_zero=5)
    ins = [TensorSpec("a", (2, 3, 4), IntType(8, False)), TensorSpec("g", (2, 3, 1), IntType(8, False))]
    layer.validate(ins)
    assert layer.pixel_gate(ins) and layer.gate(ins) is None
    rng = np.random.default_rng(2)
    a, g = rng.integers(0, 256, (5, 2, 3, 4)), rng.integers(0, 256, (5, 2, 3, 1))
    want = np.empty(a.shape, np.int64)
    for idx in np.ndindex(a.shape):
        p = (int(a[idx]) - 128) * (int(g[idx[:3] + (0,)]) - 5)
        want[idx] = min(max(-3 + ((p * m + (1 << (s - 1))) >> s), -128), 127)
    np.testing.assert_array_equal(layer.reference(a, g), want)


def test_reference_is_the_integer_formula():
    """(a - za) * (b - zb), the gate broadcast over the pixels, requantized half up."""
    m, s = 1395864371, 40
    layer = Mul("m", ("a", "g"), TensorSpec("y", (2, 3, 4), IntType(8, True)), 128, Requant([m], [s], -3, -128, 127),
                other_zero=5)
    ins = [TensorSpec("a", (2, 3, 4), IntType(8, False)), TensorSpec("g", (1, 1, 4), IntType(8, False))]
    layer.validate(ins)
    rng = np.random.default_rng(1)
    a, g = rng.integers(0, 256, (5, 2, 3, 4)), rng.integers(0, 256, (5, 1, 1, 4))
    want = np.clip(-3 + (((a - 128) * (g - 5) * m + (1 << (s - 1))) >> s), -128, 127)
    np.testing.assert_array_equal(layer.reference(a, g), want)
    same = Mul("m", ("a", "b"), TensorSpec("y", (2, 3, 4), IntType(8, True)), 128, Requant([m], [s], -3, -128, 127),
               other_zero=5)
    b = rng.integers(0, 256, (5, 2, 3, 4))
    np.testing.assert_array_equal(same.reference(a, b),
                                  np.clip(-3 + (((a - 128) * (b - 5) * m + (1 << (s - 1))) >> s), -128, 127))


def test_gate_of_wrong_shape_is_refused_by_validate():
    layer = Mul("m", ("a", "g"), TensorSpec("y", (2, 3, 4), IntType(8, True)), 0, Requant([1], [0], 0, -128, 127),
                other_zero=0)
    with pytest.raises(ModelError, match="neither of the output's shape"):
        layer.validate([TensorSpec("a", (2, 3, 4), IntType(8, False)), TensorSpec("g", (1, 3, 1), IntType(8, False))])


def test_broadcast_within_a_channel_is_refused():
    """A gate of one value per row (a max over each row) varies within a channel: refused."""
    nodes, inits = [], []
    _, xd = qdq(nodes, inits, "x", "x", 0.02, 128)
    nodes.append(helper.make_node("MaxPool", [xd], ["r"], name="rows", kernel_shape=[1, SHAPE[2]]))
    _, rd = qdq(nodes, inits, "r", "rq", 0.02, 128)
    nodes.append(helper.make_node("Mul", [xd, rd], ["m"], name="mul"))
    _, yd = qdq(nodes, inits, "m", "y", 0.02, 0, np.int8)
    nodes.append(helper.make_node("Identity", [yd], ["out"], name="out"))
    m = qdq_model(nodes, inits, SHAPE, "out", SHAPE)
    with pytest.raises(UnsupportedError, match=r"node 'mul' \(Mul\): Mul broadcasting \(4, 5, 1\) over "
                       r"\(4, 5, 6\) \(only one value per channel, per pixel or per image"):
        to_integer_graph(load(m))


def test_bipolar_operand_is_refused():
    layer = Mul("m", ("a", "b"), TensorSpec("y", (2, 3, 4), IntType(8, True)), 0, Requant([1], [0], 0, -128, 127),
                other_zero=0)
    ins = [TensorSpec("a", (2, 3, 4), IntType(1, False, bipolar=True)), TensorSpec("b", (2, 3, 4), IntType(8, False))]
    assert layer.hardware_problem(ins) == "bipolar Mul is not supported"


# ---- QOperator: com.microsoft QLinearMul -----------------------------------------------------------

def _qlinear_mul_model(b_const=False, dt=np.uint8, zp=128):
    """Q(x) -> QLinearAdd(x, x) -> Sigmoid in QDQ -> QLinearMul(x, sigmoid(2x)) (or x times a
    quantized constant) -> DQ; A, B and C of one type (as the op requires)."""
    nodes, inits = [], []
    inits += [const("xs", np.float32(0.02)), const("xz", zp, dt), const("gs", np.float32(1 / 255)),
              const("gz", np.iinfo(dt).min, dt), const("ys", np.float32(0.011)), const("yz", zp, dt)]
    nodes.append(helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"], name="x_Q"))
    if b_const:
        inits.append(const("kq", (np.arange(4).reshape(4, 1, 1) * 60 + 10 + np.iinfo(dt).min).astype(dt)))
        bq = "kq"
    else:
        inits += [const("as", np.float32(0.04)), const("az", zp, dt)]
        nodes += [helper.make_node("QLinearAdd", ["xq", "xs", "xz", "xq", "xs", "xz", "as", "az"], ["aq"], name="qadd",
                                   domain="com.microsoft"),
                  helper.make_node("DequantizeLinear", ["aq", "as", "az"], ["ad"], name="a_DQ"),
                  helper.make_node("Sigmoid", ["ad"], ["sg"], name="sigmoid"),
                  helper.make_node("QuantizeLinear", ["sg", "gs", "gz"], ["gq"], name="g_Q")]
        bq = "gq"
    nodes += [helper.make_node("QLinearMul", ["xq", "xs", "xz", bq, "gs", "gz", "ys", "yz"], ["yq"], name="qmul",
                               domain="com.microsoft"),
              helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["out"], name="y_DQ")]
    return qdq_model(nodes, inits, SHAPE, "out", SHAPE, extra_opsets=[helper.make_opsetid("com.microsoft", 1)])


@pytest.mark.parametrize("dt,zp", [(np.uint8, 128), (np.int8, -3)])
def test_golden_qlinear_mul_is_the_spec_formula(dt, zp):
    """The golden op against ``saturate(round((a - za) * (b - zb) * sa * sb / sc) + zc)`` computed
    here in float64 (ties and float32 steps may differ by one; counted), and against
    onnxruntime's kernel within one step."""
    from onnx2hw.golden.ops.ms_qlinear_mul import run
    rng = np.random.default_rng(3)
    lo, hi = np.iinfo(dt).min, np.iinfo(dt).max
    a, b = (rng.integers(lo, hi + 1, (3, 4, 5, 6)).astype(dt) for _ in range(2))
    b = b[:, :, :1, :1]     # a per-channel operand: NumPy broadcasting
    sa, sb, sc = np.float32(0.02), np.float32(0.013), np.float32(0.05)
    got = run(None, a, sa, dt(zp), b, sb, dt(3), sc, dt(zp))
    exact = (a.astype(np.int64) - zp) * (b.astype(np.int64) - 3) * (np.float64(sa) * np.float64(sb) / np.float64(sc))
    want = np.clip(np.rint(exact) + zp, lo, hi)
    diff = np.abs(got.astype(np.int64) - want)
    assert diff.max() <= 1 and np.mean(diff == 0) >= 0.99, (diff.max(), np.mean(diff == 0))
    m = _qlinear_mul_model(dt=dt, zp=zp)
    ort = kernel_session(m).run(None, {"x": _x()})[0]
    mine = golden.execute(load(m), {"x": _x()})["out"]
    assert lsb_apart(mine, ort, 0.011).max() <= 1


@pytest.mark.parametrize("b_const", [False, True], ids=["two_tensors", "by_constant"])
def test_qlinear_mul_imports(b_const):
    m = _qlinear_mul_model(b_const)
    ig = to_integer_graph(load(m))
    mul = [layer for layer in ig.layers if isinstance(layer, Mul)]
    assert len(mul) == 1 and mul[0].product == (not b_const)
    got = dequantize_outputs(ig, golden.execute(ig, quantize_inputs(ig, {"x": _x()})))["out"]
    want = golden.execute(load(m), {"x": _x()})["out"]
    lsb = lsb_apart(got, want, 0.011)
    assert lsb.max() <= 1 and np.mean(lsb == 0) >= 0.99, (lsb.max(), np.mean(lsb == 0))


def test_qlinear_mul_of_a_pixel_gate():
    """QLinearMul(x, sigmoid(QLinearConv(x) to one channel)): a per-pixel gate; against
    onnxruntime (spec session; its QLinearMul rounds a float32 product: within one step, 99 %
    equal) and bit-exact in hardware."""
    nodes, inits = [], []
    inits += [const("xs", np.float32(0.02)), const("xz", 128, np.uint8), const("w", W3[:1], np.int8),
              const("ws", np.float32(0.01)), const("wz", 0, np.int8), const("cs", np.float32(0.047)),
              const("cz", 128, np.uint8), const("gs", np.float32(1 / 255)), const("gz", 0, np.uint8),
              const("ys", np.float32(0.011)), const("yz", 128, np.uint8)]
    nodes += [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"], name="x_Q"),
              helper.make_node("QLinearConv", ["xq", "xs", "xz", "w", "ws", "wz", "cs", "cz"], ["cq"], name="qconv",
                               pads=[1, 1, 1, 1]),
              helper.make_node("DequantizeLinear", ["cq", "cs", "cz"], ["cd"], name="c_DQ"),
              helper.make_node("Sigmoid", ["cd"], ["sg"], name="sigmoid"),
              helper.make_node("QuantizeLinear", ["sg", "gs", "gz"], ["gq"], name="g_Q"),
              helper.make_node("QLinearMul", ["gq", "gs", "gz", "xq", "xs", "xz", "ys", "yz"], ["yq"], name="qmul",
                               domain="com.microsoft"),
              helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["out"], name="y_DQ")]
    m = qdq_model(nodes, inits, SHAPE, "out", SHAPE, extra_opsets=[helper.make_opsetid("com.microsoft", 1)])
    ig = _compare(m)
    mul = next(layer for layer in ig.layers if isinstance(layer, Mul))
    specs = ig.specs()
    assert mul.pixel_gate([specs[t] for t in mul.inputs])
    assert_hardware_is_golden(compile_pipeline(ig), 2)


# ---- the float path: post-training quantization --------------------------------------------------

def _float_model(kind):
    """Float (N, 4, 5, 6) models: an SE block of 1x1 convolutions, a spatial gate (the sigmoid
    of a one-channel 1x1 convolution), SiLU, x * hardsigmoid(x)."""
    rng = np.random.default_rng(4)
    w = lambda *s: rng.normal(0, 0.4, s).astype(np.float32)  # noqa: E731
    inits = {"W": w(4, 4, 3, 3), "b": w(4)}
    nodes = [helper.make_node("Conv", ["x", "W", "b"], ["c"], name="conv", pads=[1, 1, 1, 1])]
    if kind == "se":
        inits.update(W1=w(2, 4, 1, 1), b1=w(2), W2=w(4, 2, 1, 1), b2=w(4))
        nodes += [helper.make_node("GlobalAveragePool", ["c"], ["p"], name="gap"),
                  helper.make_node("Conv", ["p", "W1", "b1"], ["h"], name="fc1"),
                  helper.make_node("Relu", ["h"], ["hr"], name="relu"),
                  helper.make_node("Conv", ["hr", "W2", "b2"], ["e"], name="fc2"),
                  helper.make_node("HardSigmoid", ["e"], ["g"], name="hsig", alpha=1 / 6, beta=0.5)]
    elif kind == "spatial":   # c * sigmoid(conv1x1(c)), one output channel: a per-pixel gate
        inits.update(Wg=w(1, 4, 1, 1), bg=w(1))
        nodes += [helper.make_node("Conv", ["c", "Wg", "bg"], ["e"], name="gconv"),
                  helper.make_node("Sigmoid", ["e"], ["g"], name="sig")]
    else:
        nodes.append(helper.make_node("Sigmoid" if kind == "silu" else "HardSigmoid", ["c"], ["g"], name="act"))
    nodes += [helper.make_node("Mul", ["c", "g"], ["m"], name="mul"),
              helper.make_node("Conv", ["m", "Wo", "bo"], ["y"], name="head")]
    inits.update(Wo=w(3, 4, 1, 1), bo=w(3))
    g = helper.make_graph(nodes, kind, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", *SHAPE])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3, 5, 6])],
                          [const(k, v) for k, v in inits.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def _calib(n=64, seed=0):
    return np.random.default_rng(seed).standard_normal((n,) + SHAPE).astype(np.float32)


@pytest.mark.parametrize("kind", ["se", "spatial", "silu", "hardsigmoid"])
def test_ptq_gives_the_product_its_own_quantizer(kind):
    """The product is a unit of its own (QuantizeLinear right after it; in hardware a product
    layer, or for ``x * f(x)`` one table); compile's golden equals onnxruntime's spec session on
    the QDQ model the quantizer writes."""
    m = _float_model(kind)
    q = quantize(m, {"x": _calib()})
    muls = [n for n in q.graph.node if n.op_type == "Mul"]
    assert len(muls) == 1
    readers = [n for n in q.graph.node if muls[0].output[0] in n.input]
    assert [n.op_type for n in readers] == ["QuantizeLinear"]
    ig = to_integer_graph(load(q))
    assert sum(isinstance(layer, Mul) and layer.product for layer in ig.layers) == (kind in ("se", "spatial"))
    design = onnx2hw.compile(m, board="ulx3s", calib={"x": _calib()})
    x = _calib(16, 1)
    want = spec_session(ptq.quantize(m, {"x": _calib()})).run(None, {"x": x})[0]
    got = design.golden({"x": x})["y"]
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6 * np.abs(want).max())


@pytest.mark.sim
@pytest.mark.parametrize("kind", ["se", "spatial", "silu"])
def test_float_model_simulates_bit_exact(kind):
    x = _calib(8, 2)
    onnx2hw.compile(_float_model(kind), board="ulx3s", calib={"x": _calib()}).simulate({"x": x})


# ---- QONNX: Mul of two Quant outputs followed by a Quant ----------------------------------------

def _qonnx_model(kind):
    """Quant(x) -> Conv/Relu/Quant (y); ``gate``: y times its SE gate (GlobalAveragePool/Quant,
    1x1 Conv/Relu/Quant); ``spatial``: y times the Sigmoid/Quant of a one-channel 1x1 Conv/Quant
    of y (a per-pixel gate); ``branches``: y times a second Conv/Quant of x; then Quant."""
    from test_quant_import_qonnx import _Q
    q = _Q(9)
    x = q.quant("x", 1 / 255, 8)
    y = q.quant(q.op("Relu", [q.op("Conv", [x, q.wquant((4, 1, 3, 3), 8), q.const(q.rng.normal(0, .1, 4))],
                                   pads=[1, 1, 1, 1])]), 0.011, 8)
    if kind == "gate":
        p = q.quant(q.op("GlobalAveragePool", [y]), 0.007, 8)
        g = q.quant(q.op("Relu", [q.op("Conv", [p, q.wquant((4, 4, 1, 1), 8), q.const(q.rng.normal(0, .1, 4))])]),
                    1 / 15, 4)
    elif kind == "spatial":
        e = q.quant(q.op("Conv", [y, q.wquant((1, 4, 1, 1), 8), q.const(q.rng.normal(0, .1, 1))]), 0.02, 8,
                    signed=True)
        g = q.quant(q.op("Sigmoid", [e]), 1 / 255, 8)
    else:
        g = q.quant(q.op("Conv", [x, q.wquant((4, 1, 1, 1), 4), q.const(q.rng.normal(0, .1, 4))]), 0.013, 6,
                    signed=True)
    out = q.quant(q.op("Mul", [g, y]), 0.0031, 8, signed=True)
    return q.model(out, [1, 6, 7], [4, 6, 7])


@pytest.mark.parametrize("kind", ["gate", "spatial", "branches"])
def test_qonnx_product_equals_float_semantics(kind):
    """Golden of the integer graph against the QONNX graph's float semantics (the golden float
    executor), within one output step (the 31-bit multiplier and ROUND's ties to even), at
    least 99 % equal; and bit-exact hardware."""
    m = _qonnx_model(kind)
    graph = load(m)
    ig = to_integer_graph(graph)
    assert ig.source == "qonnx"
    mul = [layer for layer in ig.layers if isinstance(layer, Mul)]
    assert len(mul) == 1 and mul[0].product
    specs = ig.specs()
    ins = [specs[t] for t in mul[0].inputs]
    assert mul[0].gate(ins) == (4 if kind == "gate" else None) and mul[0].pixel_gate(ins) == (kind == "spatial")
    x = np.random.default_rng(2).uniform(0, 1, (32, 1, 6, 7)).astype(np.float32)
    want = golden.execute(graph, {"x": x})["y"]
    got = dequantize_outputs(ig, golden.execute(ig, quantize_inputs(ig, {"x": x})))["y"]
    lsb = lsb_apart(got, want, 0.0031)
    assert lsb.max() <= 1 and np.mean(lsb == 0) >= 0.99, (lsb.max(), np.mean(lsb == 0))
    assert_hardware_is_golden(compile_pipeline(ig), 2, input_seed=4, seed=5)


def test_square_of_one_tensor_is_bit_exact():
    """``x * x``: both operands one tensor (the pipeline forks it to the two ports)."""
    nodes, inits = [], []
    _, xd = qdq(nodes, inits, "x", "x", 0.02, 0, np.int8)
    nodes.append(helper.make_node("Mul", [xd, xd], ["m"], name="mul"))
    _, yd = qdq(nodes, inits, "m", "y", 0.03, 0, np.uint8)
    nodes.append(helper.make_node("Identity", [yd], ["out"], name="out"))
    m = qdq_model(nodes, inits, SHAPE, "out", SHAPE)
    ig = _compare(m)
    assert_hardware_is_golden(compile_pipeline(ig), 2)


def test_gate_of_one_value_per_image_is_bit_exact():
    """A gate of one value per image (a 1-channel map's mean) scales every element: one lane."""
    nodes, inits = [], []
    _, xd = qdq(nodes, inits, "x", "x", 0.02, 128)
    nodes.append(helper.make_node("Conv", [xd, _weights(nodes, inits, "w", W3[:1])], ["c"], name="conv",
                                  pads=[1, 1, 1, 1]))
    _, cd = qdq(nodes, inits, "c", "cq", 0.05, 0, np.int8)
    nodes.append(helper.make_node("GlobalAveragePool", [cd], ["p"], name="gap"))
    _, pd = qdq(nodes, inits, "p", "pq", 0.02, 0, np.int8)
    nodes.append(helper.make_node("Sigmoid", [pd], ["g"], name="sigmoid"))
    _, gd = qdq(nodes, inits, "g", "gq", 1 / 255, 0)
    nodes.append(helper.make_node("Mul", [gd, xd], ["m"], name="mul"))
    _, yd = qdq(nodes, inits, "m", "y", 0.012, 0, np.int8)
    nodes.append(helper.make_node("Identity", [yd], ["out"], name="out"))
    ig = _compare(qdq_model(nodes, inits, SHAPE, "out", SHAPE))
    mul = next(layer for layer in ig.layers if isinstance(layer, Mul))
    specs = ig.specs()
    ins = [specs[t] for t in mul.inputs]
    assert mul.gate(ins) == 1 and mul.fold_options(ins) == [(1, 1)]
    assert_hardware_is_golden(compile_pipeline(ig), 2)


def test_bipolar_operand_is_refused_on_import():
    from test_quant_import_qonnx import QONNX, _Q
    q = _Q(1)
    x = q.quant("x", 1 / 255, 8)
    c = q.op("Conv", [x, q.wquant((4, 1, 1, 1), 8)])
    q.nodes.append(helper.make_node("BipolarQuant", [c, q.const(1.0)], ["sign"], domain=QONNX, name="sign_q"))
    out = q.quant(q.op("Mul", ["sign", x]), 0.01, 8, signed=True)
    with pytest.raises(UnsupportedError, match=r"node 'mul\d+' \(Mul\): Mul of the bipolar tensor .* is not supported"):
        to_integer_graph(load(q.model(out, [1, 6, 7], [4, 6, 7])))


@pytest.mark.parametrize("k", [np.float32(-0.4), (np.arange(4, dtype=np.float32) - 1.5).reshape(4, 1, 1)],
                         ids=["scalar", "per_channel"])
def test_constant_factor_after_a_product_joins_its_multiplier(k):
    """``(x * sigmoid(maxpool(x))) * k`` with no quantizer between: one Mul layer, per-channel
    (signed) multipliers; against onnxruntime's spec session and bit-exact in hardware."""
    nodes, inits = [], []
    _, xd = qdq(nodes, inits, "x", "x", 0.02, 128)
    nodes.append(helper.make_node("MaxPool", [xd], ["mp"], name="pool", kernel_shape=[3, 3], pads=[1, 1, 1, 1]))
    _, pd = qdq(nodes, inits, "mp", "mpq", 0.02, 128)
    nodes.append(helper.make_node("Sigmoid", [pd], ["g"], name="sigmoid"))
    _, gd = qdq(nodes, inits, "g", "gq", 1 / 255, 0)
    inits.append(const("k", k))
    nodes += [helper.make_node("Mul", [xd, gd], ["p"], name="mul"), helper.make_node("Mul", ["p", "k"], ["m"],
                                                                                      name="scale")]
    _, yd = qdq(nodes, inits, "m", "y", 0.012, 0, np.int8)
    nodes.append(helper.make_node("Identity", [yd], ["out"], name="out"))
    ig = _compare(qdq_model(nodes, inits, SHAPE, "out", SHAPE))
    mul = [layer for layer in ig.layers if isinstance(layer, Mul)]
    assert len(mul) == 1 and mul[0].product and mul[0].act.channels == np.asarray(k).size
    assert_hardware_is_golden(compile_pipeline(ig), 2)
