"""The ONNX QuantizeLinear / DequantizeLinear pair (QDQ and QOperator models): quantization
parameters of weights and activations, the host-side input quantizer and output dequantizer.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..ir.errors import UnsupportedError
from ..ir.graph import Node
from .builder import (Builder, Const, QConst, along_axis, node_error, qconst, qtype_of, quant_axis, real_view,
                      zp_type)
from ._scale import check_scale
from .base import Pattern

__all__ = ["PATTERNS"]


def _q_attrs(node: Node):
    if int(node.attr("block_size", 0) or 0):
        raise node_error(node, "blocked quantization is not supported", UnsupportedError)
    return int(node.attr("axis", 1))


def _params(b: Builder, node: Node):
    """``(scale, zero point or None)`` of a QuantizeLinear / DequantizeLinear: constants of one
    shape (the spec's rule; one element each is per tensor)."""
    scale = np.asarray(b.const(node.inputs[1], node, "scale"), np.float64)
    zp = b.const(node.inputs[2], node, "zero point") if len(node.inputs) > 2 and node.inputs[2] else None
    if scale.ndim > 1 and scale.size > 1:
        raise node_error(node, f"scale of shape {scale.shape!r} is neither a scalar nor 1-D")
    if zp is not None and np.size(zp) != scale.size:
        raise node_error(node, f"zero point of shape {np.shape(zp)!r} for a scale of shape {scale.shape!r} "
                         f"(they must have the same shape)")
    return scale, zp


def _quantize_linear(b: Builder, node: Node):
    axis = _q_attrs(node)
    x = b.get(node.inputs[0], node)
    scale, zp = _params(b, node)
    if isinstance(x, Const):  # a float constant quantized in the graph: quantized here, as the spec says
        b.set(node, _quantize_constant(b, node, np.asarray(x.value, np.float64), scale, zp, axis))
        return
    zp, t = zp_type(b, node, 2)
    b.set(node, b.quantize(node, x, scale, zp, t))


def _quantize_constant(b: Builder, node: Node, v: np.ndarray, scale: np.ndarray, zp, axis: int) -> QConst:
    """``saturate(round_half_to_even(v / scale) + zp)`` on the zero point's type."""
    check_scale(scale, f"node {node.name!r}")
    t = qtype_of(zp) if zp is not None else zp_type(b, node, 2)[1]
    if np.isnan(v).any():
        raise node_error(node, "quantizes a constant holding NaN")
    z = np.asarray(zp if zp is not None else 0, np.int64)
    ax = quant_axis(node, v.shape, scale, z, axis)
    q = np.clip(np.rint(v / along_axis(scale, v.ndim, ax)) + along_axis(z, v.ndim, ax), t.lo, t.hi)
    return QConst(q.astype(np.int64), scale.reshape(-1), z.reshape(-1), ax, t)


def _dequantize_linear(b: Builder, node: Node):
    axis = _q_attrs(node)
    x = b.get(node.inputs[0], node)
    scale, zp = _params(b, node)
    if isinstance(x, Const):
        b.set(node, qconst(b, node, node.inputs[0], scale, zp, axis))
        return
    if isinstance(x, QConst):  # QuantizeLinear -> DequantizeLinear of a constant: the DQ gives the meaning
        z = np.asarray(zp if zp is not None else 0, np.int64).reshape(-1)
        b.set(node, replace(x, scale=scale.reshape(-1), zp=z, axis=quant_axis(node, x.q.shape, scale, z, axis)))
        return
    b.set(node, real_view(b, node, 0, 1, 2))


_ONLY = frozenset({"qdq", "qoperator"})
PATTERNS = (
    Pattern("", "QuantizeLinear", "quantization parameters / host input quantizer", _quantize_linear, _ONLY),
    Pattern("", "DequantizeLinear", "quantization parameters / host output dequantizer", _dequantize_linear, _ONLY),
)
