"""Dense (fully connected) layer: ``acc[n] = sum_k W[n, k] * x[k] + bias[n]``, then ``act``.

ONNX forms: Gemm / MatMul on dequantized views (QDQ, QONNX; also the float ops the
post-training quantizer takes), QLinearMatMul, MatMulInteger (+ Cast, rescale Mul, bias Add),
com.microsoft QGemm. ``x`` is the input flattened in NHWC row-major order (a flatten of an
image permutes the weight columns at import). Hardware: one matrix-vector unit (PE output
rows x SIMD input columns per cycle) + Requantize or Thresholds.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..ir.errors import UnsupportedError
from ..ir.graph import Node
from .builder import (Acc, Builder, QConst, QT, Target, as_tensor, need, node_error, opt, qconst, quantize_output,
                        real_view, scalar, int_view, zp_input)
from ._exact import exact_dense
from .base import (LayerKind, Linear, Lowered, Pattern, act_blocks, check_linear, divisors, linear_mul,
                   linear_mul_options, linear_problem, mvu_block)
from .canonical import Rewrite
from .types import Act, IntType, acc_bits_for, accumulator_bounds, apply_act, readonly

__all__ = ["Dense", "KIND", "PATTERNS"]

MS = "com.microsoft"


@dataclass(frozen=True)
class Dense(LayerKind):
    """``weights`` ``(N, K)``; ``bias`` ``(N,)`` in accumulator LSBs; ``acc_bits`` exact (see graph).
    The output tensor is ``(N,)``, or any shape of ``N`` elements holding the ``N`` results in
    row order (a vector viewed as a channels-last image ``(H, W, C)``: the same stream)."""

    viewable_output = True

    weights: np.ndarray
    bias: np.ndarray
    in_type: IntType
    w_type: IntType
    acc_bits: int
    act: Act

    def __post_init__(self):
        super().__post_init__()
        object.__setattr__(self, "weights", readonly(self.weights))
        object.__setattr__(self, "bias", readonly(self.bias))

    def validate(self, ins):
        if len(ins) != 1:
            raise self.error("needs exactly one input")
        k = int(np.prod(ins[0].shape))
        if self.weights.ndim != 2 or self.weights.shape[1] != k:
            raise self.error(f"weights {self.weights.shape!r} do not match input {ins[0].shape!r} ({k} features)")
        n = self.weights.shape[0]
        check_linear(self, ins[0], n, self.output.shape if int(np.prod(self.output.shape)) == n else (n,))

    def reference(self, x):
        """``x`` flattened (NHWC order) times the weights, exact (float BLAS when every partial sum
        is exact in it: :func:`._exact.exact_dense`), ``act``, in the output tensor's shape."""
        x = np.asarray(x)
        acc = exact_dense(x.reshape(x.shape[0], self.weights.shape[1]), self.weights, self.bias)
        return apply_act(acc, self.act).reshape((x.shape[0],) + tuple(self.output.shape))

    def hardware_problem(self, ins):
        return linear_problem(self)

    def fold_options(self, ins):
        n, k = self.weights.shape
        return sorted(((p, s) for p in divisors(n) for s in divisors(k)), key=lambda ps: (ps[0] * ps[1], ps))

    def cycles(self, ins, pe, simd):
        n, k = self.weights.shape
        return (k // simd) * (n // pe)

    def mul_options(self, ins):
        return linear_mul_options(self.in_type, self.w_type)

    def lower(self, ins, pe, simd, family, mul=None):
        n, k = self.weights.shape
        mvu = mvu_block(self.weights, self.bias, self.in_type, self.w_type, pe, simd, self.acc_bits, family, mul=mul)
        act, ob, osg = act_blocks(self.act, n, pe, self.acc_bits, self.output.dtype, family,
                                  accumulator_bounds(self.weights, self.bias, self.in_type.lo, self.in_type.hi))
        return Lowered((mvu, *act), mvu.cost.cycles, ob, osg, fill=1.0, macs=n * k, multipliers=pe * simd,
                       mul=linear_mul(self.in_type, self.w_type, mul))


# ---- import ---------------------------------------------------------------------------------------

def accumulate(b: Builder, node: Node, x: QT, w: QConst, bias, *, trans_b: bool, alpha=1.0, beta=1.0) -> Acc:
    """The pending dense layer ``x @ W (+ bias)`` on the dequantized view ``x``."""
    if len(x.onnx_shape) != 1:
        raise node_error(node, f"input of shape {x.onnx_shape!r} must be (N, K)", UnsupportedError)
    if w.q.ndim != 2:
        raise node_error(node, f"weight must be 2-D, not {w.q.shape!r}", UnsupportedError)
    n_out = w.q.shape[0] if trans_b else w.q.shape[1]
    wi, ws, wtype = b.fold_weights(node, w, 0 if trans_b else 1, n_out)
    wi = wi if trans_b else wi.T
    k = x.onnx_shape[0]
    if wi.shape[1] != k:
        raise node_error(node, f"weight {w.q.shape!r} does not match {k} input features")
    if x.perm is not None:
        wp = np.empty_like(wi)
        wp[:, x.perm] = wi
        wi = wp
    scale = x.scale * ws * float(alpha)
    ib, bias_real = b.bias_of(node, bias, scale, n_out)
    bias_real = bias_real * float(beta)
    if beta != 1.0 and np.any(ib):
        ib, bias_real = np.zeros(n_out, np.int64), ib * scale * float(beta)
    ib = ib - x.zp * wi.sum(axis=1)
    return Acc("dense", emit, node, (x,), (n_out,), scale, wi, wtype, ib, bias_real)


def emit(b: Builder, v: Acc, t: Target, act=None) -> QT:
    """Emit the Dense layer of ``v`` with ``act`` (default: the Requant onto ``t``)."""
    bias, act = (v.bias, act) if act is not None else b.requant(v, t)
    x = v.inputs[0]
    in_type = b.specs[x.tensor].dtype
    spec = b.new_tensor(t.name, v.onnx_shape, t.dtype)
    layer = Dense(v.node.name, (x.tensor,), spec, v.weights, bias, in_type, v.w_type,
                  acc_bits_for(v.weights, bias, in_type), act)
    return b.emit(layer, v.onnx_shape, t)


def _gemm(b: Builder, node: Node):
    if int(node.attr("transA", 0)):
        raise node_error(node, "transA=1 is not supported", UnsupportedError)
    x = need(node, as_tensor(b, b.get(node.inputs[0], node)), QT, "input A")
    w = need(node, b.get(node.inputs[1], node), QConst, "weight B")
    b.set(node, accumulate(b, node, x, w, opt(b, node, 2), trans_b=bool(node.attr("transB", 0)),
                           alpha=node.attr("alpha", 1.0), beta=node.attr("beta", 1.0)))


def _matmul(b: Builder, node: Node):
    x = need(node, as_tensor(b, b.get(node.inputs[0], node)), QT, "input A")
    w = need(node, b.get(node.inputs[1], node), QConst, "weight B")
    b.set(node, accumulate(b, node, x, w, None, trans_b=False))


def _qlinear_matmul(b: Builder, node: Node):
    x = real_view(b, node, 0, 1, 2)
    w = qconst(b, node, node.inputs[3], scalar(b, node, 4, "weight scale"), zp_input(b, node, 5), 1)
    quantize_output(b, node, accumulate(b, node, x, w, None, trans_b=False), 6, 7, x)


def _matmul_integer(b: Builder, node: Node):
    x = int_view(b, node, 2)
    w = qconst(b, node, node.inputs[1], np.ones(1), zp_input(b, node, 3), 1)
    b.set(node, accumulate(b, node, x, w, None, trans_b=False))


def _qgemm(b: Builder, node: Node):
    if int(node.attr("transA", 0)):
        raise node_error(node, "transA=1 is not supported", UnsupportedError)
    x = real_view(b, node, 0, 1, 2)
    ws = scalar(b, node, 4, "weight scale")
    trans_b = bool(node.attr("transB", 0))
    w = qconst(b, node, node.inputs[3], ws, zp_input(b, node, 5), 0 if trans_b else 1)
    alpha = float(node.attr("alpha", 1.0))
    bias = None
    if len(node.inputs) > 6 and node.inputs[6]:
        bias = qconst(b, node, node.inputs[6], x.scale * ws.reshape(-1) * alpha, None, 0)
    acc = accumulate(b, node, x, w, bias, trans_b=trans_b, alpha=alpha)
    if len(node.inputs) <= 7 or not node.inputs[7]:
        raise node_error(node, "QGemm without y_scale has a float output (not supported in hardware)",
                         UnsupportedError)
    quantize_output(b, node, acc, 7, 8, x)


# ---- canonical float forms (post-training quantizer) ------------------------------------------------

def _canonical_gemm(node: Node, rw: Rewrite) -> Node:
    """``A @ W.T + c``: ``transB=1``, ``alpha = beta = 1``, a constant ``W`` of shape (N, K) and a
    constant bias of N elements."""
    if node.attr("transA", 0):
        raise node_error(node, "transA=1 is not supported", UnsupportedError)
    w = rw.const(node, 1, "weight")
    if w.ndim != 2:
        raise node_error(node, f"weight must be 2-D, not shape {w.shape!r}", UnsupportedError)
    w = w.astype(np.float32)
    if not node.attr("transB", 0):
        w = w.T
    alpha, beta = float(node.attr("alpha", 1.0)), float(node.attr("beta", 1.0))
    n = w.shape[0]
    c = rw.const(node, 2, "bias")
    c = np.zeros(n, np.float32) if c is None else c.astype(np.float32) * np.float32(beta)
    try:
        c = np.broadcast_to(c, (1, n)).reshape(n) if c.ndim <= 2 and c.size in (1, n) else None
    except ValueError:
        c = None
    if c is None:
        raise node_error(node, f"bias must broadcast to ({n},) per output feature", UnsupportedError)
    base = node.name or node.outputs[0]
    wn = rw.add(f"{base}.weight", np.ascontiguousarray(w * np.float32(alpha), np.float32))
    bn = rw.add(f"{base}.bias", np.ascontiguousarray(c, np.float32))
    return replace(node, inputs=(node.inputs[0], wn, bn), attrs={"transB": 1})


def _canonical_matmul(node: Node, rw: Rewrite) -> Node:
    """An activation times a constant 2-D weight (K, N)."""
    w = rw.inits.get(node.inputs[1])
    if w is None or w.ndim != 2 or node.inputs[0] in rw.inits:
        raise node_error(node, "only activation @ constant 2-D weight is supported", UnsupportedError)
    return node


_MVU = "MatrixVectorUnit + Requantize"
PATTERNS = (
    Pattern("", "Gemm", _MVU, _gemm, ptq="layer", canonical=_canonical_gemm, linear=Linear(stat="gram")),
    Pattern("", "MatMul", _MVU + " (constant weights)", _matmul, ptq="layer", canonical=_canonical_matmul,
            linear=Linear(axis=1, bias=None, stat="gram")),
    Pattern("", "QLinearMatMul", _MVU, _qlinear_matmul, {"qoperator"}),
    Pattern("", "MatMulInteger", "MatrixVectorUnit", _matmul_integer, {"qoperator"}),
    Pattern(MS, "QGemm", _MVU, _qgemm, {"qoperator"}),
)

#: the layer kind this module declares
KIND = Dense
