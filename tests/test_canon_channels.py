"""onnx2hw.canon.channels: a Split as Slices; a chain of views that permutes the channels (the
channel shuffle as PyTorch's TorchScript and dynamo exporters and tf2onnx write it, with and
without QDQ between the views) as one Gather; one that is a pixel shuffle (PyTorch's
PixelShuffle before opset 11) as DepthToSpace or SpaceToDepth; a channel Gather composed into the selections that
read it or absorbed into the weights of the 1x1 convolution or dense layer that reads it. Oracle:
onnxruntime with every optimization off runs both graphs."""
import numpy as np
import pytest
from onnx import helper as h

from _canon_models import assert_same_function, model, ops, w
from _oracle import run_spec
from onnx2hw import golden
from onnx2hw.canon import RULES, canonicalize
from onnx2hw.canon.channels import channel_gathers, channel_shuffles, channel_splits, crd_into_producers
from onnx2hw.ir import load
from onnx2hw.ir.simplify import to_model

C, G, H, W = 8, 2, 5, 6


def _i64(*v):
    return np.asarray(v, np.int64)


def _torchscript_shuffle(src, out, nodes, inits):
    """``x.view(n, g, c // g, h, w).transpose(1, 2).contiguous().view(n, -1, h, w)`` as the
    TorchScript exporter writes it: the batch read at run time (Shape -> Gather -> Unsqueeze ->
    Concat), the rest literal."""
    nodes += [h.make_node("Shape", [src], ["sh"]), h.make_node("Gather", ["sh", "zero"], ["n"], axis=0),
              h.make_node("Unsqueeze", ["n", "ax0"], ["n1"]),
              h.make_node("Concat", ["n1", "rest5"], ["shape5"], axis=0),
              h.make_node("Reshape", [src, "shape5"], ["v5"]),
              h.make_node("Transpose", ["v5"], ["t5"], perm=[0, 2, 1, 3, 4]),
              h.make_node("Concat", ["n1", "rest4"], ["shape4"], axis=0),
              h.make_node("Reshape", ["t5", "shape4"], [out])]
    inits.update(zero=np.asarray(0, np.int64), ax0=_i64(0), rest5=_i64(G, C // G, H, W), rest4=_i64(-1, H, W))


def _unit(form: str):
    """Conv 1x1 -> channel shuffle in ``form`` -> Conv 1x1: x (N, C, H, W) or, for ``keras``,
    (N, H, W, C) with tf2onnx's Transposes around each Conv."""
    nodes, inits = [], {"W1": w(C, C, 1, 1), "W2": w(6, C, 1, 1), "b2": w(6)}
    if form == "keras":
        nodes += [h.make_node("Transpose", ["x"], ["xt"], perm=[0, 3, 1, 2]),
                  h.make_node("Conv", ["xt", "W1"], ["c1"]),
                  h.make_node("Transpose", ["c1"], ["c1t"], perm=[0, 2, 3, 1]),
                  h.make_node("Relu", ["c1t"], ["r"]),
                  h.make_node("Reshape", ["r", "s5"], ["v5"]),
                  h.make_node("Transpose", ["v5"], ["t5"], perm=[0, 1, 2, 4, 3]),
                  h.make_node("Reshape", ["t5", "s4"], ["v4"]),
                  h.make_node("Transpose", ["v4"], ["s"], perm=[0, 3, 1, 2]),
                  h.make_node("Conv", ["s", "W2", "b2"], ["c2"]),
                  h.make_node("Transpose", ["c2"], ["y"], perm=[0, 2, 3, 1])]
        inits.update(s5=_i64(-1, H, W, G, C // G), s4=_i64(-1, H, W, C))
        return model(nodes, ("x", ["N", H, W, C]), ("y", ["N", H, W, 6]), inits)
    nodes += [h.make_node("Conv", ["x", "W1"], ["c1"]), h.make_node("Relu", ["c1"], ["r"])]
    if form == "torchscript":
        _torchscript_shuffle("r", "s", nodes, inits)
        batch = "N"
    else:   # dynamo: static shapes, the batch literal
        nodes += [h.make_node("Reshape", ["r", "s5"], ["v5"]),
                  h.make_node("Transpose", ["v5"], ["t5"], perm=[0, 2, 1, 3, 4]),
                  h.make_node("Reshape", ["t5", "s4"], ["s"])]
        inits.update(s5=_i64(2, G, C // G, H, W), s4=_i64(2, C, H, W))
        batch = 2
    nodes.append(h.make_node("Conv", ["s", "W2", "b2"], ["y"]))
    return model(nodes, ("x", [batch, C, H, W]), ("y", [batch, 6, H, W]), inits)


def _shuffle_perm():
    return np.arange(C).reshape(G, C // G).T.reshape(-1)


@pytest.mark.parametrize("form", ["torchscript", "dynamo", "keras"])
def test_shuffle_is_a_gather_then_absorbed_into_the_conv(form):
    m = _unit(form)
    g = channel_shuffles(load(m))
    gathers = [n for n in g.nodes if n.op_type == "Gather"]
    assert len(gathers) == 1 and "Reshape" not in ops(g)
    np.testing.assert_array_equal(g.initializers[gathers[0].inputs[1]], _shuffle_perm())
    assert_same_function(m, g, batch=2)
    a = channel_gathers(g)
    assert "Gather" not in ops(a) and ops(a).count("Conv") == 2
    assert_same_function(m, a, batch=2)
    c = canonicalize(load(m))
    assert "Gather" not in ops(c) and "Reshape" not in ops(c) and ops(c).count("Conv") == 2
    assert_same_function(m, c, batch=2)


def _qdq(nodes, inits, x, name, scale=0.05, zp=0, dtype=np.int8):
    inits.update({f"{name}_s": np.float32(scale), f"{name}_z": np.asarray(zp, dtype)})
    nodes += [h.make_node("QuantizeLinear", [x, f"{name}_s", f"{name}_z"], [f"{name}_q"]),
              h.make_node("DequantizeLinear", [f"{name}_q", f"{name}_s", f"{name}_z"], [f"{name}_d"])]
    return f"{name}_d"


def _qdq_unit(between: bool, form: str = "torchscript"):
    """The QDQ form onnxruntime's quantizer writes: each view between DequantizeLinear and
    QuantizeLinear on one grid (``between``), or the QDQ only around the whole shuffle; the 1x1
    convolutions' weights int8 through DequantizeLinear. ``keras``: the shuffle channels-last
    between tf2onnx's Transposes."""
    rng = np.random.default_rng(3)
    nodes, inits = [], {}
    xd = _qdq(nodes, inits, "x", "x", 0.02, 0)
    for k, (o, i) in enumerate(((C, C), (6, C))):
        inits.update({f"w{k}_q": rng.integers(-90, 90, (o, i, 1, 1)).astype(np.int8), f"w{k}_s": np.float32(0.01),
                      f"w{k}_z": np.asarray(0, np.int8)})
        nodes.append(h.make_node("DequantizeLinear", [f"w{k}_q", f"w{k}_s", f"w{k}_z"], [f"w{k}"]))
    nodes += [h.make_node("Conv", [xd, "w0"], ["c1"]), h.make_node("Relu", ["c1"], ["r"])]
    cur = _qdq(nodes, inits, "r", "r", 0.03, 0, np.uint8)
    if form == "keras":
        views = (("Transpose", None, {"perm": [0, 2, 3, 1]}), ("Reshape", "s5", {}),
                 ("Transpose", None, {"perm": [0, 1, 2, 4, 3]}), ("Reshape", "s4", {}),
                 ("Transpose", None, {"perm": [0, 3, 1, 2]}))
        inits.update(s5=_i64(-1, H, W, G, C // G), s4=_i64(-1, H, W, C))
    else:
        views = (("Reshape", "s5", {}), ("Transpose", None, {"perm": [0, 2, 1, 3, 4]}), ("Reshape", "s4", {}))
        inits.update(s5=_i64(-1, G, C // G, H, W), s4=_i64(-1, C, H, W))
    for k, (op, extra, attrs) in enumerate(views):
        nodes.append(h.make_node(op, [cur] + ([extra] if extra else []), [f"v{k}"], **attrs))
        cur = _qdq(nodes, inits, f"v{k}", f"v{k}", 0.03, 0, np.uint8) if between or k == len(views) - 1 else f"v{k}"
    nodes.append(h.make_node("Conv", [cur, "w1"], ["c2"]))
    _qdq(nodes, inits, "c2", "y", 0.1, 0)
    nodes.append(h.make_node("Identity", ["y_d"], ["y"]))
    return model(nodes, ("x", ["N", C, H, W]), ("y", ["N", 6, H, W]), inits)


def _x(shape, seed=4):
    return np.random.default_rng(seed).uniform(-2, 2, shape).astype(np.float32)


@pytest.mark.parametrize("form", ["torchscript", "keras"])
@pytest.mark.parametrize("between", [True, False], ids=["qdq_between_views", "qdq_around"])
def test_qdq_shuffle_is_a_gather_exactly(between, form):
    m = _qdq_unit(between, form)
    g = channel_shuffles(load(m))
    assert ops(g).count("Gather") == 1 and "Reshape" not in ops(g) and "Transpose" not in ops(g)
    x = _x((16, C, H, W))
    np.testing.assert_array_equal(run_spec(to_model(g), {"x": x})[0], run_spec(m, {"x": x})[0])


@pytest.mark.parametrize("form", ["torchscript", "keras"])
def test_qdq_shuffle_absorbed_into_the_quantized_weight(form):
    """The Gather goes into the int8 weight of the 1x1 conv: the same products summed in another
    order (float32), so an output may round one step apart where the sum lands on a tie; counted."""
    m = _qdq_unit(True, form)
    c = canonicalize(load(m))
    assert "Gather" not in ops(c) and "Reshape" not in ops(c) and "Transpose" not in ops(c)
    x = _x((16, C, H, W))
    got, want = run_spec(to_model(c), {"x": x})[0], run_spec(m, {"x": x})[0]
    steps = np.rint(np.abs(got - want) / 0.1)
    assert steps.max() <= 1 and np.mean(steps == 0) >= 0.999, (steps.max(), np.mean(steps == 0))


def test_gather_read_by_a_pool_stays():
    nodes = [h.make_node("Relu", ["x"], ["r"]), h.make_node("Reshape", ["r", "s5"], ["v5"]),
             h.make_node("Transpose", ["v5"], ["t5"], perm=[0, 2, 1, 3, 4]),
             h.make_node("Reshape", ["t5", "s4"], ["s"]), h.make_node("MaxPool", ["s"], ["y"], kernel_shape=[2, 2])]
    m = model(nodes, ("x", ["N", C, H, W]), ("y", ["N", C, H - 1, W - 1]),
              {"s5": _i64(-1, G, C // G, H, W), "s4": _i64(-1, C, H, W)})
    c = canonicalize(load(m))
    assert ops(c) == ["Relu", "Gather", "MaxPool"]
    assert_same_function(m, c)


def test_views_that_move_pixels_are_not_a_gather():
    """A Transpose of H and W (a square image) between views returns the shape but moves pixels."""
    nodes = [h.make_node("Relu", ["x"], ["r"]), h.make_node("Transpose", ["r"], ["t"], perm=[0, 1, 3, 2]),
             h.make_node("Reshape", ["t", "s"], ["v"]), h.make_node("Relu", ["v"], ["y"])]
    m = model(nodes, ("x", ["N", C, 4, 4]), ("y", ["N", C, 4, 4]), {"s": _i64(-1, C, 4, 4)})
    assert "Gather" not in ops(channel_shuffles(load(m)))


def test_vector_permutation_into_a_dense_layer():
    """Reshape (N, 12) -> (N, 3, 4) -> Transpose -> Flatten: a permutation of the features of a
    vector, absorbed into the rows of the Gemm that reads it."""
    nodes = [h.make_node("Gemm", ["x", "W1"], ["a"]), h.make_node("Reshape", ["a", "s3"], ["v"]),
             h.make_node("Transpose", ["v"], ["t"], perm=[0, 2, 1]), h.make_node("Flatten", ["t"], ["f"]),
             h.make_node("Gemm", ["f", "W2", "b2"], ["y"], transB=1)]
    m = model(nodes, ("x", ["N", 5]), ("y", ["N", 3]), {"W1": w(5, 12), "s3": _i64(-1, 3, 4), "W2": w(3, 12),
                                                         "b2": w(3)})
    g = channel_shuffles(load(m))
    assert ops(g) == ["Gemm", "Gather", "Gemm"]
    assert ops(channel_gathers(g)) == ["Gemm", "Gemm"]
    c = canonicalize(load(m))
    assert ops(c) == ["Gemm", "Gemm"]
    assert_same_function(m, c)


def _split_model(form: str):
    """Conv -> Split of the channels into (3, 5) (opsets 11/13: ``split`` attribute / input) or
    into 3 parts of a 8-channel tensor (opset 18 ``num_outputs``: 3, 3, 2) -> Relu each -> Concat."""
    nodes, inits = [h.make_node("Conv", ["x", "W"], ["c"])], {"W": w(C, 3, 1, 1)}
    outs = ["a", "b"] if form != "num_outputs" else ["a", "b", "d"]
    opset = {"attribute": 11, "input": 13, "num_outputs": 18}[form]
    if form == "attribute":
        nodes.append(h.make_node("Split", ["c"], outs, axis=1, split=[3, 5]))
    elif form == "input":
        nodes.append(h.make_node("Split", ["c", "sp"], outs, axis=1))
        inits["sp"] = _i64(3, 5)
    else:
        nodes.append(h.make_node("Split", ["c"], outs, axis=1, num_outputs=3))
    nodes += [h.make_node("Relu", [o], [f"{o}_r"]) for o in outs]
    nodes.append(h.make_node("Concat", [f"{o}_r" for o in outs[::-1]], ["y"], axis=1))
    return model(nodes, ("x", ["N", 3, H, W]), ("y", ["N", C, H, W]), inits, opset=opset)


@pytest.mark.parametrize("form", ["attribute", "input", "num_outputs"])
def test_split_is_one_slice_per_output(form):
    m = _split_model(form)
    g = channel_splits(load(m))
    assert "Split" not in ops(g) and ops(g).count("Slice") == (3 if form == "num_outputs" else 2)
    assert_same_function(m, g)


def test_shuffle_then_split_compose_into_two_gathers():
    """ShuffleNet v2's shuffle followed by the next unit's split: each half reads the shuffled
    tensor's channels directly (the shuffle is no block of its own)."""
    nodes, inits = [h.make_node("Relu", ["x"], ["r"])], {}
    _torchscript_shuffle("r", "s", nodes, inits)
    nodes += [h.make_node("Split", ["s", "sp"], ["a", "b"], axis=1), h.make_node("Relu", ["a"], ["ar"]),
              h.make_node("Sigmoid", ["b"], ["bs"]), h.make_node("Concat", ["ar", "bs"], ["y"], axis=1)]
    inits["sp"] = _i64(4, 4)
    m = model(nodes, ("x", ["N", C, H, W]), ("y", ["N", C, H, W]), inits)
    c = canonicalize(load(m))
    gathers = [n for n in c.nodes if n.op_type == "Gather"]
    assert len(gathers) == 2 and all(n.inputs[0] == "r" for n in gathers), ops(c)
    np.testing.assert_array_equal(sorted(np.concatenate([c.initializers[n.inputs[1]] for n in gathers])), range(C))
    assert_same_function(m, c)


def test_rules_order():
    """Splits go before anything traces the graph (the golden executor has no Split); shuffles
    after constant folding, before the Transposes move."""
    names = [n for n, _ in RULES]
    assert names.index("channel splits") < names.index("constant folding") < names.index("channel shuffles") \
        < names.index("channel gathers") < names.index("transposes")


def test_split_then_dynamic_shapes_fold():
    """A Split before a TorchScript shuffle (Shape -> Gather -> Concat shapes): the Split goes
    first, so the graph can be traced and the shuffle becomes a Gather composed with nothing
    else (a graph output)."""
    nodes, inits = [h.make_node("Split", ["x", "sp"], ["a", "b"], axis=1), h.make_node("Concat", ["b", "a"], ["r"],
                                                                                          axis=1)], {"sp": _i64(3, 5)}
    _torchscript_shuffle("r", "y", nodes, inits)
    m = model(nodes, ("x", ["N", C, H, W]), ("y", ["N", C, H, W]), inits)
    c = canonicalize(load(m))
    assert "Split" not in ops(c) and "Reshape" not in ops(c) and "Shape" not in ops(c), ops(c)
    assert_same_function(m, c)


def test_qonnx_quantizers_between_views():
    """QONNX: a Quant (8-bit signed, scale 0.05, per tensor) after each view of the shuffle: they
    commute with it, so the chain is those Quants then one Gather. Expected: the int64 formula of
    qonnx's Quant (ROUND: half to even; float32 division), then the shuffle's indexing."""
    q = "qonnx.custom_op.general"
    nodes, inits = [h.make_node("Quant", ["x", "s", "z", "b"], ["q0"], domain=q, signed=1)], {}
    cur = "q0"
    for k, (op, extra, attrs) in enumerate((("Reshape", "s5", {}), ("Transpose", None, {"perm": [0, 2, 1, 3, 4]}),
                                            ("Reshape", "s4", {}))):
        nodes += [h.make_node(op, [cur] + ([extra] if extra else []), [f"v{k}"], **attrs),
                  h.make_node("Quant", [f"v{k}", "s", "z", "b"], [f"q{k + 1}"], domain=q, signed=1)]
        cur = f"q{k + 1}"
    nodes.append(h.make_node("Identity", [cur], ["y"]))
    inits.update(s=np.float32(0.05), z=np.float32(0), b=np.float32(8), s5=_i64(-1, G, C // G, H, W),
                 s4=_i64(-1, C, H, W))
    m = model(nodes, ("x", ["N", C, H, W]), ("y", ["N", C, H, W]), inits, domains=(q,))
    g = channel_shuffles(load(m))
    assert ops(g) == ["Quant", "Quant", "Quant", "Gather", "Quant", "Identity"]
    x = _x((5, C, H, W))
    codes = np.clip(np.rint(x / np.float32(0.05)), -128, 127).astype(np.int64)
    got = golden.execute(g, {"x": x})["y"]
    np.testing.assert_array_equal(np.rint(got / np.float32(0.05)).astype(np.int64), codes[:, _shuffle_perm()])


def _shuffle_into(conv_w: str, nodes, inits, **conv_attrs):
    nodes += [h.make_node("Relu", ["x"], ["r"]), h.make_node("Reshape", ["r", "s5"], ["v5"]),
              h.make_node("Transpose", ["v5"], ["t5"], perm=[0, 2, 1, 3, 4]),
              h.make_node("Reshape", ["t5", "s4"], ["s"]), h.make_node("Conv", ["s", conv_w], ["y"], **conv_attrs)]
    inits.update(s5=_i64(-1, G, C // G, H, W), s4=_i64(-1, C, H, W))


def test_absorbed_into_a_qonnx_quantized_weight():
    """The weight read through a QONNX Quant with one scale per output channel: its constant is
    permuted (the quantizer acts on each element alone). Both graphs run by the golden executor."""
    q = "qonnx.custom_op.general"
    nodes, inits = [h.make_node("Quant", ["W", "ws", "z", "b"], ["Wq"], domain=q, signed=1, narrow=1)], {}
    inits.update(W=w(6, C, 1, 1), ws=(np.arange(1, 7, dtype=np.float32) * 0.01).reshape(6, 1, 1, 1),
                 z=np.float32(0), b=np.float32(4))
    _shuffle_into("Wq", nodes, inits)
    m = model(nodes, ("x", ["N", C, H, W]), ("y", ["N", 6, H, W]), inits, domains=(q,))
    c = canonicalize(load(m))
    assert "Gather" not in ops(c) and "Transpose" not in ops(c), ops(c)
    x = _x((3, C, H, W))
    np.testing.assert_allclose(golden.execute(c, {"x": x})["y"], golden.execute(load(m), {"x": x})["y"],
                               rtol=0, atol=1e-5)


def test_grouped_conv_keeps_the_gather():
    """A grouped convolution reads each group's channels only: no weight permutation stands for
    the shuffle, which stays a Gather (a ChannelSelect in hardware)."""
    nodes, inits = [], {"Wg": w(C, C // 2, 1, 1)}
    _shuffle_into("Wg", nodes, inits, group=2)
    m = model(nodes, ("x", ["N", C, H, W]), ("y", ["N", C, H, W]), inits)
    c = canonicalize(load(m))
    assert ops(c) == ["Relu", "Gather", "Conv"]
    assert_same_function(m, c)


def test_absorbed_through_a_pool():
    """A max pool computes each channel from itself: the shuffle moves below it into the 1x1
    convolution's weight (ShuffleNet's shuffle, then a pool, then a 1x1 conv)."""
    nodes, inits = [], {"W": w(6, C, 1, 1)}
    _shuffle_into("W", nodes, inits)
    nodes[-1:] = [h.make_node("MaxPool", ["s"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
                  h.make_node("Conv", ["p", "W"], ["y"])]
    m = model(nodes, ("x", ["N", C, H, W]), ("y", ["N", 6, H // 2, W // 2]), inits)
    c = canonicalize(load(m))
    assert ops(c) == ["Relu", "MaxPool", "Conv"]
    assert_same_function(m, c)


# ---- view chains that are a pixel shuffle -------------------------------------------------------

def _pixel_chain(form, r=2, c=8, hh=3, ww=2, opset=9):
    """Relu -> the views of a pixel shuffle in ``form`` -> Relu on (N, c, hh, ww): ``crd`` as
    PyTorch's exporters wrote ``PixelShuffle`` before opset 11 (view, permute, view), ``dcr``
    the DepthToSpace definition's default order, ``s2d`` SpaceToDepth's (then the image is
    (N, c, hh*r, ww*r))."""
    if form == "crd":
        s6, perm, s4 = _i64(-1, c // r // r, r, r, hh, ww), [0, 1, 4, 2, 5, 3], _i64(-1, c // r // r, hh * r, ww * r)
        xs, ys = (c, hh, ww), (c // r // r, hh * r, ww * r)
    elif form == "dcr":
        s6, perm, s4 = _i64(-1, r, r, c // r // r, hh, ww), [0, 3, 4, 1, 5, 2], _i64(-1, c // r // r, hh * r, ww * r)
        xs, ys = (c, hh, ww), (c // r // r, hh * r, ww * r)
    else:
        s6, perm, s4 = _i64(-1, c, hh, r, ww, r), [0, 3, 5, 1, 2, 4], _i64(-1, c * r * r, hh, ww)
        xs, ys = (c, hh * r, ww * r), (c * r * r, hh, ww)
    nodes = [h.make_node("Relu", ["x"], ["a"]), h.make_node("Reshape", ["a", "s6"], ["v6"]),
             h.make_node("Transpose", ["v6"], ["t6"], perm=perm), h.make_node("Reshape", ["t6", "s4"], ["v4"]),
             h.make_node("Relu", ["v4"], ["y"])]
    return model(nodes, ("x", ["N", *xs]), ("y", ["N", *ys]), {"s6": s6, "s4": s4}, opset=opset)


@pytest.mark.parametrize("form, r, op, mode", [("crd", 2, "DepthToSpace", "CRD"), ("crd", 3, "DepthToSpace", "CRD"),
                                               ("dcr", 2, "DepthToSpace", "DCR"), ("s2d", 2, "SpaceToDepth", None)])
@pytest.mark.parametrize("opset", [9, 13])
def test_pixel_shuffle_views_are_the_op(form, r, op, mode, opset):
    """From opset 11 the op in its mode; before, DepthToSpace has only the DCR order: a CRD
    shuffle is a Gather of the channels into DCR order, then the op."""
    m = _pixel_chain(form, r, c=2 * r * r, opset=opset)
    c = channel_shuffles(load(m))
    old_crd = opset < 11 and mode == "CRD"
    assert ops(c) == (["Relu", "Gather", op, "Relu"] if old_crd else ["Relu", op, "Relu"])
    node = c.nodes[-2]
    assert node.attr("blocksize") == r and node.attr("mode", "DCR" if op == "DepthToSpace" else None) == (
        "DCR" if old_crd else mode)
    x = np.random.default_rng(1).standard_normal((3,) + tuple(load(m).inputs[0].shape[1:])).astype(np.float32)
    np.testing.assert_array_equal(run_spec(to_model(c), {"x": x})[0], run_spec(m, {"x": x})[0])


def test_views_that_are_no_pixel_shuffle_stay():
    """The CRD view chain with the block's row and column swapped (perm (0, 1, 4, 3, 5, 2)) is
    neither mode's DepthToSpace."""
    nodes = [h.make_node("Relu", ["x"], ["a"]), h.make_node("Reshape", ["a", "s6"], ["v6"]),
             h.make_node("Transpose", ["v6"], ["t6"], perm=[0, 1, 4, 3, 5, 2]),
             h.make_node("Reshape", ["t6", "s4"], ["y"])]
    m = model(nodes, ("x", ["N", 8, 3, 2]), ("y", ["N", 2, 6, 4]),
              {"s6": _i64(-1, 2, 2, 2, 3, 2), "s4": _i64(-1, 2, 6, 4)})
    assert "DepthToSpace" not in ops(channel_shuffles(load(m)))


def test_a_reshape_of_a_one_pixel_image_stays_a_view():
    """(N, 8, 1, 1) -> (N, 2, 2, 2) moves elements as a CRD DepthToSpace would, but is a view
    (no Transpose): left to the view rules."""
    nodes = [h.make_node("Relu", ["x"], ["a"]), h.make_node("Reshape", ["a", "s"], ["v"]),
             h.make_node("Relu", ["v"], ["y"])]
    m = model(nodes, ("x", ["N", 8, 1, 1]), ("y", ["N", 2, 2, 2]), {"s": _i64(-1, 2, 2, 2)})
    assert ops(channel_shuffles(load(m))) == ["Relu", "Reshape", "Relu"]


def _conv_crd(extra_reader=False, group=1):
    """Conv (C*4 outputs) -> Relu -> DepthToSpace(2, CRD) -> Relu; ``extra_reader``: the Conv's
    output is also a graph output."""
    nodes = [h.make_node("Conv", ["x", "W", "b"], ["c"], pads=[1, 1, 1, 1], group=group),
             h.make_node("Relu", ["c"], ["a"]), h.make_node("DepthToSpace", ["a"], ["d"], blocksize=2, mode="CRD"),
             h.make_node("Relu", ["d"], ["y"])]
    m = model(nodes, ("x", ["N", 4, 3, 2]), ("y", ["N", 2, 6, 4]), {"W": w(8, 4 // group, 3, 3), "b": w(8)})
    if extra_reader:
        m.graph.output.append(h.make_tensor_value_info("c", 1, ["N", 8, 3, 2]))
    return m


def test_crd_order_goes_into_the_convolution():
    m = _conv_crd()
    c = crd_into_producers(load(m))
    assert ops(c) == ["Conv", "Relu", "DepthToSpace", "Relu"] and c.nodes[2].attr("mode") == "DCR"
    assert_same_function(m, c)


@pytest.mark.parametrize("kw", [dict(extra_reader=True), dict(group=2)])
def test_crd_order_stays_where_the_convolution_is_shared_or_grouped(kw):
    c = crd_into_producers(load(_conv_crd(**kw)))
    assert [n.attr("mode") for n in c.nodes if n.op_type == "DepthToSpace"] == ["CRD"]


def test_channel_permutation_goes_into_the_convolution():
    """Conv -> Relu -> the pre-opset-11 CRD pixel shuffle (views): canonical form Conv (output
    channels permuted), Relu, DCR DepthToSpace."""
    nodes = [h.make_node("Conv", ["x", "W", "b"], ["c"], pads=[1, 1, 1, 1]), h.make_node("Relu", ["c"], ["a"]),
             h.make_node("Reshape", ["a", "s6"], ["v6"]),
             h.make_node("Transpose", ["v6"], ["t6"], perm=[0, 1, 4, 2, 5, 3]), h.make_node("Reshape", ["t6", "s4"], ["y"])]
    m = model(nodes, ("x", ["N", 4, 3, 2]), ("y", ["N", 2, 6, 4]),
              {"W": w(8, 4, 3, 3), "b": w(8), "s6": _i64(-1, 2, 2, 2, 3, 2), "s4": _i64(-1, 2, 6, 4)}, opset=9)
    c = canonicalize(load(m))
    assert ops(c) == ["Conv", "Relu", "DepthToSpace"]
    assert_same_function(m, c)
