"""Float models with several inputs or outputs, built with onnx.helper (tests/test_multi_io.py)."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["two_heads", "two_inputs", "late_input", "calib_for"]


def _w(rng, name, *shape, s=0.3):
    return numpy_helper.from_array((rng.standard_normal(shape) * s).astype(np.float32), name)


def _model(nodes, inputs, outputs, inits, name):
    def info(n, s):
        return helper.make_tensor_value_info(n, TensorProto.FLOAT, ["N", *s])
    g = helper.make_graph(nodes, name, [info(n, s) for n, s in inputs], [info(n, s) for n, s in outputs], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    onnx.checker.check_model(m, full_check=True)
    return m


def two_heads(softmax: bool = False, seed: int = 0) -> onnx.ModelProto:
    """x (1x8x8) -> Conv 3x3 (4 channels) -> Relu -> Flatten, shared by a classifier head
    (Gemm -> ``logits``, through Softmax with ``softmax``) and a regression head (Gemm -> Relu
    -> ``box``, non-negative: its quantized type is unsigned where the logits' is signed)."""
    rng = np.random.default_rng(seed)
    inits = [_w(rng, "cw", 4, 1, 3, 3), _w(rng, "cb", 4, s=0.1), _w(rng, "w1", 10, 256, s=0.1),
             _w(rng, "b1", 10, s=0.1), _w(rng, "w2", 2, 256, s=0.1), _w(rng, "b2", 2, s=0.1)]
    nodes = [helper.make_node("Conv", ["x", "cw", "cb"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Flatten", ["r"], ["f"], name="flat"),
             helper.make_node("Gemm", ["f", "w1", "b1"], ["l" if softmax else "logits"], transB=1, name="cls"),
             helper.make_node("Gemm", ["f", "w2", "b2"], ["h"], transB=1, name="reg"),
             helper.make_node("Relu", ["h"], ["box"], name="relu_box")]
    if softmax:
        nodes.append(helper.make_node("Softmax", ["l"], ["logits"], axis=1, name="sm"))
    return _model(nodes, [("x", (1, 8, 8))], [("logits", (10,)), ("box", (2,))], inits, "two_heads")


def two_inputs(join: str = "Add", seed: int = 0) -> onnx.ModelProto:
    """a (12) -> Gemm -> Relu and b (8) -> Gemm -> Relu, joined by ``join`` (Add or Concat),
    then Gemm -> y (5)."""
    rng = np.random.default_rng(seed)
    inits = [_w(rng, "wa", 16, 12), _w(rng, "ba", 16, s=0.1), _w(rng, "wb", 16, 8), _w(rng, "bb", 16, s=0.1),
             _w(rng, "wo", 5, 32 if join == "Concat" else 16), _w(rng, "bo", 5, s=0.1)]
    nodes = [helper.make_node("Gemm", ["a", "wa", "ba"], ["ha"], transB=1, name="ga"),
             helper.make_node("Relu", ["ha"], ["ra"], name="relu_a"),
             helper.make_node("Gemm", ["b", "wb", "bb"], ["hb"], transB=1, name="gb"),
             helper.make_node("Relu", ["hb"], ["rb"], name="relu_b"),
             helper.make_node(join, ["ra", "rb"], ["j"], name="joined", **({"axis": 1} if join == "Concat" else {})),
             helper.make_node("Gemm", ["j", "wo", "bo"], ["y"], transB=1, name="go")]
    return _model(nodes, [("a", (12,)), ("b", (8,))], [("y", (5,))], inits, f"two_inputs_{join.lower()}")


def late_input(seed: int = 0) -> onnx.ModelProto:
    """a (12) -> Gemm -> Relu -> Gemm -> Relu -> Add with the second input b (16) itself -> Gemm
    -> y (5): b is first read by the Add, after two layers of a."""
    rng = np.random.default_rng(seed)
    inits = [_w(rng, "w0", 16, 12), _w(rng, "b0", 16, s=0.1), _w(rng, "w1", 16, 16), _w(rng, "b1", 16, s=0.1),
             _w(rng, "wo", 5, 16), _w(rng, "bo", 5, s=0.1)]
    nodes = [helper.make_node("Gemm", ["a", "w0", "b0"], ["h0"], transB=1, name="g0"),
             helper.make_node("Relu", ["h0"], ["r0"], name="relu0"),
             helper.make_node("Gemm", ["r0", "w1", "b1"], ["h1"], transB=1, name="g1"),
             helper.make_node("Relu", ["h1"], ["r1"], name="relu1"),
             helper.make_node("Add", ["r1", "b"], ["s"], name="late_add"),
             helper.make_node("Gemm", ["s", "wo", "bo"], ["y"], transB=1, name="go")]
    return _model(nodes, [("a", (12,)), ("b", (16,))], [("y", (5,))], inits, "late_input")


def calib_for(model: onnx.ModelProto, n: int, seed: int, positive=()) -> dict[str, np.ndarray]:
    """``n`` float samples per model input: uniform [0, 1) for an image and the inputs named in
    ``positive`` (quantized unsigned), standard normal otherwise (signed)."""
    rng = np.random.default_rng(seed)
    out = {}
    for vi in model.graph.input:
        shape = [d.dim_value for d in vi.type.tensor_type.shape.dim][1:]
        if len(shape) == 3 or vi.name in positive:
            out[vi.name] = rng.random((n, *shape), dtype=np.float32)
        else:
            out[vi.name] = rng.standard_normal((n, *shape), dtype=np.float32)
    return out
