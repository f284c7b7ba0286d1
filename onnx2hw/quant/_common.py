"""Op handlers shared by the importers: layout ops, activations folded into clamps, constants,
the ONNX QuantizeLinear/DequantizeLinear pair and the float linear ops on dequantized views."""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..ir.errors import UnsupportedError
from ..ir.graph import Node
from ._build import QT, Acc, Builder, Const, FloatIn, QConst, node_error, qtype_of
from ._layout import flatten_perm
from . import integer_graph as ig

__all__ = ["COMMON", "QDQ_PAIR", "FLOAT_LINEAR", "opt", "real_view", "qconst", "zp_type"]


def opt(b: Builder, node: Node, i: int):
    """Input ``i`` of ``node`` or ``None`` when omitted."""
    return b.get(node.inputs[i], node) if len(node.inputs) > i and node.inputs[i] else None


def _view(b: Builder, node: Node, x: QT, shape: tuple[int, ...]) -> QT:
    n = int(np.prod(x.onnx_shape))
    if tuple(shape) == x.onnx_shape:
        return x
    if len(shape) != 1 or shape[0] != n:
        raise node_error(node, f"reshape of {x.onnx_shape!r} to {shape!r} (only flattening to (N, features) is "
                         f"supported)", UnsupportedError)
    perm = x.perm if x.perm is not None else flatten_perm(x.onnx_shape)
    return replace(x, onnx_shape=(n,), perm=perm)


def _flatten(b: Builder, node: Node):
    x = b.get(node.inputs[0], node)
    if not isinstance(x, QT):
        raise node_error(node, "flattens a value that is not a quantized tensor", UnsupportedError)
    axis = int(node.attr("axis", 1))
    if axis not in (1, -len(x.onnx_shape)):
        raise node_error(node, f"Flatten axis {axis!r} would fold the batch", UnsupportedError)
    b.set(node, _view(b, node, x, (int(np.prod(x.onnx_shape)),)))


def _reshape(b: Builder, node: Node):
    """Reshape that keeps the batch (target ``[0 or -1, ...]``) to the same shape or a vector."""
    x = b.get(node.inputs[0], node)
    if not isinstance(x, QT):
        raise node_error(node, "reshapes a value that is not a quantized tensor", UnsupportedError)
    shape = [int(v) for v in b.const(node.inputs[1], node, "shape")]
    size = int(np.prod(x.onnx_shape))
    if not node.attr("allowzero", 0):  # 0 copies the input dim at that index
        shape = [(x.onnx_shape[i - 1] if i else 0) if d == 0 and i <= len(x.onnx_shape) else d
                 for i, d in enumerate(shape)]
    if not shape or shape[0] not in (0, -1):
        raise node_error(node, f"Reshape to {shape!r} does not keep the batch as its first dim", UnsupportedError)
    rest = shape[1:]
    if shape[0] == 0 and rest.count(-1) == 1:
        known = int(np.prod([d for d in rest if d != -1]))
        rest = [size // known if d == -1 else d for d in rest]
    if any(d < 1 for d in rest) or int(np.prod(rest)) != size:
        raise node_error(node, f"Reshape of {x.onnx_shape!r} to {shape!r} changes the batch dimension",
                         UnsupportedError)
    b.set(node, _view(b, node, x, tuple(rest)))


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


def _relu(b: Builder, node: Node):
    x = b.get(node.inputs[0], node)
    if not isinstance(x, Acc):
        raise node_error(node, "Relu must directly follow a quantized layer (it is folded into its clamp)",
                         UnsupportedError)
    b.set(node, b.clamp_acc(node, x, 0.0, np.inf))


def _clip(b: Builder, node: Node):
    x = b.get(node.inputs[0], node)
    if not isinstance(x, Acc):
        raise node_error(node, "Clip must directly follow a quantized layer (it is folded into its clamp)",
                         UnsupportedError)
    if node.since_version < 11:
        lo, hi = node.attr("min", -np.inf), node.attr("max", np.inf)
    else:
        lo = float(b.const(node.inputs[1], node, "min")) if len(node.inputs) > 1 and node.inputs[1] else -np.inf
        hi = float(b.const(node.inputs[2], node, "max")) if len(node.inputs) > 2 and node.inputs[2] else np.inf
    b.set(node, b.clamp_acc(node, x, float(lo), float(hi)))


def _identity(b: Builder, node: Node):
    b.set(node, b.get(node.inputs[0], node))


def _constant(b: Builder, node: Node):
    for key in ("value", "value_float", "value_floats", "value_int", "value_ints"):
        if node.attr(key) is not None:
            b.set(node, Const(np.asarray(node.attr(key))))
            return
    raise node_error(node, "unsupported Constant attribute", UnsupportedError)


def _maxpool(b: Builder, node: Node):
    x = b.get(node.inputs[0], node)
    if not isinstance(x, QT):
        raise node_error(node, "MaxPool of a value that is not a quantized tensor", UnsupportedError)
    b.set(node, b.maxpool(node, x))


def zp_type(b: Builder, node: Node, zp_index: int, default: ig.IntType | None = None) -> tuple[int, ig.IntType]:
    """``(zero point, its IntType)`` of a Q/DQ-style zero point input (``default`` / uint8 when omitted)."""
    if len(node.inputs) > zp_index and node.inputs[zp_index]:
        v = b.get(node.inputs[zp_index], node)
        if not isinstance(v, Const):
            raise node_error(node, "zero point must be a constant")
        arr = v.value
        try:
            t = qtype_of(arr)
        except ValueError as exc:
            raise node_error(node, str(exc), UnsupportedError) from None
        if arr.size != 1:
            raise node_error(node, "per-channel activation zero point is not supported", UnsupportedError)
        return int(np.asarray(arr, np.int64).reshape(-1)[0]), t
    if default is not None:
        return 0, default
    odt = int(node.attr("output_dtype", 0) or 0)
    from ._build import _ELEM_TYPES
    return 0, _ELEM_TYPES.get(odt, ig.IntType(8, False))


def qconst(b: Builder, node: Node, q_name: str, scale, zp, axis: int) -> QConst:
    """A quantized constant from an integer initializer and its scale / zero point values."""
    v = b.get(q_name, node)
    if not isinstance(v, Const):
        raise node_error(node, f"{q_name!r} must be a constant integer tensor", UnsupportedError)
    try:
        t = qtype_of(v.value) if np.asarray(v.value).dtype.name not in ("int32", "int64") else ig.IntType(16, True)
    except ValueError as exc:
        raise node_error(node, str(exc), UnsupportedError) from None
    q = np.asarray(v.value, dtype=np.int64)
    s = np.asarray(scale, dtype=np.float64).reshape(-1) if np.asarray(scale).ndim else np.asarray(scale, np.float64)
    z = np.zeros_like(s, dtype=np.int64) if zp is None else np.asarray(zp, dtype=np.int64)
    axis = axis + q.ndim if axis < 0 else axis
    return QConst(q, s, z, axis, t)


def real_view(b: Builder, node: Node, i_x: int, i_s: int, i_zp: int | None) -> QT:
    """The dequantized view of integer input ``i_x`` with the scale / zero point inputs ``i_s``/``i_zp``."""
    x = b.get(node.inputs[i_x], node)
    if isinstance(x, FloatIn):
        raise node_error(node, "integer op fed by a float model input (quantize it first)", UnsupportedError)
    if not isinstance(x, QT) or x.real:
        raise node_error(node, f"input {node.inputs[i_x]!r} must be an integer tensor", UnsupportedError)
    s = np.asarray(b.const(node.inputs[i_s], node, "scale"), np.float64)
    if s.size != 1:
        raise node_error(node, "per-channel activation scale is not supported", UnsupportedError)
    zp = 0
    if i_zp is not None and len(node.inputs) > i_zp and node.inputs[i_zp]:
        zp = int(np.asarray(b.const(node.inputs[i_zp], node, "zero point"), np.int64).reshape(-1)[0])
    from ._scale import check_scale
    return replace(x, real=True, scale=float(check_scale(s.reshape(()), f"node {node.name!r} input")), zp=zp)


# ---- QuantizeLinear / DequantizeLinear ---------------------------------------------------------

def _q_attrs(node: Node):
    if int(node.attr("block_size", 0) or 0):
        raise node_error(node, "blocked quantization is not supported", UnsupportedError)
    return int(node.attr("axis", 1))


def _quantize_linear(b: Builder, node: Node):
    axis = _q_attrs(node)
    x = b.get(node.inputs[0], node)
    scale = np.asarray(b.const(node.inputs[1], node, "scale"), np.float64)
    if isinstance(x, Const):  # a float constant quantized in the graph: fold it
        from ._scale import check_scale
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


# ---- float linear ops on dequantized views (QDQ style) ---------------------------------------------

def _need(node, x, kind, what):
    if not isinstance(x, kind):
        raise node_error(node, f"{what} must be {'a dequantized integer tensor' if kind is QT else 'a quantized constant'}"
                         f" (a float op between quantized layers cannot run in hardware)", UnsupportedError)
    if kind is QT and not x.real:
        raise node_error(node, f"{what} is an integer tensor where a float is expected", UnsupportedError)
    return x


def _conv(b: Builder, node: Node):
    x = _need(node, b.get(node.inputs[0], node), QT, "input")
    w = _need(node, b.get(node.inputs[1], node), QConst, "weight")
    b.set(node, b.conv(node, x, w, opt(b, node, 2)))


def _gemm(b: Builder, node: Node):
    if int(node.attr("transA", 0)):
        raise node_error(node, "transA=1 is not supported", UnsupportedError)
    x = _need(node, b.get(node.inputs[0], node), QT, "input A")
    w = _need(node, b.get(node.inputs[1], node), QConst, "weight B")
    b.set(node, b.dense(node, x, w, opt(b, node, 2), trans_b=bool(node.attr("transB", 0)),
                        alpha=node.attr("alpha", 1.0), beta=node.attr("beta", 1.0)))


def _matmul(b: Builder, node: Node):
    x = _need(node, b.get(node.inputs[0], node), QT, "input A")
    w = _need(node, b.get(node.inputs[1], node), QConst, "weight B")
    b.set(node, b.dense(node, x, w, None, trans_b=False))


def _add(b: Builder, node: Node):
    x, y = b.get(node.inputs[0], node), b.get(node.inputs[1], node)
    if isinstance(x, QT) and isinstance(y, QT):
        _need(node, x, QT, "input A"), _need(node, y, QT, "input B")
        b.set(node, b.add(node, x, y))
        return
    if isinstance(y, Acc) and isinstance(x, (Const, QConst)):
        x, y = y, x
    if isinstance(x, Acc) and isinstance(y, (Const, QConst)) and x.kind in ("dense", "conv"):
        v = y.value if isinstance(y, Const) else y.real()
        n = x.onnx_shape[0]
        v = np.asarray(v, np.float64)
        if x.kind == "conv" and v.size == n:
            v = v.reshape(-1)
        if v.size not in (1, n) or (v.size == n and x.kind == "dense" and v.shape[-1:] != (n,)):
            raise node_error(node, f"adds a constant of shape {v.shape!r} to a layer with {n} outputs",
                             UnsupportedError)
        b.set(node, replace(x, bias_real=x.bias_real + np.broadcast_to(v.reshape(-1), (n,))))
        return
    raise node_error(node, "Add needs two dequantized tensors or a layer plus a constant bias", UnsupportedError)


def _mul(b: Builder, node: Node):
    x, y = b.get(node.inputs[0], node), b.get(node.inputs[1], node)
    if isinstance(y, Acc):
        x, y = y, x
    if not (isinstance(x, Acc) and isinstance(y, Const) and x.kind in ("dense", "conv", "avgpool")):
        raise node_error(node, "Mul is only supported as a constant positive rescale of a layer output",
                         UnsupportedError)
    n = x.onnx_shape[0]
    v = np.asarray(y.value, np.float64).reshape(-1)
    if v.size not in (1, n) or np.any(v <= 0) or not np.all(np.isfinite(v)):
        raise node_error(node, f"rescale {v!r} must be positive finite, per tensor or per output channel",
                         UnsupportedError)
    v = np.broadcast_to(v, (n,))
    b.set(node, replace(x, scale=x.scale * v, bias_real=x.bias_real * v))


def _global_avgpool(b: Builder, node: Node):
    x = _need(node, b.get(node.inputs[0], node), QT, "input")
    if len(x.onnx_shape) != 3:
        raise node_error(node, f"input {x.onnx_shape!r} must be (N, C, H, W)", UnsupportedError)
    b.set(node, b.avgpool(node, x, x.onnx_shape[1:], (1, 1), (0, 0, 0, 0)))


def avgpool_geometry(node: Node, x: QT):
    from ._build import pads_of
    if len(x.onnx_shape) != 3:
        raise node_error(node, f"input {x.onnx_shape!r} must be (N, C, H, W)", UnsupportedError)
    kernel = tuple(node.attr("kernel_shape"))
    strides = tuple(node.attr("strides", (1, 1)))
    pads = pads_of(node, x.onnx_shape[1:], kernel, strides)
    if any(pads) and not int(node.attr("count_include_pad", 0)):
        raise node_error(node, "padding with count_include_pad=0 divides by a varying count", UnsupportedError)
    if tuple(node.attr("dilations", (1, 1))) != (1, 1):
        raise node_error(node, "dilations are not supported", UnsupportedError)
    return kernel, strides, pads


def _avgpool(b: Builder, node: Node):
    x = _need(node, b.get(node.inputs[0], node), QT, "input")
    b.set(node, b.avgpool(node, x, *avgpool_geometry(node, x)))


def _cast(b: Builder, node: Node):
    x = b.get(node.inputs[0], node)
    if not isinstance(x, Acc):
        raise node_error(node, "Cast is only supported on an integer layer output", UnsupportedError)
    b.set(node, x)


COMMON = {
    ("", "Flatten"): _flatten, ("", "Reshape"): _reshape, ("", "Squeeze"): _squeeze,
    ("", "Relu"): _relu, ("", "Clip"): _clip, ("", "Identity"): _identity, ("", "Dropout"): _identity,
    ("", "Constant"): _constant, ("", "MaxPool"): _maxpool,
}
QDQ_PAIR = {("", "QuantizeLinear"): _quantize_linear, ("", "DequantizeLinear"): _dequantize_linear}
FLOAT_LINEAR = {
    ("", "Conv"): _conv, ("", "Gemm"): _gemm, ("", "MatMul"): _matmul, ("", "Add"): _add, ("", "Mul"): _mul,
    ("", "GlobalAveragePool"): _global_avgpool, ("", "AveragePool"): _avgpool, ("", "Cast"): _cast,
}
