"""The shared engine of the importers: symbolic interpretation of a quantized ONNX graph.

Every ONNX value is interpreted as one of

* :class:`QT`    — an integer tensor of the IntegerGraph (``real=False``) or its dequantized
  float view ``scale * (q - zero_point)`` (``real=True``); a flatten is a view with a
  permutation of the NHWC feature order;
* :class:`QConst` — a quantized constant (weights, bias): integers + scale/zero point;
* :class:`Const` — a plain constant (scales, shapes, clip bounds);
* :class:`Acc`   — the float result of a linear layer (dense, conv, average pool, add) that
  still awaits its output quantizer; ReLU/Clip narrow its real clamp bounds;
* :class:`FloatIn` — a float model input, awaiting its input quantizer.

Quantizing an :class:`Acc` emits one IntegerGraph layer. The flavour modules
(:mod:`.import_qdq`, :mod:`.import_qop`, :mod:`.import_qonnx`) register op handlers.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Callable

import numpy as np
from onnx import TensorProto

from ..ir.errors import ModelError, UnsupportedError
from ..ir.graph import Graph, Node
from . import arith
from . import integer_graph as ig
from ._layout import nhwc
from ._scale import check_scale, ratio_to_multiplier_shift

__all__ = ["QT", "QConst", "Const", "Acc", "FloatIn", "Builder", "qtype_of", "node_error"]

_ELEM_TYPES = {
    TensorProto.INT4: ig.IntType(4, True), TensorProto.UINT4: ig.IntType(4, False),
    TensorProto.INT8: ig.IntType(8, True), TensorProto.UINT8: ig.IntType(8, False),
    TensorProto.INT16: ig.IntType(16, True), TensorProto.UINT16: ig.IntType(16, False),
}
_NP_TYPES = {"int4": ig.IntType(4, True), "uint4": ig.IntType(4, False),
             "int8": ig.IntType(8, True), "uint8": ig.IntType(8, False),
             "int16": ig.IntType(16, True), "uint16": ig.IntType(16, False)}


def node_error(node: Node, message: str, cls=ModelError) -> ModelError:
    return cls(f"node {node.name!r} ({node.op_type}): {message}")


def qtype_of(array) -> ig.IntType:
    """The :class:`IntType` of an integer array's dtype (int4/uint4 via ml_dtypes)."""
    name = np.asarray(array).dtype.name
    if name not in _NP_TYPES:
        raise ValueError(f"quantized type {name!r} is not one of {', '.join(_NP_TYPES)}")
    return _NP_TYPES[name]


@dataclass(frozen=True)
class QT:
    tensor: str
    scale: float
    zp: int
    dtype: ig.IntType
    real: bool
    onnx_shape: tuple[int, ...]           # ONNX shape without batch (NCHW order)
    perm: np.ndarray | None = None        # flat ONNX index -> flat NHWC index of ``tensor``


@dataclass(frozen=True)
class QConst:
    q: np.ndarray            # int64 integers
    scale: np.ndarray        # float64, scalar or 1-D along ``axis``
    zp: np.ndarray           # int64, same shape as scale (or scalar)
    axis: int
    dtype: ig.IntType

    def real(self) -> np.ndarray:
        shape = [1] * self.q.ndim
        s, z = self.scale, self.zp
        if s.size > 1 or z.size > 1:
            shape[self.axis] = -1
        return (self.q - z.reshape(shape if z.size > 1 else ())) * s.reshape(shape if s.size > 1 else ())


@dataclass(frozen=True)
class Const:
    value: np.ndarray


@dataclass(frozen=True)
class FloatIn:
    name: str
    onnx_shape: tuple[int, ...]


@dataclass(frozen=True)
class Acc:
    """A pending linear layer; ``scale`` is the real value of one accumulator LSB per channel."""

    kind: str                           # "dense" | "conv" | "avgpool" | "add"
    node: Node
    inputs: tuple[QT, ...]
    onnx_shape: tuple[int, ...]
    scale: np.ndarray | None = None     # (C,) float64
    weights: np.ndarray | None = None   # zero-point folded integer weights
    w_type: ig.IntType | None = None
    bias: np.ndarray | None = None      # (C,) int64, in accumulator LSBs (includes the zp fold)
    bias_real: np.ndarray | None = None  # (C,) float64 extra bias in real units (rounded at quantize)
    params: dict = field(default_factory=dict)
    lo_real: float = -math.inf
    hi_real: float = math.inf


Value = QT | QConst | Const | Acc | FloatIn
Handler = Callable[["Builder", Node], None]


class Builder:
    """Interpret ``graph`` with ``handlers`` ((domain, op_type) -> fn(builder, node)) into an IntegerGraph."""

    def __init__(self, graph: Graph, handlers: dict[tuple[str, str], Handler], source: str):
        self.graph = graph
        self.handlers = handlers
        self.source = source
        self.vals: dict[str, Value] = {}
        self.layers: list = []
        self.specs: dict[str, ig.TensorSpec] = {}
        self.inputs: dict[str, tuple[ig.InputQuant, ig.TensorSpec]] = {}
        for vi in graph.inputs:
            shape = vi.shape
            if vi.kind != "tensor" or shape is None or len(shape) < 1 or any(not isinstance(d, int) for d in shape[1:]):
                raise ModelError(f"model input {vi.name!r} needs a tensor shape with a batch dim and fixed other dims, "
                                 f"not {shape!r}")
            if vi.elem_type not in (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE):
                raise UnsupportedError(f"model input {vi.name!r} is not a float tensor (elem_type {vi.elem_type}); "
                                       f"integer model inputs are not supported")
            self.vals[vi.name] = FloatIn(vi.name, tuple(shape[1:]))

    # ---- values -------------------------------------------------------------------------
    def get(self, name: str, node: Node) -> Value:
        if name in self.vals:
            return self.vals[name]
        if name in self.graph.initializers:
            return Const(np.asarray(self.graph.initializers[name]))
        raise node_error(node, f"input {name!r} is not defined")

    def const(self, name: str, node: Node, what: str) -> np.ndarray:
        v = self.get(name, node)
        if isinstance(v, Const):
            return v.value
        if isinstance(v, QConst):
            return v.real()
        raise node_error(node, f"{what} {name!r} must be a constant")

    def set(self, node: Node, value: Value, index: int = 0):
        self.vals[node.outputs[index]] = value

    def elem_type(self, name: str) -> int:
        vi = self.graph.value_info.get(name)
        return vi.elem_type if vi is not None else 0

    # ---- layer emission ---------------------------------------------------------------------
    def new_tensor(self, name: str, shape, dtype: ig.IntType) -> ig.TensorSpec:
        base, i = name, 1
        while name in self.specs:
            name, i = f"{base}_{i}", i + 1
        spec = ig.TensorSpec(name, tuple(shape), dtype)
        self.specs[name] = spec
        return spec

    def input_tensor(self, fin: FloatIn, scale: float, zp: int, dtype: ig.IntType, node: Node) -> QT:
        check_scale(scale, f"node {node.name!r} input scale")
        shape = fin.onnx_shape
        nchw = len(shape) == 3
        if len(shape) not in (1, 3):
            raise node_error(node, f"model input {fin.name!r} of shape {shape!r} is neither (N, F) nor (N, C, H, W)",
                             UnsupportedError)
        if fin.name in self.inputs:
            q, spec = self.inputs[fin.name]
            if (q.scale, q.zero_point, q.dtype) != (float(scale), int(zp), dtype):
                raise node_error(node, f"model input {fin.name!r} is quantized twice with different parameters",
                                 UnsupportedError)
        else:
            spec = self.new_tensor(fin.name, nhwc(shape), dtype)
            q = ig.InputQuant(fin.name, float(scale), int(zp), dtype, nchw)
            self.inputs[fin.name] = (q, spec)
        return QT(spec.name, float(scale), int(zp), dtype, False, shape)

    def natural(self, x: QT, node: Node) -> QT:
        if x.perm is not None:
            raise node_error(node, "input is a flattened image used as an image again", UnsupportedError)
        return x

    # ---- linear layers ----------------------------------------------------------------------
    def fold_weights(self, node: Node, w: QConst, out_axis: int, n_out: int):
        """(integer weights with the zero point removed, per-output scale (n_out,), w_type)."""
        if w.scale.size not in (1, n_out) or (w.scale.size > 1 and w.axis != out_axis):
            raise node_error(node, f"weight scale of shape {w.scale.shape!r} (axis {w.axis}) is not per tensor or "
                             f"per output channel", UnsupportedError)
        if w.zp.size not in (1, n_out) or (w.zp.size > 1 and w.axis != out_axis):
            raise node_error(node, "weight zero point is not per tensor or per output channel", UnsupportedError)
        check_scale(w.scale, f"node {node.name!r} weight")
        shape = [1] * w.q.ndim
        shape[out_axis] = -1
        zp = np.broadcast_to(w.zp.reshape(-1), (n_out,)).reshape(shape)
        wi = w.q - zp
        wtype = w.dtype if not np.any(w.zp) else ig.int_type_for(wi.min(initial=0), wi.max(initial=0))
        return wi, np.broadcast_to(w.scale.reshape(-1), (n_out,)).astype(np.float64), wtype

    def bias_of(self, node: Node, b: Value | None, acc_scale: np.ndarray, n_out: int):
        """``(int bias, residual real bias)``: a bias quantized on the accumulator grid is taken exactly."""
        if b is None:
            return np.zeros(n_out, np.int64), np.zeros(n_out)
        if isinstance(b, QConst):
            q = b.q.reshape(-1)
            if q.size not in (1, n_out):
                raise node_error(node, f"bias of {q.size} elements for {n_out} outputs")
            s = np.broadcast_to(b.scale.reshape(-1), (n_out,))
            if not np.any(b.zp) and np.allclose(s, acc_scale, rtol=1e-6, atol=0):
                return np.broadcast_to(q, (n_out,)).astype(np.int64), np.zeros(n_out)
            return np.zeros(n_out, np.int64), np.broadcast_to(b.real().reshape(-1), (n_out,)).astype(np.float64)
        if isinstance(b, Const):
            v = b.value.reshape(-1).astype(np.float64)
            if v.size not in (1, n_out):
                raise node_error(node, f"bias of {v.size} elements for {n_out} outputs")
            return np.zeros(n_out, np.int64), np.broadcast_to(v, (n_out,)).copy()
        raise node_error(node, "bias must be a constant", UnsupportedError)

    def dense(self, node: Node, x: QT, w: QConst, b: Value | None, *, trans_b: bool, alpha=1.0, beta=1.0) -> Acc:
        if len(x.onnx_shape) != 1:
            raise node_error(node, f"input of shape {x.onnx_shape!r} must be (N, K)", UnsupportedError)
        if w.q.ndim != 2:
            raise node_error(node, f"weight must be 2-D, not {w.q.shape!r}", UnsupportedError)
        n_out = w.q.shape[0] if trans_b else w.q.shape[1]
        wi, ws, wtype = self.fold_weights(node, w, 0 if trans_b else 1, n_out)
        wi = wi if trans_b else wi.T
        k = x.onnx_shape[0]
        if wi.shape[1] != k:
            raise node_error(node, f"weight {w.q.shape!r} does not match {k} input features")
        if x.perm is not None:
            wp = np.empty_like(wi)
            wp[:, x.perm] = wi
            wi = wp
        scale = x.scale * ws * float(alpha)
        bias, bias_real = self.bias_of(node, b, scale, n_out)
        bias_real = bias_real * float(beta)
        if beta != 1.0 and np.any(bias):
            bias, bias_real = np.zeros(n_out, np.int64), bias * scale * float(beta)
        bias = bias - x.zp * wi.sum(axis=1)
        return Acc("dense", node, (x,), (n_out,), scale, wi, wtype, bias, bias_real)

    def conv(self, node: Node, x: QT, w: QConst, b: Value | None) -> Acc:
        x = self.natural(x, node)
        if len(x.onnx_shape) != 3 or w.q.ndim != 4:
            raise node_error(node, f"only 2-D convolution is supported (input {x.onnx_shape!r}, weight {w.q.shape!r})",
                             UnsupportedError)
        c, h, wd = x.onnx_shape
        co, cg, kh, kw = w.q.shape
        group = int(node.attr("group", 1))
        if cg * group != c:
            raise node_error(node, f"weight {w.q.shape!r} with group {group} does not match {c} input channels")
        if tuple(node.attr("dilations", (1, 1))) != (1, 1):
            raise node_error(node, f"dilations {node.attr('dilations')!r} are not supported", UnsupportedError)
        strides = tuple(node.attr("strides", (1, 1)))
        pads = pads_of(node, (h, wd), (kh, kw), strides)
        wi, ws, wtype = self.fold_weights(node, w, 0, co)
        wi = wi.transpose(0, 2, 3, 1)
        scale = x.scale * ws
        bias, bias_real = self.bias_of(node, b, scale, co)
        bias = bias - x.zp * wi.reshape(co, -1).sum(axis=1)
        oh = (h + pads[0] + pads[2] - kh) // strides[0] + 1
        ow = (wd + pads[1] + pads[3] - kw) // strides[1] + 1
        return Acc("conv", node, (x,), (co, oh, ow), scale, wi, wtype, bias, bias_real,
                   {"stride": strides, "pads": pads, "group": group})

    def avgpool(self, node: Node, x: QT, kernel, strides, pads) -> Acc:
        x = self.natural(x, node)
        c, h, w = x.onnx_shape
        area = kernel[0] * kernel[1]
        oh = (h + pads[0] + pads[2] - kernel[0]) // strides[0] + 1
        ow = (w + pads[1] + pads[3] - kernel[1]) // strides[1] + 1
        return Acc("avgpool", node, (x,), (c, oh, ow), np.full(c, x.scale / area),
                   bias=np.full(c, -area * x.zp, np.int64), bias_real=np.zeros(c),
                   params={"kernel": tuple(kernel), "stride": tuple(strides), "pads": tuple(pads)})

    def add(self, node: Node, a: QT, b: QT) -> Acc:
        if a.onnx_shape != b.onnx_shape:
            raise node_error(node, f"Add of shapes {a.onnx_shape!r} and {b.onnx_shape!r} (broadcasting is not supported)",
                             UnsupportedError)
        if (a.perm is None) != (b.perm is None) or (a.perm is not None and not np.array_equal(a.perm, b.perm)):
            raise node_error(node, "Add of tensors in different layouts", UnsupportedError)
        return Acc("add", node, (a, b), a.onnx_shape)

    def maxpool(self, node: Node, x: QT) -> QT:
        x = self.natural(x, node)
        if len(x.onnx_shape) != 3:
            raise node_error(node, f"MaxPool input {x.onnx_shape!r} must be (N, C, H, W)", UnsupportedError)
        if tuple(node.attr("dilations", (1, 1))) != (1, 1) or int(node.attr("storage_order", 0)) != 0:
            raise node_error(node, "dilations / storage_order are not supported", UnsupportedError)
        if len(node.outputs) > 1 and node.outputs[1]:
            raise node_error(node, "the Indices output is not supported", UnsupportedError)
        kernel = tuple(node.attr("kernel_shape"))
        strides = tuple(node.attr("strides", (1, 1)))
        c, h, w = x.onnx_shape
        pads = pads_of(node, (h, w), kernel, strides)
        oh = (h + pads[0] + pads[2] - kernel[0]) // strides[0] + 1
        ow = (w + pads[1] + pads[3] - kernel[1]) // strides[1] + 1
        spec = self.new_tensor(node.outputs[0], (oh, ow, c), x.dtype)
        self.layers.append(ig.MaxPool(node.name, (x.tensor,), spec, kernel, strides, pads))
        return replace(x, tensor=spec.name, onnx_shape=(c, oh, ow))

    def clamp_acc(self, node: Node, acc: Acc, lo: float, hi: float) -> Acc:
        return replace(acc, lo_real=max(acc.lo_real, lo), hi_real=min(acc.hi_real, hi))

    # ---- quantizing an accumulator ---------------------------------------------------------------
    def quantize(self, node: Node, v: Value, scale, zp, dtype: ig.IntType, *, narrow=False, out_name=None) -> QT:
        """The integer tensor ``clamp(round(v / scale) + zp)`` (emits a layer for an :class:`Acc`)."""
        sc = np.asarray(scale, dtype=np.float64)
        if sc.size != 1:
            raise node_error(node, "per-channel activation quantization is not supported", UnsupportedError)
        scale = float(check_scale(sc.reshape(()), f"node {node.name!r} output"))
        zp = int(np.asarray(zp).reshape(-1)[0]) if zp is not None else 0
        qlo, qhi = arith.int_range(dtype.bits, dtype.signed, narrow) if not dtype.bipolar else (-1, 1)
        name = out_name or node.outputs[0]
        if isinstance(v, FloatIn):
            return self.input_tensor(v, scale, zp, dtype, node)
        if isinstance(v, QT):
            if not v.real:
                raise node_error(node, "quantizes a tensor that is already integer")
            if math.isclose(v.scale, scale, rel_tol=1e-6) and v.zp == zp and v.dtype == dtype and not narrow:
                return replace(v, real=False)
            raise node_error(node, f"requantizes a tensor from scale {v.scale!r} zp {v.zp} to scale {scale!r} zp {zp} "
                             f"without a layer in between", UnsupportedError)
        if not isinstance(v, Acc):
            raise node_error(node, "quantizes a value that is not computed by a supported layer", UnsupportedError)
        lo = qlo if v.lo_real == -math.inf else max(qlo, _round_even(v.lo_real / scale) + zp)
        hi = qhi if v.hi_real == math.inf else min(qhi, _round_even(v.hi_real / scale) + zp)
        if lo > hi:
            raise node_error(node, f"activation clamp leaves no values in [{qlo}, {qhi}]")
        if v.kind == "add":
            return self._emit_add(node, v, scale, zp, dtype, lo, hi, name)
        bias = v.bias + np.rint(v.bias_real / v.scale).astype(np.int64)
        m, s = ratio_to_multiplier_shift(v.scale / scale, f"node {v.node.name!r} requantization")
        if np.all(m == m[0]) and np.all(s == s[0]):
            m, s = m[:1], s[:1]
        act = ig.Requant(m, s, zp, lo, hi)
        x = v.inputs[0]
        if v.kind == "avgpool":
            c, oh, ow = v.onnx_shape
            spec = self.new_tensor(name, (oh, ow, c), dtype)
            self.layers.append(ig.AvgPool(v.node.name, (x.tensor,), spec, v.params["kernel"], v.params["stride"],
                                          v.params["pads"], act, int(bias[0]), x.zp))
            return QT(spec.name, scale, zp, dtype, False, v.onnx_shape)
        return self.emit_linear(v, bias, act, dtype, name, scale, zp)

    def emit_linear(self, v: Acc, bias, act, dtype, name, scale, zp) -> QT:
        x = v.inputs[0]
        in_spec = self.specs[x.tensor]
        acc_bits = ig._acc_bits(v.weights, bias, in_spec.dtype)
        if v.kind == "dense":
            spec = self.new_tensor(name, v.onnx_shape, dtype)
            self.layers.append(ig.Dense(v.node.name, (x.tensor,), spec, v.weights, bias, in_spec.dtype, v.w_type,
                                        acc_bits, act))
        else:
            co, oh, ow = v.onnx_shape
            spec = self.new_tensor(name, (oh, ow, co), dtype)
            p = v.params
            self.layers.append(ig.Conv(v.node.name, (x.tensor,), spec, v.weights, bias, p["stride"], p["pads"], x.zp,
                                       p["group"], (1, 1), in_spec.dtype, v.w_type, acc_bits, act))
        return QT(spec.name, scale, zp, dtype, False, v.onnx_shape)

    def _emit_add(self, node, v: Acc, scale, zp, dtype, lo, hi, name) -> QT:
        a, b = v.inputs
        ra, rb = a.scale / scale, b.scale / scale
        _, s = ratio_to_multiplier_shift(max(ra, rb), f"node {v.node.name!r} add scale")
        shift = int(s[0])
        ma, mb = round(ra * 2.0 ** shift), round(rb * 2.0 ** shift)
        if min(ma, mb) == 0:
            raise node_error(v.node, f"input scales {a.scale!r} and {b.scale!r} differ too much to add exactly",
                             UnsupportedError)
        reqs = []
        for x, m in ((a, ma), (b, mb)):
            t = self.specs[x.tensor].dtype
            ends = ((t.lo - x.zp) * m, (t.hi - x.zp) * m)
            reqs.append(ig.Requant(np.array([m]), np.array([0]), 0, min(ends), max(ends)))
        spec = self.new_tensor(name, nhwc(v.onnx_shape), dtype)
        self.layers.append(ig.Add(v.node.name, (a.tensor, b.tensor), spec, (a.zp, b.zp), tuple(reqs), zp, lo, hi,
                                  shift))
        return QT(spec.name, scale, zp, dtype, False, v.onnx_shape, a.perm)

    # ---- driver -----------------------------------------------------------------------------------
    def run(self) -> ig.IntegerGraph:
        for node in self.graph.nodes:
            fn = self.handlers.get((node.domain, node.op_type))
            if fn is None:
                kind = f"{node.domain}::{node.op_type}" if node.domain else node.op_type
                raise node_error(node, f"op {kind} is not supported by the {self.source} importer (hardware "
                                 f"cannot run it between quantized layers)", UnsupportedError)
            fn(self, node)
        return self.finish()

    def finish(self) -> ig.IntegerGraph:
        outs, out_specs = [], []
        rename: dict[str, str] = {}
        for vi in self.graph.outputs:
            v = self.vals.get(vi.name)
            if not isinstance(v, QT):
                what = "a float input" if isinstance(v, FloatIn) else "not quantized"
                raise ModelError(f"model output {vi.name!r} is {what}: the graph must end in a quantizer")
            nchw = len(self.specs[v.tensor].shape) == 3
            shape = v.onnx_shape if (v.perm is not None or not nchw) else None
            integer = not v.real
            outs.append(ig.OutputDequant(vi.name, v.scale, v.zp, nchw, vi.elem_type, integer, shape))
            if v.tensor not in rename and vi.name not in self.specs and vi.name not in rename.values():
                rename[v.tensor] = vi.name
            out_specs.append(v.tensor)
        if not self.inputs:
            raise ModelError("the model quantizes none of its inputs")

        def rn(name):
            return rename.get(name, name)

        def spec(s):
            return replace(s, name=rn(s.name))
        layers = []
        for layer in self.layers:
            layers.append(replace(layer, inputs=tuple(rn(n) for n in layer.inputs), output=spec(layer.output)))
        order = [vi.name for vi in self.graph.inputs if vi.name in self.inputs]
        g = ig.IntegerGraph(
            inputs=tuple(self.inputs[n][0] for n in order),
            input_specs=tuple(spec(self.inputs[n][1]) for n in order),
            layers=tuple(layers),
            outputs=tuple(outs),
            output_specs=tuple(spec(self.specs[t]) for t in out_specs),
            source=self.source, model_name=self.graph.name,
            metadata=dict(self.graph.metadata))
        return g.validate()


def _round_even(x: float) -> int:
    return int(np.rint(x))


def pads_of(node: Node, hw, kernel, strides) -> tuple[int, int, int, int]:
    """``(t, l, b, r)`` from ``pads``/``auto_pad``; ``ceil_mode`` only where it changes nothing."""
    auto = node.attr("auto_pad", "NOTSET")
    if auto in ("NOTSET", "VALID"):
        p = tuple(node.attr("pads", (0, 0, 0, 0))) if auto == "NOTSET" else (0, 0, 0, 0)
        if len(p) != 4:
            raise node_error(node, f"pads {p!r} are not 2-D", UnsupportedError)
        pads = (p[0], p[1], p[2], p[3])
    elif auto in ("SAME_UPPER", "SAME_LOWER"):
        pads4 = [0, 0, 0, 0]
        for i in range(2):
            out = -(-hw[i] // strides[i])
            total = max(0, (out - 1) * strides[i] + kernel[i] - hw[i])
            small, big = total // 2, total - total // 2
            pads4[i], pads4[i + 2] = (small, big) if auto == "SAME_UPPER" else (big, small)
        pads = tuple(pads4)
    else:
        raise node_error(node, f"auto_pad {auto!r} is not supported", UnsupportedError)
    if int(node.attr("ceil_mode", 0)):
        for i in range(2):
            span = hw[i] + pads[i] + pads[i + 2] - kernel[i]
            if span % strides[i]:
                raise node_error(node, "ceil_mode=1 with a partial last window is not supported", UnsupportedError)
    return pads
