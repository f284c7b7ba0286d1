"""Post-training quantization of float models to standard QDQ ONNX (``onnx2hw quantize``).

Our own PTQ, not onnxruntime's (onnxruntime is only a test oracle):

1. :func:`onnx2hw.ir.load` the float model; fold ``BatchNormalization`` into the ``Conv``/``Gemm``
   before it, drop ``Identity``/``Dropout`` (see :mod:`onnx2hw.quant._canonical`).
2. Cut the graph into *units*: a primary node (``Conv``, ``Gemm``, ``MatMul``, ``Add``,
   ``AveragePool``, ``GlobalAveragePool``, ``Concat`` (one common output grid its inputs are
   requantized onto), ``Mul`` by a constant, the tabulated activations, standalone ``Relu``/``Clip``)
   plus the ``Relu``/``Clip`` that is the only reader of its output (fused: the quantizer sits
   *after* the activation). A ``Mul`` by a positive constant (scalar or per channel) that is the only
   reader of a ``Conv``/``Gemm``/``MatMul`` is fused into that unit too (no quantizer between: the
   importer folds it into the layer's requantization scale). ``MaxPool``, ``GlobalMaxPool``, ``Resize``/``Upsample`` (nearest),
   ``Flatten``, ``Reshape`` and kept ``Identity`` pass their input's quantization parameters
   through (exact for integers). The op roles are the layer registry's (:func:`onnx2hw.layers.ptq_ops`).
3. Calibrate the float range of every graph input and unit output by running
   :func:`onnx2hw.golden.execute` on the calibration data (``minmax`` or ``percentile`` 99.99);
   0 is always inside the range.
4. Write QDQ ONNX the way onnxruntime's QDQ format does: each graph input and unit output is
   followed by ``QuantizeLinear -> DequantizeLinear``; weights are stored quantized and read
   through ``DequantizeLinear`` (axis 0 = output channel when per-channel; ``MatMul`` weights axis 1);
   biases are int32 with scale ``s_in * s_w`` (float32 product), zero point 0.

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
from ..ir.simplify import simplify
from ..layers import ptq_ops
from . import _canonical
from .calib import METHODS as _METHODS, check_feeds, collect_ranges, load_npz as _load_npz
from .partition import split

__all__ = ["quantize", "load_calibration", "act_qparams", "weight_qparams", "QParams",
           "WEIGHT_BITS", "ACT_BITS", "METHODS"]

WEIGHT_BITS = (8, 4)
ACT_BITS = (8, 4)
METHODS = _METHODS

#: primary ops of a unit that gets its own calibrated output quantizer
_REQUANT_OPS = ptq_ops("layer")
#: ops whose output reuses the input's quantization parameters
_PASS_OPS = ptq_ops("pass")
_ACTS = frozenset({"Relu", "Clip"})
#: layers a positive constant Mul right after is fused with (the importer folds it into their scale)
_LINEAR = frozenset({"Conv", "Gemm", "MatMul"})
#: ops whose constant inputs after the first (shape, bounds, scales, slope, factor) stay float constants
_PARAM_OPS = frozenset({"Reshape", "Clip", "Resize", "Upsample", "Mul", "PRelu", "ReduceMean"})
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

    * ``Gemm``/``MatMul`` (``stat`` = input Gram matrix ``E[x x^T]``): GPTQ-style sequential rounding
      (quantize one input column at a time and spread its output error over the columns not yet
      quantized through the Cholesky factor of the inverse Gram matrix).
    * ``Conv`` (``stat`` = per-input-channel mean): bias correction, ``b -= sum((Wq - W) * E[x])``.

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
    sb = s.reshape((-1,) + (1,) * (w.ndim - 1)) if s.ndim else s
    delta = wq * sb - w  # (Cout, Cin_g, kh, kw)
    mean = np.asarray(stat, np.float64)
    if delta.shape[1] != mean.size:  # grouped conv: leave as is
        return wq, None
    return wq, -np.einsum("ocij,c->o", delta, mean)


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
    acts: tuple[Node, ...]  # fused after the node, in order: a positive constant Mul (linear layers), Relu/Clip
    out: str  # float output of the unit (after the fused activation)


def _positive_scale(layer: Node, node: Node, graph: Graph) -> bool:
    """``node`` is ``Mul(layer output, c)`` by a positive finite constant, a scalar or one value per
    output channel of ``layer`` (it then folds into the layer's requantization scale)."""
    if node.op_type != "Mul" or len(node.inputs) != 2 or node.inputs[0] != layer.outputs[0]:
        return False
    c = graph.initializers.get(node.inputs[1])
    if c is None or not np.all(np.isfinite(c)) or not np.all(np.asarray(c) > 0):
        return False
    c = np.asarray(c)
    if c.size == 1:
        return True
    w = graph.initializers.get(layer.inputs[1]) if len(layer.inputs) > 1 else None
    if w is None or np.ndim(w) != 2 and layer.op_type != "Conv":
        return False
    n = {"Conv": w.shape[0], "MatMul": w.shape[-1], "Gemm": w.shape[0] if layer.attr("transB", 0) else w.shape[-1]}
    per_channel = (n[layer.op_type],) + (1,) * (2 if layer.op_type == "Conv" else 0)
    return c.shape in (per_channel, (1,) + per_channel)


def _units(graph: Graph) -> list[_Unit]:
    readers: dict[str, list[Node]] = {}
    for n in graph.nodes:
        for i in n.inputs:
            if i:
                readers.setdefault(i, []).append(n)
    outputs = set(graph.output_names)
    fused: set[int] = set()
    units = []
    for node in graph.nodes:
        if id(node) in fused:
            continue
        out = node.outputs[0]
        acts = []
        if node.op_type in _LINEAR and out not in outputs:
            r = readers.get(out, [])
            if len(r) == 1 and _positive_scale(node, r[0], graph):  # folded into the layer's requantizer
                acts.append(r[0])
                out = r[0].outputs[0]
        if node.op_type in _REQUANT_OPS - _ACTS and out not in outputs:
            r = readers.get(out, [])
            if len(r) == 1 and r[0].op_type in _ACTS:
                acts.append(r[0])
                out = r[0].outputs[0]
        fused.update(id(a) for a in acts)
        units.append(_Unit(node, tuple(acts), out))
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
    full = simplify(model if isinstance(model, Graph) else load(model))
    _canonical.check_float_model(full, check_ops=False)
    parts = split(full, host)
    graph = parts.core
    _canonical.check_float_model(graph)
    feeds = check_feeds(calib, graph)
    g = _canonical.prepare(graph)
    units = _units(g)

    # which tensors get their own quantizer, and which inherit one
    own = list(g.input_names)
    inherit: dict[str, str] = {}
    for u in units:
        if u.node.op_type in _PASS_OPS:
            inherit[u.out] = u.node.inputs[0]
        else:
            own.append(u.out)
    stats = {}
    if weight_bits <= 4:  # statistics for error-compensating rounding (see _round_weights)
        for u in units:
            if u.node.op_type in ("Gemm", "MatMul"):
                stats[u.node.inputs[0]] = "gram"
            elif u.node.op_type == "Conv":
                stats[u.node.inputs[0]] = "mean"
    ranges = collect_ranges(g, feeds, own, method, progress, stats)
    qp: dict[str, QParams] = {t: act_qparams(*ranges[t], act_bits, t) for t in own}
    for u in units:  # topological: a pass unit's input already has its parameters
        if u.out in inherit:
            qp[u.out] = qp[inherit[u.out]]
    return _write(graph, g, units, qp, weight_bits, act_bits, per_channel, method, stats, parts.tail)


def _write(orig: Graph, g: Graph, units: list[_Unit], qp: dict[str, QParams], weight_bits: int,
           act_bits: int, per_channel: bool, method: str, stats: dict, tail: Graph | None) -> onnx.ModelProto:
    names = FreshNames(g)
    outputs = set(g.output_names)
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []
    dq_name: dict[str, str] = {}  # float tensor -> its dequantized copy

    def qdq(t: str, produced_as: str) -> None:
        p = qp[t]
        sn, zn = names.fresh(f"{t}_scale"), names.fresh(f"{t}_zero_point")
        inits.extend([_tensor(sn, p.scale, TensorProto.FLOAT), _tensor(zn, p.zero_point, p.onnx_type, [])])
        qn = names.fresh(f"{t}_quantized")
        dn = t if t in outputs else names.fresh(f"{t}_dequantized")
        nodes.append(helper.make_node("QuantizeLinear", [produced_as, sn, zn], [qn], name=names.fresh(f"{t}_QuantizeLinear")))
        nodes.append(helper.make_node("DequantizeLinear", [qn, sn, zn], [dn], name=names.fresh(f"{t}_DequantizeLinear")))
        dq_name[t] = dn

    def attrs(node: Node) -> dict:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in node.attrs.items()}

    for t in g.input_names:
        qdq(t, t)
    n_layers = 0
    for u in units:
        node = u.node
        ins = list(node.inputs)
        label = f"node {node.name!r} ({node.op_type})"
        if node.op_type in ("Conv", "Gemm", "MatMul"):
            n_layers += 1
            x = ins[0]
            if x not in dq_name:
                raise UnsupportedError(f"{label}: its input {x!r} is not a quantized activation")
            w = g.initializers[ins[1]]
            axis = 1 if node.op_type == "MatMul" else 0
            min_scale = 0.0
            if len(ins) > 2 and ins[2]:  # keep round(bias / (s_in * s_w)) inside int32
                b_abs = np.abs(np.asarray(g.initializers[ins[2]], np.float64))
                min_scale = (b_abs if per_channel else b_abs.max()) / (float(qp[x].scale) * _BIAS_MAX)
            wq, ws = weight_qparams(w, weight_bits, per_channel, axis, f"{label} weight", min_scale)
            bias_fix = None
            if x in stats:
                wq, bias_fix = _round_weights(w, wq, ws, axis, weight_bits, stats[x])
            wtype = TensorProto.INT8 if weight_bits == 8 else TensorProto.INT4
            wn = names.fresh(f"{ins[1]}_quantized")
            wsn, wzn = names.fresh(f"{ins[1]}_scale"), names.fresh(f"{ins[1]}_zero_point")
            inits += [_tensor(wn, wq, wtype), _tensor(wsn, ws, TensorProto.FLOAT),
                      _tensor(wzn, np.zeros(ws.shape, np.int64), wtype)]
            wdq = names.fresh(f"{ins[1]}_dequantized")
            ch_attr = {"axis": axis} if ws.ndim else {}
            nodes.append(helper.make_node("DequantizeLinear", [wn, wsn, wzn], [wdq],
                                          name=names.fresh(f"{ins[1]}_DequantizeLinear"), **ch_attr))
            new_ins = [dq_name[x], wdq]
            if len(ins) > 2 and ins[2]:
                b = np.asarray(g.initializers[ins[2]], np.float64)
                if bias_fix is not None:
                    b = b + bias_fix
                bs = _check_scale(qp[x].scale * ws, f"{label} bias")  # float32 product
                bq = np.rint(b / bs.astype(np.float64))
                if np.any(np.abs(bq) > (1 << 31) - 1):
                    raise ModelError(f"{label}: bias does not fit int32 at scale s_in * s_w "
                                     f"(max |bias/scale| = {float(np.max(np.abs(bq))):.3g})")
                bn = names.fresh(f"{ins[2]}_quantized")
                bsn, bzn = names.fresh(f"{ins[2]}_scale"), names.fresh(f"{ins[2]}_zero_point")
                inits += [_tensor(bn, bq, TensorProto.INT32), _tensor(bsn, bs, TensorProto.FLOAT),
                          _tensor(bzn, np.zeros(bs.shape, np.int64), TensorProto.INT32)]
                bdq = names.fresh(f"{ins[2]}_dequantized")
                nodes.append(helper.make_node("DequantizeLinear", [bn, bsn, bzn], [bdq],
                                              name=names.fresh(f"{ins[2]}_DequantizeLinear"), **ch_attr))
                new_ins.append(bdq)
        else:
            new_ins = []
            for i, name in enumerate(ins):
                if not name:  # an omitted optional input (Resize's roi)
                    new_ins.append(name)
                elif name in dq_name:
                    new_ins.append(dq_name[name])
                elif name in g.initializers and node.op_type in _PARAM_OPS and (i > 0 or node.op_type == "Mul"):
                    new_ins.append(name)
                    inits.append(numpy_helper.from_array(np.asarray(g.initializers[name]), name))
                else:
                    raise UnsupportedError(f"{label}: its input {name!r} is not a quantized activation")
        # the unit's float output gets a fresh name when the dequantized copy must carry the original
        float_out = names.fresh(f"{u.out}_float") if u.out in outputs else u.out
        mid = names.fresh(f"{node.outputs[0]}_preact") if u.acts else float_out
        op_type, node_attrs = node.op_type, attrs(node)
        if op_type == "Upsample":  # removed from opset 10 on: the same nearest mapping as a Resize
            op_type, new_ins, node_attrs = _upsample_as_resize(node, new_ins, g, inits, names)
        nodes.append(helper.make_node(op_type, new_ins, [mid], name=node.name or names.fresh(node.op_type),
                                      **node_attrs))
        prev = mid
        for k, act in enumerate(u.acts):
            dst = float_out if k == len(u.acts) - 1 else names.fresh(f"{act.outputs[0]}_preact")
            act_ins = [prev] + list(act.inputs[1:])
            for extra in act_ins[1:]:
                if extra:
                    inits.append(numpy_helper.from_array(np.asarray(g.initializers[extra], np.float32), extra))
            nodes.append(helper.make_node(act.op_type, act_ins, [dst], name=act.name or names.fresh(act.op_type),
                                          **attrs(act)))
            prev = dst
        qdq(u.out, float_out)

    four = weight_bits == 4 or act_bits == 4
    opset = max(int(orig.opsets.get("", 13)), 21 if four else 13)
    outputs = [helper.make_tensor_value_info(v.name, TensorProto.FLOAT, list(v.shape) if v.shape is not None else None)
               for v in orig.outputs]
    if tail is not None:  # the host's float part, as the model has it, after the quantized core
        rest = to_model(tail).graph
        nodes.extend(rest.node)
        inits.extend(rest.initializer)
        outputs = list(rest.output)
    graph = helper.make_graph(
        nodes, (orig.name or "model") + "_qdq",
        [helper.make_tensor_value_info(v.name, TensorProto.FLOAT, list(v.shape) if v.shape is not None else None)
         for v in orig.inputs],
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


def _upsample_as_resize(node: Node, ins: list, g: Graph, inits: list, names) -> tuple[str, list, dict]:
    """Upsample (nearest; opset 7 scales attribute, opset 9 scales input) as the equivalent
    Resize-13: asymmetric coordinates, nearest_mode floor (ONNX's Upsample semantics)."""
    mode = node.attr("mode", "nearest")
    mode = mode.decode() if isinstance(mode, bytes) else str(mode)
    if mode != "nearest":
        raise UnsupportedError(f"node {node.name!r} (Upsample): mode {mode!r} is not supported (only nearest)")
    if node.since_version < 9:
        sn = names.fresh(f"{node.name or 'upsample'}_scales")
        inits.append(_tensor(sn, np.asarray(node.attr("scales"), np.float32), TensorProto.FLOAT))
    else:
        sn = ins[1]
    return "Resize", [ins[0], "", sn], {"mode": "nearest", "coordinate_transformation_mode": "asymmetric",
                                       "nearest_mode": "floor"}


def _dedupe(inits: list[onnx.TensorProto]) -> list[onnx.TensorProto]:
    seen, out = set(), []
    for t in inits:
        if t.name not in seen:
            seen.add(t.name)
            out.append(t)
    return out
