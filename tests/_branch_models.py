"""Small QDQ / QOperator graphs built with onnx.helper for the Concat, Resize and Mul layer tests."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["qdq_model", "qdq", "const"]


def const(name, value, dtype=None):
    return numpy_helper.from_array(np.asarray(value, dtype=dtype), name)


def qdq(nodes, inits, x, name, scale, zp, dtype=np.uint8):
    """Append QuantizeLinear -> DequantizeLinear of ``x`` on (scale, zp); returns (quantized, dequantized)."""
    inits += [const(f"{name}_s", np.float32(scale)), const(f"{name}_z", zp, dtype)]
    nodes.append(helper.make_node("QuantizeLinear", [x, f"{name}_s", f"{name}_z"], [f"{name}_q"], name=f"{name}_Q"))
    nodes.append(helper.make_node("DequantizeLinear", [f"{name}_q", f"{name}_s", f"{name}_z"], [f"{name}_dq"],
                                  name=f"{name}_DQ"))
    return f"{name}_q", f"{name}_dq"


def qdq_model(nodes, inits, in_shape, out_name, out_shape, opset=13, extra_opsets=()):
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", *in_shape])],
                          [helper.make_tensor_value_info(out_name, TensorProto.FLOAT, ["N", *out_shape])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset), *extra_opsets], ir_version=8)
    onnx.checker.check_model(m)
    return m
