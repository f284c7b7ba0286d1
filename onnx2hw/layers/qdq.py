"""The ONNX QuantizeLinear / DequantizeLinear pair (QDQ and QOperator models): quantization
parameters of weights and activations, the host-side input quantizer and output dequantizer.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..ir.errors import UnsupportedError
from ..ir.graph import Node
from .builder import Builder, Const, QConst, node_error, qconst, qtype_of, real_view, zp_type
from ._scale import check_scale
from .base import Pattern

__all__ = ["PATTERNS"]


def _q_attrs(node: Node):
    if int(node.attr("block_size", 0) or 0):
        raise node_error(node, "blocked quantization is not supported", UnsupportedError)
    return int(node.attr("axis", 1))


def _quantize_linear(b: Builder, node: Node):
    axis = _q_attrs(node)
    x = b.get(node.inputs[0], node)
    scale = np.asarray(b.const(node.inputs[1], node, "scale"), np.float64)
    if isinstance(x, Const):  # a float constant quantized in the graph: fold it
        check_scale(scale, f"node {node.name!r}")
        zp_arr = b.const(node.inputs[2], node, "zero point") if len(node.inputs) > 2 and node.inputs[2] else None
        t = qtype_of(zp_arr) if zp_arr is not None else zp_type(b, node, 2)[1]
        v = np.asarray(x.value, np.float64)
        ax = axis + v.ndim if axis < 0 else axis
        z = np.asarray(zp_arr if zp_arr is not None else 0, np.int64)
        shp = [1] * v.ndim
        shp[ax] = -1
        s_b = scale.reshape(shp) if scale.size > 1 else scale.reshape(())
        z_b = z.reshape(shp) if z.size > 1 else z.reshape(())
        q = np.clip(np.rint(v / s_b) + z_b, t.lo, t.hi).astype(np.int64)
        b.set(node, QConst(q, scale.reshape(-1), z.reshape(-1), ax, t))
        return
    zp, t = zp_type(b, node, 2)
    b.set(node, b.quantize(node, x, scale, zp, t))


def _dequantize_linear(b: Builder, node: Node):
    axis = _q_attrs(node)
    x = b.get(node.inputs[0], node)
    scale = np.asarray(b.const(node.inputs[1], node, "scale"), np.float64)
    zp = b.const(node.inputs[2], node, "zero point") if len(node.inputs) > 2 and node.inputs[2] else None
    if isinstance(x, Const):
        b.set(node, qconst(b, node, node.inputs[0], scale, zp, axis))
        return
    if isinstance(x, QConst):  # QuantizeLinear -> DequantizeLinear of a constant: the DQ gives the meaning
        z = np.asarray(zp if zp is not None else 0, np.int64).reshape(-1)
        ax = axis + x.q.ndim if axis < 0 else axis
        b.set(node, replace(x, scale=scale.reshape(-1), zp=z, axis=ax if scale.size > 1 or z.size > 1 else x.axis))
        return
    b.set(node, real_view(b, node, 0, 1, 2))


_ONLY = frozenset({"qdq", "qoperator"})
PATTERNS = (
    Pattern("", "QuantizeLinear", "quantization parameters / host input quantizer", _quantize_linear, _ONLY),
    Pattern("", "DequantizeLinear", "quantization parameters / host output dequantizer", _dequantize_linear, _ONLY),
)
