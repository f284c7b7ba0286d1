"""onnx2hw.canon.pads: a zero Pad in front of a Conv (or an AveragePool counting its padding) is
the window op's own padding (onnxruntime with optimizations off as the oracle of both graphs)."""
import numpy as np
import pytest
from onnx import helper as h

from _canon_models import assert_same_function, model, ops, w
from onnx2hw.canon import canonicalize
from onnx2hw.canon.pads import ceil_pools, pads_into_windows
from onnx2hw.ir import load


def _pad(opset, pads, **kw):
    if opset < 11:
        return h.make_node("Pad", ["r"], ["p"], pads=pads, **kw)
    return h.make_node("Pad", ["r", "pads"], ["p"], **kw)


@pytest.mark.parametrize("opset", [9, 11, 13])
def test_zero_pad_joins_the_conv(opset):
    pads = [0, 0, 1, 2, 0, 0, 2, 1]
    nodes = [h.make_node("Relu", ["x"], ["r"]), _pad(opset, pads),
             h.make_node("Conv", ["p", "W"], ["y"], pads=[1, 0, 0, 1])]
    inits = {"W": w(2, 3, 3, 3)} | ({"pads": np.array(pads, np.int64)} if opset >= 11 else {})
    m = model(nodes, ("x", ["N", 3, 6, 6]), ("y", ["N", 2, 8, 8]), inits, opset=opset)
    g = pads_into_windows(load(m))
    assert ops(g) == ["Relu", "Conv"] and g.nodes[1].attrs["pads"] == (2, 2, 2, 2)
    assert_same_function(m, g)


def test_zero_pad_joins_an_average_pool_that_counts_it():
    nodes = [h.make_node("Relu", ["x"], ["r"]), _pad(13, None),
             h.make_node("AveragePool", ["p"], ["y"], kernel_shape=[3, 3], count_include_pad=1)]
    m = model(nodes, ("x", ["N", 2, 5, 5]), ("y", ["N", 2, 5, 5]), {"pads": np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64)})
    g = pads_into_windows(load(m))
    assert ops(g) == ["Relu", "AveragePool"]
    assert_same_function(m, g)


@pytest.mark.parametrize("case", ["reflect", "value", "channels", "maxpool"])
def test_other_pads_stay(case):
    pads = np.array([0, 1 if case == "channels" else 0, 1, 1, 0, 0, 1, 1], np.int64)
    kw = {"mode": "reflect"} if case == "reflect" else {}
    inputs = ["r", "pads"] + (["v"] if case == "value" else [])
    reader = h.make_node("MaxPool", ["p"], ["y"], kernel_shape=[3, 3]) if case == "maxpool" else \
        h.make_node("Conv", ["p", "W"], ["y"])
    act = "Tanh" if case == "maxpool" else "Relu"    # a maximum of a tensor that may be negative
    nodes = [h.make_node(act, ["x"], ["r"]), h.make_node("Pad", inputs, ["p"], **kw), reader]
    cin = 3 + (case == "channels")
    m = model(nodes, ("x", ["N", 3, 6, 6]), ("y", ["N", None, None, None]), {"pads": pads, "v": np.float32(0.5), "W": w(2, cin, 3, 3)})
    assert "Pad" in ops(pads_into_windows(load(m)))


@pytest.mark.parametrize("act", ["Relu", "Clip"])
def test_zero_pad_joins_a_max_pool_of_a_tensor_never_negative(act):
    """PyTorch's ``max_pool1d(F.pad(relu(x), (1, 0)), 2)``: the zeros and the pool's own padding
    give the same maximum of values that are never negative."""
    ins = ["x", "lo", "hi"] if act == "Clip" else ["x"]
    nodes = [h.make_node(act, ins, ["r"]), _pad(13, None),
             h.make_node("MaxPool", ["p"], ["y"], kernel_shape=[2, 3], strides=[2, 1], pads=[0, 1, 0, 0])]
    m = model(nodes, ("x", ["N", 2, 6, 6]), ("y", ["N", 2, 3, 6]),
              {"pads": np.array([0, 0, 1, 0, 0, 0, 0, 1], np.int64), "lo": np.float32(0), "hi": np.float32(6)})
    g = pads_into_windows(load(m))
    assert ops(g) == [act, "MaxPool"] and g.nodes[1].attrs["pads"] == (1, 1, 0, 1)
    assert_same_function(m, g)


def test_pad_of_nothing_goes():
    """PyTorch's avg_pool2d at opset 9 writes a Pad of all zeros (attribute form) before the pool."""
    nodes = [h.make_node("Relu", ["x"], ["r"]), _pad(9, [0] * 8),
             h.make_node("AveragePool", ["p"], ["y"], kernel_shape=[2, 2], strides=[2, 2])]
    m = model(nodes, ("x", ["N", 2, 4, 4]), ("y", ["N", 2, 2, 2]), {}, opset=9)
    g = pads_into_windows(load(m))
    assert ops(g) == ["Relu", "AveragePool"]
    assert_same_function(m, g)


@pytest.mark.parametrize("size, kernel, stride, pads", [(7, 2, 2, [0, 0, 0, 0]), (9, 3, 2, [0, 0, 0, 0]),
                                                        (6, 3, 2, [1, 1, 1, 1]), (8, 2, 2, [0, 0, 0, 0])])
def test_ceil_mode_max_pool_is_end_padding(size, kernel, stride, pads):
    """PyTorch's MaxPool2d(ceil_mode=True) on an odd feature map: a partial last window."""
    nodes = [h.make_node("Relu", ["x"], ["r"]),
             h.make_node("MaxPool", ["r"], ["y"], kernel_shape=[kernel] * 2, strides=[stride] * 2, pads=pads, ceil_mode=1)]
    out = -(-(size + pads[0] + pads[2] - kernel) // stride) + 1
    if (out - 1) * stride >= size + pads[0]:
        out -= 1
    m = model(nodes, ("x", ["N", 2, size, size]), ("y", ["N", 2, out, out]), {}, opset=13)
    g = ceil_pools(load(m))
    assert g.nodes[1].attrs["ceil_mode"] == 0
    assert_same_function(m, g)


@pytest.mark.parametrize("size, kernel, stride, pads", [(7, 3, 2, [1, 0, 0, 2]), (8, 2, 2, [0, 1, 1, 0]),
                                                        (9, 3, 3, [2, 0, 0, 1])])
def test_ceil_mode_max_pool_with_asymmetric_pads(size, kernel, stride, pads):
    nodes = [h.make_node("Relu", ["x"], ["r"]),
             h.make_node("MaxPool", ["r"], ["y"], kernel_shape=[kernel] * 2, strides=[stride] * 2, pads=pads, ceil_mode=1)]
    m = model(nodes, ("x", ["N", 2, size, size + 1]), ("y", ["N", 2, None, None]), {}, opset=13)
    g = ceil_pools(load(m))
    assert g.nodes[1].attrs["ceil_mode"] == 0
    assert_same_function(m, g)


@pytest.mark.parametrize("auto", ["VALID", "SAME_UPPER", "SAME_LOWER"])
def test_ceil_mode_max_pool_with_auto_pad(auto):
    """VALID pads nothing, so its ceil-mode windows become explicit end padding; SAME has
    ceil(n / s) windows whatever ceil_mode says (onnxruntime): its padding becomes explicit and
    ceil_mode goes."""
    nodes = [h.make_node("Relu", ["x"], ["r"]),
             h.make_node("MaxPool", ["r"], ["y"], kernel_shape=[3, 2], strides=[2, 2], auto_pad=auto, ceil_mode=1)]
    m = model(nodes, ("x", ["N", 2, 8, 7]), ("y", ["N", 2, None, None]), {}, opset=13)
    g = ceil_pools(load(m))
    attrs = g.nodes[1].attrs
    assert attrs.get("ceil_mode", 0) == 0 and "auto_pad" not in attrs
    assert auto != "VALID" or tuple(attrs["pads"]) == (0, 0, 1, 1)
    assert_same_function(m, g)


@pytest.mark.parametrize("pads, joins", [([0, 0, 1, 1, 0, 0, 0, 0], True), ([0, 0, 0, 0, 0, 0, 1, 1], False)])
def test_zero_pad_joins_a_ceil_mode_average_pool_only_at_the_start(pads, joins):
    """A ceil-mode pool's last window may start in a Pad's end padding but not in its own: a Pad
    with end amounts stays (folded, the output would lose a row and a column)."""
    nodes = [h.make_node("Relu", ["x"], ["r"]), _pad(13, None),
             h.make_node("AveragePool", ["p"], ["y"], kernel_shape=[2, 2], strides=[2, 2], count_include_pad=1,
                         ceil_mode=1)]
    m = model(nodes, ("x", ["N", 2, 4, 5]), ("y", ["N", 2, None, None]), {"pads": np.array(pads, np.int64)})
    g = pads_into_windows(load(m))
    assert ("Pad" not in ops(g)) == joins
    assert_same_function(m, g)


@pytest.mark.parametrize("op, auto, cip", [("AveragePool", "SAME_UPPER", 1), ("AveragePool", "SAME_LOWER", 0),
                                          ("MaxPool", "SAME_LOWER", 0), ("AveragePool", "SAME_UPPER", 0)])
def test_same_padding_of_pools_becomes_explicit(op, auto, cip):
    """Odd totals on both axes: the extra position at the end (UPPER) or the start (LOWER); an
    average pool counts explicit padding as it counts SAME padding."""
    kw = {"count_include_pad": cip} if op == "AveragePool" else {}
    nodes = [h.make_node("Relu", ["x"], ["r"]),
             h.make_node(op, ["r"], ["y"], kernel_shape=[2, 3], strides=[2, 1], auto_pad=auto, **kw)]
    m = model(nodes, ("x", ["N", 2, 7, 6]), ("y", ["N", 2, 4, 6]), {}, opset=13)
    g = ceil_pools(load(m))
    attrs = g.nodes[1].attrs
    assert "auto_pad" not in attrs
    assert tuple(attrs["pads"]) == ((0, 1, 1, 1) if auto == "SAME_UPPER" else (1, 1, 0, 1))
    assert_same_function(m, g)


def test_counted_same_padding_stops_an_affine_map():
    """Mul/Add after an AveragePool that counts its SAME padding: the map does not commute with
    the pool (padded zeros are not mapped), so it must not climb into the Conv before it; with
    the padding explicit the affine rule sees it."""
    nodes = [h.make_node("Conv", ["x", "W", "b"], ["c"]),
             h.make_node("AveragePool", ["c"], ["p"], kernel_shape=[3, 3], auto_pad="SAME_UPPER", count_include_pad=1),
             h.make_node("Mul", ["p", "k"], ["m"]), h.make_node("Add", ["m", "t"], ["y"])]
    m = model(nodes, ("x", ["N", 2, 6, 6]), ("y", ["N", 3, 4, 4]),
              {"W": w(3, 2, 3, 3), "b": w(3), "k": w(1, 3, 1, 1) + 2, "t": w(1, 3, 1, 1)})
    assert_same_function(m, canonicalize(load(m)))


@pytest.mark.parametrize("auto", ["SAME_UPPER", "SAME_LOWER"])
def test_same_padding_with_a_stride_beyond_the_kernel_stays(auto):
    """A stride beyond the kernel gives SAME a negative padding total, which onnxruntime refuses
    (2-D, and 1-D before opset 19) or crops the input by: the pool is left as it is."""
    nodes = [h.make_node("Relu", ["x"], ["r"]),
             h.make_node("AveragePool", ["r"], ["y"], kernel_shape=[1, 1], strides=[1, 3], auto_pad=auto)]
    m = model(nodes, ("x", ["N", 2, 3, 6]), ("y", ["N", 2, 3, 2]), {}, opset=13)
    g = ceil_pools(load(m))
    assert g.nodes[1].attrs["auto_pad"] == auto
