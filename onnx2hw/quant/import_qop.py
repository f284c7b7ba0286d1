"""QOperator models (``QuantFormat.QOperator``) -> :class:`~onnx2hw.quant.integer_graph.IntegerGraph`.

Supported: QLinearConv, QLinearMatMul, MatMulInteger / ConvInteger (followed by Cast, a
constant positive Mul rescale, an optional constant Add bias, Relu/Clip and a QuantizeLinear),
and the ``com.microsoft`` ops onnxruntime's quantizer emits: QGemm, QLinearAdd,
QLinearAveragePool, QLinearGlobalAveragePool. MaxPool, Flatten and Reshape-to-vector run on the
integers directly; QuantizeLinear on the model input and DequantizeLinear on the outputs are the
host-side converters.
"""
from __future__ import annotations

import numpy as np

from ..ir.errors import UnsupportedError
from ..ir.graph import Graph, Node
from ._build import Builder, QT, node_error
from ._common import COMMON, FLOAT_LINEAR, QDQ_PAIR, avgpool_geometry, qconst, real_view, zp_type
from .integer_graph import IntegerGraph

__all__ = ["import_qop", "HANDLERS"]

MS = "com.microsoft"


def _scalar(b: Builder, node: Node, i: int, what: str) -> np.ndarray:
    return np.asarray(b.const(node.inputs[i], node, what), np.float64)


def _zp(b: Builder, node: Node, i: int):
    return b.const(node.inputs[i], node, "zero point") if len(node.inputs) > i and node.inputs[i] else None


def _out(b: Builder, node: Node, acc, i_s: int, i_zp: int, x: QT):
    zp, t = zp_type(b, node, i_zp, default=x.dtype)
    b.set(node, b.quantize(node, acc, _scalar(b, node, i_s, "output scale"), zp, t))


def _bias(b: Builder, node: Node, i: int, x: QT, w_scale: np.ndarray):
    if len(node.inputs) <= i or not node.inputs[i]:
        return None
    return qconst(b, node, node.inputs[i], x.scale * w_scale.reshape(-1), None, 0)


def _qlinear_conv(b: Builder, node: Node):
    x = real_view(b, node, 0, 1, 2)
    ws = _scalar(b, node, 4, "weight scale")
    w = qconst(b, node, node.inputs[3], ws, _zp(b, node, 5), 0)
    _out(b, node, b.conv(node, x, w, _bias(b, node, 8, x, ws)), 6, 7, x)


def _qlinear_matmul(b: Builder, node: Node):
    x = real_view(b, node, 0, 1, 2)
    w = qconst(b, node, node.inputs[3], _scalar(b, node, 4, "weight scale"), _zp(b, node, 5), 1)
    _out(b, node, b.dense(node, x, w, None, trans_b=False), 6, 7, x)


def _int_view(b: Builder, node: Node, zp_index: int) -> QT:
    from dataclasses import replace
    x = b.get(node.inputs[0], node)
    if not isinstance(x, QT) or x.real:
        raise node_error(node, f"input {node.inputs[0]!r} must be an integer tensor", UnsupportedError)
    zp = _zp(b, node, zp_index)
    return replace(x, real=True, scale=1.0, zp=int(np.asarray(zp if zp is not None else 0).reshape(-1)[0]))


def _matmul_integer(b: Builder, node: Node):
    x = _int_view(b, node, 2)
    w = qconst(b, node, node.inputs[1], np.ones(1), _zp(b, node, 3), 1)
    b.set(node, b.dense(node, x, w, None, trans_b=False))


def _conv_integer(b: Builder, node: Node):
    x = _int_view(b, node, 2)
    w = qconst(b, node, node.inputs[1], np.ones(1), _zp(b, node, 3), 0)
    b.set(node, b.conv(node, x, w, None))


def _qgemm(b: Builder, node: Node):
    if int(node.attr("transA", 0)):
        raise node_error(node, "transA=1 is not supported", UnsupportedError)
    x = real_view(b, node, 0, 1, 2)
    ws = _scalar(b, node, 4, "weight scale")
    trans_b = bool(node.attr("transB", 0))
    w = qconst(b, node, node.inputs[3], ws, _zp(b, node, 5), 0 if trans_b else 1)
    alpha = float(node.attr("alpha", 1.0))
    bias = None
    if len(node.inputs) > 6 and node.inputs[6]:
        bias = qconst(b, node, node.inputs[6], x.scale * ws.reshape(-1) * alpha, None, 0)
    acc = b.dense(node, x, w, bias, trans_b=trans_b, alpha=alpha)
    if len(node.inputs) <= 7 or not node.inputs[7]:
        raise node_error(node, "QGemm without y_scale has a float output (not supported in hardware)",
                         UnsupportedError)
    _out(b, node, acc, 7, 8, x)


def _qlinear_add(b: Builder, node: Node):
    a = real_view(b, node, 0, 1, 2)
    c = real_view(b, node, 3, 4, 5)
    _out(b, node, b.add(node, a, c), 6, 7, a)


def _channels_first(node: Node):
    if int(node.attr("channels_last", 0)):
        raise node_error(node, "channels_last=1 is not supported", UnsupportedError)


def _qlinear_avgpool(b: Builder, node: Node):
    _channels_first(node)
    x = real_view(b, node, 0, 1, 2)
    _out(b, node, b.avgpool(node, x, *avgpool_geometry(node, x)), 3, 4, x)


def _qlinear_global_avgpool(b: Builder, node: Node):
    _channels_first(node)
    x = real_view(b, node, 0, 1, 2)
    if len(x.onnx_shape) != 3:
        raise node_error(node, f"input {x.onnx_shape!r} must be (N, C, H, W)", UnsupportedError)
    _out(b, node, b.avgpool(node, x, x.onnx_shape[1:], (1, 1), (0, 0, 0, 0)), 3, 4, x)


HANDLERS = {
    **COMMON, **QDQ_PAIR, **FLOAT_LINEAR,
    ("", "QLinearConv"): _qlinear_conv, ("", "QLinearMatMul"): _qlinear_matmul,
    ("", "MatMulInteger"): _matmul_integer, ("", "ConvInteger"): _conv_integer,
    (MS, "QGemm"): _qgemm, (MS, "QLinearAdd"): _qlinear_add,
    (MS, "QLinearAveragePool"): _qlinear_avgpool, (MS, "QLinearGlobalAveragePool"): _qlinear_global_avgpool,
}


def import_qop(graph: Graph) -> IntegerGraph:
    """Exact integer graph of a QOperator-format model (``graph`` from :func:`onnx2hw.ir.load`)."""
    return Builder(graph, HANDLERS, "qoperator").run()
