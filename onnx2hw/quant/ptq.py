"""Post-training quantization of float models to standard QDQ ONNX (``onnx2hw quantize``).

Our own PTQ, not onnxruntime's (onnxruntime is only a test oracle):

1. :func:`onnx2hw.ir.load` the float model and bring it into canonical form
   (:mod:`onnx2hw.quant._canonical`: each op's ``canonical`` function, declared with the op in
   :mod:`onnx2hw.layers`, e.g. BatchNormalization folded into the Conv/Gemm before it).
2. Cut the graph into *units* by the ops' declared roles (:class:`onnx2hw.layers.Pattern`): a
   node of role ``layer`` (Conv, Gemm, Add, Concat, the tabulated activations, ...) gets its own
   output quantizer; a node of role ``pass`` (MaxPool, Resize, Reshape, ...) reuses its input's
   quantization parameters (exact for integers). A unit also takes the only reader of its output
   when that op declares ``fuse``: a positive constant rescale after a linear layer (no quantizer
   between: the importer folds it into the layer's requantization scale), then a clamp
   (Relu/Clip) after a ``layer`` node (the quantizer sits *after* the clamp).
3. Calibrate the float range of every graph input and unit output by running
   :func:`onnx2hw.golden.execute` on the calibration data (``minmax`` or ``percentile`` 99.99);
   0 is always inside the range.
4. Write QDQ ONNX the way onnxruntime's QDQ format does: each graph input and unit output is
   followed by ``QuantizeLinear -> DequantizeLinear``; a linear layer's weight (its declared
   :class:`~onnx2hw.layers.Linear` input) is stored quantized and read through
   ``DequantizeLinear`` (per channel along its declared output-channel axis); biases are int32
   with scale ``s_in * s_w`` (float32 product), zero point 0. Other constant inputs an op
   declares (``const_inputs``: shapes, bounds, scales) stay float.

Number formats
--------------
* weights: symmetric, signed, narrow range (int8: -127..127, int4: -7..7), per tensor or per output
  channel. 8-bit: scale = max|w| / 127. 4-bit: scale = r * max|w| / 7 with the clipping ratio
  r in [0.4, 1] that minimizes the squared rounding error. Per-channel scales are floored at
  the per-tensor scale / 2**10 (near-dead channels) and raised where needed so that the int32
  bias fits.
* activations: a tensor whose calibrated range never goes negative is unsigned with zero point 0
  (uint8 / uint4, scale = hi / (2**b - 1)); otherwise signed symmetric with zero point 0
  (int8 / int4, scale = max(|lo|, |hi|) / (2**(b-1) - 1)).
* opset: ``max(model opset, 13)`` for 8-bit; ``max(model opset, 21)`` (IR version >= 10) when any
  4-bit type is used.

onnxruntime 1.31 runs every output with its default optimizations except 4-bit activations feeding
a ``Conv``: its QDQ fusion then builds a ``QLinearConv`` that rejects ``uint4``/``int4`` (the model is
valid ONNX and runs with ``GraphOptimizationLevel.ORT_DISABLE_ALL``).

A calibrated range of zero (for example an all-zero calibration set) would give a zero scale; it is
rejected with an error naming the tensor. Every scale is checked to be a finite, normal float32.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Mapping

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ..ir import load
from ..ir.save import to_model
from ..ir.errors import ModelError, UnsupportedError
from ..ir.graph import Graph, Node
from ..ir.names import FreshNames
from ..canon import canonicalize
from ..layers import Linear
from ..layers.canonical import channel_vector
from . import _canonical
from ._canonical import pattern
from .calib import METHODS as _METHODS, check_feeds, collect_ranges, load_npz as _load_npz
from .partition import split

__all__ = ["quantize", "load_calibration", "act_qparams", "weight_qparams", "QParams",
           "WEIGHT_BITS", "ACT_BITS", "METHODS"]

WEIGHT_BITS = (8, 4)
ACT_BITS = (8, 4)
METHODS = _METHODS

_FLT32_TINY = float(np.finfo(np.float32).tiny)
#: per-channel weight scales are at least the per-tensor scale / 2**_CH_FLOOR_LOG2
_CH_FLOOR_LOG2 = 10
#: largest |int32 bias| written (a little margin below 2**31 - 1)
_BIAS_MAX = (1 << 31) - 1 - (1 << 16)


@dataclasses.dataclass(frozen=True)
class QParams:
    """Quantization parameters of one tensor: ``q = clamp(round(x / scale) + zero_point)``."""

    scale: np.ndarray  # float32, scalar or (C,)
    zero_point: int
    bits: int
    signed: bool

    @property
    def onnx_type(self) -> int:
        return {(8, True): TensorProto.INT8, (8, False): TensorProto.UINT8,
                (4, True): TensorProto.INT4, (4, False): TensorProto.UINT4}[(self.bits, self.signed)]


def load_calibration(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """Read a calibration ``.npz`` keyed by the model's input names (batch first)."""
    return _load_npz(path)


def _check_options(weight_bits, act_bits, method):
    if isinstance(weight_bits, bool) or weight_bits not in WEIGHT_BITS:
        raise ValueError(f"weight bit width must be one of {WEIGHT_BITS!r}, not {weight_bits!r}")
    if isinstance(act_bits, bool) or act_bits not in ACT_BITS:
        raise ValueError(f"activation bit width must be one of {ACT_BITS!r}, not {act_bits!r}")
    if method not in METHODS:
        raise ValueError(f"calibration method must be one of {METHODS!r}, not {method!r}")


def _check_scale(scale, what: str) -> np.ndarray:
    s = np.asarray(scale, dtype=np.float32)
    if not np.all(np.isfinite(s)) or np.any(s < _FLT32_TINY):
        raise ModelError(f"{what}: quantization scale {s.tolist()!r} is not a positive normal float32")
    return s


def act_qparams(lo: float, hi: float, bits: int, tensor: str) -> QParams:
    """Activation parameters for a calibrated range (see module docstring)."""
    lo, hi = min(float(lo), 0.0), max(float(hi), 0.0)
    if not (np.isfinite(lo) and np.isfinite(hi)):
        raise ModelError(f"tensor {tensor!r}: calibrated range [{lo!r}, {hi!r}] is not finite")
    if lo == hi == 0.0:
        raise ModelError(f"tensor {tensor!r} is zero for every calibration sample: its quantization scale "
                         "would be 0; calibrate with data that exercises the model")
    if lo >= 0.0:
        s = np.float32(hi / ((1 << bits) - 1))
        signed = False
    else:
        s = np.float32(max(-lo, hi) / ((1 << (bits - 1)) - 1))
        signed = True
    return QParams(_check_scale(s, f"tensor {tensor!r}"), 0, bits, signed)


def weight_qparams(w: np.ndarray, bits: int, per_channel: bool, axis: int, what: str,
                   min_scale=0.0):
    """Symmetric narrow-range weight quantization: ``(q int64, scale float32 scalar or (C,))``.

    Per-channel scales are at least ``tensor scale / 2**_CH_FLOOR_LOG2`` (near-dead channels would
    otherwise get a scale whose requantization multiplier is not representable) and at least
    ``min_scale`` (scalar or per channel; used to keep the int32 bias in range).
    """
    qmax = (1 << (bits - 1)) - 1
    w = np.asarray(w, dtype=np.float32)
    tensor_max = float(np.max(np.abs(w))) if w.size else 0.0
    tensor_scale = np.float32(tensor_max / qmax) if tensor_max > 0 else np.float32(1.0)
    if bits <= 4:
        tensor_scale = np.float32(_mse_scale(w.reshape(1, -1), qmax)[0]) if tensor_max > 0 else tensor_scale
    if per_channel:
        red = tuple(i for i in range(w.ndim) if i != axis)
        cmax = np.max(np.abs(w), axis=red).astype(np.float32)
        if bits <= 4:
            cmax = _mse_scale(np.moveaxis(w, axis, 0).reshape(w.shape[axis], -1), qmax) * np.float32(qmax)
        scale = np.maximum(cmax / np.float32(qmax), tensor_scale * np.float32(2.0 ** -_CH_FLOOR_LOG2))
        scale = np.maximum(scale, np.asarray(min_scale, np.float32)).astype(np.float32)
        shape = [1] * w.ndim
        shape[axis] = -1
        sb = scale.reshape(shape)
    else:
        scale = sb = np.float32(max(float(tensor_scale), float(np.max(min_scale))))
    scale = _check_scale(scale, what)
    q = np.clip(np.rint(w / sb), -qmax, qmax).astype(np.int64)
    return q, scale


def _mse_scale(rows: np.ndarray, qmax: int) -> np.ndarray:
    """Per row, the scale ``r * max|w| / qmax`` (r in 0.40..1.00) with the least squared rounding error."""
    amax = np.max(np.abs(rows), axis=1).astype(np.float64)
    ratios = np.linspace(0.4, 1.0, 61)
    best, best_err = amax / qmax, np.full(len(rows), np.inf)
    for r in ratios:
        s = np.where(amax > 0, r * amax / qmax, 1.0)
        err = np.sum((np.clip(np.rint(rows / s[:, None]), -qmax, qmax) * s[:, None] - rows) ** 2, axis=1)
        better = err < best_err
        best = np.where(better, s, best)
        best_err = np.where(better, err, best_err)
    return best.astype(np.float32)


def _round_weights(w, wq, scale, axis: int, bits: int, stat: np.ndarray):
    """Error-compensating rounding for low-bit weights, with the scales kept.

    * ``stat`` = the input's Gram matrix ``E[x x^T]`` (a 2-D weight, declared ``"gram"``): GPTQ-style
      sequential rounding (quantize one input column at a time and spread its output error over
      the columns not yet quantized through the Cholesky factor of the inverse Gram matrix).
    * ``stat`` = the per-input-channel mean (a weight ``(Cout, Cin_g, *kernel)``, declared
      ``"mean"``): bias correction, ``b -= sum((Wq - W) * E[x])``.

    Returns ``(q, bias_delta)``: integer weights and the float correction to add to the bias.
    """
    qmax = (1 << (bits - 1)) - 1
    w = np.asarray(w, np.float64)
    s = np.asarray(scale, np.float64)
    if stat.ndim == 2:  # rows = output channels
        rows = w if axis == 0 else w.T
        rs = np.broadcast_to(s, (rows.shape[0],)) if s.ndim else np.full(rows.shape[0], float(s))
        h = stat.copy()
        dead = np.diag(h) == 0
        h[dead, dead] = 1.0
        h += np.eye(len(h)) * 0.01 * np.mean(np.diag(h))
        try:
            hinv = np.linalg.cholesky(np.linalg.inv(h)).T  # upper factor of H^-1
        except np.linalg.LinAlgError:
            return wq, None
        work = rows.copy()
        q = np.zeros_like(rows, dtype=np.int64)
        for j in range(rows.shape[1]):
            qj = np.clip(np.rint(work[:, j] / rs), -qmax, qmax)
            q[:, j] = qj
            err = (work[:, j] - qj * rs) / hinv[j, j]
            work[:, j + 1:] -= np.outer(err, hinv[j, j + 1:])
        return (q if axis == 0 else q.T), None
    if axis != 0:   # a ConvTranspose weight (Cin, Cout/group, *k): each output sees a stride-dependent part of it
        return wq, None
    sb = s.reshape((-1,) + (1,) * (w.ndim - 1)) if s.ndim else s
    delta = wq * sb - w  # (Cout, Cin_g, kh, kw)
    mean = np.asarray(stat, np.float64)
    if delta.shape[1] != mean.size:  # grouped conv: leave as is
        return wq, None
    return wq, -np.einsum("ock,c->o", delta.reshape(delta.shape[0], delta.shape[1], -1), mean)


def _tensor(name: str, values, onnx_type: int, dims=None) -> onnx.TensorProto:
    values = np.asarray(values)
    dims = list(values.shape) if dims is None else dims
    if onnx_type in (TensorProto.INT4, TensorProto.UINT4):
        return helper.make_tensor(name, onnx_type, dims, values.astype(np.int64).ravel().tolist())
    np_type = helper.tensor_dtype_to_np_dtype(onnx_type)
    return numpy_helper.from_array(values.astype(np_type).reshape(dims), name)


@dataclasses.dataclass
class _Unit:
    node: Node
    fused: tuple[Node, ...]  # after the node, in order: a positive rescale (linear layers), a clamp
    out: str  # float output of the unit (after its fused ops)


def _positive_rescale(layer: Node, node: Node, graph: Graph) -> bool:
    """``node`` is ``op(layer output, c)`` by a positive finite constant, a scalar or one value per
    output channel of the linear ``layer`` (it then folds into the layer's requantization scale)."""
    if len(node.inputs) != 2 or node.inputs[0] != layer.outputs[0]:
        return False
    c = graph.initializers.get(node.inputs[1])
    if c is None or not np.all(np.isfinite(c)) or not np.all(np.asarray(c) > 0):
        return False
    c = np.asarray(c)
    if c.size == 1:
        return True
    form = pattern(layer).linear
    w = graph.initializers[layer.inputs[form.weight]]
    return channel_vector(c, w.shape[form.axis], w.ndim - 2) is not None


def _units(graph: Graph) -> list[_Unit]:
    """The graph's nodes, each with the ops fused after it (module docstring, step 2)."""
    readers: dict[str, list[Node]] = {}
    for n in graph.nodes:
        for i in n.inputs:
            if i:
                readers.setdefault(i, []).append(n)
    outputs = set(graph.output_names)

    def only_reader(out: str, fuse: str) -> Node | None:
        r = readers.get(out, [])
        return r[0] if out not in outputs and len(r) == 1 and pattern(r[0]).fuse == fuse else None

    fused: set[int] = set()
    units = []
    for node in graph.nodes:
        if id(node) in fused:
            continue
        if all(not i or i in graph.initializers for i in node.inputs):
            raise UnsupportedError(f"node {node.name!r} ({node.op_type}) computes from constants only "
                                   f"({', '.join(repr(i) for i in node.inputs if i)}); onnx2hw quantize "
                                   "quantizes ops of activations")
        spec, out, after = pattern(node), node.outputs[0], []
        if spec.linear and (r := only_reader(out, "rescale")) and _positive_rescale(node, r, graph):
            after.append(r)
            out = r.outputs[0]
        if spec.ptq == "layer" and spec.fuse != "clamp" and (r := only_reader(out, "clamp")):
            after.append(r)
            out = r.outputs[0]
        fused.update(id(a) for a in after)
        units.append(_Unit(node, tuple(after), out))
    return units


def quantize(model, calib: Mapping[str, np.ndarray], *, weight_bits: int = 8, act_bits: int = 8,
             per_channel: bool = False, method: str = "minmax", progress: bool = False,
             host=()) -> onnx.ModelProto:
    """Quantize a float model (path, bytes, ``ModelProto`` or :class:`~onnx2hw.ir.Graph`) to QDQ ONNX.

    ``calib`` maps each model input name to a float array, batch first. The model's host tail
    (:mod:`onnx2hw.quant.partition`: a Softmax head, ...; ``host`` names more nodes for it) is
    kept in float after the quantized core. Raises :class:`~onnx2hw.ir.ModelError` (a
    ``ValueError``) for bad models, data or options. ``progress`` shows a rich progress bar on
    stderr when calibration is slow.
    """
    _check_options(weight_bits, act_bits, method)
    full = canonicalize(model if isinstance(model, Graph) else load(model))
    _canonical.check_float_model(full, check_ops=False)
    parts = split(full, host)
    graph = parts.core
    _canonical.check_float_model(graph)
    feeds = check_feeds(calib, graph)
    g = _canonical.prepare(graph)
    units = _units(g)
    stats = _rounding_stats(units) if weight_bits <= 4 else {}
    qp = _calibrate(g, units, feeds, act_bits, method, progress, stats)
    writer = _Writer(g, qp, weight_bits, per_channel, stats)
    for t in g.input_names:
        writer.qdq(t, t)
    for u in units:
        writer.unit(u)
    return _model(graph, writer, weight_bits, act_bits, per_channel, method, parts.tail, full.output_names)


def _rounding_stats(units: list[_Unit]) -> dict[str, str]:
    """Linear layer input -> the statistic its error-compensating rounding needs (see _round_weights)."""
    return {u.node.inputs[0]: pattern(u.node).linear.stat for u in units if pattern(u.node).linear}


def _calibrate(g: Graph, units: list[_Unit], feeds, act_bits: int, method: str, progress: bool,
               stats: dict) -> dict[str, QParams]:
    """Quantization parameters of the graph inputs and every unit output: calibrated, or a
    ``pass`` unit's input's; fills ``stats`` in place."""
    own = list(g.input_names)
    inherit: dict[str, str] = {}
    for u in units:
        if pattern(u.node).ptq == "pass":
            inherit[u.out] = u.node.inputs[0]
        else:
            own.append(u.out)
    ranges = collect_ranges(g, feeds, own, method, progress, stats)
    qp: dict[str, QParams] = {t: act_qparams(*ranges[t], act_bits, t) for t in own}
    for u in units:  # topological: a pass unit's input already has its parameters
        if u.out in inherit:
            qp[u.out] = qp[inherit[u.out]]
    return qp


def _attrs(node: Node) -> dict:
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in node.attrs.items()}


class _Writer:
    """The QDQ core's nodes and initializers, written one unit at a time in graph order."""

    def __init__(self, g: Graph, qp: dict[str, QParams], weight_bits: int, per_channel: bool, stats: dict):
        self.g, self.qp, self.weight_bits, self.per_channel, self.stats = g, qp, weight_bits, per_channel, stats
        self.names = FreshNames(g)
        self.outputs = set(g.output_names)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.dq_name: dict[str, str] = {}  # float tensor -> its dequantized copy

    def qdq(self, t: str, produced_as: str) -> None:
        """``QuantizeLinear -> DequantizeLinear`` of tensor ``t`` (made as ``produced_as``) with its
        calibrated parameters; the dequantized copy keeps the name ``t`` when it is a graph output."""
        p, names = self.qp[t], self.names
        sn, zn = names.fresh(f"{t}_scale"), names.fresh(f"{t}_zero_point")
        self.inits.extend([_tensor(sn, p.scale, TensorProto.FLOAT), _tensor(zn, p.zero_point, p.onnx_type, [])])
        qn = names.fresh(f"{t}_quantized")
        dn = t if t in self.outputs else names.fresh(f"{t}_dequantized")
        self.nodes.append(helper.make_node("QuantizeLinear", [produced_as, sn, zn], [qn],
                                           name=names.fresh(f"{t}_QuantizeLinear")))
        self.nodes.append(helper.make_node("DequantizeLinear", [qn, sn, zn], [dn],
                                           name=names.fresh(f"{t}_DequantizeLinear")))
        self.dq_name[t] = dn

    def unit(self, u: _Unit) -> None:
        """One unit: its node on dequantized inputs, the ops fused after it, its output quantizer."""
        node, spec = u.node, pattern(u.node)
        ins = self.linear_inputs(node, spec.linear) if spec.linear else self.plain_inputs(node, spec.const_inputs)
        # the unit's float output gets a fresh name when the dequantized copy must carry the original
        float_out = self.names.fresh(f"{u.out}_float") if u.out in self.outputs else u.out
        mid = self.names.fresh(f"{node.outputs[0]}_preact") if u.fused else float_out
        self.nodes.append(helper.make_node(node.op_type, ins, [mid], name=node.name or self.names.fresh(node.op_type),
                                           **_attrs(node)))
        self.fused(u.fused, mid, float_out)
        self.qdq(u.out, float_out)

    def activation(self, node: Node, name: str) -> str:
        """The dequantized copy of ``node``'s input ``name``."""
        if name not in self.dq_name:
            raise UnsupportedError(f"node {node.name!r} ({node.op_type}): its input {name!r} is not a quantized "
                                   "activation")
        return self.dq_name[name]

    def plain_inputs(self, node: Node, const_inputs: int | None) -> list[str]:
        """Dequantized activations; constants where the op declares them (written as they are)."""
        ins = []
        for i, name in enumerate(node.inputs):
            if not name or name in self.dq_name:  # "": an omitted optional input (Resize's roi)
                ins.append(self.dq_name.get(name, name))
            elif name in self.g.initializers and const_inputs is not None and i >= const_inputs:
                self.inits.append(numpy_helper.from_array(np.asarray(self.g.initializers[name]), name))
                ins.append(name)
            else:
                ins.append(self.activation(node, name))
        return ins

    def linear_inputs(self, node: Node, form: Linear) -> list[str]:
        """A linear layer's inputs: the dequantized activation, its weight quantized (symmetric,
        per tensor or per output channel) and its bias as int32 at scale ``s_in * s_w``."""
        ins, label = node.inputs, f"node {node.name!r} ({node.op_type})"
        x = ins[0]
        dx = self.activation(node, x)
        bias = ins[form.bias] if form.bias is not None and len(ins) > form.bias and ins[form.bias] else None
        w = self.g.initializers[ins[form.weight]]
        min_scale = 0.0
        if bias:  # keep round(bias / (s_in * s_w)) inside int32
            b_abs = np.abs(np.asarray(self.g.initializers[bias], np.float64))
            if self.per_channel and b_abs.size != w.shape[form.axis]:   # grouped ConvTranspose: (group, Cout/group)
                b_abs = b_abs.reshape(-1, w.shape[form.axis]).max(axis=0)
            min_scale = (b_abs if self.per_channel else b_abs.max()) / (float(self.qp[x].scale) * _BIAS_MAX)
        wq, ws = weight_qparams(w, self.weight_bits, self.per_channel, form.axis, f"{label} weight", min_scale)
        bias_fix = None
        if x in self.stats:
            wq, bias_fix = _round_weights(w, wq, ws, form.axis, self.weight_bits, self.stats[x])
        wtype = TensorProto.INT8 if self.weight_bits == 8 else TensorProto.INT4
        new_ins = [dx, self.dequantized_const(ins[form.weight], wq, ws, wtype, form.axis)]
        if bias:
            groups = np.size(self.g.initializers[bias]) // ws.size if ws.ndim else 1   # scales repeat per group
            new_ins.append(self.int32_bias(label, bias, bias_fix, self.qp[x].scale * np.tile(ws, groups)))
        return new_ins

    def int32_bias(self, label: str, name: str, fix, scale) -> str:
        """The bias constant ``name`` (plus the rounding correction ``fix``) as int32 at ``scale``."""
        b = np.asarray(self.g.initializers[name], np.float64)
        if fix is not None:
            b = b + fix
        bs = _check_scale(scale, f"{label} bias")  # float32 product
        bq = np.rint(b / bs.astype(np.float64))
        if np.any(np.abs(bq) > (1 << 31) - 1):
            raise ModelError(f"{label}: bias does not fit int32 at scale s_in * s_w "
                             f"(max |bias/scale| = {float(np.max(np.abs(bq))):.3g})")
        return self.dequantized_const(name, bq, bs, TensorProto.INT32, 0)

    def dequantized_const(self, name: str, q, scale: np.ndarray, qtype: int, axis: int) -> str:
        """Integers ``q`` stored as ``qtype`` with zero point 0, read through a DequantizeLinear
        (along ``axis`` when ``scale`` is per channel); returns the dequantized tensor's name."""
        names = self.names
        qn, sn, zn = (names.fresh(f"{name}_{s}") for s in ("quantized", "scale", "zero_point"))
        self.inits += [_tensor(qn, q, qtype), _tensor(sn, scale, TensorProto.FLOAT),
                       _tensor(zn, np.zeros(scale.shape, np.int64), qtype)]
        dq = names.fresh(f"{name}_dequantized")
        self.nodes.append(helper.make_node("DequantizeLinear", [qn, sn, zn], [dq],
                                           name=names.fresh(f"{name}_DequantizeLinear"),
                                           **({"axis": axis} if scale.ndim else {})))
        return dq

    def fused(self, ops: tuple[Node, ...], mid: str, float_out: str) -> None:
        """The ops fused after a unit's node, from ``mid`` to ``float_out``; their constant inputs
        stay float32."""
        prev = mid
        for k, op in enumerate(ops):
            dst = float_out if k == len(ops) - 1 else self.names.fresh(f"{op.outputs[0]}_preact")
            op_ins = [prev] + list(op.inputs[1:])
            for extra in op_ins[1:]:
                if extra:
                    value = np.asarray(self.g.initializers[extra], np.float32)
                    self.inits.append(numpy_helper.from_array(value, extra))
            self.nodes.append(helper.make_node(op.op_type, op_ins, [dst], name=op.name or self.names.fresh(op.op_type),
                                               **_attrs(op)))
            prev = dst


def _model(orig: Graph, writer: _Writer, weight_bits: int, act_bits: int, per_channel: bool, method: str,
           tail: Graph | None, output_names) -> onnx.ModelProto:
    """The QDQ model: the written core, then the host's float tail as the model has it, its
    outputs ``output_names`` (the model's, each from the core or the tail); opset and IR
    version as 4-bit types need; the quantizer's options in the metadata; checked."""
    nodes, inits = list(writer.nodes), list(writer.inits)
    four = weight_bits == 4 or act_bits == 4
    opset = max(int(orig.opsets.get("", 13)), 21 if four else 13)
    infos = {v.name: _float_info(v) for v in orig.outputs}
    if tail is not None:
        rest = to_model(tail).graph
        nodes.extend(rest.node)
        inits.extend(rest.initializer)
        infos.update((v.name, v) for v in rest.output)
    outputs = [infos[name] for name in output_names]
    graph = helper.make_graph(nodes, (orig.name or "model") + "_qdq", [_float_info(v) for v in orig.inputs],
                              outputs, _dedupe(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              producer_name="onnx2hw", producer_version="0.1")
    model.ir_version = max(int(orig.ir_version or 0), 10 if four else 7)
    props = dict(orig.metadata)
    props.update({"onnx2hw.quantize.weight_bits": str(weight_bits), "onnx2hw.quantize.act_bits": str(act_bits),
                  "onnx2hw.quantize.per_channel": str(bool(per_channel)).lower(),
                  "onnx2hw.quantize.method": method})
    helper.set_model_props(model, props)
    try:
        onnx.checker.check_model(model, full_check=True)
    except Exception as exc:  # noqa: BLE001 - a bug in this writer, reported as one line
        raise ModelError(f"internal error: the quantized model fails onnx.checker: {exc}") from None
    return model


def _float_info(v) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(v.name, TensorProto.FLOAT, list(v.shape) if v.shape is not None else None)


def _dedupe(inits: list[onnx.TensorProto]) -> list[onnx.TensorProto]:
    seen, out = set(), []
    for t in inits:
        if t.name not in seen:
            seen.add(t.name)
            out.append(t)
    return out
