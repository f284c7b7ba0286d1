"""onnx2hw.canon.crops: a spatial Slice cropping a ConvTranspose's output (through onnxruntime's
Q/DQ pairs) is the ConvTranspose with larger pads; onnxruntime with every optimization off
computes the same function from both graphs. End to end: Keras ``Conv1DTranspose(padding="same")``
as tf2onnx writes it (``ConvTranspose`` without pads, then ``Slice`` of the border), quantized by
onnx2hw's post-training quantizer (onnxruntime's quantizer: in tests/test_output_layout.py): the
golden against onnxruntime's spec session on the QDQ model (the same integers dequantized in
float32: within 1e-6 of the output's magnitude), the hardware simulated bit-exact."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper as h

import onnx2hw
from _canon_models import assert_same_function, model, ops, w
from _oracle import spec_session
from onnx2hw.canon import canonicalize
from onnx2hw.canon.crops import crops_into_conv_transpose
from onnx2hw.ir import load
from onnx2hw.quant import ptq

BIG = np.iinfo(np.int64).max


def _i64(*v):
    return np.array(v, np.int64)


def _keras_convt1d(k=4, stride=2, relu=True, dense=True, crop=None):
    """tf2onnx's Keras Conv1DTranspose(4, k, strides=stride, padding="same")[-ReLU] on an (N, 8, 3)
    signal, Conv1D(4, 1), then Flatten + Dense(5, use_bias=False) or the output (N, 8*stride, 4)."""
    full = stride * 7 + k
    begin = (full - 8 * stride) // 2 if crop is None else crop
    nodes = [h.make_node("Unsqueeze", ["x", "ax1"], ["u"]),
             h.make_node("Transpose", ["u"], ["t"], perm=[0, 3, 1, 2]),
             h.make_node("ConvTranspose", ["t", "Wt", "bt"], ["ct"], kernel_shape=[1, k], strides=[1, stride]),
             h.make_node("Slice", ["ct", "starts", "ends", "axes"], ["sl"])]
    nodes += [h.make_node("Relu", ["sl"], ["r"])] if relu else [h.make_node("Identity", ["sl"], ["r"])]
    nodes += [h.make_node("Conv", ["r", "W2"], ["c2"], kernel_shape=[1, 1]),
              h.make_node("Squeeze", ["c2", "ax2"], ["s2"]),
              h.make_node("Transpose", ["s2"], ["o" if dense else "y"], perm=[0, 2, 1])]
    n = 8 * stride
    inits = {"ax1": _i64(1), "ax2": _i64(2), "Wt": w(3, 4, 1, k), "bt": w(4), "W2": w(4, 4, 1, 1),
             "starts": _i64(0, begin), "ends": _i64(1, begin + n), "axes": _i64(2, 3)}
    if dense:
        nodes += [h.make_node("Reshape", ["o", "flat"], ["f"]), h.make_node("MatMul", ["f", "Wd"], ["y"])]
        inits.update(flat=_i64(-1, 4 * n), Wd=w(4 * n, 5))
    return model(nodes, ("x", ["N", 8, 3]), ("y", ["N", 5] if dense else ["N", n, 4]), inits)


def _keras_convt1d_short_kernel(bias_in_ct=False, pad=(0, 0, 0, 0, 0, 0, 0, 1), dense=True):
    """tf2onnx's Keras Conv1DTranspose(4, 2, strides=3, padding="same")-ReLU on (N, 8, 3): the
    ConvTranspose without bias (23 positions), a Pad of one at the end (24), the bias an Add;
    Conv1D(4, 1), Flatten + Dense(5, use_bias=False) or the output (N, 24, 4)."""
    nodes = [h.make_node("Unsqueeze", ["x", "ax1"], ["u"]),
             h.make_node("Transpose", ["u"], ["t"], perm=[0, 3, 1, 2]),
             h.make_node("ConvTranspose", ["t", "Wt"] + (["bt0"] if bias_in_ct else []), ["ct"],
                         kernel_shape=[1, 2], strides=[1, 3]),
             h.make_node("Pad", ["ct", "pads"], ["p"]), h.make_node("Add", ["p", "bt"], ["a"]),
             h.make_node("Relu", ["a"], ["r"]), h.make_node("Conv", ["r", "W2"], ["c2"], kernel_shape=[1, 1]),
             h.make_node("Squeeze", ["c2", "ax2"], ["s2"]),
             h.make_node("Transpose", ["s2"], ["o" if dense else "y"], perm=[0, 2, 1])]
    n = 23 + sum(pad)
    inits = {"ax1": _i64(1), "ax2": _i64(2), "Wt": w(3, 4, 1, 2), "bt": w(4, 1, 1), "bt0": w(4), "W2": w(4, 4, 1, 1),
             "pads": _i64(*pad)}
    if dense:
        nodes += [h.make_node("Reshape", ["o", "flat"], ["f"]), h.make_node("MatMul", ["f", "Wd"], ["y"])]
        inits.update(flat=_i64(-1, 4 * n), Wd=w(4 * n, 5))
    return model(nodes, ("x", ["N", 8, 3]), ("y", ["N", 5] if dense else ["N", n, 4]), inits)


def _convt2d(slice_inputs, out_hw, **attrs):
    """Relu, ConvTranspose 3 -> 4 (3x3, strides 2, ``attrs``) on (N, 3, 5, 6), a Slice, Relu."""
    names = ["starts", "ends", "axes", "steps"][:len(slice_inputs)]
    nodes = [h.make_node("Relu", ["x"], ["r"]),
             h.make_node("ConvTranspose", ["r", "W", "b"], ["ct"], kernel_shape=[3, 3], strides=[2, 2], **attrs),
             h.make_node("Slice", ["ct"] + names, ["sl"]), h.make_node("Relu", ["sl"], ["y"])]
    inits = {"W": w(3, 4, 3, 3), "b": w(4)}
    inits.update({k: _i64(*v) for k, v in zip(names, slice_inputs)})
    return model(nodes, ("x", ["N", 3, 5, 6]), ("y", ["N", 4, *out_hw]), inits)


def _qdq_convt():
    """onnxruntime's QDQ form: ConvTranspose -> Q -> DQ -> Slice -> Q -> DQ (one grid)."""
    s, z = np.array(0.05, np.float32), np.array(128, np.uint8)
    nodes = [h.make_node("ConvTranspose", ["x", "W"], ["ct"], kernel_shape=[1, 4], strides=[1, 2]),
             h.make_node("QuantizeLinear", ["ct", "s", "z"], ["q0"]),
             h.make_node("DequantizeLinear", ["q0", "s", "z"], ["d0"]),
             h.make_node("Slice", ["d0", "starts", "ends", "axes"], ["sl"]),
             h.make_node("QuantizeLinear", ["sl", "s", "z"], ["q1"]),
             h.make_node("DequantizeLinear", ["q1", "s", "z"], ["y"])]
    return model(nodes, ("x", ["N", 3, 1, 8]), ("y", ["N", 4, 1, 16]),
                 {"W": w(3, 4, 1, 4), "s": s, "z": z, "starts": _i64(1), "ends": _i64(17), "axes": _i64(3)})


CASES = {
    "keras_k4_s2": lambda: _keras_convt1d(),
    "keras_k3_s2": lambda: _keras_convt1d(k=3),
    "keras_k5_s3": lambda: _keras_convt1d(k=5, stride=3),
    # 2-D: crops on both axes, on top of pads and output_padding; negative and clamped indices
    "pads_output_padding": lambda: _convt2d([(1, 0), (-1, BIG), (2, 3)], (8, 11), pads=[1, 0, 0, 1],
                                            output_padding=[1, 1]),
    "all_axes": lambda: _convt2d([(0, 0, 2, 1), (BIG, 4, -1, 12)], (8, 11)),
    "steps_of_one": lambda: _convt2d([(1,), (10,), (-2,), (1,)], (9, 13)),
    "qdq": _qdq_convt,
}


@pytest.mark.parametrize("name", list(CASES))
def test_crop_is_conv_transpose_pads(name):
    m = CASES[name]()
    g = crops_into_conv_transpose(load(m))
    assert "Slice" not in ops(g)
    assert_same_function(m, g)
    assert_same_function(m, canonicalize(load(m)))


def test_qdq_pair_of_the_slice_goes():
    g = crops_into_conv_transpose(load(_qdq_convt()))
    assert ops(g) == ["ConvTranspose", "QuantizeLinear", "DequantizeLinear"]


def test_slice_below_opset_10():
    nodes = [h.make_node("ConvTranspose", ["x", "W"], ["ct"], kernel_shape=[3], strides=[2]),
             h.make_node("Slice", ["ct"], ["y"], starts=[1], ends=[16], axes=[2])]
    m = model(nodes, ("x", ["N", 3, 8]), ("y", ["N", 4, 15]), {"W": w(3, 4, 3)}, opset=9)
    g = crops_into_conv_transpose(load(m))
    assert ops(g) == ["ConvTranspose"]
    assert_same_function(m, g)


def test_end_pad_is_output_padding():
    m = _keras_convt1d_short_kernel()
    g = crops_into_conv_transpose(load(m))
    assert "Pad" not in ops(g)
    ct = next(n for n in g.nodes if n.op_type == "ConvTranspose")
    assert list(ct.attr("output_padding")) == [0, 1]
    assert_same_function(m, g)
    c = canonicalize(load(m))
    assert "Pad" not in ops(c) and ops(c).count("Conv") == 1   # the bias Add folded into the ConvTranspose
    assert_same_function(m, c)


@pytest.mark.parametrize("case", ["bias", "begin", "past_stride"])
def test_pad_is_not_output_padding(case):
    """With a bias in the ConvTranspose (the padded positions would hold it), a Pad at the begin,
    or output padding reaching the stride, the Pad stays (the function is the same)."""
    pad = {"begin": (0, 0, 0, 1, 0, 0, 0, 0), "past_stride": (0, 0, 0, 0, 0, 0, 0, 3)}.get(case,
                                                                                     (0, 0, 0, 0, 0, 0, 0, 1))
    m = _keras_convt1d_short_kernel(bias_in_ct=case == "bias", pad=pad)
    assert "Pad" in ops(crops_into_conv_transpose(load(m)))
    assert_same_function(m, canonicalize(load(m)))


@pytest.mark.parametrize("case", ["channels", "step_2", "output_shape", "shared", "same_upper"])
def test_crop_stays(case):
    """A Slice of channels or with step 2, a ConvTranspose given ``output_shape`` or
    ``auto_pad=SAME_UPPER``, or read by another node too: the Slice stays."""
    attrs = {"output_shape": [11, 13]} if case == "output_shape" else \
        {"auto_pad": "SAME_UPPER"} if case == "same_upper" else {}
    n_hw = {"output_shape": (11, 13), "same_upper": (10, 12)}.get(case, (11, 13))
    if case == "channels":
        m = _convt2d([(1,), (3,), (1,)], n_hw)
    elif case == "step_2":
        m = _convt2d([(1,), (10,), (2,), (2,)], (5, 13))
    else:
        m = _convt2d([(1,), (n_hw[0] - 1,), (2,)], (n_hw[0] - 2, n_hw[1]), **attrs)
    if case == "shared":
        nodes = list(m.graph.node)
        nodes[-1] = h.make_node("ReduceMax", ["ct"], ["mx"], axes=[2, 3], keepdims=1)
        nodes.append(h.make_node("Add", ["sl", "mx"], ["y"]))
        del m.graph.node[:]
        m.graph.node.extend(nodes)
    g = crops_into_conv_transpose(load(m))
    assert ops(g) == ops(load(m))
    assert_same_function(m, canonicalize(load(m)))


# ---- end to end ----------------------------------------------------------------------------------

def _data(n, seed):
    return np.random.default_rng(seed).standard_normal((n, 8, 3)).astype(np.float32)


@pytest.mark.parametrize("k,stride", [(4, 2), (3, 2), (2, 3)])
def test_keras_conv1d_transpose_from_float(k, stride):
    m = _keras_convt1d(k=k, stride=stride) if k >= stride else _keras_convt1d_short_kernel()
    x = _data(32, 0)
    design = onnx2hw.compile(m, board="ulx3s", calib={"x": x})
    want = spec_session(ptq.quantize(m, {"x": x})).run(None, {"x": x[:8]})[0]
    got = design.golden({"x": x[:8]})["y"]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6 * np.abs(want).max())


@pytest.mark.sim
def test_keras_conv1d_transpose_simulates_bit_exact():
    x = _data(16, 1)
    design = onnx2hw.compile(_keras_convt1d(), board="ulx3s", calib={"x": x})
    design.simulate({"x": x[:3]})   # MismatchError unless bit-exact against the golden


# ---- Conv: a crop of the output is less padding ---------------------------------------------------

from onnx2hw.canon.crops import crops_into_conv  # noqa: E402


def _chomp(k=3, dil=2, ends=None, qdq=False, z_out=0):
    """locuslab TCN's block: Conv1d(4 -> 5, k, dilation=dil, padding=(k-1)*dil), ``x[:, :, :-p]``
    (``Slice`` of axis 2), ReLU, on (N, 4, 16); with ``qdq`` onnxruntime's pairs between Conv
    and Slice and after the Slice (another grid, ReLU's zero point 0)."""
    p = (k - 1) * dil
    s0, z0 = np.array(0.04, np.float32), np.array(120, np.uint8)
    s1, z1 = np.array(0.03, np.float32), np.array(z_out, np.uint8)
    conv_out = "c" if qdq else "cq"
    nodes = [h.make_node("Conv", ["x", "W", "b"], [conv_out], kernel_shape=[k], dilations=[dil], pads=[p, p])]
    if qdq:
        nodes += [h.make_node("QuantizeLinear", ["c", "s0", "z0"], ["q0"]),
                  h.make_node("DequantizeLinear", ["q0", "s0", "z0"], ["cq"])]
    nodes += [h.make_node("Slice", ["cq", "starts", "ends", "axes", "steps"], ["sl"])]
    if qdq:
        nodes += [h.make_node("QuantizeLinear", ["sl", "s1", "z1"], ["q1"]),
                  h.make_node("DequantizeLinear", ["q1", "s1", "z1"], ["y"])]
    else:
        nodes += [h.make_node("Relu", ["sl"], ["y"])]
    inits = {"W": w(5, 4, k), "b": w(5), "starts": _i64(0), "ends": _i64(-p if ends is None else ends),
             "axes": _i64(2), "steps": _i64(1), "s0": s0, "z0": z0, "s1": s1, "z1": z1}
    return model(nodes, ("x", ["N", 4, 16]), ("y", ["N", 5, 16]), inits)


@pytest.mark.parametrize("k,dil", [(3, 1), (3, 2), (2, 4), (5, 1)])
def test_chomp_is_causal_conv(k, dil):
    m = _chomp(k, dil)
    g = crops_into_conv(load(m))
    assert ops(g) == ["Conv", "Relu"]
    assert list(g.nodes[0].attr("pads")) == [(k - 1) * dil, 0]
    assert_same_function(m, g)
    assert_same_function(m, canonicalize(load(m)))


@pytest.mark.parametrize("z_out", [0, 5])
def test_chomp_qdq_pair_of_the_slice_goes(z_out):
    """The Slice goes; its output quantizer then requantizes the Conv's grid: with its zero point
    at the type's minimum (onnxruntime's form of a Relu) a Relu is put before it, else nothing."""
    m = _chomp(qdq=True, z_out=z_out)
    g = crops_into_conv(load(m))
    relu = ["Relu"] if z_out == 0 else []
    assert ops(g) == ["Conv", "QuantizeLinear", "DequantizeLinear"] + relu + ["QuantizeLinear", "DequantizeLinear"]
    assert_same_function(m, g)


def _conv1d_crop(n, k, s, dil, pads, a, b):
    """Conv 2 -> 3 (k, stride s, dilation dil, ``pads``) on (N, 2, n), then a Slice dropping
    ``a`` outputs at the begin and ``b`` at the end of the time axis (ends as a negative index
    or, for ``b == 0``, the int64 maximum)."""
    nodes = [h.make_node("Conv", ["x", "W"], ["c"], kernel_shape=[k], strides=[s], dilations=[dil], pads=list(pads)),
             h.make_node("Slice", ["c", "starts", "ends", "axes"], ["y"])]
    out = (n + sum(pads) - (k - 1) * dil - 1) // s + 1
    inits = {"W": w(3, 2, k), "starts": _i64(a), "ends": _i64(-b if b else BIG), "axes": _i64(2)}
    return model(nodes, ("x", ["N", 2, n]), ("y", ["N", 3, out - a - b]), inits)


def _sweep():
    """Every small 1-D case with at least one output kept: the crop goes into the pads where
    ``a*s <= begin`` and an end pad in reach exists, else the Slice stays; same function both
    ways."""
    for n in (7, 8):
        for k, dil in ((1, 1), (3, 1), (2, 2)):
            for s in (1, 2, 3):
                for pads in ((0, 0), (2, 1), (3, 3)):
                    out = (n + sum(pads) - (k - 1) * dil - 1) // s + 1
                    for a in range(0, 3):
                        for b in range(0, 3):
                            if (a or b) and out - a - b >= 1:
                                yield n, k, s, dil, pads, a, b


SWEEP = list(_sweep())


def test_conv_crop_sweep():
    """Against onnxruntime on every case of :func:`_sweep`; some cases fold and some stay."""
    folded = stayed = 0
    for case in SWEEP:
        m = _conv1d_crop(*case)
        g = crops_into_conv(load(m))
        n, k, s, dil, pads, a, b = case
        if "Slice" in ops(g):
            stayed += 1
            assert a * s > pads[0] or b * s > pads[1], case   # only where a pad would go below zero
        else:
            folded += 1
        assert_same_function(m, g)
    assert folded > 50 and stayed > 50


def test_conv2d_crop_both_axes_stride_2():
    nodes = [h.make_node("Relu", ["x"], ["r"]),
             h.make_node("Conv", ["r", "W", "b"], ["c"], kernel_shape=[3, 3], strides=[2, 2], pads=[2, 3, 3, 2]),
             h.make_node("Slice", ["c", "starts", "ends", "axes"], ["sl"]), h.make_node("Relu", ["sl"], ["y"])]
    inits = {"W": w(4, 3, 3, 3), "b": w(4), "starts": _i64(1, 0), "ends": _i64(-1, -1), "axes": _i64(2, 3)}
    m = model(nodes, ("x", ["N", 3, 9, 10]), ("y", ["N", 4, 4, 5]), inits)
    g = crops_into_conv(load(m))
    assert ops(g) == ["Relu", "Conv", "Relu"]
    assert_same_function(m, g)
    assert_same_function(m, canonicalize(load(m)))


@pytest.mark.parametrize("case", ["channels", "shared", "same_upper", "begin_past_pad"])
def test_conv_crop_stays(case):
    """A Slice of channels, a Conv read by another node too or with ``auto_pad=SAME_UPPER``, or a
    crop at the begin larger than the begin pad: the Slice stays (the function is the same)."""
    if case == "channels":
        nodes = [h.make_node("Conv", ["x", "W"], ["c"], kernel_shape=[3], pads=[2, 2]),
                 h.make_node("Slice", ["c", "starts", "ends", "axes"], ["y"])]
        m = model(nodes, ("x", ["N", 2, 8]), ("y", ["N", 2, 10]),
                  {"W": w(3, 2, 3), "starts": _i64(0), "ends": _i64(2), "axes": _i64(1)})
    elif case == "same_upper":
        nodes = [h.make_node("Conv", ["x", "W"], ["c"], kernel_shape=[3], auto_pad="SAME_UPPER"),
                 h.make_node("Slice", ["c", "starts", "ends", "axes"], ["y"])]
        m = model(nodes, ("x", ["N", 2, 8]), ("y", ["N", 3, 7]),
                  {"W": w(3, 2, 3), "starts": _i64(0), "ends": _i64(-1), "axes": _i64(2)})
    elif case == "begin_past_pad":
        m = _conv1d_crop(8, 3, 1, 1, (1, 1), 2, 0)
    else:
        m = _chomp()
        nodes = list(m.graph.node)
        nodes[-1] = h.make_node("ReduceMax", ["cq"], ["mx"], axes=[2], keepdims=1)
        nodes.append(h.make_node("Add", ["sl", "mx"], ["y"]))
        del m.graph.node[:]
        m.graph.node.extend(nodes)
    g = crops_into_conv(load(m))
    assert ops(g) == ops(load(m))
    assert_same_function(m, canonicalize(load(m)))

