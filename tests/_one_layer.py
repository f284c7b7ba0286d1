"""Small integer graphs of one or two layers, and one ONNX op run by the spec-exact onnxruntime
session, for the tests of the layer kinds and of the golden integer executor."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

from _oracle import run_spec
from onnx2hw import layers as ig

U8, S8, S4 = ig.IntType(8, False), ig.IntType(8, True), ig.IntType(4, True)


def ort_op(op, inputs: dict, out_type, **attrs):
    """Output ``y`` of one ONNX node ``op`` (opset 17) over uint8/int8 ``inputs``."""
    node = helper.make_node(op, list(inputs), ["y"], **attrs)
    tp = {np.dtype(np.uint8): TensorProto.UINT8, np.dtype(np.int8): TensorProto.INT8}
    g = helper.make_graph([node], "t", [helper.make_tensor_value_info(k, tp[v.dtype], list(v.shape))
                                        for k, v in inputs.items()],
                          [helper.make_tensor_value_info("y", out_type, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return run_spec(m, inputs)[0]


def graph_of(in_spec, layers, outs=None):
    """A validated IntegerGraph of ``layers`` on one input; its outputs ``outs`` (default: the
    last layer's)."""
    outs = outs or [layers[-1].output]
    return ig.IntegerGraph(
        inputs=(ig.InputQuant(in_spec.name, 0.1, 0, in_spec.dtype, len(in_spec.shape) == 3),),
        input_specs=(in_spec,), layers=tuple(layers),
        outputs=tuple(ig.OutputDequant(o.name, 0.5, 0, len(o.shape) == 3, TensorProto.FLOAT) for o in outs),
        output_specs=tuple(outs), source="qdq").validate()


def small_dense(**kw):
    """A 3 -> 2 Dense layer ``fc`` on uint8 input ``x``; ``kw`` replaces any of its fields."""
    w = np.array([[1, -2, 3], [4, 5, -6]])
    args = dict(name="fc", inputs=("x",), output=ig.TensorSpec("y", (2,), U8), weights=w, bias=np.array([1, 2]),
                in_type=U8, w_type=S4, acc_bits=13, act=ig.Requant(np.array([3]), np.array([4]), 0, 0, 255))
    args.update(kw)
    return ig.Dense(**args)
