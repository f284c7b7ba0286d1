"""ChannelSelect layer kind: Slice, Split and Gather of the channels of a quantized image, 1-D
signal or vector, and of a window of its spatial positions (a crop; one position of an axis,
which a Gather of one index drops: ``y[:, :, -1]``). Truth: onnxruntime's spec-exact session on
QDQ graphs (a selection moves codes, so the golden equals it exactly), the NumPy indexing
written here; the hardware bit-exact under random backpressure; a ShuffleNet-like unit, a
causal TCN read at its last step and a crop of a pooled map quantized from float by onnx2hw
(golden against onnxruntime on the QDQ model), compiled and simulated."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import onnx2hw
from _branch_models import const, qdq, qdq_model
from _oracle import run_spec
from _pysim_check import assert_hardware_is_golden
from _sim_fixtures import require_simulator
from onnx2hw import golden
from onnx2hw.dataflow import compile_pipeline
from onnx2hw.ir import UnsupportedError, load
from onnx2hw.layers import IntType, TensorSpec, dequantize_outputs, handlers, quantize_inputs
from onnx2hw.layers.builder import Builder
from onnx2hw.layers.channels import ChannelSelect
from onnx2hw.quant import ptq, to_integer_graph

pytestmark = pytest.mark.filterwarnings("ignore::amaranth.hdl._ir.UnusedElaboratable")


def _x(shape, n=32, seed=9):
    return np.random.default_rng(seed).uniform(-2.6, 2.6, (n,) + tuple(shape)).astype(np.float32)


def _golden(model, x):
    ig = to_integer_graph(load(model))
    return ig, dequantize_outputs(ig, golden.execute(ig, quantize_inputs(ig, {"x": x})))["out"]


def _one_op(in_shape, out_shape, make, opset=13):
    """x -> QDQ -> ``make(nodes, inits, xd) -> y`` -> QDQ on the same grid -> out."""
    nodes, inits = [], []
    _, xd = qdq(nodes, inits, "x", "x", 0.02, 128)
    y = make(nodes, inits, xd)
    _, yd = qdq(nodes, inits, y, "y", 0.02, 128)
    nodes.append(helper.make_node("Identity", [yd], ["out"], name="out"))
    return qdq_model(nodes, inits, in_shape, "out", out_shape, opset=opset)


def _slice(starts, ends, axes, steps=None):
    def make(nodes, inits, xd):
        names = ["st", "en", "ax"] + (["sp"] if steps is not None else [])
        for n, v in zip(names, (starts, ends, axes, steps)):
            inits.append(const(n, np.asarray(v, np.int64)))
        nodes.append(helper.make_node("Slice", [xd] + names, ["s"], name="slice"))
        return "s"
    return make


def _gather(indices, axis=1):
    def make(nodes, inits, xd):
        inits.append(const("idx", np.asarray(indices, np.int64)))
        nodes.append(helper.make_node("Gather", [xd, "idx"], ["g"], name="gather", axis=axis))
        return "g"
    return make


def _channels_last(make, to_last, back=None):
    """``make`` on the channels-last view (Transpose ``to_last``), its result transposed by
    ``back`` (none: read as it is)."""
    def wrapped(nodes, inits, xd):
        nodes.append(helper.make_node("Transpose", [xd], ["last"], name="to_last", perm=list(to_last)))
        y = make(nodes, inits, "last")
        if back is None:
            return y
        nodes.append(helper.make_node("Transpose", [y], ["first"], name="to_first", perm=list(back)))
        return "first"
    return wrapped


def _split_concat(sizes, order, opset=13):
    """Split of the channels into ``sizes`` (QDQ on each part), Concat of the parts in ``order``."""
    def make(nodes, inits, xd):
        outs = [f"p{k}" for k in range(len(sizes))]
        if opset >= 13:
            inits.append(const("sp", np.asarray(sizes, np.int64)))
            nodes.append(helper.make_node("Split", [xd, "sp"], outs, name="split", axis=1))
        else:
            nodes.append(helper.make_node("Split", [xd], outs, name="split", axis=1, split=list(sizes)))
        parts = [qdq(nodes, inits, o, o, 0.02, 128)[1] for o in outs]
        nodes.append(helper.make_node("Concat", [parts[k] for k in order], ["cat"], name="cat", axis=1))
        return "cat"
    return make


def _split_part(sizes, k):
    """Split of the channels into ``sizes``; part ``k`` is the output, the others are not read."""
    def make(nodes, inits, xd):
        inits.append(const("sp", np.asarray(sizes, np.int64)))
        nodes.append(helper.make_node("Split", [xd, "sp"], [f"p{j}" for j in range(len(sizes))], name="split", axis=1))
        return f"p{k}"
    return make


CASES = {
    # name: (input shape, output shape, maker, numpy formula on the NCHW tensor)
    "slice_step2": ((6, 5, 6), (3, 5, 6), _slice([0], [6], [1], [2]), lambda x: x[:, 0:6:2]),
    "slice_negative": ((6, 4, 4), (3, 4, 4), _slice([-1], [-100], [1], [-2]), lambda x: x[:, ::-2]),
    "slice_signal": ((6, 10), (4, 10), _slice([1, 0], [5, 10], [1, 2]), lambda x: x[:, 1:5]),
    "slice_vector": ((10,), (4,), _slice([6], [10], [-1]), lambda x: x[:, 6:10]),
    "gather_repeats": ((6, 3, 4), (4, 3, 4), _gather([5, 0, 0, -3]), lambda x: x[:, [5, 0, 0, 3]]),
    "gather_vector": ((6,), (6,), _gather([1, 0, 3, 2, 5, 4]), lambda x: x[:, [1, 0, 3, 2, 5, 4]]),
    "split2_swapped": ((6, 4, 5), (6, 4, 5), _split_concat((2, 4), (1, 0)), lambda x: x[:, [2, 3, 4, 5, 0, 1]]),
    "split3_uneven": ((7, 3, 3), (7, 3, 3), _split_concat((3, 1, 3), (2, 0, 1)),
                      lambda x: x[:, [4, 5, 6, 0, 1, 2, 3]]),
    "split3_signal": ((6, 9), (3, 9), _split_part((1, 2, 3), 2), lambda x: x[:, 3:6]),
    # spatial axes: a crop keeps the axis; a Gather of one index (a scalar) drops it
    "gather_last_step": ((6, 10), (6,), _gather(-1, axis=2), lambda x: x[:, :, -1]),
    "gather_first_step": ((4, 7), (4,), _gather(0, axis=-1), lambda x: x[:, :, 0]),
    "gather_row": ((4, 5, 6), (4, 6), _gather(2, axis=2), lambda x: x[:, :, 2]),
    "gather_column_negative": ((4, 5, 6), (4, 5), _gather(-2, axis=3), lambda x: x[:, :, :, -2]),
    "gather_column_range": ((4, 5, 6), (4, 5, 3), _gather([-3, -2, -1], axis=3), lambda x: x[:, :, :, 3:6]),
    "gather_rows_list_of_one": ((4, 5, 6), (4, 1, 6), _gather([4], axis=2), lambda x: x[:, :, 4:5]),
    "slice_crop": ((4, 6, 7), (4, 3, 4), _slice([1, 2], [4, -1], [2, 3]), lambda x: x[:, :, 1:4, 2:6]),
    "slice_crop_and_channels": ((6, 5, 5), (2, 3, 5), _slice([1, 1, 0], [3, 4, 5], [1, 2, 3]),
                                lambda x: x[:, 1:3, 1:4]),
    "slice_signal_tail": ((4, 10), (4, 4), _slice([-4], [1000], [2], [1]), lambda x: x[:, :, -4:]),
    # tf2onnx's Keras Cropping2D lists every axis, the batch's whole
    "slice_crop_every_axis": ((4, 6, 7), (4, 4, 5), _slice([0, 1, 2, 0], [2 ** 31 - 1, -1, 2 ** 31 - 1, 2 ** 31 - 1],
                                                           [0, 2, 3, 1]), lambda x: x[:, :, 1:5, 2:]),
    "slice_one_row_step3": ((4, 5, 6), (4, 1, 6), _slice([2], [4], [2], [3]), lambda x: x[:, :, 2:3]),
    "gather_unit_row": ((4, 1, 6), (4, 6), _gather(-1, axis=2), lambda x: x[:, :, 0]),
    "gather_unit_signal": ((4, 1), (4,), _gather(0, axis=2), lambda x: x[:, :, 0]),
    # channels-last views (an NLC / NHWC exporter's Transposes around the selection)
    "nhwc_crop": ((4, 5, 6), (4, 3, 3), _channels_last(_slice([1, 2], [4, 5], [1, 2]), (0, 2, 3, 1), (0, 3, 1, 2)),
                  lambda x: x[:, :, 1:4, 2:5]),
    "nhwc_gather_column": ((4, 5, 6), (4, 5), _channels_last(_gather(-1, axis=2), (0, 2, 3, 1), (0, 2, 1)),
                           lambda x: x[:, :, :, -1]),
}


@pytest.mark.parametrize("name", list(CASES))
def test_golden_matches_onnxruntime_exactly(name):
    in_shape, out_shape, make, formula = CASES[name]
    m = _one_op(in_shape, out_shape, make)
    x = _x(in_shape)
    ig, got = _golden(m, x)
    # the one row of a (C, 1, W) image is the signal (C, W): the same tensor, no layer
    assert any(isinstance(layer, ChannelSelect) for layer in ig.layers) != (name == "gather_unit_row")
    want = run_spec(m, {"x": x})[0]
    np.testing.assert_array_equal(got, want)
    xq = np.clip(np.rint(x / np.float32(0.02)) + 128, 0, 255)          # the input codes, QuantizeLinear's rule
    np.testing.assert_array_equal(got, ((formula(xq) - 128) * np.float32(0.02)).astype(np.float32))


@pytest.mark.parametrize("name", ["slice_step2", "split3_uneven", "gather_repeats",
                                  "slice_signal", "gather_vector", "gather_last_step", "gather_column_negative",
                                  "gather_row", "slice_crop", "slice_crop_and_channels", "gather_unit_signal",
                                  "nhwc_crop", "nhwc_gather_column"])
def test_hardware_is_bit_exact(name):
    in_shape, out_shape, make, _ = CASES[name]
    p = compile_pipeline(to_integer_graph(load(_one_op(in_shape, out_shape, make))))
    assert "channelselect" in [s.op for s in p.stages]
    assert_hardware_is_golden(p, 3, input_seed=3, seed=4)


def _builder_run(m):
    """The QDQ importer on the graph as written (no canonicalization): the Split handler itself."""
    return Builder(load(m), handlers("qdq"), "qdq").run()


@pytest.mark.parametrize("opset, form", [(11, "attribute"), (13, "input"), (18, "num_outputs")])
def test_split_handler_of_each_opset(opset, form):
    def make(nodes, inits, xd):
        if form == "num_outputs":
            nodes.append(helper.make_node("Split", [xd], ["a", "b", "c"], name="split", axis=1, num_outputs=3))
        else:
            return _split_concat((3, 2, 3), (2, 0, 1), opset)(nodes, inits, xd)
        parts = [qdq(nodes, inits, o, o, 0.02, 128)[1] for o in ("a", "b", "c")]
        nodes.append(helper.make_node("Concat", [parts[2], parts[0], parts[1]], ["cat"], name="cat", axis=1))
        return "cat"
    m = _one_op((8, 3, 3), (8, 3, 3), make, opset)
    ig = _builder_run(m)
    sel = [layer for layer in ig.layers if isinstance(layer, ChannelSelect)]
    parts = [(0, 1, 2), (3, 4, 5), (6, 7)] if form == "num_outputs" else [(0, 1, 2), (3, 4), (5, 6, 7)]
    assert [s.indices for s in sel] == parts
    x = _x((8, 3, 3))
    got = dequantize_outputs(ig, golden.execute(ig, quantize_inputs(ig, {"x": x})))["out"]
    np.testing.assert_array_equal(got, run_spec(m, {"x": x})[0])


def test_reference_is_indexing():
    layer = ChannelSelect("s", ("a",), TensorSpec("y", (2, 3, 4), IntType(8, True)), (4, 0, 0, 2))
    layer.validate([TensorSpec("a", (2, 3, 5), IntType(8, True))])
    a = np.random.default_rng(0).integers(-128, 128, (3, 2, 3, 5))
    np.testing.assert_array_equal(layer.reference(a), a[..., [4, 0, 0, 2]])
    with pytest.raises(ValueError, match="outside the 5 input channels"):
        ChannelSelect("s", ("a",), TensorSpec("y", (2, 3, 1), IntType(8, True)), (5,)).validate(
            [TensorSpec("a", (2, 3, 5), IntType(8, True))])


@pytest.mark.parametrize("make, out_shape, msg", [
    (_slice([0], [6], [2], [2]), (6, 3, 6), r"node 'slice' \(Slice\): step 2 along axis 2 \(only a contiguous"),
    (_slice([4], [0], [3], [-1]), (6, 5, 4), r"node 'slice' \(Slice\): step -1 along axis 3 "),
    (_gather([0, 2], axis=3), (6, 5, 2), r"node 'gather' \(Gather\): indices \[0, 2\] along axis 3 are not "
                                         r"consecutive"),
    (_gather([[0, 1]], axis=2), (6, 1, 2, 6), r"node 'gather' \(Gather\): indices of shape \(1, 2\) along axis 2 "),
    (_gather(0, axis=0), (6, 5, 6), r"node 'gather' \(Gather\): Gather along the batch axis"),
    (_gather(0), (5, 6), r"node 'gather' \(Gather\): indices of shape \(\) "),
])
def test_refusals_are_one_line(make, out_shape, msg):
    m = _one_op((6, 5, 6), out_shape, make)
    with pytest.raises(UnsupportedError, match=msg) as err:
        to_integer_graph(load(m))
    assert "\n" not in str(err.value)


def test_window_reference_is_slicing():
    """The window of rows and columns, then the channels, in stream order in the output's shape
    (NumPy slicing written here); a window of one pixel is the vector."""
    a = np.random.default_rng(0).integers(-128, 128, (3, 4, 5, 6))
    layer = ChannelSelect("s", ("a",), TensorSpec("y", (2, 3, 2), IntType(8, True)), (5, 1), rows=(1, 3), cols=(2, 5))
    layer.validate([TensorSpec("a", (4, 5, 6), IntType(8, True))])
    np.testing.assert_array_equal(layer.reference(a), a[:, 1:3, 2:5][..., [5, 1]])
    pixel = ChannelSelect("p", ("a",), TensorSpec("y", (6,), IntType(8, True)), tuple(range(6)), rows=(3, 4),
                          cols=(4, 5))
    pixel.validate([TensorSpec("a", (4, 5, 6), IntType(8, True))])
    np.testing.assert_array_equal(pixel.reference(a), a[:, 3, 4, :])
    with pytest.raises(ValueError, match=r"cols \(4, 6\) is not a non-empty range inside 0..5"):
        ChannelSelect("s", ("a",), TensorSpec("y", (1, 2, 6), IntType(8, True)), tuple(range(6)), rows=(0, 1),
                      cols=(4, 6)).validate([TensorSpec("a", (4, 5, 6), IntType(8, True))])
    with pytest.raises(ValueError, match="does not hold 2 pixels of 6 channels"):
        ChannelSelect("s", ("a",), TensorSpec("y", (3, 6), IntType(8, True)), tuple(range(6)), rows=(0, 1),
                      cols=(3, 5)).validate([TensorSpec("a", (4, 5, 6), IntType(8, True))])


def test_window_onto_another_grid_requantizes():
    """The last column of an image quantized onto int8, scale 0.05, zp -3: SpatialCrop (the zero
    point subtracted there) + Requantize; the codes against the formula of the ratio 0.4 (never a
    tie, so half up and half to even agree)."""
    nodes, inits = [], []
    _, xd = qdq(nodes, inits, "x", "x", 0.02, 128)
    inits.append(const("idx", np.asarray(-1, np.int64)))
    nodes.append(helper.make_node("Gather", [xd, "idx"], ["g"], name="gather", axis=3))
    _, yd = qdq(nodes, inits, "g", "y", 0.05, -3, np.int8)
    nodes.append(helper.make_node("Identity", [yd], ["out"], name="out"))
    m = qdq_model(nodes, inits, (3, 4, 5), "out", (3, 4))
    x = _x((3, 4, 5))
    ig, got = _golden(m, x)
    (sel,) = [layer for layer in ig.layers if isinstance(layer, ChannelSelect)]
    assert sel.act is not None and (sel.rows, sel.cols) == ((0, 4), (4, 5)) and sel.output.shape == (1, 4, 3)
    np.testing.assert_array_equal(got, run_spec(m, {"x": x})[0])
    xq = np.clip(np.rint(x / np.float32(0.02)) + 128, 0, 255).astype(np.int64)
    codes = np.clip(-3 + np.floor((xq[:, :, :, -1] - 128) * 0.4 + 0.5), -128, 127)   # formula, round half up
    np.testing.assert_array_equal(got, ((codes + 3) * np.float32(0.05)).astype(np.float32))
    p = compile_pipeline(ig)
    assert [b.kind for s in p.stages if s.op == "channelselect" for b in s.blocks] == ["SpatialCrop", "Requantize"]
    assert_hardware_is_golden(p, 3, input_seed=3, seed=4)


def test_crop_and_channels_lower_to_both_blocks():
    in_shape, out_shape, make, _ = CASES["slice_crop_and_channels"]
    p = compile_pipeline(to_integer_graph(load(_one_op(in_shape, out_shape, make))))
    assert [b.kind for s in p.stages if s.op == "channelselect" for b in s.blocks] == ["SpatialCrop",
                                                                                        "ChannelSelectUnit"]


def test_qoperator_slice_of_integers():
    """QOperator: the Slice reads the int8 codes themselves (QuantizeLinear -> Slice ->
    DequantizeLinear), as onnxruntime's QOperator quantizer writes pass-through ops."""
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"], name="xQ"),
             helper.make_node("Slice", ["xq", "st", "en", "ax"], ["sq"], name="slice"),
             helper.make_node("DequantizeLinear", ["sq", "xs", "xz"], ["out"], name="yDQ")]
    inits = [const("xs", np.float32(0.02)), const("xz", 3, np.int8), const("st", np.asarray([2], np.int64)),
             const("en", np.asarray([5], np.int64)), const("ax", np.asarray([1], np.int64))]
    m = qdq_model(nodes, inits, (6, 4, 4), "out", (3, 4, 4))
    x = _x((6, 4, 4))
    ig, got = _golden(m, x)
    assert ig.source == "qoperator" or any(isinstance(layer, ChannelSelect) for layer in ig.layers)
    np.testing.assert_array_equal(got, run_spec(m, {"x": x})[0])


def _shuffle_unit():
    """A ShuffleNet v2-like unit as PyTorch writes it: a 1x1 stem, the channel split, the right
    half through 1x1 conv -> ReLU -> depthwise 3x3 -> 1x1 conv -> ReLU, the left half as it is,
    Concat, the channel shuffle (Reshape -> Transpose -> Reshape, groups of 2), a 1x1 conv."""
    rng = np.random.default_rng(5)

    def w(*s):
        return (rng.standard_normal(s) * 0.4).astype(np.float32)
    c = 8
    inits = {"w0": w(c, 3, 1, 1), "b0": w(c), "w1": w(4, 4, 1, 1), "b1": w(4), "wd": w(4, 1, 3, 3), "bd": w(4),
             "w2": w(4, 4, 1, 1), "b2": w(4), "w3": w(6, c, 1, 1), "b3": w(6), "sp": np.asarray([4, 4], np.int64),
             "s5": np.asarray([-1, 2, 4, 6, 6], np.int64), "s4": np.asarray([-1, c, 6, 6], np.int64)}
    n = [helper.make_node("Conv", ["x", "w0", "b0"], ["c0"], name="stem"),
         helper.make_node("Relu", ["c0"], ["r0"], name="relu0"),
         helper.make_node("Split", ["r0", "sp"], ["left", "right"], axis=1, name="split"),
         helper.make_node("Conv", ["right", "w1", "b1"], ["c1"], name="pw1"),
         helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
         helper.make_node("Conv", ["r1", "wd", "bd"], ["cd"], pads=[1, 1, 1, 1], group=4, name="dw"),
         helper.make_node("Conv", ["cd", "w2", "b2"], ["c2"], name="pw2"),
         helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
         helper.make_node("Concat", ["left", "r2"], ["cat"], axis=1, name="cat"),
         helper.make_node("Reshape", ["cat", "s5"], ["v5"], name="view5"),
         helper.make_node("Transpose", ["v5"], ["t5"], perm=[0, 2, 1, 3, 4], name="shuffle"),
         helper.make_node("Reshape", ["t5", "s4"], ["v4"], name="view4"),
         helper.make_node("Conv", ["v4", "w3", "b3"], ["y"], name="head")]
    g = helper.make_graph(n, "shuffle_unit", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 6, 6])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 6, 6, 6])],
                          [onnx.numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m, full_check=True)
    return m


@pytest.fixture(scope="module")
def shuffle_design():
    rng = np.random.default_rng(1)
    return onnx2hw.compile(_shuffle_unit(), calib={"x": rng.uniform(-1, 1, (32, 3, 6, 6)).astype(np.float32)})


def test_shuffle_unit_compiles_with_the_shuffle_in_the_weights(shuffle_design):
    ig = shuffle_design.integer
    sel = [layer for layer in ig.layers if isinstance(layer, ChannelSelect)]
    assert sorted(s.indices for s in sel) == [(0, 1, 2, 3), (4, 5, 6, 7)]   # the split; the shuffle is in "head"
    ops = [s.op for s in shuffle_design.pipeline.stages]
    assert ops.count("channelselect") == 2 and "concat" in ops
    p = compile_pipeline(ig, folding=shuffle_design.pipeline.folding)
    assert_hardware_is_golden(p, 2, input_seed=5, seed=6)


@pytest.mark.sim
def test_shuffle_unit_simulates_bit_exact(shuffle_design):
    require_simulator("verilator")
    x = np.random.default_rng(2).uniform(-1, 1, (3, 3, 6, 6)).astype(np.float32)
    y = shuffle_design.simulate({"x": x})["y"]   # raises unless bit-exact against the golden
    ig = shuffle_design.integer
    want = dequantize_outputs(ig, golden.execute(ig, quantize_inputs(ig, {"x": x})))
    np.testing.assert_array_equal(y, want["y"])


def test_qonnx_gather_between_quantizers():
    """QONNX: Quant -> Gather of the channels -> Quant on the same grid (8-bit signed, scale
    0.05); the codes against the int64 formula written here from qonnx's Quant (ROUND: half to
    even, clipped to -128..127), then indexed."""
    q = "qonnx.custom_op.general"
    inits = [onnx.numpy_helper.from_array(np.asarray(v, np.float32), n) for n, v in
             (("s", 0.05), ("z", 0.0), ("b", 8.0))] + [const("idx", np.asarray([3, 1, 2, 0, 3], np.int64))]
    nodes = [helper.make_node("Quant", ["x", "s", "z", "b"], ["xq"], domain=q, name="xq", signed=1),
             helper.make_node("Gather", ["xq", "idx"], ["g"], name="gather", axis=1),
             helper.make_node("Quant", ["g", "s", "z", "b"], ["out"], domain=q, name="yq", signed=1)]
    g = helper.make_graph(nodes, "qonnx_gather",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4, 3, 3])],
                          [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["N", 5, 3, 3])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid(q, 1)])
    x = _x((4, 3, 3), n=16)
    ig, got = _golden(m, x)
    assert [type(layer).__name__ for layer in ig.layers] == ["ChannelSelect"]
    codes = np.clip(np.rint(x / np.float32(0.05)), -128, 127).astype(np.int64)   # float32 division, as qonnx
    np.testing.assert_array_equal(np.rint(got / np.float32(0.05)).astype(np.int64), codes[:, [3, 1, 2, 0, 3]])


def test_channels_last_split_between_transposes():
    """tf2onnx's form of Keras ``tf.split(x, 2, axis=-1)``: Transpose to NHWC, Split on the last
    axis, each part back to NCHW (QDQ after each part), Concat of the parts swapped."""
    def make(nodes, inits, xd):
        inits.append(const("sp", np.asarray([2, 4], np.int64)))
        nodes += [helper.make_node("Transpose", [xd], ["nhwc"], name="to_nhwc", perm=[0, 2, 3, 1]),
                  helper.make_node("Split", ["nhwc", "sp"], ["a", "b"], name="split", axis=-1)]
        parts = []
        for o in ("a", "b"):
            nodes.append(helper.make_node("Transpose", [o], [f"{o}_t"], name=f"{o}_to_nchw", perm=[0, 3, 1, 2]))
            parts.append(qdq(nodes, inits, f"{o}_t", o, 0.02, 128)[1])
        nodes.append(helper.make_node("Concat", parts[::-1], ["cat"], name="cat", axis=1))
        return "cat"
    m = _one_op((6, 3, 4), (6, 3, 4), make)
    x = _x((6, 3, 4))
    ig, got = _golden(m, x)
    assert sorted(layer.indices for layer in ig.layers if isinstance(layer, ChannelSelect)) == [(0, 1), (2, 3, 4, 5)]
    np.testing.assert_array_equal(got, run_spec(m, {"x": x})[0])


def _requant_gather():
    """x (uint8, scale 0.02, zp 128) -> Gather of channels [2, 0, 2] -> QuantizeLinear onto int8,
    scale 0.05, zp -3: the selection requantized by the ratio 0.4 (no code lands on a rounding
    tie: 0.4 k is never n + 1/2 for integers k, n, so half up and half to even agree)."""
    nodes, inits = [], []
    _, xd = qdq(nodes, inits, "x", "x", 0.02, 128)
    inits.append(const("idx", np.asarray([2, 0, 2], np.int64)))
    nodes.append(helper.make_node("Gather", [xd, "idx"], ["g"], name="gather", axis=1))
    _, yd = qdq(nodes, inits, "g", "y", 0.05, -3, np.int8)
    nodes.append(helper.make_node("Identity", [yd], ["out"], name="out"))
    return qdq_model(nodes, inits, (3, 4, 4), "out", (3, 4, 4))


def test_quantizer_on_another_grid_requantizes():
    m = _requant_gather()
    x = _x((3, 4, 4))
    ig, got = _golden(m, x)
    (sel,) = [layer for layer in ig.layers if isinstance(layer, ChannelSelect)]
    assert sel.act is not None and sel.zero == 128 and sel.output.dtype == IntType(8, True)
    np.testing.assert_array_equal(got, run_spec(m, {"x": x})[0])
    xq = np.clip(np.rint(x / np.float32(0.02)) + 128, 0, 255).astype(np.int64)
    codes = np.clip(-3 + np.floor((xq[:, [2, 0, 2]] - 128) * 0.4 + 0.5), -128, 127)   # formula, round half up
    np.testing.assert_array_equal(got, ((codes + 3) * np.float32(0.05)).astype(np.float32))
    p = compile_pipeline(ig)
    assert [b.kind for s in p.stages if s.op == "channelselect" for b in s.blocks] == ["ChannelSelectUnit",
                                                                                        "Requantize"]
    assert_hardware_is_golden(p, 3, input_seed=3, seed=4)



def test_qonnx_slice_requantized_by_the_next_quant():
    """Brevitas' form of a channel split: a tensor out of one Quant (8-bit, scale 0.05) sliced, the
    slice quantized by another Quant (4-bit signed, scale 0.15): a ChannelSelect that requantizes.
    Expected from the int64 formula of qonnx's Quant (ROUND, float32 division): the input codes
    ``c = clip(rint(x / 0.05), -128, 127)``, then ``clip(rint(c / 3), -8, 7)`` (``c / 3`` is never
    a tie, so the hardware's half-up rounding agrees)."""
    q = "qonnx.custom_op.general"
    inits = [onnx.numpy_helper.from_array(np.asarray(v, np.float32), n) for n, v in
             (("s", 0.05), ("s2", 0.15), ("z", 0.0), ("b", 8.0), ("b4", 4.0))]
    inits += [const(n, np.asarray(v, np.int64)) for n, v in (("st", [1]), ("en", [3]), ("ax", [1]))]
    nodes = [helper.make_node("Quant", ["x", "s", "z", "b"], ["xq"], domain=q, name="xq", signed=1),
             helper.make_node("Slice", ["xq", "st", "en", "ax"], ["sl"], name="slice"),
             helper.make_node("Quant", ["sl", "s2", "z", "b4"], ["out"], domain=q, name="yq", signed=1)]
    g = helper.make_graph(nodes, "qonnx_slice",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4, 3, 3])],
                          [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["N", 2, 3, 3])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid(q, 1)])
    x = _x((4, 3, 3), n=16)
    ig, got = _golden(m, x)
    (sel,) = ig.layers
    assert isinstance(sel, ChannelSelect) and sel.indices == (1, 2) and sel.act is not None
    c = np.clip(np.rint(x / np.float32(0.05)), -128, 127).astype(np.int64)[:, 1:3]
    np.testing.assert_array_equal(np.rint(got / np.float32(0.15)).astype(np.int64), np.clip(np.rint(c / 3), -8, 7))
    assert_hardware_is_golden(compile_pipeline(ig), 3, input_seed=3, seed=4)


# ---- end to end: float models as PyTorch writes them, quantized by onnx2hw ------------------------

def _float_model(nodes, x_shape, y_shape, inits, opset=13):
    g = helper.make_graph(nodes, "spatial", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", *x_shape])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", *y_shape])],
                          [onnx.numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    onnx.checker.check_model(m, full_check=True)
    return m


def _w(rng, *shape):
    return (rng.standard_normal(shape) * 0.4).astype(np.float32)


def _tcn_last_step():
    """A causal TCN keyword spotter classifying from its last time step, as the TorchScript
    exporter writes ``fc(relu(conv(F.pad(x, (4, 0))))[:, :, -1])``: Conv1d(4 -> 8, 3, dilation
    2, pads [4, 0]), Relu, ``Gather(indices=-1 (a scalar), axis=2)``, Gemm(transB=1) to 3 classes."""
    rng = np.random.default_rng(11)
    inits = {"W": _w(rng, 8, 4, 3), "b": _w(rng, 8), "last": np.asarray(-1, np.int64), "Wf": _w(rng, 3, 8),
             "bf": _w(rng, 3)}
    nodes = [helper.make_node("Conv", ["x", "W", "b"], ["c"], name="conv", kernel_shape=[3], dilations=[2],
                              pads=[4, 0]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Gather", ["r", "last"], ["g"], name="select", axis=2),
             helper.make_node("Gemm", ["g", "Wf", "bf"], ["y"], name="fc", transB=1)]
    return _float_model(nodes, (4, 30), (3,), inits)


def _pool_crop():
    """An image crop no convolution absorbs: Conv 3x3 (pads 1), Relu, MaxPool 2x2 stride 2, then
    ``Slice`` of rows 1:3 and columns 0:3 of the pooled 4x4 map, a 1x1 Conv."""
    rng = np.random.default_rng(12)
    inits = {"W": _w(rng, 6, 3, 3, 3), "b": _w(rng, 6), "st": np.asarray([1, 0], np.int64),
             "en": np.asarray([3, 3], np.int64), "ax": np.asarray([2, 3], np.int64), "W2": _w(rng, 4, 6, 1, 1),
             "b2": _w(rng, 4)}
    nodes = [helper.make_node("Conv", ["x", "W", "b"], ["c"], name="conv", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("MaxPool", ["r"], ["p"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Slice", ["p", "st", "en", "ax"], ["s"], name="crop"),
             helper.make_node("Conv", ["s", "W2", "b2"], ["y"], name="head", kernel_shape=[1, 1])]
    return _float_model(nodes, (3, 8, 8), (4, 2, 3), inits)


def _nlc_last_step(gather: bool):
    """The same classifier with the features channels-last, as tf2onnx writes Keras
    ``Dense(3)(x[:, -1, :])`` after a Conv1D: Transpose to (N, L, C), ``Slice(starts=-1,
    ends=INT64_MAX, axes=1)`` and ``Squeeze(axes=1)`` (``gather``: ``Gather(indices=-1, axis=1)``),
    MatMul + Add."""
    rng = np.random.default_rng(13)
    inits = {"W": _w(rng, 8, 4, 3), "b": _w(rng, 8), "st": np.asarray([-1], np.int64),
             "en": np.asarray([np.iinfo(np.int64).max], np.int64), "ax": np.asarray([1], np.int64),
             "last": np.asarray(-1, np.int64), "Wf": _w(rng, 8, 3), "bf": _w(rng, 3)}
    select = [helper.make_node("Gather", ["t", "last"], ["v"], name="last", axis=1)] if gather else \
        [helper.make_node("Slice", ["t", "st", "en", "ax"], ["s"], name="last"),
         helper.make_node("Squeeze", ["s", "ax"], ["v"], name="squeeze")]
    nodes = [helper.make_node("Conv", ["x", "W", "b"], ["c"], name="conv", kernel_shape=[3], pads=[2, 0]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Transpose", ["r"], ["t"], name="to_nlc", perm=[0, 2, 1]), *select,
             helper.make_node("MatMul", ["v", "Wf"], ["mm"], name="fc"),
             helper.make_node("Add", ["mm", "bf"], ["y"], name="fc_bias")]
    used = {i for n in nodes for i in n.input}
    return _float_model(nodes, (4, 30), (3,), {k: v for k, v in inits.items() if k in used})


_FLOAT = {"tcn_last_step": (_tcn_last_step, (4, 30), ((0, 1), (29, 30))),
          "nlc_slice_last_step": (lambda: _nlc_last_step(False), (4, 30), ((0, 1), (29, 30))),
          "nlc_gather_last_step": (lambda: _nlc_last_step(True), (4, 30), ((0, 1), (29, 30))),
          "pool_crop": (_pool_crop, (3, 8, 8), ((1, 3), (0, 3)))}


@pytest.fixture(scope="module", params=list(_FLOAT))
def spatial_design(request):
    make, shape, _ = _FLOAT[request.param]
    x = np.random.default_rng(4).uniform(-1, 1, (32,) + shape).astype(np.float32)
    return request.param, make(), x, onnx2hw.compile(make(), calib={"x": x})


def test_spatial_selection_from_float_matches_onnxruntime(spatial_design):
    """The golden against onnxruntime's spec session on the QDQ model onnx2hw's quantizer writes
    (the same integers dequantized in float32: within 1e-6 of the output's magnitude)."""
    name, m, x, design = spatial_design
    (sel,) = [layer for layer in design.integer.layers if isinstance(layer, ChannelSelect)]
    assert (sel.rows, sel.cols) == _FLOAT[name][2]
    want = run_spec(ptq.quantize(m, {"x": x}), {"x": x[:8]})[0]
    got = design.golden({"x": x[:8]})["y"]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6 * np.abs(want).max())
    assert_hardware_is_golden(compile_pipeline(design.integer, folding=design.pipeline.folding), 2,
                              input_seed=5, seed=6)


@pytest.mark.sim
def test_spatial_selection_simulates_bit_exact(spatial_design):
    require_simulator("verilator")
    _, _, x, design = spatial_design
    design.simulate({"x": x[:3]})   # MismatchError unless bit-exact against the golden
