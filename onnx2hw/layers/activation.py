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
from .canonical import Rewrite
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


# ---- canonical float forms (post-training quantizer) ------------------------------------------------

def _canonical_clip(node: Node, rw: Rewrite) -> Node:
    """The bounds as constant inputs (the opset-11 form; -inf / inf where absent), as Clip-13."""
    lo, hi = node.attr("min"), node.attr("max")
    if node.since_version >= 11 or (lo is None and hi is None):
        lo = rw.const(node, 1, "min")
        hi = rw.const(node, 2, "max")
    lo = -np.inf if lo is None else float(np.asarray(lo))
    hi = np.inf if hi is None else float(np.asarray(hi))
    base = node.name or node.outputs[0]
    ln, hn = rw.add(f"{base}.min", np.float32(lo)), rw.add(f"{base}.max", np.float32(hi))
    return replace(node, inputs=(node.inputs[0], ln, hn), attrs={}, since_version=13)


def _canonical_batchnorm(node: Node, rw: Rewrite) -> None:
    """Folded into the linear layer that made its input (the only reader of that output)."""
    layer = rw.linear_before(node.inputs[0])
    if layer is None:
        raise node_error(node, "can only fold a BatchNormalization whose input comes from a Conv or Gemm read by "
                         "nothing else", UnsupportedError)
    if node.attr("training_mode", 0) or (len(node.outputs) > 1 and any(node.outputs[1:])):
        raise node_error(node, "training mode is not supported", UnsupportedError)
    scale, bias, mean, var = (rw.const(node, i, what).astype(np.float64)
                              for i, what in enumerate(("scale", "B", "mean", "var"), start=1))
    k = scale / np.sqrt(var + float(node.attr("epsilon", 1e-5)))
    if layer.channels != k.size:
        raise node_error(node, f"{k.size} channels do not match {layer.node.name!r} with {layer.channels} outputs",
                         UnsupportedError)
    rw.fold(layer, node.outputs[0], "bnfold", centre=mean, scale=k, shift=bias)
    return None


_CLAMP = "folded into the output clamp, or a LookupUnit (of a dequantized tensor)"
_INPUT = "folded into the host input quantizer (scaling of the model input)"
PATTERNS = (
    Pattern("", "Relu", _CLAMP, _relu, ptq="layer", fuse="clamp"),
    Pattern("", "Clip", _CLAMP, _clip, ptq="layer", canonical=_canonical_clip, fuse="clamp", const_inputs=1),
    Pattern("", "Sub", _INPUT, _input_only("sub")),
    Pattern("", "Div", _INPUT, _input_only("div")),
    Pattern("", "BatchNormalization", "folded into the preceding layer", _batchnorm, {"qonnx"}, ptq="fold",
            canonical=_canonical_batchnorm),
)
