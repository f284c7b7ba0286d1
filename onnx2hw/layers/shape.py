"""Ops that only change how a quantized tensor is viewed: folded at import, no hardware. A model
input flattened before its quantizer is quantized on the host as the flat vector.

Flatten / Reshape / Squeeze to a vector become a permutation of the NHWC feature order read by
the next dense layer; Identity and Dropout disappear; Constant feeds constants; Cast of a
layer's integer result is the result itself.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..ir.errors import UnsupportedError
from ..ir.graph import Node
from ._importer import QT, Acc, Builder, Const, FloatIn, node_error
from ._layout import flatten_perm
from .base import Pattern

__all__ = ["PATTERNS"]


def _view(b: Builder, node: Node, x: QT, shape: tuple[int, ...]) -> QT:
    n = int(np.prod(x.onnx_shape))
    if tuple(shape) == x.onnx_shape:
        return x
    if len(shape) != 1 or shape[0] != n:
        raise node_error(node, f"reshape of {x.onnx_shape!r} to {shape!r} (only flattening to (N, features) is "
                         f"supported)", UnsupportedError)
    perm = x.perm if x.perm is not None else flatten_perm(x.onnx_shape)
    return replace(x, onnx_shape=(n,), perm=perm)


def _flatten_input(node: Node, x: FloatIn, shape) -> FloatIn:
    """A model input flattened before its quantizer: the host quantizes it as a vector (C order,
    as ONNX flattens); only flattening to (N, features) is supported."""
    n = int(np.prod(x.onnx_shape))
    if tuple(shape) != (n,):
        raise node_error(node, f"reshape of model input {x.name!r} from {x.onnx_shape!r} to {tuple(shape)!r} "
                         f"(only flattening to (N, {n}) is supported before its quantizer)", UnsupportedError)
    return replace(x, onnx_shape=(n,))


def _flatten(b: Builder, node: Node):
    x = b.get(node.inputs[0], node)
    if isinstance(x, FloatIn) and int(node.attr("axis", 1)) == 1:
        b.set(node, _flatten_input(node, x, (int(np.prod(x.onnx_shape)),)))
        return
    if not isinstance(x, QT):
        raise node_error(node, "flattens a value that is not a quantized tensor", UnsupportedError)
    axis = int(node.attr("axis", 1))
    if axis not in (1, -len(x.onnx_shape)):
        raise node_error(node, f"Flatten axis {axis!r} would fold the batch", UnsupportedError)
    b.set(node, _view(b, node, x, (int(np.prod(x.onnx_shape)),)))


def _reshape(b: Builder, node: Node):
    """Reshape that keeps the batch (target ``[0 or -1, ...]``) to the same shape or a vector."""
    x = b.get(node.inputs[0], node)
    if not isinstance(x, (QT, FloatIn)):
        raise node_error(node, "reshapes a value that is not a quantized tensor", UnsupportedError)
    shape = [int(v) for v in b.const(node.inputs[1], node, "shape")]
    size = int(np.prod(x.onnx_shape))
    if not node.attr("allowzero", 0):  # 0 copies the input dim at that index
        shape = [(x.onnx_shape[i - 1] if i else 0) if d == 0 and i <= len(x.onnx_shape) else d
                 for i, d in enumerate(shape)]
    if not shape or (shape[0] not in (0, -1) and shape[0] != b.batch):  # b.batch: a batch the model fixes
        raise node_error(node, f"Reshape to {shape!r} does not keep the batch as its first dim", UnsupportedError)
    rest = shape[1:]
    if shape[0] != -1 and rest.count(-1) == 1:
        known = int(np.prod([d for d in rest if d != -1]))
        rest = [size // known if d == -1 else d for d in rest]
    if any(d < 1 for d in rest) or int(np.prod(rest)) != size:
        raise node_error(node, f"Reshape of {x.onnx_shape!r} to {shape!r} changes the batch dimension",
                         UnsupportedError)
    b.set(node, _flatten_input(node, x, rest) if isinstance(x, FloatIn) else _view(b, node, x, tuple(rest)))


def _squeeze(b: Builder, node: Node):
    x = b.get(node.inputs[0], node)
    if not isinstance(x, QT):
        raise node_error(node, "squeezes a value that is not a quantized tensor", UnsupportedError)
    axes = node.attr("axes") if len(node.inputs) < 2 else tuple(int(a) for a in b.const(node.inputs[1], node, "axes"))
    rank = len(x.onnx_shape) + 1
    axes = sorted(a + rank if a < 0 else a for a in (axes or [i + 1 for i, d in enumerate(x.onnx_shape) if d == 1]))
    if 0 in axes or any(x.onnx_shape[a - 1] != 1 for a in axes):
        raise node_error(node, f"Squeeze axes {axes!r} are not unit non-batch axes", UnsupportedError)
    shape = tuple(d for i, d in enumerate(x.onnx_shape) if i + 1 not in axes)
    b.set(node, _view(b, node, x, shape))


def _identity(b: Builder, node: Node):
    b.set(node, b.get(node.inputs[0], node))


def _constant(b: Builder, node: Node):
    for key in ("value", "value_float", "value_floats", "value_int", "value_ints"):
        if node.attr(key) is not None:
            b.set(node, Const(np.asarray(node.attr(key))))
            return
    raise node_error(node, "unsupported Constant attribute", UnsupportedError)


def _cast(b: Builder, node: Node):
    x = b.get(node.inputs[0], node)
    if not isinstance(x, Acc):
        raise node_error(node, "Cast is only supported on an integer layer output", UnsupportedError)
    b.set(node, x)


_VIEW = "absorbed at compile time"
PATTERNS = (
    Pattern("", "Flatten", _VIEW, _flatten, ptq="pass"),
    Pattern("", "Reshape", _VIEW, _reshape, ptq="pass"),
    Pattern("", "Squeeze", _VIEW, _squeeze),
    Pattern("", "Identity", "removed", _identity, ptq="pass"),
    Pattern("", "Dropout", "removed (inference)", _identity, ptq="fold"),
    Pattern("", "Constant", "constant input, folded at compile time", _constant, ptq="fold"),
    Pattern("", "Cast", "removed (integer layer output)", _cast),
)
