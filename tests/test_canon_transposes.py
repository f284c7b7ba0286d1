"""onnx2hw.canon.transposes and onnx2hw.canon.channels_last: layouts moved until they cancel or
are absorbed into a dense layer (Keras Conv1D's NWC <-> NCW, QONNX channels-last nodes)."""
import numpy as np
from onnx import TensorProto as T, helper as h
from onnx.reference import ReferenceEvaluator

from _canon_models import assert_same_function, model, ops, w
from onnx2hw.canon import canonicalize
from onnx2hw.canon.channels_last import CHANNELS_LAST
from onnx2hw.canon.transposes import sink_transposes
from onnx2hw.ir import load
from onnx2hw.ir.simplify import to_model


def _conv1d_nwc():
    """Keras Conv1D as tf2onnx writes it: NWC input, Transpose to NCW around each Conv, then
    Flatten of the NWC result into a dense layer."""
    nodes = [h.make_node("Transpose", ["x"], ["t0"], perm=[0, 2, 1]), h.make_node("Conv", ["t0", "W1", "b1"], ["c1"]),
             h.make_node("Transpose", ["c1"], ["t1"], perm=[0, 2, 1]), h.make_node("Relu", ["t1"], ["r1"]),
             h.make_node("Transpose", ["r1"], ["t2"], perm=[0, 2, 1]), h.make_node("Conv", ["t2", "W2", "b2"], ["c2"]),
             h.make_node("Transpose", ["c2"], ["t3"], perm=[0, 2, 1]), h.make_node("Relu", ["t3"], ["r2"]),
             h.make_node("Flatten", ["r2"], ["f"]), h.make_node("MatMul", ["f", "Wd"], ["md"]),
             h.make_node("Add", ["md", "bd"], ["y"])]
    inits = {"W1": w(8, 4, 3), "b1": w(8), "W2": w(6, 8, 3), "b2": w(6), "Wd": w(36, 5), "bd": w(5)}
    return model(nodes, ("x", ["N", 10, 4]), ("y", ["N", 5]), inits)


def test_conv1d_transposes_cancel_and_the_last_is_absorbed():
    m = _conv1d_nwc()
    g = canonicalize(load(m))
    assert ops(g) == ["Transpose", "Conv", "Relu", "Conv", "Relu", "Reshape", "Gemm"]
    assert_same_function(m, g)


def test_transpose_through_a_constant_operand():
    nodes = [h.make_node("Transpose", ["x"], ["t"], perm=[0, 2, 3, 1]), h.make_node("Add", ["t", "c"], ["a"]),
             h.make_node("Relu", ["a"], ["r"]), h.make_node("Transpose", ["r"], ["y"], perm=[0, 3, 1, 2])]
    m = model(nodes, ("x", ["N", 3, 4, 5]), ("y", ["N", 3, 4, 5]), {"c": w(3)})
    g = sink_transposes(load(m))
    assert ops(g) == ["Add", "Relu"]
    assert_same_function(m, g)


def test_transpose_that_meets_no_inverse_stays():
    nodes = [h.make_node("Transpose", ["x"], ["t"], perm=[0, 2, 1]), h.make_node("Relu", ["t"], ["y"])]
    m = model(nodes, ("x", ["N", 3, 4]), ("y", ["N", 4, 3]), {})
    g = canonicalize(load(m))
    assert ops(g) == ["Transpose", "Relu"]   # moving it would gain nothing: it stays
    assert_same_function(m, g)


def _channels_last_model():
    """What qonnx's ConvertToChannelsLastAndClean writes for Conv -> Relu -> MaxPool: the input
    transposed to NHWC, channels-last nodes (the Conv's weight stored OHWI), back to NCHW."""
    wt = w(4, 3, 3, 3)
    nodes = [h.make_node("Transpose", ["x"], ["xl"], perm=[0, 2, 3, 1]),
             h.make_node("Conv", ["xl", "Wl", "b"], ["c"], domain=CHANNELS_LAST, kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                         strides=[1, 1], dilations=[1, 1], group=1),
             h.make_node("Relu", ["c"], ["r"]),
             h.make_node("MaxPool", ["r"], ["p"], domain=CHANNELS_LAST, kernel_shape=[2, 2], strides=[2, 2]),
             h.make_node("Transpose", ["p"], ["y"], perm=[0, 3, 1, 2])]
    m = model(nodes, ("x", ["N", 3, 6, 6]), ("y", ["N", 4, 3, 3]), {"Wl": np.transpose(wt, (0, 2, 3, 1)), "b": w(4)},
              domains=[CHANNELS_LAST])
    std = [h.make_node("Conv", ["x", "W", "b"], ["c"], pads=[1, 1, 1, 1]), h.make_node("Relu", ["c"], ["r"]),
           h.make_node("MaxPool", ["r"], ["y"], kernel_shape=[2, 2], strides=[2, 2])]
    return m, model(std, ("x", ["N", 3, 6, 6]), ("y", ["N", 4, 3, 3]), {"W": wt, "b": m.graph.initializer[1]
                                                                       and np.asarray(_init(m, "b"))})


def _init(m, name):
    from onnx import numpy_helper
    return numpy_helper.to_array(next(t for t in m.graph.initializer if t.name == name))


def test_channels_last_nodes_become_the_channels_first_graph():
    m, std = _channels_last_model()
    g = canonicalize(load(m))
    assert ops(g) == ["Conv", "Relu", "MaxPool"] and all(n.domain == "" for n in g.nodes)
    assert CHANNELS_LAST not in g.opsets
    x = np.random.default_rng(3).standard_normal((2, 3, 6, 6)).astype(np.float32)
    # the channels-first model with the weight as stored before qonnx's conversion is the oracle
    want = ReferenceEvaluator(std).run(None, {"x": x})[0]
    got = ReferenceEvaluator(to_model(g)).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)


def test_qonnx_quantizer_is_crossed_with_its_parameters():
    """A per-channel Quant between two Transposes: its scale moves with the layout."""
    q = "qonnx.custom_op.general"
    nodes = [h.make_node("Transpose", ["x"], ["t"], perm=[0, 2, 3, 1]),
             h.make_node("Quant", ["t", "sc", "zp", "bw"], ["qt"], domain=q, signed=1, narrow=0, rounding_mode="ROUND"),
             h.make_node("Transpose", ["qt"], ["y"], perm=[0, 3, 1, 2])]
    m = model(nodes, ("x", ["N", 3, 2, 2]), ("y", ["N", 3, 2, 2]),
              {"sc": np.array([0.1, 0.2, 0.3], np.float32), "zp": np.float32(0), "bw": np.float32(4)}, domains=[q])
    g = sink_transposes(load(m))
    assert ops(g) == ["Quant"]
    assert g.initializers[g.nodes[0].inputs[1]].shape == (1, 3, 1, 1)


def test_reduction_of_a_transposed_tensor():
    """PyTorch's mean over the time axis of an NWC signal (Conv1D between Transposes at opset 9)."""
    for keep, out in ((0, ["N", 6]), (1, ["N", 1, 6])):
        nodes = [h.make_node("Conv", ["x", "W"], ["c"]), h.make_node("Transpose", ["c"], ["t"], perm=[0, 2, 1]),
                 h.make_node("Relu", ["t"], ["r"]), h.make_node("ReduceMean", ["r"], ["y"], axes=[1], keepdims=keep)]
        m = model(nodes, ("x", ["N", 3, 8]), ("y", out), {"W": w(6, 3, 3)}, opset=11)
        g = sink_transposes(load(m))
        if keep:   # the Transpose would only move below the reduction: it stays
            assert ops(g) == ["Conv", "Transpose", "Relu", "ReduceMean"]
        else:
            assert ops(g) == ["Conv", "Relu", "ReduceMean"] and g.nodes[2].attrs["axes"] == (2,)
        assert_same_function(m, g)


def test_quantized_bias_moves_with_the_layout():
    """QKeras through qonnx: the Conv1D bias is a QONNX Quant of a constant, added on the NWC
    tensor between two Transposes; the Transposes meet once the quantized bias is transposed."""
    q = "qonnx.custom_op.general"
    nodes = [h.make_node("Conv", ["x", "W"], ["c"]), h.make_node("Transpose", ["c"], ["t"], perm=[0, 2, 1]),
             h.make_node("Quant", ["b", "s", "z", "bw"], ["bq"], domain=q, signed=1, narrow=0, rounding_mode="ROUND"),
             h.make_node("Add", ["t", "bq"], ["a"]), h.make_node("Relu", ["a"], ["r"]),
             h.make_node("Transpose", ["r"], ["y"], perm=[0, 2, 1])]
    m = model(nodes, ("x", ["N", 3, 8]), ("y", ["N", 4, 6]),
              {"W": w(4, 3, 3), "b": w(4), "s": np.float32(0.125), "z": np.float32(0), "bw": np.float32(8)}, domains=[q])
    g = sink_transposes(load(m))
    assert "Transpose" not in ops(g)
    add = next(n for n in g.nodes if n.op_type == "Add")
    bias = next(n for n in g.nodes if n.op_type == "Quant" and n.outputs[0] in add.inputs)
    assert g.initializers[bias.inputs[0]].shape == (1, 4, 1)
