"""The API the import side of every layer kind is written against: a :class:`Builder`
interprets a quantized ONNX graph node by node, calling the handlers the kind modules declare
(:class:`~onnx2hw.layers.base.Pattern`), and collects the IntegerGraph layers they emit. The
importers of :mod:`onnx2hw.quant` run one with the handlers of their flavour
(:func:`onnx2hw.layers.handlers`).

Every ONNX value is one of these frozen values (derive new ones with ``dataclasses.replace``):

* :class:`QT` -- a tensor of the IntegerGraph: its integer codes (``real=False``, what a
  QuantizeLinear yields) or their float view ``scale * (q - zp)`` (``real=True``, what a
  DequantizeLinear yields and a layer reads). ``onnx_shape`` is the ONNX shape without the batch
  (NCHW unless ``hwc``), the IntegerGraph tensor is NHWC; ``perm`` marks a flattened image;
* :class:`QConst` -- a quantized constant (weights, bias): integers, scale and zero point;
* :class:`Const` -- a plain constant (scales, shapes, clip bounds);
* :class:`FloatIn` -- a model input awaiting the quantizer the host will apply;
* :class:`Acc` -- the result of a layer (dense, conv, add, a table...) awaiting its output
  quantizer: the layer is emitted only then, when its output grid is known.

What a kind module takes from here, and what for:

* reading a node: ``b.get(name, node)`` (any value), ``b.const`` / :func:`scalar` (a constant's
  array), :func:`opt` (an optional input), :func:`need` (the value must be a dequantized
  :class:`QT` or a :class:`QConst`, else the error every kind gives), ``b.natural`` (an image,
  not a flattened or channels-last view);
* QOperator forms (QLinearConv, QLinearAdd...): :func:`real_view` (an input with its scale/zero
  point inputs), :func:`qconst` (an integer weight with its parameters), :func:`int_view`,
  :func:`zp_input`, :func:`zp_type` (integer ops' zero points), :func:`quantize_output` (the
  output scale/zero point inputs quantize the result);
* linear layers: ``b.fold_weights`` (zero point folded out, per-channel scale), ``b.bias_of``,
  ``b.clamp_acc`` (a ReLU/Clip after the layer), ``b.requant(acc, target)`` (integer bias and
  :class:`~onnx2hw.layers.types.Requant` onto a :class:`Target`);
* emitting: ``b.new_tensor(name, nhwc_shape, dtype)``, ``b.emit(layer, onnx_shape, target)``
  (or ``b.layers.append`` for a layer that keeps its input's grid, such as MaxPool);
* checks: :func:`node_error` (the one error form: ``node 'name' (Op): message``),
  :func:`pads_of` (2-D ``pads``/``auto_pad``/``ceil_mode``), :func:`scale_input` (a constant
  scaling of a model input folded into the host quantizer), :func:`quant_axis`.

Writing the import side of a new kind, step by step:

1. For each ONNX op, a handler ``_op(b, node)``: read the inputs (``need(node, b.get(...), QT,
   "input")`` for activations, :class:`QConst` for weights), check attributes, and refuse what the
   hardware cannot do with ``node_error(node, why, UnsupportedError)`` (a model that breaks the
   ONNX spec: the default :class:`~onnx2hw.ir.errors.ModelError`).
2. An op that computes a new value returns ``Acc(kind, emit, node, inputs, onnx_shape, ...)`` with
   ``b.set(node, acc)``; the QuantizeLinear after it calls ``b.quantize``, which calls the
   kind's ``emit(b, acc, target)`` once. An op that keeps its input's grid (a max pool, a
   reshape) emits at once and sets the :class:`QT` of its output.
3. ``emit`` builds the layer: ``bias, act = b.requant(acc, t)``, ``spec = b.new_tensor(t.name,
   ..., t.dtype)``, the kind's node class named ``acc.node.name``, ``return b.emit(layer,
   acc.onnx_shape, t)``.
4. ``PATTERNS = (Pattern(domain, op_type, hardware, handler, flavours, ptq=...), ...)`` and
   ``KIND`` in the module; the module in :data:`onnx2hw.layers.KIND_MODULES` and in the
   independence contract of ``pyproject.toml``.

Invariants: a handler raises only :class:`~onnx2hw.ir.errors.ModelError` (or its subclass
``UnsupportedError``) for a bad model -- :meth:`Builder.run` names the node in a ``ValueError``
or ``OverflowError`` of a kind's own checks, anything else is a bug; a layer reads only
``real=True`` views and writes integer codes; a value, once set, is never changed (handlers
derive new ones); the kind modules never import each other.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Callable

import numpy as np
from onnx import TensorProto

from .. import arith
from ..ir.errors import ModelError, UnsupportedError
from ..ir.graph import Graph, Node
from . import graph as ig
from . import types as it
from ._layout import nhwc
from ._scale import check_scale, rational_ratio, ratio_to_multiplier_shift, ties_for

__all__ = ["Builder", "QT", "QConst", "Const", "FloatIn", "Acc", "exact_lsb", "image_input", "Target", "Value", "Handler",
           "node_error", "as_tensor", "need", "opt", "scalar", "qconst", "real_view", "int_view", "zp_input", "zp_type",
           "quantize_output", "scale_input", "pads_of", "quant_axis", "along_axis", "qtype_of",
           "check_only_outputs"]

_ELEM_TYPES = {
    TensorProto.INT4: it.IntType(4, True), TensorProto.UINT4: it.IntType(4, False),
    TensorProto.INT8: it.IntType(8, True), TensorProto.UINT8: it.IntType(8, False),
    TensorProto.INT16: it.IntType(16, True), TensorProto.UINT16: it.IntType(16, False),
}
_NP_TYPES = {"int4": it.IntType(4, True), "uint4": it.IntType(4, False),
             "int8": it.IntType(8, True), "uint8": it.IntType(8, False),
             "int16": it.IntType(16, True), "uint16": it.IntType(16, False)}


def node_error(node: Node, message: str, cls=ModelError) -> ModelError:
    """The error (``cls``: ``ModelError`` or ``UnsupportedError``) ``node 'name' (Op): message``."""
    return cls(f"node {node.name!r} ({node.op_type}): {message}")


def qtype_of(array) -> it.IntType:
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
    dtype: it.IntType
    real: bool
    onnx_shape: tuple[int, ...]           # ONNX shape without batch (NCHW order)
    perm: np.ndarray | None = None        # flat ONNX index -> flat NHWC index of ``tensor``
    #: ``onnx_shape`` is an image in channels-last order (H, W, C) (an exporter's NHWC view,
    #: before or after its Transposes): ``tensor`` holds it in that order, row-major
    hwc: bool = False


@dataclass(frozen=True)
class QConst:
    q: np.ndarray            # int64 integers
    scale: np.ndarray        # float64, scalar or 1-D along ``axis``
    zp: np.ndarray           # int64, same shape as scale (or scalar)
    axis: int
    dtype: it.IntType

    def real(self) -> np.ndarray:
        return ((self.q - along_axis(self.zp, self.q.ndim, self.axis))
                * along_axis(self.scale, self.q.ndim, self.axis))


@dataclass(frozen=True)
class Const:
    value: np.ndarray


@dataclass(frozen=True)
class FloatIn:
    """A model input awaiting its quantizer (an integer input: awaiting the DequantizeLinear that
    gives its scale and zero point)."""

    name: str
    onnx_shape: tuple[int, ...]
    pre: tuple[tuple[str, float], ...] = ()   # float scaling steps applied on the host before quantizing
    #: "onnx": the model's layout (an image is NCHW: the host moves the channels last);
    #: "hwc": ``onnx_shape`` is (H, W, C), the model's own channels-last input (an NHWC
    #: exporter's, read through a Transpose to NCHW), or (L, C), a channels-last signal (an
    #: ``H = 1`` image, read through a Reshape to (1, L, C)); "nhwc": ``onnx_shape`` is (C, H, W)
    #: after that Transpose, the data arrives channels-last (the host moves no axes)
    layout: str = "onnx"
    #: the model input is already the integer codes (TFLite int8 models)
    integer: bool = False


@dataclass(frozen=True)
class Acc:
    """A pending linear layer; ``scale`` is the real value of one accumulator LSB per channel."""

    kind: str                           # the layer kind that made it: "dense", "conv", "add", ...
    emit: Callable                      # emit(builder, acc, Target) -> QT: the layer kind's emitter
    node: Node
    inputs: tuple[QT, ...]
    onnx_shape: tuple[int, ...]
    scale: np.ndarray | None = None     # (C,) float64
    weights: np.ndarray | None = None   # zero-point folded integer weights
    w_type: it.IntType | None = None
    bias: np.ndarray | None = None      # (C,) int64, in accumulator LSBs (includes the zp fold)
    bias_real: np.ndarray | None = None  # (C,) float64 extra bias in real units (rounded at quantize)
    params: dict = field(default_factory=dict)
    lo_real: float = -math.inf
    hi_real: float = math.inf
    #: exact(builder, acc) -> QT | None: the result as an exact integer tensor of a wider type, no
    #: requantizer (for a layer that reads it unquantized), where the kind can give one
    exact: Callable | None = None
    #: fn(real) -> real: an elementwise function (float64 arrays in and out; the golden op in
    #: float32) of the clamped real value, pending for the quantizer that reads it; only a
    #: threshold quantizer, which evaluates the composite exactly, takes it (:mod:`.lookup`)
    fn: Callable | None = None
    #: the real LSB exactly, where ``scale`` (one for all channels) rounds a rational that is no
    #: float (an average pool's ``x.scale / divisor``); see :func:`exact_lsb`
    scale_exact: Fraction | None = None


def image_input(b: "Builder", node: Node) -> QT:
    """``node``'s first input as a quantized (C, H, W) image in the natural stream order, else
    one error line naming the node."""
    x = b.get(node.inputs[0], node)
    if not isinstance(x, QT):
        raise node_error(node, f"{node.op_type} of a value that is not a quantized tensor", UnsupportedError)
    x = b.natural(x, node)
    if len(x.onnx_shape) != 3:
        raise node_error(node, f"{node.op_type} input {x.onnx_shape!r} must be (N, C, H, W)", UnsupportedError)
    return x


def exact_lsb(v: Acc) -> Fraction | None:
    """The real LSB of ``v`` exactly (one for all channels, else ``None``): ``v.scale_exact`` while
    ``v.scale`` is still its rounding (a rule that rescales ``v`` drops it), else ``v.scale``."""
    if v.scale is None or np.size(np.unique(v.scale)) != 1:
        return None
    f = float(np.reshape(v.scale, -1)[0])
    return v.scale_exact if v.scale_exact is not None and float(v.scale_exact) == f else Fraction(f)


@dataclass(frozen=True)
class Target:
    """Where an :class:`Acc` is quantized to: tensor ``name`` on the grid ``scale``/``zp`` of
    ``dtype``, clamped to ``[lo, hi]``."""

    name: str
    scale: float
    zp: int
    dtype: it.IntType
    lo: int
    hi: int
    #: no requantizer: the tensor is the raw accumulator (a float last layer; the host scales it)
    raw: bool = False
    #: the quantizer rounds half to even (ONNX QuantizeLinear, QONNX ROUND), else half up
    half_even: bool = True


Value = QT | QConst | Const | Acc | FloatIn
Handler = Callable[["Builder", Node], None]


class Builder:
    """Interpret ``graph`` with ``handlers`` ((domain, op_type) -> fn(builder, node)) into an IntegerGraph.

    ``evaluate(node, *arrays) -> tuple`` runs one float ONNX node by its spec (the golden
    executor's, given by the importer): handlers that tabulate a float function use it.
    """

    def __init__(self, graph: Graph, handlers: dict[tuple[str, str], Handler], source: str,
                 evaluate: Callable[..., tuple] | None = None):
        self.graph = graph
        self.handlers = handlers
        self.source = source
        self.evaluate = evaluate
        self.vals: dict[str, Value] = {}
        self.layers: list = []
        self.specs: dict[str, it.TensorSpec] = {}
        self.inputs: dict[str, tuple[ig.InputQuant, it.TensorSpec]] = {}
        #: the batch size the model fixes (its first input's first dim, when a number), else None
        first = graph.inputs[0].shape if graph.inputs else None
        self.batch = first[0] if first and isinstance(first[0], int) and first[0] > 0 else None
        nhwc_inputs = _nhwc_inputs(graph)
        for vi in graph.inputs:
            shape = vi.shape
            if vi.kind != "tensor" or shape is None or len(shape) < 1 or \
                    any(not isinstance(d, int) or d < 1 for d in shape[1:]):
                raise ModelError(f"model input {vi.name!r} needs a tensor shape with a batch dim and fixed positive "
                                 f"other dims, not {shape!r}")
            integer = vi.elem_type in _ELEM_TYPES
            if vi.elem_type not in (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE) and not integer:
                raise UnsupportedError(f"model input {vi.name!r} is neither a float nor a 4..16-bit integer tensor "
                                       f"(elem_type {vi.elem_type})")
            self.vals[vi.name] = FloatIn(vi.name, tuple(shape[1:]), layout="hwc" if vi.name in nhwc_inputs else "onnx",
                                         integer=integer)

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
    def new_tensor(self, name: str, shape, dtype: it.IntType) -> it.TensorSpec:
        base, i = name, 1
        while name in self.specs:
            name, i = f"{base}_{i}", i + 1
        spec = it.TensorSpec(name, tuple(shape), dtype)
        self.specs[name] = spec
        return spec

    def input_tensor(self, fin: FloatIn, scale: float, zp: int, dtype: it.IntType, node: Node, *,
                     narrow: bool = False) -> QT:
        check_scale(scale, f"node {node.name!r} input scale")
        shape = fin.onnx_shape
        nchw = len(shape) in (2, 3) and fin.layout == "onnx"   # (C, L): a 1-D signal, held as a (1, L, C) image
        if len(shape) not in (1, 2, 3):
            raise node_error(node, f"model input {fin.name!r} of shape {shape!r} is neither (N, F), (N, C, L) nor "
                             f"(N, C, H, W)", UnsupportedError)
        if fin.integer and dtype != _ELEM_TYPES.get(self.graph.value_info[fin.name].elem_type):
            raise node_error(node, f"integer model input {fin.name!r} is read as {dtype}, not as its own type",
                             UnsupportedError)
        if fin.name in self.inputs:
            q, spec = self.inputs[fin.name]
            if (q.scale, q.zero_point, q.dtype, q.pre, q.narrow) != (float(scale), int(zp), dtype, fin.pre, narrow):
                raise node_error(node, f"model input {fin.name!r} is quantized twice with different parameters",
                                 UnsupportedError)
        else:
            # "hwc": the model's channels-last image (H, W, C) or signal (L, C), an H = 1 image
            spec = self.new_tensor(fin.name, ((1,) * (3 - len(shape)) + shape) if fin.layout == "hwc" else nhwc(shape),
                                   dtype)
            model = next(tuple(vi.shape[1:]) for vi in self.graph.inputs if vi.name == fin.name)
            q = ig.InputQuant(fin.name, float(scale), int(zp), dtype, nchw, fin.pre,
                              model if model != tuple(spec.shape if not nchw else shape) or len(shape) == 2 else None,
                              bool(narrow), integer_input=fin.integer)
            self.inputs[fin.name] = (q, spec)
        return QT(spec.name, float(scale), int(zp), dtype, False, shape, hwc=fin.layout == "hwc")

    def natural(self, x: QT, node: Node) -> QT:
        if x.perm is not None:
            raise node_error(node, "input is a flattened image used as an image again", UnsupportedError)
        if x.hwc:
            raise node_error(node, f"input of shape {x.onnx_shape!r} is channels-last (H, W, C): only a Transpose "
                             f"to NCHW or a flatten can read it", UnsupportedError)
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
        wtype = w.dtype if not np.any(w.zp) else it.int_type_for(wi.min(initial=0), wi.max(initial=0))
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

    def clamp_acc(self, node: Node, acc: Acc, lo: float, hi: float) -> Acc:
        return replace(acc, lo_real=max(acc.lo_real, lo), hi_real=min(acc.hi_real, hi))

    # ---- quantizing an accumulator ---------------------------------------------------------------
    def quantize(self, node: Node, v: Value, scale, zp, dtype: it.IntType, *, narrow=False, out_name=None,
                 half_even=True) -> QT:
        """The integer tensor ``clamp(round(v / scale) + zp)`` (emits a layer for an :class:`Acc`;
        ``half_even``: ``round`` takes ties to even, else half up).

        Per-channel scales (one per output channel of a layer; the zero point one for all) give a
        per-channel :class:`~onnx2hw.layers.Requant`; such a tensor can only be a model output
        (dequantized per channel on the host), since the next layer's accumulator needs one
        input scale."""
        sc = np.asarray(scale, dtype=np.float64)
        zps = np.asarray(zp if zp is not None else 0, dtype=np.float64).reshape(-1)
        name = out_name or node.outputs[0]
        # (a Mul layer has its own signed multipliers)
        if isinstance(v, Acc) and v.kind != "mul" and v.scale is not None and np.any(np.asarray(v.scale) <= 0):
            raise node_error(node, "a negative rescale of the layer (a BatchNormalization with a negative scale) "
                             "is only supported with a threshold activation (outputs of at most 8 bits)",
                             UnsupportedError)
        if zps.size > 1 and np.all(zps == zps[0]):
            zps = zps[:1]
        if sc.size > 1 and np.all(sc == sc.reshape(-1)[0]):
            sc = sc.reshape(-1)[:1]
        if zps.size > 1:
            raise node_error(node, "per-channel activation zero points are not supported", UnsupportedError)
        zp = int(zps[0])
        qlo, qhi = arith.int_range(dtype.bits, dtype.signed, narrow) if not dtype.bipolar else (-1, 1)
        if sc.size > 1:
            if not isinstance(v, Acc) or sc.size != v.onnx_shape[0]:
                raise node_error(node, f"per-channel activation scales ({sc.size}) are only supported on the output "
                                 f"of a layer, one per output channel", UnsupportedError)
            check_only_outputs(self.graph, name, node)
            s = check_scale(sc.reshape(-1), f"node {node.name!r} output")
            los = {qlo if v.lo_real == -math.inf else max(qlo, _round_even(v.lo_real / x) + zp) for x in s}
            his = {qhi if v.hi_real == math.inf else min(qhi, _round_even(v.hi_real / x) + zp) for x in s}
            if len(los) > 1 or len(his) > 1:
                raise node_error(node, "a clamp of the layer gives different integer bounds per channel",
                                 UnsupportedError)
            lo, hi = los.pop(), his.pop()
            if lo > hi:
                raise node_error(node, f"activation clamp leaves no values in [{qlo}, {qhi}]")
            return v.emit(self, v, Target(name, s, zp, dtype, lo, hi, half_even=half_even))
        scale = float(check_scale(sc.reshape(()), f"node {node.name!r} output"))
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
        return v.emit(self, v, Target(name, scale, zp, dtype, lo, hi, half_even=half_even))

    def requant(self, v: Acc, t: "Target") -> tuple[np.ndarray, it.Requant]:
        """``(integer bias, Requant)`` mapping ``v``'s accumulator onto ``t`` (its float bias rounded
        onto the accumulator grid; one multiplier/shift when every channel shares them). Ties go
        to even where ``t``'s quantizer does so and the accumulator is the real value exactly:
        the bias on its grid and the multiplier the scale ratio (:func:`~._scale.ties_for`)."""
        if t.raw:
            return v.bias, None
        extra = np.rint(v.bias_real / v.scale)
        if not np.all(np.abs(extra) < 2.0 ** 62):
            raise node_error(v.node, "the layer's bias is not finite, or too large for any accumulator")
        bias = v.bias + extra.astype(np.int64)
        on_grid = bool(np.all(extra * v.scale == v.bias_real))
        lsb = exact_lsb(v)
        if t.half_even and on_grid and lsb is not None and np.size(t.scale) == 1:
            rational = rational_ratio(lsb / Fraction(float(np.reshape(t.scale, -1)[0])))
            if rational is not None:   # real ties that a binary multiplier misses: divided exactly
                m, s, d = rational
                return bias, it.Requant([m], [s], t.zp, t.lo, t.hi, "even", d)
        m, s = ratio_to_multiplier_shift(v.scale / t.scale, f"node {v.node.name!r} requantization")
        ties = ties_for(v.scale, t.scale, m, s, t.half_even and on_grid)
        if np.all(m == m[0]) and np.all(s == s[0]):
            m, s = m[:1], s[:1]
        return bias, it.Requant(m, s, t.zp, t.lo, t.hi, ties)

    def emit(self, layer, out_shape_onnx, t: "Target", perm=None) -> QT:
        """Append ``layer`` to the graph; the :class:`QT` of its output on ``t``'s grid."""
        self.layers.append(layer)
        return QT(layer.output.name, t.scale, t.zp, t.dtype, False, tuple(out_shape_onnx), perm)

    def reduce_axes(self, node: Node) -> list[int]:
        """The constant ``axes`` of a Reduce* node (its second input from opset 18, before
        that its attribute; none given: every axis)."""
        if len(node.inputs) > 1 and node.inputs[1]:
            return [int(a) for a in np.asarray(self.const(node.inputs[1], node, "axes")).reshape(-1)]
        return list(node.attr("axes", []) or [])

    def _producer(self, x: QT):
        return next((l for l in self.layers if l.output.name == x.tensor), None)

    def viewable(self, x: QT) -> bool:
        """Whether :meth:`view_output` can hold ``x`` as an image: a layer that allows it
        (``LayerKind.viewable_output``) made it."""
        layer = self._producer(x)
        return layer is not None and layer.viewable_output

    def view_output(self, node: Node, x: QT, shape: tuple[int, ...]) -> None:
        """The IntegerGraph tensor of ``x`` (a layer's output that no layer has read yet) held as
        ``shape`` (same elements, same stream order), where the layer producing it allows that
        (``LayerKind.viewable_output``: its output is one run of values whatever its shape)."""
        layer = self._producer(x)
        if layer is None or not layer.viewable_output:
            what = "a model input" if layer is None else f"the output of {type(layer).__name__} layer {layer.name!r}"
            raise node_error(node, f"views {what} as the image {shape!r}: only a dense layer's output can be",
                             UnsupportedError)
        if any(x.tensor in l.inputs for l in self.layers):
            raise node_error(node, f"the output of {layer.name!r} is read as a vector elsewhere and viewed as an "
                             f"image here", UnsupportedError)
        spec = replace(layer.output, shape=tuple(shape))
        self.layers[self.layers.index(layer)] = replace(layer, output=spec)
        self.specs[x.tensor] = spec

    # ---- driver -----------------------------------------------------------------------------------
    def run(self) -> ig.IntegerGraph:
        for node in self.graph.nodes:
            fn = self.handlers.get((node.domain, node.op_type))
            if fn is None:
                kind = f"{node.domain}::{node.op_type}" if node.domain else node.op_type
                raise node_error(node, f"op {kind} is not supported by the {self.source} importer (hardware "
                                 f"cannot run it between quantized layers)", UnsupportedError)
            try:
                fn(self, node)
            except ModelError:
                raise
            except (ValueError, OverflowError) as exc:  # a value the layer kinds' own checks refuse
                raise node_error(node, str(exc), UnsupportedError) from None
        return self.finish()

    def finish(self) -> ig.IntegerGraph:
        outs, out_specs = [], []
        rename: dict[str, str] = {}
        for vi in self.graph.outputs:
            v = self.vals.get(vi.name)
            if isinstance(v, Acc):
                outs.append(self.raw_output(v, vi))
                out_specs.append(self.layers[-1].output.name)
                continue
            if not isinstance(v, QT):
                what = "a float input" if isinstance(v, FloatIn) else "not quantized"
                raise ModelError(f"model output {vi.name!r} is {what}: the graph must end in a quantizer "
                                 f"or a linear layer")
            nchw, shape = self.output_layout(v)
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


    def raw_output(self, v: Acc, vi) -> ig.OutputDequant:
        """Emit the float last layer ``v`` without a requantizer: the hardware streams its integer
        accumulator; the host dequantizer applies its per-channel scale and float bias."""
        if v.kind not in ("dense", "conv"):
            raise node_error(v.node, f"model output {vi.name!r} is the float output of a {v.kind} layer: "
                             f"the graph must end in a quantizer", UnsupportedError)
        if v.lo_real != -math.inf or v.hi_real != math.inf:
            raise node_error(v.node, f"model output {vi.name!r} is a clamped float accumulator (an activation "
                             f"after the last layer without a quantizer)", UnsupportedError)
        in_type = self.specs[v.inputs[0].tensor].dtype
        bits = it.acc_bits_for(v.weights, v.bias, in_type)
        if bits > 32:
            raise node_error(v.node, f"the last layer's accumulator needs {bits} bits; a float output streams "
                             f"at most 32", UnsupportedError)
        t = Target(vi.name, 1.0, 0, it.IntType(bits, True), *arith.int_range(bits, True), raw=True)
        nchw, shape = self.output_layout(v.emit(self, v, t))
        return ig.OutputDequant(vi.name, np.asarray(v.scale, np.float64), 0, nchw, vi.elem_type, False, shape,
                                bias=np.asarray(v.bias_real, np.float64))

    def output_layout(self, q: QT) -> tuple[bool, tuple[int, ...] | None]:
        """``(nhwc_to_nchw, shape)`` of the host dequantizer of model output ``q``: an image tensor
        moves its channels first (not one the model holds channels-last, ``hwc``), and the ONNX shape
        is applied after unless it is that ``(C, H, W)`` image itself (a 1-D ``(C, L)`` output is the
        ``H = 1`` image reshaped to the model's rank; a ``perm`` view or a flattened one is reshaped)."""
        nchw = len(self.specs[q.tensor].shape) == 3 and not q.hwc
        plain = q.perm is None and nchw and len(q.onnx_shape) == 3
        return nchw, None if plain else q.onnx_shape


# ---- helpers of the op handlers -------------------------------------------------------------------

def opt(b: Builder, node: Node, i: int):
    """Input ``i`` of ``node`` or ``None`` when omitted."""
    return b.get(node.inputs[i], node) if len(node.inputs) > i and node.inputs[i] else None


def zp_type(b: Builder, node: Node, zp_index: int, default: it.IntType | None = None) -> tuple[int, it.IntType]:
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
    return 0, _ELEM_TYPES.get(odt, it.IntType(8, False))


def qconst(b: Builder, node: Node, q_name: str, scale, zp, axis: int) -> QConst:
    """A quantized constant from an integer initializer and its scale / zero point values."""
    v = b.get(q_name, node)
    if not isinstance(v, Const):
        raise node_error(node, f"{q_name!r} must be a constant integer tensor", UnsupportedError)
    try:
        t = qtype_of(v.value) if np.asarray(v.value).dtype.name not in ("int32", "int64") else it.IntType(16, True)
    except ValueError as exc:
        raise node_error(node, str(exc), UnsupportedError) from None
    q = np.asarray(v.value, dtype=np.int64)
    s = np.asarray(scale, dtype=np.float64).reshape(-1) if np.asarray(scale).ndim else np.asarray(scale, np.float64)
    z = np.zeros_like(s, dtype=np.int64) if zp is None else np.asarray(zp, dtype=np.int64)
    return QConst(q, s, z, quant_axis(node, q.shape, s, z, axis), t)


def quant_axis(node: Node, shape, scale, zp, axis: int) -> int:
    """The axis of the quantization parameters ``scale``/``zp`` (``zp`` may be ``None``) of a
    tensor of ``shape``, in ``0..rank-1``. Parameters of one element each are per tensor and
    ``axis`` is ignored, as the ONNX spec says (0 is returned); otherwise ``axis`` must name a dim
    (``-rank..rank-1``) whose length each parameter of more than one element has."""
    sizes = (int(np.size(scale)), 1 if zp is None else int(np.size(zp)))
    if max(sizes) == 1:
        return 0
    rank = len(shape)
    if not -rank <= axis < rank:
        raise node_error(node, f"axis {axis} is out of range for a tensor of rank {rank} (the scale or zero "
                         f"point has one value per index of that axis)")
    axis %= rank
    if any(n not in (1, shape[axis]) for n in sizes):
        raise node_error(node, f"scale of {sizes[0]} and zero point of {sizes[1]} values for axis {axis} of "
                         f"length {shape[axis]} (shape {tuple(shape)!r})")
    return axis


def along_axis(values, ndim: int, axis: int) -> np.ndarray:
    """``values`` (one, or one per index of ``axis``) shaped to broadcast against a tensor of rank ``ndim``."""
    values = np.asarray(values)
    if values.size == 1:
        return values.reshape(())
    shape = [1] * ndim
    shape[axis] = -1
    return values.reshape(shape)


def real_view(b: Builder, node: Node, i_x: int, i_s: int, i_zp: int | None) -> QT:
    """The dequantized view of integer input ``i_x`` with the scale / zero point inputs ``i_s``/``i_zp``."""
    x = b.get(node.inputs[i_x], node)
    if isinstance(x, FloatIn) and not x.integer:
        raise node_error(node, "integer op fed by a float model input (quantize it first)", UnsupportedError)
    s = np.asarray(b.const(node.inputs[i_s], node, "scale"), np.float64)
    if s.size != 1:
        raise node_error(node, "per-channel activation scale is not supported", UnsupportedError)
    zp = 0
    if i_zp is not None and len(node.inputs) > i_zp and node.inputs[i_zp]:
        zp = int(np.asarray(b.const(node.inputs[i_zp], node, "zero point"), np.int64).reshape(-1)[0])
    if isinstance(x, FloatIn):  # an integer model input: its codes go to the hardware as they are
        x = b.input_tensor(x, float(check_scale(s.reshape(()), f"node {node.name!r} input")), zp,
                           _ELEM_TYPES[b.graph.value_info[x.name].elem_type], node)
    if not isinstance(x, QT) or x.real:
        raise node_error(node, f"input {node.inputs[i_x]!r} must be an integer tensor", UnsupportedError)
    return replace(x, real=True, scale=float(check_scale(s.reshape(()), f"node {node.name!r} input")), zp=zp)


def as_tensor(b: Builder, x):
    """``x``, or a pending layer read without a quantizer as its exact integer tensor (a sum pool
    read by a dense layer: the mean's division is that layer's scale) where its kind gives one."""
    if isinstance(x, Acc) and x.exact is not None and x.lo_real == -math.inf and x.hi_real == math.inf \
            and not np.any(x.bias_real):
        q = x.exact(b, x)
        if q is not None:
            b.set(x.node, q)
            return q
    return x


def need(node, x, kind, what):
    """``x`` when it is a dequantized :class:`QT` (``kind=QT``) or a :class:`QConst`; else the
    error saying that ``what`` would be a float op between quantized layers (or, for a model
    input, that it is not quantized)."""
    if kind is QT and isinstance(x, FloatIn):
        raise node_error(node, f"{what} is the model input {x.name!r} unquantized (the model needs an input "
                         f"quantizer there)", UnsupportedError)
    if not isinstance(x, kind):
        raise node_error(node, f"{what} must be {'a dequantized integer tensor' if kind is QT else 'a quantized constant'}"
                         f" (a float op between quantized layers cannot run in hardware)", UnsupportedError)
    if kind is QT and not x.real:
        raise node_error(node, f"{what} is an integer tensor where a float is expected", UnsupportedError)
    return x


def scalar(b: Builder, node: Node, i: int, what: str) -> np.ndarray:
    """Constant input ``i`` as float64 (``what`` names it in the error when it is not constant)."""
    return np.asarray(b.const(node.inputs[i], node, what), np.float64)


def zp_input(b: Builder, node: Node, i: int):
    """Constant zero point input ``i``, ``None`` when omitted."""
    return b.const(node.inputs[i], node, "zero point") if len(node.inputs) > i and node.inputs[i] else None


def int_view(b: Builder, node: Node, zp_index: int) -> QT:
    """Input 0 of an integer op (MatMulInteger, ConvInteger) as a view of scale 1 with the zero
    point input ``zp_index``."""
    x = b.get(node.inputs[0], node)
    if not isinstance(x, QT) or x.real:
        raise node_error(node, f"input {node.inputs[0]!r} must be an integer tensor", UnsupportedError)
    zp = zp_input(b, node, zp_index)
    return replace(x, real=True, scale=1.0, zp=int(np.asarray(zp if zp is not None else 0).reshape(-1)[0]))


#: ops an NHWC model input may pass through (quantizers) before the Transpose that makes it NCHW
_QUANTIZERS = frozenset({"QuantizeLinear", "DequantizeLinear", "Quant"})


#: (rank without batch, perm) of the Transposes that read a channels-last model input as channels first
_TO_CHANNELS_FIRST = frozenset({(3, (0, 3, 1, 2)), (2, (0, 2, 1))})


def _nhwc_inputs(graph: Graph) -> set[str]:
    """Names of the model inputs that the graph reads as channels-last, every path from the input
    through quantizers ending in

    * a Transpose with ``perm = (0, 3, 1, 2)`` (a rank-4 ``(N, H, W, C)`` input) or
      ``perm = (0, 2, 1)`` (a rank-3 ``(N, L, C)`` signal: Keras ``Conv1D``);
    * a Reshape to ``(N, 1, H, W)`` of a one-channel ``(N, H, W, 1)`` input: the same Transpose,
      as tf2onnx writes it when it moves only a unit axis;
    * a Reshape to ``(N, 1, L, C)`` of a rank-3 ``(N, L, C)`` input (Keras ``Conv1D``'s
      ``ExpandDims`` of a channels-last signal), itself ending in one of the above."""
    readers: dict[str, list[Node]] = {}
    for n in graph.nodes:
        for i in n.inputs[:1]:
            readers.setdefault(i, []).append(n)

    def shape_of(name: str) -> tuple | None:
        vi = graph.value_info.get(name)
        if vi is None or not vi.shape or any(not isinstance(d, int) for d in vi.shape[1:]):
            return None
        return tuple(vi.shape[1:])

    def ends_in_transpose(name: str, shape: tuple, depth: int = 0) -> bool:
        rs = readers.get(name, [])
        if not rs or depth > 6:
            return False
        for n in rs:
            if n.op_type == "Transpose":
                if (len(shape), tuple(n.attr("perm", ()))) not in _TO_CHANNELS_FIRST:
                    return False
            elif n.op_type == "Reshape":
                out = shape_of(n.outputs[0])
                if len(shape) == 3 and not (shape[2] == 1 and out == (1, shape[0], shape[1])):
                    return False
                if len(shape) == 2 and not (out == (1,) + shape and ends_in_transpose(n.outputs[0], out, depth + 1)):
                    return False
            elif n.op_type not in _QUANTIZERS or not ends_in_transpose(n.outputs[0], shape, depth + 1):
                return False
        return True

    return {vi.name for vi in graph.inputs if vi.shape is not None and len(vi.shape) in (3, 4)
            and all(isinstance(d, int) for d in vi.shape[1:]) and ends_in_transpose(vi.name, tuple(vi.shape[1:]))}


def check_only_outputs(graph: Graph, name: str, node: Node) -> None:
    """``name`` (a tensor with per-channel scales) reaches only model outputs, possibly through
    DequantizeLinear / Identity; otherwise an ``UnsupportedError`` naming the consumer."""
    outs = set(graph.output_names)
    todo, seen = [name], set()
    while todo:
        t = todo.pop()
        if t in seen:
            continue
        seen.add(t)
        for n in graph.nodes:
            if t in n.inputs:
                if n.op_type in ("DequantizeLinear", "Identity") and n.domain in ("", "ai.onnx"):
                    todo.extend(n.outputs)
                else:
                    raise node_error(node, f"per-channel activation scales can only feed a model output, not node "
                                     f"{n.name!r} ({n.op_type}) (its accumulator needs one input scale)",
                                     UnsupportedError)
        if t not in outs and t != name and not any(t in n.inputs for n in graph.nodes):
            raise node_error(node, f"per-channel activation tensor {t!r} is neither consumed nor a model output",
                             UnsupportedError)


def _round_even(x: float) -> int:
    return int(np.rint(x))


def pads_of(node: Node, hw, kernel, strides) -> tuple[int, int, int, int]:
    """``(t, l, b, r)`` from ``pads``/``auto_pad``; ``ceil_mode`` only where it changes nothing.
    Kernel and strides must be two positive integers, pads non-negative, and the window must fit."""
    for what, v in (("kernel_shape", kernel), ("strides", strides)):
        if len(v) != 2 or any(int(d) < 1 for d in v):
            raise node_error(node, f"{what} {list(v)!r} must be two positive integers", UnsupportedError)
    auto = node.attr("auto_pad", "NOTSET")
    if auto in ("NOTSET", "VALID"):
        p = tuple(node.attr("pads", (0, 0, 0, 0))) if auto == "NOTSET" else (0, 0, 0, 0)
        if len(p) != 4:
            raise node_error(node, f"pads {p!r} are not 2-D", UnsupportedError)
        pads = (p[0], p[1], p[2], p[3])
        if any(int(v) < 0 for v in pads):
            raise node_error(node, f"pads {list(p)!r} must not be negative", UnsupportedError)
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
    for i in range(2):
        if hw[i] + pads[i] + pads[i + 2] < kernel[i]:
            raise node_error(node, f"the {kernel[0]}x{kernel[1]} window does not fit the {hw[0]}x{hw[1]} input "
                             f"padded by {list(pads)}")
    return pads


def quantize_output(b: Builder, node: Node, acc, i_s: int, i_zp: int, x: QT) -> None:
    """Quantize a QLinear op's result with its output scale / zero point inputs (the input's type
    when the zero point is omitted)."""
    zp, t = zp_type(b, node, i_zp, default=x.dtype)
    b.set(node, b.quantize(node, acc, scalar(b, node, i_s, "output scale"), zp, t))


def scale_input(b: Builder, node: Node, op: str) -> bool:
    """Fold ``node`` -- ``op`` (mul, add, sub, div) of a model input and a scalar constant, such as
    the ``2x - 1`` Brevitas puts in front -- into that input's host-side scaling steps. Returns
    ``False`` when the node is not of that form."""
    a, c = b.get(node.inputs[0], node), b.get(node.inputs[1], node)
    if isinstance(a, FloatIn) and isinstance(c, (Const, QConst)):
        fin, const, step = a, c, op
    elif isinstance(c, FloatIn) and isinstance(a, (Const, QConst)) and op in ("mul", "add", "sub"):
        fin, const, step = c, a, "rsub" if op == "sub" else op
    else:
        return False
    v = np.asarray(const.value if isinstance(const, Const) else const.real(), np.float64)
    if v.size != 1 or not np.all(np.isfinite(v)) or (step == "div" and float(v.reshape(-1)[0]) == 0):
        raise node_error(node, f"scaling of model input {fin.name!r} by {v.reshape(-1)[:4].tolist()!r}: only a "
                         f"finite scalar (non-zero for Div) is supported", UnsupportedError)
    b.set(node, replace(fin, pre=fin.pre + ((step, float(v.reshape(-1)[0])),)))
    return True
