"""onnx2hw.canon.constants: weights given as inputs, constant sub-computations and computed view
targets (the forms of IR-3 files and of exporters run without constant folding)."""
import numpy as np
from onnx import helper as h

from _canon_models import assert_same_function, model, ops, w
from onnx2hw.canon import canonicalize
from onnx2hw.canon.constants import fold_constants, literal_views, static_inputs
from onnx2hw.ir import load


def _flatten_by_shape_chain(**kw):
    """``x.view(x.size(0), -1)`` as TorchScript wrote it at opset 9: Shape, Gather, Unsqueeze,
    Concat, Reshape; then a dense layer whose weight is ``Pow`` of a constant."""
    nodes = [h.make_node("Shape", ["x"], ["s"]), h.make_node("Constant", [], ["i0"], value=h.make_tensor("i0", 7, [], [0])),
             h.make_node("Gather", ["s", "i0"], ["b"], axis=0), h.make_node("Unsqueeze", ["b"], ["b1"], axes=[0]),
             h.make_node("Concat", ["b1", "m1"], ["tgt"], axis=0), h.make_node("Reshape", ["x", "tgt"], ["f"]),
             h.make_node("Pow", ["w0", "two"], ["w2"]), h.make_node("Gemm", ["f", "w2", "b2"], ["y"], transB=1)]
    inits = {"m1": np.array([-1], np.int64), "w0": w(5, 24), "two": np.array(2, np.float32), "b2": w(5)}
    return model(nodes, ("x", ["N", 2, 3, 4]), ("y", ["N", 5]), inits, opset=9, **kw)


def test_static_inputs_are_constants():
    m = _flatten_by_shape_chain(ir=3, as_inputs=True)
    g = load(m)
    assert g.overridable
    s = static_inputs(g)
    assert [v.name for v in s.inputs] == ["x"] and not s.overridable and s.ir_version >= 4


def test_shape_chain_and_constant_ops_fold():
    m = _flatten_by_shape_chain(ir=3, as_inputs=True)
    g = canonicalize(load(m))
    assert ops(g) == ["Reshape", "Gemm"]
    reshape = g.nodes[0]
    assert g.initializers[reshape.inputs[1]].tolist() == [-1, 24]
    assert_same_function(m, g, batch=2)
    assert_same_function(m, g, batch=5)


def test_quantizers_of_constants_stay():
    nodes = [h.make_node("QuantizeLinear", ["w0", "s", "z"], ["wq"]), h.make_node("DequantizeLinear", ["wq", "s", "z"], ["wd"]),
             h.make_node("Gemm", ["x", "wd"], ["y"], transB=1)]
    m = model(nodes, ("x", ["N", 4]), ("y", ["N", 3]), {"w0": w(3, 4), "s": np.float32(0.01), "z": np.int8(0)})
    g = fold_constants(load(m))
    assert ops(g) == ["QuantizeLinear", "DequantizeLinear", "Gemm"]


def test_unsqueeze_squeeze_become_literal_reshapes_and_merge():
    nodes = [h.make_node("Unsqueeze", ["x"], ["u"], axes=[2]), h.make_node("Relu", ["u"], ["r"]),
             h.make_node("Squeeze", ["r"], ["q"], axes=[2]), h.make_node("Unsqueeze", ["q"], ["u2"], axes=[2]),
             h.make_node("Squeeze", ["u2"], ["y"], axes=[2])]
    m = model(nodes, ("x", ["N", 6]), ("y", ["N", 6]), {}, opset=11)
    g = literal_views(load(m))
    assert ops(g) == ["Relu", "Reshape"]   # the views move below the activation and merge
    assert_same_function(m, g)


def test_fixed_batch_keeps_its_literal_batch():
    nodes = [h.make_node("Flatten", ["x"], ["f"]), h.make_node("Unsqueeze", ["f"], ["y"], axes=[2])]
    m = model(nodes, ("x", [2, 3, 4]), ("y", [2, 12, 1]), {}, opset=11)
    g = literal_views(load(m))
    assert g.initializers[g.nodes[-1].inputs[1]].tolist() == [2, 12, 1]


def test_view_between_a_layer_and_its_activation_moves_below_it():
    """tf2onnx's Conv1D at opset 9: Squeeze, then the bias Add and Relu on the squeezed tensor."""
    nodes = [h.make_node("Unsqueeze", ["x"], ["u"], axes=[2]), h.make_node("Conv", ["u", "W"], ["c"]),
             h.make_node("Squeeze", ["c"], ["s"], axes=[2]), h.make_node("Add", ["s", "b"], ["a"]),
             h.make_node("Relu", ["a"], ["r"]), h.make_node("MatMul", ["r2", "W2"], ["y"]),
             h.make_node("Flatten", ["r"], ["r2"])]
    nodes[-2], nodes[-1] = nodes[-1], nodes[-2]
    m = model(nodes, ("x", ["N", 3, 8]), ("y", ["N", 2]), {"W": w(4, 3, 1, 3), "b": w(4, 1), "W2": w(24, 2)}, opset=9)
    g = canonicalize(load(m))
    assert ops(g)[1:4] == ["Conv", "Add", "Relu"] or ops(g)[1:3] == ["Conv", "Relu"], ops(g)
    assert_same_function(m, g)


def test_canonical_form_is_a_fixed_point():
    """Rules run until a pass changes nothing: canonicalizing the canonical graph gives it back."""
    from onnx2hw.canon import _shape_of
    m = _flatten_by_shape_chain(ir=3, as_inputs=True)
    g = canonicalize(load(m))
    from onnx2hw.ir.simplify import to_model
    assert _shape_of(canonicalize(load(to_model(g)))) == _shape_of(g)
