"""Ops folded into the layer before them: Relu and Clip narrow its output clamp (of a dequantized
tensor with no pending layer they are a table, :mod:`.lookup`), a BatchNormalization (QONNX)
rescales its accumulator's real value. A constant Add, Sub or Div applied to a model input
(Brevitas' ``2x - 1``) is folded into the host-side input quantizer instead
(:attr:`onnx2hw.layers.InputQuant.pre`, computed in float32 as the model does); Mul is
:mod:`.mul`'s.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..ir.errors import UnsupportedError
from ..ir.graph import Node
from .builder import QT, Acc, Builder, node_error, scale_input
from .base import Pattern
from .lookup import tabulate

__all__ = ["PATTERNS"]


def _relu(b: Builder, node: Node):
    x = b.get(node.inputs[0], node)
    if isinstance(x, QT) and x.real:
        tabulate(b, node)
        return
    if not isinstance(x, Acc):
        raise node_error(node, "Relu must follow a quantized layer (folded into its clamp) or a dequantized tensor "
                         "(a table)", UnsupportedError)
    b.set(node, b.clamp_acc(node, x, 0.0, np.inf))


def _clip(b: Builder, node: Node):
    x = b.get(node.inputs[0], node)
    if isinstance(x, QT) and x.real:
        tabulate(b, node)
        return
    if not isinstance(x, Acc):
        raise node_error(node, "Clip must follow a quantized layer (folded into its clamp) or a dequantized tensor "
                         "(a table)", UnsupportedError)
    if node.since_version < 11:
        lo, hi = node.attr("min", -np.inf), node.attr("max", np.inf)
    else:
        lo = float(b.const(node.inputs[1], node, "min")) if len(node.inputs) > 1 and node.inputs[1] else -np.inf
        hi = float(b.const(node.inputs[2], node, "max")) if len(node.inputs) > 2 and node.inputs[2] else np.inf
    b.set(node, b.clamp_acc(node, x, float(lo), float(hi)))


def _batchnorm(b: Builder, node: Node):
    x = b.get(node.inputs[0], node)
    if not (isinstance(x, Acc) and x.kind in ("dense", "conv")):
        raise node_error(node, "BatchNormalization must directly follow a Gemm/MatMul/Conv", UnsupportedError)
    gamma, beta, mean, var = (np.asarray(b.const(n, node, "parameter"), np.float64).reshape(-1)
                              for n in node.inputs[1:5])
    k = gamma / np.sqrt(var + float(node.attr("epsilon", 1e-5)))
    if np.any(k == 0) or not np.all(np.isfinite(k)):
        raise node_error(node, "BatchNormalization with a zero or infinite scale cannot fold into its layer",
                         UnsupportedError)
    b.set(node, replace(x, scale=x.scale * k, bias_real=x.bias_real * k + beta - mean * k))


def _input_only(op: str):
    """Sub / Div: only as scaling of a model input (folded into its host-side quantizer)."""
    def handler(b: Builder, node: Node):
        if not scale_input(b, node, op):
            raise node_error(node, f"{node.op_type} is only supported as scaling of a model input by a constant "
                             f"(folded into the host-side input quantizer)", UnsupportedError)
    return handler


_CLAMP = "folded into the output clamp, or a LookupUnit (of a dequantized tensor)"
_INPUT = "folded into the host input quantizer (scaling of the model input)"
PATTERNS = (
    Pattern("", "Relu", _CLAMP, _relu, ptq="layer"),
    Pattern("", "Clip", _CLAMP, _clip, ptq="layer"),
    Pattern("", "Sub", _INPUT, _input_only("sub")),
    Pattern("", "Div", _INPUT, _input_only("div")),
    Pattern("", "BatchNormalization", "folded into the preceding layer", _batchnorm, {"qonnx"}, ptq="fold"),
)
