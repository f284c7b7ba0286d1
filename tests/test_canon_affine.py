"""onnx2hw.canon.affine: MatMul + constant Add, and affine maps by constants wherever exporters
put them (after views, after activations, as Sub/Div), each checked with onnx.reference."""
import numpy as np
import pytest
from onnx import helper as h

from _canon_models import assert_same_function, model, ops, w
from onnx2hw.canon import canonicalize
from onnx2hw.canon.affine import affine_maps, matmul_add
from onnx2hw.canon.constants import static_inputs
from onnx2hw.ir import load


def _bn(name, x, y, c):
    return h.make_node("BatchNormalization", [x, f"{name}_s", f"{name}_b", f"{name}_m", f"{name}_v"], [y], epsilon=1e-3)


def _bn_params(name, c):
    return {f"{name}_s": 1 + w(c), f"{name}_b": w(c), f"{name}_m": w(c), f"{name}_v": np.abs(w(c)) + 0.5}


@pytest.mark.parametrize("opset", [7, 9, 13])
def test_matmul_add_is_a_dense_layer(opset):
    nodes = [h.make_node("MatMul", ["x", "W"], ["m"]), h.make_node("Add", ["m", "b"], ["y"])]
    m = model(nodes, ("x", ["N", 8]), ("y", ["N", 3]), {"W": w(8, 3), "b": w(3)}, opset=opset, ir=3, as_inputs=True)
    g = canonicalize(load(m))
    assert ops(g) == ["Gemm"]
    assert_same_function(m, g)


def test_batchnorm_between_views_moves_onto_the_dense_layer():
    """PyTorch BatchNorm1d after Linear as older exporters wrote it: Gemm, Unsqueeze, BN, Squeeze."""
    nodes = [h.make_node("Gemm", ["x", "W", "b"], ["g"], transB=1), h.make_node("Unsqueeze", ["g"], ["u"], axes=[2]),
             _bn("bn", "u", "n", 6), h.make_node("Squeeze", ["n"], ["q"], axes=[2]), h.make_node("Relu", ["q"], ["y"])]
    m = model(nodes, ("x", ["N", 4]), ("y", ["N", 6]), {"W": w(6, 4), "b": w(6), **_bn_params("bn", 6)}, opset=9)
    g = canonicalize(load(m))
    assert ops(g) == ["Gemm", "Mul", "Add", "Relu"]
    assert_same_function(m, g)


def test_batchnorm_between_transposes_moves_onto_the_conv():
    """A channels-last framework's BN: Conv, Transpose to NHWC, BN over the last axis as Mul/Add, back."""
    nodes = [h.make_node("Conv", ["x", "W", "b"], ["c"], pads=[1, 1, 1, 1]),
             h.make_node("Transpose", ["c"], ["t"], perm=[0, 2, 3, 1]),
             h.make_node("Mul", ["t", "k"], ["mk"]), h.make_node("Sub", ["mk", "s"], ["ms"]),
             h.make_node("Transpose", ["ms"], ["y"], perm=[0, 3, 1, 2])]
    m = model(nodes, ("x", ["N", 3, 5, 5]), ("y", ["N", 4, 5, 5]), {"W": w(4, 3, 3, 3), "b": w(4), "k": 1 + w(4), "s": w(4)})
    g = affine_maps(load(m))
    assert ops(g) == ["Conv", "Mul", "Add", "Transpose", "Transpose"]
    assert_same_function(m, g)
    g = canonicalize(load(m))   # the Transposes cancel; onnxslim may fold the map into the Conv
    assert ops(g)[0] == "Conv" and not {"Transpose", "Sub"} & set(ops(g))
    assert_same_function(m, g)


def test_batchnorm_after_an_activation_is_a_depthwise_layer():
    nodes = [h.make_node("Conv", ["x", "W", "b"], ["c"], pads=[1, 1, 1, 1]), h.make_node("Selu", ["c"], ["s"]),
             _bn("bn", "s", "n", 4), h.make_node("Conv", ["n", "W2"], ["y"], pads=[1, 1, 1, 1])]
    m = model(nodes, ("x", ["N", 3, 6, 6]), ("y", ["N", 2, 6, 6]),
              {"W": w(4, 3, 3, 3), "b": w(4), "W2": w(2, 4, 3, 3), **_bn_params("bn", 4)})
    g = affine_maps(load(m))
    assert ops(g) == ["Conv", "Selu", "Conv", "Conv"]
    assert g.nodes[2].attrs["group"] == 4
    assert_same_function(m, g)


def test_divide_after_an_activation_of_a_vector_is_a_diagonal_dense_layer():
    nodes = [h.make_node("Gemm", ["x", "W"], ["g"], transB=1), h.make_node("Tanh", ["g"], ["t"]),
             h.make_node("Div", ["t", "d"], ["y"])]
    m = model(nodes, ("x", ["N", 4]), ("y", ["N", 5]), {"W": w(5, 4), "d": 1 + np.abs(w(5))})
    g = affine_maps(load(m))
    assert ops(g) == ["Gemm", "Tanh", "Gemm"]
    assert_same_function(m, g)


def test_map_of_the_model_input_folds_into_the_dense_layer_that_reads_it():
    """An input normalization (a BatchNormalization on the model input) folds forward into the
    first dense layer: W' = diag(k) W, b' = b + t W."""
    nodes = [h.make_node("BatchNormalization", ["x", "bn_s", "bn_b", "bn_m", "bn_v"], ["n"]),
             h.make_node("Gemm", ["n", "W", "b"], ["g"], transB=1), h.make_node("Relu", ["g"], ["y"])]
    m = model(nodes, ("x", ["N", 4]), ("y", ["N", 2]), {**_bn_params("bn", 4), "W": w(2, 4), "b": w(2)})
    g = affine_maps(load(m))
    assert ops(g) == ["Gemm", "Relu"]
    assert_same_function(m, g)


def test_map_before_a_padded_convolution_is_a_layer():
    """Folding a shift into a padded Conv is not exact (the padding is not shifted): on the model
    input (an input normalization) and after an activation alike, it is a layer of its own."""
    nodes = [h.make_node("Sub", ["x", "c"], ["s"]), h.make_node("Conv", ["s", "W"], ["y"], pads=[1, 1, 1, 1])]
    m = model(nodes, ("x", ["N", 2, 4, 4]), ("y", ["N", 3, 4, 4]), {"c": w(1, 2, 1, 1), "W": w(3, 2, 3, 3)})
    g = affine_maps(load(m))
    assert ops(g) == ["Conv", "Conv"] and g.nodes[0].attrs["group"] == 2
    assert_same_function(m, g)
    nodes = [h.make_node("Conv", ["x", "W0"], ["c0"]), h.make_node("Relu", ["c0"], ["r"]),
             h.make_node("Sub", ["r", "c"], ["s"]), h.make_node("Conv", ["s", "W"], ["y"], pads=[1, 1, 1, 1])]
    m = model(nodes, ("x", ["N", 2, 4, 4]), ("y", ["N", 3, 4, 4]), {"W0": w(2, 2, 1, 1), "c": w(1, 2, 1, 1), "W": w(3, 2, 3, 3)})
    g = affine_maps(load(m))
    assert ops(g) == ["Conv", "Relu", "Conv", "Conv"] and g.nodes[2].attrs["group"] == 2
    assert_same_function(m, g)


def test_map_after_an_activation_folds_into_an_unpadded_convolution():
    nodes = [h.make_node("Conv", ["x", "W0"], ["c0"]), h.make_node("Relu", ["c0"], ["r"]),
             h.make_node("Mul", ["r", "k"], ["mk"]), h.make_node("Add", ["mk", "c"], ["s"]),
             h.make_node("Conv", ["s", "W", "b"], ["y"])]
    m = model(nodes, ("x", ["N", 2, 5, 5]), ("y", ["N", 3, 3, 3]),
              {"W0": w(2, 2, 1, 1), "k": 1 + w(1, 2, 1, 1), "c": w(1, 2, 1, 1), "W": w(3, 2, 3, 3), "b": w(3)})
    g = canonicalize(load(m))
    assert ops(g) == ["Conv", "Relu", "Conv"]
    assert_same_function(m, g)


def test_quantized_graphs_are_left_to_the_importers():
    nodes = [h.make_node("QuantizeLinear", ["x", "sc"], ["q"]), h.make_node("DequantizeLinear", ["q", "sc"], ["d"]),
             h.make_node("Relu", ["d"], ["r"]), h.make_node("Mul", ["r", "k"], ["y"])]
    m = model(nodes, ("x", ["N", 4]), ("y", ["N", 4]), {"sc": np.float32(0.1), "k": w(4)})
    assert ops(affine_maps(load(m))) == ["QuantizeLinear", "DequantizeLinear", "Relu", "Mul"]


@pytest.mark.parametrize("bias", [True, False])
def test_dense_over_a_sequence_is_a_pointwise_convolution(bias):
    """Keras Dense on a (N, L, F) sequence as keras2onnx wrote it (MatMul + Add, opset 8), then
    a BatchNormalization over the features through Transposes: one 1x1 Conv1D with the map folded
    in after the Transposes meet."""
    nodes = [h.make_node("MatMul", ["x", "W"], ["m"])] + ([h.make_node("Add", ["m", "b"], ["a"])] if bias else []) + [
        h.make_node("Transpose", ["a" if bias else "m"], ["t"], perm=[0, 2, 1]), _bn("bn", "t", "n", 5),
        h.make_node("Transpose", ["n"], ["r"], perm=[0, 2, 1]), h.make_node("Relu", ["r"], ["y"])]
    m = model(nodes, ("x", ["N", 4, 6]), ("y", ["N", 4, 5]), {"W": w(6, 5), "b": w(5), **_bn_params("bn", 5)},
              opset=8, ir=3, as_inputs=True)
    g = matmul_add(static_inputs(load(m)))
    assert ops(g)[:3] == ["Transpose", "Conv", "Transpose"]
    assert_same_function(m, g)
    g = canonicalize(load(m))
    assert ops(g).count("Conv") == 1 and "MatMul" not in ops(g) and "BatchNormalization" not in ops(g)
    assert_same_function(m, g)


def test_batchnorm_after_a_resize_and_a_pool_moves_onto_the_conv():
    """A map commutes with a nearest resize and, for positive scales, a max pool: it reaches the
    Conv (opset 7 Upsample with its scales attribute, as older exporters wrote it)."""
    nodes = [h.make_node("Conv", ["x", "W", "b"], ["c"], pads=[1, 1, 1, 1]),
             h.make_node("Upsample", ["c"], ["u"], mode="nearest", scales=[1.0, 1.0, 2.0, 2.0]),
             h.make_node("MaxPool", ["u"], ["p"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             h.make_node("BatchNormalization", ["p", "bn_s", "bn_b", "bn_m", "bn_v"], ["y"], spatial=1, epsilon=1e-3)]
    params = _bn_params("bn", 4)
    params["bn_s"] = np.abs(params["bn_s"]) + 0.1
    m = model(nodes, ("x", ["N", 3, 5, 5]), ("y", ["N", 4, 10, 10]), {"W": w(4, 3, 3, 3), "b": w(4), **params},
              opset=7, ir=3, as_inputs=True)
    g = affine_maps(static_inputs(load(m)))
    assert ops(g) == ["Conv", "Mul", "Add", "Upsample", "MaxPool"]
    assert_same_function(m, g)


def test_negative_scale_does_not_cross_a_max_pool():
    nodes = [h.make_node("Conv", ["x", "W"], ["c"]), h.make_node("MaxPool", ["c"], ["p"], kernel_shape=[2, 2]),
             h.make_node("Mul", ["p", "k"], ["y"])]
    m = model(nodes, ("x", ["N", 3, 5, 5]), ("y", ["N", 2, 2, 2]), {"W": w(2, 3, 2, 2), "k": np.array([[[1.0]], [[-2.0]]], np.float32)})
    g = affine_maps(load(m))
    assert ops(g) == ["Conv", "MaxPool", "Conv"]   # a depthwise layer of its own
    assert_same_function(m, g)


def test_dense_over_steps_with_the_batch_merged_into_rows():
    """TensorFlow's Tensordot (tf2onnx): Reshape (N, L, F) -> (N*L, F), MatMul, Reshape back (its
    shape computed from the input's), bias Add: a dense layer over the steps of the sequence."""
    nodes = [h.make_node("Reshape", ["x", "rows"], ["r"]), h.make_node("MatMul", ["r", "W"], ["m"]),
             h.make_node("Shape", ["x"], ["s"]), h.make_node("Gather", ["s", "i0"], ["n"], axis=0),
             h.make_node("Unsqueeze", ["n"], ["n1"], axes=[0]), h.make_node("Concat", ["n1", "rest"], ["back"], axis=0),
             h.make_node("Reshape", ["m", "back"], ["u"]), h.make_node("Add", ["u", "b"], ["a"]),
             h.make_node("Relu", ["a"], ["y"])]
    inits = {"rows": np.array([-1, 4], np.int64), "W": w(4, 3), "i0": np.array(0, np.int64),
             "rest": np.array([5, 3], np.int64), "b": w(3)}
    m = model(nodes, ("x", ["N", 5, 4]), ("y", ["N", 5, 3]), inits, opset=9)
    g = canonicalize(load(m))
    assert "MatMul" not in ops(g) and ops(g).count("Conv") == 1 and "Shape" not in ops(g)
    assert_same_function(m, g, batch=2)
    assert_same_function(m, g, batch=4)


def test_batchnorm_as_mul_add_after_a_layer_and_after_an_activation():
    """tf2onnx's Keras BatchNormalization at opset 9 (Mul, Add by constants): after a dense layer it
    stays for the quantizer to fold; after an activation it folds into the next dense layer."""
    nodes = [h.make_node("Gemm", ["x", "W1", "b1"], ["g1"]), h.make_node("Mul", ["g1", "k1"], ["m1"]),
             h.make_node("Add", ["m1", "t1"], ["a1"]), h.make_node("Relu", ["a1"], ["r1"]),
             h.make_node("Mul", ["r1", "k2"], ["m2"]), h.make_node("Add", ["m2", "t2"], ["a2"]),
             h.make_node("Gemm", ["a2", "W2", "b2"], ["y"])]
    m = model(nodes, ("x", ["N", 4]), ("y", ["N", 2]), {"W1": w(4, 5), "b1": w(5), "k1": 1 + w(5), "t1": w(5),
                                                        "k2": 1 + w(5), "t2": w(5), "W2": w(5, 2), "b2": w(2)}, opset=9)
    g = affine_maps(load(m))
    assert ops(g) == ["Gemm", "Mul", "Add", "Relu", "Gemm"]
    assert_same_function(m, g)


def test_map_over_the_last_axis_of_a_channels_last_signal_is_a_depthwise_layer():
    """Keras's BatchNormalization after an activation of a Conv1D, as tf2onnx writes it: the map
    over the channels of an (N, L, C) tensor, between the Transposes around the convolutions,
    becomes the depthwise layer between Transposes of its own, which cancel the graph's."""
    nodes = [h.make_node("Conv", ["x", "W", "b"], ["c"], pads=[1, 1]),
             h.make_node("Transpose", ["c"], ["t"], perm=[0, 2, 1]), h.make_node("Relu", ["t"], ["r"]),
             h.make_node("Mul", ["r", "k"], ["mk"]), h.make_node("Add", ["mk", "s"], ["ms"]),
             h.make_node("Transpose", ["ms"], ["u"], perm=[0, 2, 1]),
             h.make_node("Conv", ["u", "W2"], ["y"], pads=[1, 1])]
    m = model(nodes, ("x", ["N", 3, 9]), ("y", ["N", 2, 9]), {"W": w(4, 3, 3), "b": w(4), "k": 1 + w(4), "s": w(4), "W2": w(2, 4, 3)})
    g = affine_maps(load(m))
    assert ops(g) == ["Conv", "Transpose", "Relu", "Transpose", "Conv", "Transpose", "Transpose", "Conv"]
    assert_same_function(m, g)
    g = canonicalize(load(m))
    assert ops(g) == ["Conv", "Relu", "Conv", "Conv"]
    assert_same_function(m, g)


def test_map_of_a_layer_output_read_elsewhere_is_a_layer_of_its_own():
    """``conv2(relu(c * 0.5 + 0.25) + c)``: the conv's output is read by the map and by the sum,
    so the map cannot go into the conv's weights; it becomes a depthwise layer."""
    nodes = [h.make_node("Conv", ["x", "W", "b"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             h.make_node("Mul", ["c", "k"], ["s"]), h.make_node("Add", ["s", "t"], ["a"]),
             h.make_node("Relu", ["a"], ["r"]), h.make_node("Add", ["r", "c"], ["sum"]),
             h.make_node("Conv", ["sum", "W2"], ["y"], kernel_shape=[1, 1])]
    m = model(nodes, ("x", ["N", 3, 5, 5]), ("y", ["N", 2, 5, 5]),
              {"W": w(4, 3, 3, 3), "b": w(4), "k": np.array(0.5, np.float32), "t": np.array(0.25, np.float32),
               "W2": w(2, 4, 1, 1)})
    g = canonicalize(load(m))
    assert ops(g).count("Conv") == 3 and "Mul" not in ops(g)
    assert next(n for n in g.nodes if n.op_type == "Conv" and n.attr("group", 1) == 4)
    assert_same_function(m, g)
