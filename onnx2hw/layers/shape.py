"""Ops that only change how a quantized tensor is viewed: folded at import, no hardware. A model
input flattened before its quantizer is quantized on the host as the flat vector.

Flatten / Reshape / Squeeze / Unsqueeze to a vector become a permutation of the NHWC feature
order read by the next dense layer (or none: a vector viewed as ``(1, F)`` and back is the same
stream); a dense layer's vector viewed channels-last ``(H, W, C)`` before a Transpose to channels
first is that image (canonicalization writes PyTorch's ``view(N, C, H, W)`` of a dense layer so);
Identity and Dropout disappear; Constant feeds constants; Cast of a layer's integer
result is the result itself.

Transpose, as exporters of channels-last frameworks (Keras, TFLite) write it, moves no data:
the hardware's images are channels-last already. ``NHWC input -> Transpose(0, 3, 1, 2)`` makes
the host quantize the input as it comes (no axis moved); ``Transpose(0, 2, 3, 1) -> flatten``
before a dense layer is the NHWC feature order itself (the dense weights are read in that
order); a Transpose of a constant is folded. Other permutations are refused.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..ir.errors import UnsupportedError
from ..ir.graph import Node
from .builder import QT, Acc, Builder, Const, FloatIn, QConst, as_tensor, node_error
from ._layout import flatten_perm
from .base import Pattern
from .canonical import Rewrite

__all__ = ["PATTERNS"]


def _view(b: Builder, node: Node, x: QT, shape: tuple[int, ...]) -> QT:
    """``x`` viewed with the ONNX shape ``shape`` (same number of elements, ONNX C order): a
    flatten, any reshape between shapes that are not images (a vector as ``(1, F)`` and back), a
    1-D signal as an image with a unit axis and back (the hardware streams both alike), a dense
    layer's vector as the channels-last image ``(H, W, C)`` or signal ``(L, C)`` that a Transpose
    to channels first reads (its tensor then holds that image: :meth:`Builder.view_output`) or as
    the one-pixel image ``(C, 1, 1)`` that a layer other than a gate reads (a decoder's first
    ConvTranspose), or a vector ``(C,)`` as a per-channel Mul gate ``(C, 1, 1)`` / ``(C, 1)``
    (channels-last: ``(1, 1, C)`` / ``(1, C)``), the same stream of ``C`` values."""
    shape = tuple(int(d) for d in shape)
    n = int(np.prod(x.onnx_shape))
    if shape == x.onnx_shape:
        return x
    if x.perm is None and not x.hwc and _signal_as_image(x.onnx_shape, shape):
        return replace(x, onnx_shape=shape)   # both are held as the (1, L, C) image: the same stream
    if x.perm is None and not x.hwc and len(x.onnx_shape) == 1 and len(shape) in (2, 3) and shape[-1] != n \
            and _read_channels_first(b, node, len(shape)):   # more than one pixel (one: a Mul's gate, below)
        b.view_output(node, x, shape if len(shape) == 3 else (1,) + shape)
        return replace(x, onnx_shape=shape, hwc=True)   # the vector in its own order is the (H, W, C) image
    if x.perm is None and not x.hwc and len(x.onnx_shape) == 1 and len(shape) in (2, 3) and n in (shape[0], shape[-1]):
        if shape[0] == n and b.viewable(x) and _not_gate_reader(b, node, shape) is not None:
            b.view_output(node, x, (1, 1, n))    # a one-pixel image (a decoder's first ConvTranspose)
            return replace(x, onnx_shape=shape)
        _check_gate_readers(b, node, x.onnx_shape, shape)
        if shape[0] == n:        # a vector (C,) as (C, 1, 1) or (C, 1): the same stream
            return replace(x, onnx_shape=shape)
        return replace(x, onnx_shape=shape, hwc=True)   # ... as the channels-last (1, 1, C) or (1, C)
    if x.perm is None and not x.hwc and len(x.onnx_shape) == 1 and len(shape) in (2, 3):
        raise node_error(node, f"a vector {x.onnx_shape!r} viewed as {shape!r} is supported only as the output of a "
                         f"dense layer that nothing else reads (through elementwise ops), or viewed channels-last "
                         f"(H, W, C) / (L, C) before a Transpose to channels first", UnsupportedError)
    if len(shape) == 3 or int(np.prod(shape)) != n:
        raise node_error(node, f"reshape of {x.onnx_shape!r} to {shape!r} (only flattening to (N, features) is "
                         f"supported)", UnsupportedError)
    if x.perm is not None:
        perm = x.perm
    elif x.hwc or len(x.onnx_shape) not in (2, 3):  # stored in ONNX C order already (a (C, L) signal is not)
        perm = None
    else:
        perm = flatten_perm(x.onnx_shape)
    return replace(x, onnx_shape=shape, perm=perm, hwc=False)


#: nodes that hand a viewed tensor on unchanged in shape (quantizers of the three flavours)
_PASS_ON = frozenset({"QuantizeLinear", "DequantizeLinear", "Quant", "Identity"})


def _readers(b: Builder, node: Node):
    """The nodes reading ``node``'s output through :data:`_PASS_ON` nodes (``None`` stands for a
    model output)."""
    todo, seen = [node.outputs[0]], set()
    while todo:
        t = todo.pop()
        if t in seen:
            continue
        seen.add(t)
        if t in b.graph.output_names:
            yield None
        for n in b.graph.nodes:
            if t in n.inputs:
                if n.op_type in _PASS_ON:
                    todo.extend(n.outputs[:1])
                else:
                    yield n


def _read_channels_first(b: Builder, node: Node, rank: int) -> bool:
    """Everything reading the view ``node`` makes of a vector is a Transpose of the channels-last
    image ``(H, W, C)`` (``rank`` 3) or signal ``(L, C)`` (``rank`` 2) to channels first: the view
    is then that image, the vector's order being its row-major order (Keras ``Reshape((H, W, C))``
    before tf2onnx's Transpose; a PyTorch ``view(N, C, H, W)`` once canonicalization has put the
    dense layer's rows in that order)."""
    first = [0, rank] + list(range(1, rank))
    rs = list(_readers(b, node))
    return bool(rs) and all(r is not None and r.op_type == "Transpose" and list(r.attr("perm") or ()) == first
                            for r in rs)


def _not_gate_reader(b: Builder, node: Node, shape: tuple[int, ...]) -> Node | None:
    """A node reading the view ``node`` makes (possibly through quantizers) other than a Mul that
    broadcasts it per channel over a larger operand (a Conv, a pool, a table, a Mul whose result
    has the view's shape), or ``None``."""
    return next((n for n in _readers(b, node) if n is not None and
                 (n.op_type not in ("Mul", "QLinearMul") or _result_shape(b, n) == shape)), None)


def _check_gate_readers(b: Builder, node: Node, src: tuple[int, ...], shape: tuple[int, ...]) -> None:
    """A vector viewed as a one-pixel image or signal (an SE gate from Linear/Dense layers) keeps
    the vector's tensor, which has no pixel axes, where only Muls read it as their per-channel
    gate; a one-pixel image ``(C, 1, 1)`` read otherwise is the dense layer's output held as that
    image (:func:`_view`). Any other reader of a view ``(1, 1, C)`` is refused here."""
    n = _not_gate_reader(b, node, shape)
    if n is not None:
        raise node_error(node, f"a vector {src!r} viewed as {shape!r} is only supported as the per-channel "
                         f"gate of a Mul, not read by node {n.name!r} ({n.op_type})", UnsupportedError)


def _result_shape(b: Builder, node: Node) -> tuple | None:
    """The shape of ``node``'s result after the batch, where the model's types give it."""
    vi = b.graph.value_info.get(node.outputs[0])
    return None if vi is None or vi.shape is None else tuple(vi.shape[1:])


def _signal_as_image(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    """``a`` and ``b`` are a 1-D signal ``(C, L)`` and the ``H = 1`` image ``(C, 1, L)``, either
    way: the hardware holds both as ``(1, L, C)`` (an image ``(C, L, 1)`` is another geometry,
    which canonicalization turns into this one)."""
    a, b = sorted((a, b), key=len)
    return len(a) == 2 and b == (a[0], 1, a[1])


def _flatten_input(node: Node, x: FloatIn, shape) -> FloatIn:
    """A model input flattened before its quantizer: the host quantizes it as a vector (C order,
    as ONNX flattens); only flattening to (N, features) is supported."""
    n = int(np.prod(x.onnx_shape))
    if tuple(shape) != (n,) or x.layout == "nhwc":
        raise node_error(node, f"reshape of model input {x.name!r} from {x.onnx_shape!r} to {tuple(shape)!r} "
                         f"(only flattening to (N, {n}) is supported before its quantizer)", UnsupportedError)
    return replace(x, onnx_shape=(n,), layout="onnx")


def _flatten(b: Builder, node: Node):
    x = as_tensor(b, b.get(node.inputs[0], node))
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
    x = as_tensor(b, b.get(node.inputs[0], node))
    if isinstance(x, Acc) and _pending_view(b, node, x, [int(v) for v in b.const(node.inputs[1], node, "shape")][1:]):
        return
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
    moved = _unit_axis_move(x, tuple(rest))
    if moved is not None:
        b.set(node, moved)
    else:
        b.set(node, _flatten_input(node, x, rest) if isinstance(x, FloatIn) else _view(b, node, x, tuple(rest)))


def _unit_axis_move(x: QT | FloatIn, shape: tuple[int, ...]) -> QT | FloatIn | None:
    """A reshape of a channels-last view that moves only a unit axis, as the Transpose it stands
    for (``None`` for any other reshape). The data order does not change: tf2onnx writes the
    NHWC -> NCHW Transpose of a one-channel image ``(H, W, 1) -> (1, H, W)`` as a Reshape (and
    NCHW -> NHWC ``(1, H, W) -> (H, W, 1)``), and Keras ``Conv1D`` views its ``(L, C)`` signal as
    the image ``(1, L, C)`` (``ExpandDims``) before the Transpose to NCHW."""
    src = x.onnx_shape
    hwc = x.layout == "hwc" if isinstance(x, FloatIn) else (x.hwc and x.perm is None)
    if hwc and len(src) == 2 and shape == (1,) + src:
        return replace(x, onnx_shape=shape)                                        # (L, C) -> (1, L, C)
    if hwc and len(src) == 3 and src[2] == 1 and shape == (1, src[0], src[1]):   # (H, W, 1) -> (1, H, W)
        return replace(x, onnx_shape=shape, layout="nhwc") if isinstance(x, FloatIn) else \
            replace(x, onnx_shape=shape, hwc=False)
    if isinstance(x, QT) and not x.hwc and x.perm is None and len(src) == 3 and src[0] == 1 \
            and shape == (src[1], src[2], 1):                                       # (1, H, W) -> (H, W, 1)
        return replace(x, onnx_shape=shape, hwc=True)
    return None


def _pending_view(b: Builder, node: Node, x, shape) -> bool:
    """A pending layer ``x`` viewed as ``shape`` where that keeps its stream (a 1-D signal and an
    image of it with a unit axis): the layer's result takes the view (``True``); else ``False``."""
    if isinstance(x, Acc) and _signal_as_image(x.onnx_shape, tuple(shape)):
        b.set(node, replace(x, onnx_shape=tuple(shape)))
        return True
    return False


def _squeeze(b: Builder, node: Node):
    x = as_tensor(b, b.get(node.inputs[0], node))
    if isinstance(x, Acc):
        axes = node.attr("axes") if len(node.inputs) < 2 else tuple(int(a) for a in b.const(node.inputs[1], node, "axes"))
        rank = len(x.onnx_shape) + 1
        axes = [a + rank if a < 0 else a for a in (axes or ())]
        if _pending_view(b, node, x, tuple(d for i, d in enumerate(x.onnx_shape) if i + 1 not in axes)):
            return
    if not isinstance(x, QT):
        raise node_error(node, "squeezes a value that is not a quantized tensor", UnsupportedError)
    axes = node.attr("axes") if len(node.inputs) < 2 else tuple(int(a) for a in b.const(node.inputs[1], node, "axes"))
    rank = len(x.onnx_shape) + 1
    axes = sorted(a + rank if a < 0 else a for a in (axes or [i + 1 for i, d in enumerate(x.onnx_shape) if d == 1]))
    if 0 in axes or any(x.onnx_shape[a - 1] != 1 for a in axes):
        raise node_error(node, f"Squeeze axes {axes!r} are not unit non-batch axes", UnsupportedError)
    shape = tuple(d for i, d in enumerate(x.onnx_shape) if i + 1 not in axes)
    b.set(node, _view(b, node, x, shape))


def _unsqueeze(b: Builder, node: Node):
    x = as_tensor(b, b.get(node.inputs[0], node))
    if isinstance(x, Acc):
        axes = node.attr("axes") if len(node.inputs) < 2 else tuple(int(a) for a in b.const(node.inputs[1], node, "axes"))
        rank = len(x.onnx_shape) + 1 + len(axes or ())
        axes = [a + rank if a < 0 else a for a in (axes or ())]
        rest = iter(x.onnx_shape)
        if _pending_view(b, node, x, tuple(1 if i in axes else next(rest) for i in range(1, rank))):
            return
    if not isinstance(x, QT):
        raise node_error(node, "unsqueezes a value that is not a quantized tensor", UnsupportedError)
    axes = node.attr("axes") if len(node.inputs) < 2 else tuple(int(a) for a in b.const(node.inputs[1], node, "axes"))
    rank = len(x.onnx_shape) + 1 + len(axes or ())
    axes = sorted(a + rank if a < 0 else a for a in (axes or ()))
    if not axes or 0 in axes or len(set(axes)) != len(axes) or axes[-1] >= rank:
        raise node_error(node, f"Unsqueeze axes {axes!r} must be non-batch axes", UnsupportedError)
    rest = iter(x.onnx_shape)
    shape = tuple(1 if i in axes else next(rest) for i in range(1, rank))
    b.set(node, _view(b, node, x, shape))


_NCHW_TO_NHWC, _NHWC_TO_NCHW = (1, 2, 0), (2, 0, 1)   # on the axes after the batch


def _to_first(shape) -> tuple[int, ...] | None:
    """The perm (after the batch) from channels last to channels first: an image ``(H, W, C)``
    or a signal ``(L, C)``."""
    return {3: _NHWC_TO_NCHW, 2: (1, 0)}.get(len(shape))


def _transpose(b: Builder, node: Node):
    x = as_tensor(b, b.get(node.inputs[0], node))
    if isinstance(x, Const):
        b.set(node, Const(np.transpose(x.value, node.attr("perm"))))
        return
    if isinstance(x, QConst):
        perm = tuple(node.attr("perm") or range(x.q.ndim)[::-1])
        b.set(node, replace(x, q=np.transpose(x.q, perm), axis=perm.index(x.axis) if x.q.ndim else x.axis))
        return
    if not isinstance(x, (QT, FloatIn)):
        raise node_error(node, "transposes a value that is not a quantized tensor or a model input",
                         UnsupportedError)
    shape = x.onnx_shape
    perm = tuple(int(p) for p in (node.attr("perm") or range(len(shape) + 1)[::-1]))
    if sorted(perm) != list(range(len(shape) + 1)) or perm[0] != 0:
        raise node_error(node, f"Transpose perm {list(perm)!r} moves the batch axis", UnsupportedError)
    p = tuple(a - 1 for a in perm[1:])
    new = tuple(shape[a] for a in p)
    if p == tuple(range(len(shape))):
        b.set(node, x)
    elif isinstance(x, FloatIn) and x.layout == "hwc" and p == _to_first(shape):
        b.set(node, replace(x, onnx_shape=new, layout="nhwc"))
    elif isinstance(x, QT) and x.perm is None and not x.hwc and (
            (len(shape) == 3 and p == _NCHW_TO_NHWC)
            or (len(shape) == 2 and p == (1, 0) and b.specs[x.tensor].shape == (1, shape[1], shape[0]))):
        # an image, or a 1-D signal (C, L) held as the (1, L, C) image, viewed channels last
        b.set(node, replace(x, onnx_shape=new, hwc=True))
    elif isinstance(x, QT) and x.perm is None and p == _to_first(shape) and x.hwc:
        b.set(node, replace(x, onnx_shape=new, hwc=False))
    elif isinstance(x, QT) and [a for a in p if shape[a] != 1] == sorted(a for a in p if shape[a] != 1) \
            and len(new) != 3:
        b.set(node, _view(b, node, x, new))  # moves only unit axes: a reshape
    elif isinstance(x, QT) and (x.perm is not None or x.hwc) and len(new) != 3:
        # a flattened view (Keras Conv1D: (C, 1, L) -> squeeze (C, L) -> Transpose (L, C) -> flatten):
        # its feature permutation, transposed; only a flatten or a dense layer reads it
        base = x.perm if x.perm is not None else np.arange(int(np.prod(shape)))
        order = np.arange(base.size).reshape(shape).transpose(p).reshape(-1)
        b.set(node, replace(x, onnx_shape=new, perm=base[order], hwc=False))
    else:
        raise node_error(node, f"Transpose perm {list(perm)!r} of shape {shape!r} is not supported (only NHWC <-> "
                         f"NCHW of an image at the model input or before a flatten)", UnsupportedError)


def _identity(b: Builder, node: Node):
    b.set(node, b.get(node.inputs[0], node))


def _constant(b: Builder, node: Node):
    for key in ("value", "value_float", "value_floats", "value_int", "value_ints"):
        if node.attr(key) is not None:
            b.set(node, Const(np.asarray(node.attr(key))))
            return
    raise node_error(node, "unsupported Constant attribute", UnsupportedError)


def _cast(b: Builder, node: Node):
    x = as_tensor(b, b.get(node.inputs[0], node))
    if not isinstance(x, Acc):
        raise node_error(node, "Cast is only supported on an integer layer output", UnsupportedError)
    b.set(node, x)


# ---- canonical float forms (post-training quantizer) ------------------------------------------------

def _canonical_constant(node: Node, rw: Rewrite) -> None:
    """A Constant becomes an initializer (float32 or int64 for the scalar and list forms)."""
    for key in ("value", "value_float", "value_floats", "value_int", "value_ints"):
        v = node.attr(key)
        if v is not None:
            dtype = None if key == "value" else np.float32 if "float" in key else np.int64
            rw.inits[node.outputs[0]] = np.asarray(v, dtype=dtype)
            return None
    raise node_error(node, "only tensor/float/int constants are supported", UnsupportedError)


def _canonical_identity(node: Node, rw: Rewrite) -> Node | None:
    """Removed (its readers read its input), but kept as an Identity where it makes a graph output."""
    if rw.is_output(node.outputs[0]):
        return Node(node.name, "Identity", "", node.inputs[:1], node.outputs[:1], since_version=node.since_version)
    rw.alias(node.outputs[0], node.inputs[0])
    return None


def _canonical_dropout(node: Node, rw: Rewrite) -> Node | None:
    """Inference Dropout is an Identity."""
    if len(node.outputs) > 1 and node.outputs[1]:
        raise node_error(node, "the mask output is not supported", UnsupportedError)
    if node.attr("training_mode") is not None or (len(node.inputs) > 2 and node.inputs[2]):
        raise node_error(node, "training_mode is not supported", UnsupportedError)
    return _canonical_identity(node, rw)


def _canonical_reshape(node: Node, rw: Rewrite) -> Node:
    if node.inputs[1] not in rw.inits:
        raise node_error(node, "Reshape needs a constant shape", UnsupportedError)
    return node


_VIEW = "absorbed at compile time"
PATTERNS = (
    Pattern("", "Flatten", _VIEW, _flatten, ptq="pass"),
    Pattern("", "Reshape", _VIEW, _reshape, ptq="pass", canonical=_canonical_reshape, const_inputs=1),
    Pattern("", "Squeeze", _VIEW, _squeeze),
    Pattern("", "Unsqueeze", _VIEW, _unsqueeze),
    Pattern("", "Transpose", "absorbed (NHWC <-> NCHW: stream order; constants: folded)", _transpose, ptq="pass"),
    Pattern("", "Identity", "removed", _identity, ptq="pass", canonical=_canonical_identity),
    Pattern("", "Dropout", "removed (inference)", _identity, ptq="fold", canonical=_canonical_dropout),
    Pattern("", "Constant", "constant input, folded at compile time", _constant, ptq="fold",
            canonical=_canonical_constant),
    Pattern("", "Cast", "removed (integer layer output)", _cast),
)
