"""AvgPool, NHWC: ``acc = window sum + bias`` (``bias = -kernel_area * input zero point``; padding
adds ``pad_value``, the input zero point), then a :class:`Requant` whose ratio includes ``1 / divisor``.

ONNX forms: AveragePool / GlobalAveragePool / ReduceMean over the spatial axes on dequantized views (QDQ, QONNX, float for the
post-training quantizer), com.microsoft QLinearAveragePool / QLinearGlobalAveragePool.
The divisor of each output is the count ONNX defines for it: with ``count_include_pad=1`` the
window positions inside the padded image, with ``count_include_pad=0`` those inside the image;
a ceil-mode partial last window (a window may not start in the end padding) is floor-mode
pooling over extra end padding whose positions are never counted (onnxruntime, PyTorch's
``AvgPool2d(ceil_mode=True)``; ``onnx.reference`` moves half of an extension of 2 or more to the
start instead and disagrees there). com.microsoft QLinearAveragePool divides by the kernel area
whenever it counts padding (onnxruntime's contrib kernel), partial windows included. Since
padding adds the zero point, ``sum + bias`` is the exact real sum over the counted positions
whatever the divisor: a pool whose divisors vary (edges, corners, partial windows) keeps that
sum and requantizes each output with the multiplier of its divisor (``count_acts``, a
:class:`~onnx2hw.rtl.pool_divisor.DivisorRequantize` in hardware).
A QDQ pool of two codes on its input's own grid (TFLite's 1-D pools) rounds its ties the way
float32 does: it sums a table of exact terms into thresholds instead (see :mod:`._pair_mean`).
GlobalAvgPool is an AvgPool whose kernel is the whole image. A 1-D pool on ``(N, C, L)`` is the
2-D one on an ``H = 1`` image. (The QONNX importer turns a pool of one divisor
with a narrow output quantizer into a depthwise Conv with thresholds instead.) Hardware:
AvgPoolUnit or GlobalAvgPoolUnit window sum + a registered ``+ bias`` Cast + Requantize
(DivisorRequantize when the divisor varies).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction

import numpy as np

from .. import arith
from ..ir.errors import UnsupportedError
from ..ir.graph import Node
from ..rtl.cast import Cast
from ..rtl.cost import Cost
from ..rtl.lookup import MAX_IN_BITS, LookupUnit
from ..rtl.pool import AvgPoolUnit, GlobalAvgPoolUnit
from ..rtl.pool_divisor import DivisorRequantize
from ..rtl.stage import Block
from .builder import Acc, Builder, QT, Target, exact_lsb, need, node_error, pads_of, quantize_output, real_view
from ._pair_mean import pair_mean_terms
from ._windows import (as_image, axis_counts, ceil_end_pad, pad_nhwc, same_begin, spatial_out, spatial_reduction,
                       windows)
from .base import (LayerKind, Lowered, Pattern, act_blocks, check_act, check_window, ties_param, window_fill,
                   window_problem)
from .types import IntType, Requant, apply_act, elem_shape, int_type_for, readonly, window_out

__all__ = ["AvgPool", "KIND", "PATTERNS"]

MS = "com.microsoft"


@dataclass(frozen=True)
class AvgPool(LayerKind):
    """Window sum + ``bias`` (the input zero point correction), then ``act``; padding adds ``pad_value``.

    With ``terms`` (the exact float32 form of a QDQ pool of two codes, see :mod:`._pair_mean`) the
    window sums ``terms[x - terms_lo]`` instead of ``x`` (a table per input code, a LookupUnit in
    front of the window), and ``act`` is usually a :class:`~onnx2hw.layers.types.Thresholds`.

    With ``counts`` (the divisor per output row and per output column: output ``(i, j)`` divides
    by ``counts[0][i] * counts[1][j]``) each output is requantized by the :class:`Requant` of
    its divisor in ``count_acts`` (``(divisor, Requant)`` pairs, every divisor once, ascending);
    ``act`` is then the largest divisor's (the pairs share its zero point and clamp)."""

    kernel: tuple[int, int]
    stride: tuple[int, int]
    pads: tuple[int, int, int, int]
    act: Requant
    bias: int = 0
    pad_value: int = 0
    terms: np.ndarray | None = None
    terms_lo: int = 0
    counts: tuple[tuple[int, ...], tuple[int, ...]] | None = None
    count_acts: tuple[tuple[int, Requant], ...] = ()

    def __post_init__(self):
        super().__post_init__()
        for f in ("kernel", "stride", "pads"):
            object.__setattr__(self, f, tuple(int(v) for v in getattr(self, f)))
        object.__setattr__(self, "bias", int(self.bias))
        object.__setattr__(self, "pad_value", int(self.pad_value))
        object.__setattr__(self, "terms_lo", int(self.terms_lo))
        if self.terms is not None:
            object.__setattr__(self, "terms", readonly(self.terms))
        if self.counts is not None:
            object.__setattr__(self, "counts", tuple(tuple(int(c) for c in axis) for axis in self.counts))
        object.__setattr__(self, "count_acts", tuple((int(d), a) for d, a in self.count_acts))

    def validate(self, ins):
        check_window(self, ins)
        check_act(self, self.act, ins[0].shape[-1], self.output)
        t = ins[0].dtype
        if self.terms is not None and \
                (self.terms.ndim != 1 or (self.terms_lo, self.terms.size) != (t.lo, t.hi - t.lo + 1)):
            raise self.error(f"terms table of {self.terms.shape} from {self.terms_lo} does not cover input type {t}")
        if self.counts is not None:
            self._check_counts()

    def _check_counts(self):
        oh, ow, _ = self.output.shape
        if len(self.counts) != 2 or (len(self.counts[0]), len(self.counts[1])) != (oh, ow) or \
                min(min(a) for a in self.counts) < 1:
            raise self.error(f"counts {self.counts!r} are not a positive count per output row ({oh}) and column ({ow})")
        divs = sorted({r * c for r in self.counts[0] for c in self.counts[1]})
        if [d for d, _ in self.count_acts] != divs:
            raise self.error(f"count_acts cover divisors {[d for d, _ in self.count_acts]}, not the layer's {divs}")
        if self.terms is not None or not isinstance(self.act, Requant) or not _same(self.count_acts[-1][1], self.act):
            raise self.error("divisors per position need Requant activations, the largest divisor's as act")
        for d, a in self.count_acts:
            if not isinstance(a, Requant) or (a.zero_point, a.lo, a.hi, a.ties) != \
                    (self.act.zero_point, self.act.lo, self.act.hi, self.act.ties):
                raise self.error(f"the Requant of divisor {d} differs from act in zero point, clamp or ties")

    def divisors(self) -> np.ndarray | None:
        """The ``(OH, OW)`` divisor of each output (``None``: one divisor, folded into ``act``)."""
        return None if self.counts is None else np.multiply.outer(self.counts[0], self.counts[1])

    def summed_type(self, t):
        """The type of the values the window sums (the input's, or that of ``terms``)."""
        return t if self.terms is None else int_type_for(int(self.terms.min()), int(self.terms.max()))

    def reference(self, x):
        x = np.asarray(x, dtype=np.int64)
        if self.terms is not None:
            x = self.terms[x - self.terms_lo]
        x = pad_nhwc(x, self.pads, self.pad_value)
        acc = windows(x, self.kernel, self.stride).sum(axis=(3, 4)) + self.bias
        div = self.divisors()
        if div is None:
            return apply_act(acc, self.act)
        out = np.empty_like(acc)
        for d, a in self.count_acts:
            at = div == d
            out[:, at] = a(acc[:, at])
        return out

    def hardware_problem(self, ins):
        if self.terms is not None and ins[0].dtype.bits > MAX_IN_BITS:
            return f"a {ins[0].dtype.bits}-bit input needs a terms table of {1 << ins[0].dtype.bits} entries"
        return window_problem(self)

    def lower(self, ins, pe, simd, family, mul=None):
        spec = ins[0]
        h, w, c = spec.shape
        summed = self.summed_type(spec.dtype)
        es = elem_shape(summed)
        area = self.kernel[0] * self.kernel[1]
        terms = ()
        if self.terms is not None:
            params = dict(in_shape=elem_shape(spec.dtype), out_shape=es, table=tuple(int(v) for v in self.terms),
                          lanes=simd, channels=1)
            terms = (Block(LookupUnit, params, LookupUnit.estimate(**params, family=family)),)
        if self.kernel == (h, w) and self.pads == (0, 0, 0, 0):
            params = dict(height=h, width=w, channels=c, elem_shape=es, simd=simd)
            window = Block(GlobalAvgPoolUnit, params, GlobalAvgPoolUnit.estimate(**params, family=family))
        else:
            params = dict(height=h, width=w, channels=c, kernel=self.kernel, stride=self.stride,
                          pads=self.pads, elem_shape=es, simd=simd, pad_value=self.pad_value)
            window = Block(AvgPoolUnit, params, AvgPoolUnit.estimate(**params, family=family))
        lo, hi = summed.lo * area + self.bias, summed.hi * area + self.bias
        acc_bits = arith.acc_bits(min(lo, 0), max(hi, 0))
        if self.counts is None:
            act, ob, osg = act_blocks(self.act, c, simd, acc_bits, self.output.dtype, family,
                                      None if any(self.pads) else (lo, hi))  # padding adds pad_value
        else:
            act, ob, osg = [self._divisor_block(c, simd, acc_bits, family)], self.output.dtype.bits, \
                self.output.dtype.signed
        return Lowered((*terms, window, _offset_block(acc_bits, self.bias), *act), window.cost.cycles, ob, osg,
                       fill=window_fill(self.kernel[0], self.pads[0], h))

    def _divisor_block(self, channels: int, pe: int, acc_bits: int, family: str) -> Block:
        """The DivisorRequantize of ``counts``: a class per distinct row / column count."""
        rows, cols = sorted(set(self.counts[0])), sorted(set(self.counts[1]))
        acts = dict(self.count_acts)

        def table(field):
            return np.array([[np.broadcast_to(getattr(acts[r * k], field), (channels,)) for k in cols] for r in rows],
                            np.int64)
        out = self.output.dtype
        params = dict(channels=channels, pe=pe, acc_bits=acc_bits, rows=tuple(rows.index(v) for v in self.counts[0]),
                      cols=tuple(cols.index(v) for v in self.counts[1]), multiplier=table("multiplier"),
                      shift=table("shift"), zero_point=self.act.zero_point, out_bits=out.bits,
                      out_signed=out.signed, lo=self.act.lo, hi=self.act.hi, **ties_param(replace(self.act, divisor=1)))
        divisor = np.array([[acts[r * k].divisor for k in cols] for r in rows], np.int64)
        if np.any(divisor != 1):
            params["divisor"] = divisor
        return Block(DivisorRequantize, params, DivisorRequantize.estimate(**params, family=family))


def _same(a: Requant, b: Requant) -> bool:
    return isinstance(a, Requant) and np.array_equal(a.multiplier, b.multiplier) and \
        np.array_equal(a.shift, b.shift) and (a.zero_point, a.lo, a.hi, a.ties, a.divisor) == \
        (b.zero_point, b.lo, b.hi, b.ties, b.divisor)


def _offset_block(bits: int, offset: int) -> Block:
    """The registered lane-wise ``+ offset`` (rtl ``Cast``) into a signed accumulator."""
    lut = bits if offset else 0
    return Block(Cast, dict(bits=bits, signed=True, offset=offset),
                 Cost(1, 1 if offset else 0, lut, bits if offset else 0, 0, 0))


# ---- import ---------------------------------------------------------------------------------------

def accumulate(b: Builder, node: Node, x: QT, kernel, strides, pads, counts=None) -> Acc:
    """The pending average pool of the dequantized image (or 1-D signal, an ``H = 1`` image) ``x``
    (``counts``: the divisor per output row and column, ``None`` for the kernel area everywhere).

    A pool of one divisor is of kind ``avgpool``, its scale ``x.scale / divisor``; one whose
    divisors vary is of kind ``avgpool_counts`` (scale ``x.scale``, the window sum's: :func:`emit`
    gives each divisor ``d`` its own requantization, of scale ``x.scale / d`` rounded once), which
    no other kind folds or thresholds."""
    x = b.natural(x, node)
    _, (c, h, w) = as_image(node, x.onnx_shape)
    area = kernel[0] * kernel[1]
    oh = window_out(h, kernel[0], strides[0], pads[0], pads[2])
    ow = window_out(w, kernel[1], strides[1], pads[1], pads[3])
    divs = {area} if counts is None else {r * k for r in counts[0] for k in counts[1]}
    kind, div = ("avgpool", divs.pop()) if len(divs) == 1 else ("avgpool_counts", 1)
    params = {"kernel": tuple(kernel), "stride": tuple(strides), "pads": tuple(pads), "out_hw": (oh, ow)}
    if kind == "avgpool_counts":
        params["counts"] = counts
    exact = Fraction(float(np.reshape(x.scale, -1)[0])) / div if np.size(x.scale) == 1 else None
    return Acc(kind, emit, node, (x,), spatial_out(x.onnx_shape, c, oh, ow), np.full(c, x.scale / div),
               bias=np.full(c, -area * x.zp, np.int64), bias_real=np.zeros(c), params=params, exact=_exact_sum,
               scale_exact=exact)


#: widest exact window sum handed to the next layer as its input
MAX_SUM_BITS = 16


def _exact_sum(b: Builder, v: Acc) -> QT | None:
    """The window sum of ``x - zp`` as a signed integer tensor on the grid ``x.scale / area``: the
    mean, exactly (``None`` when it needs more than :data:`MAX_SUM_BITS` bits, or padding adds
    values the sum does not hold)."""
    x = v.inputs[0]
    if any(v.params["pads"]) or np.size(np.unique(v.scale)) != 1:
        return None
    area = int(np.prod(v.params["kernel"]))
    lo, hi = (x.dtype.lo - x.zp) * area, (x.dtype.hi - x.zp) * area
    bits = arith.acc_bits(min(lo, 0), max(hi, 0))
    if bits > MAX_SUM_BITS:
        return None
    t = Target(v.node.outputs[0], float(v.scale[0]), 0, IntType(bits, True), *arith.int_range(bits, True), raw=True)
    return replace(emit(b, v, t), real=True)


def emit(b: Builder, v: Acc, t: Target) -> QT:
    if "counts" in v.params:
        return _emit_counts(b, v, t)
    bias, act = b.requant(v, t)
    x = v.inputs[0]
    spec = b.new_tensor(t.name, (*v.params["out_hw"], v.onnx_shape[0]), t.dtype)
    exact = _float_terms(v, t, act) if b.source == "qdq" else None
    if exact is not None:   # a float32 pair mean that the integer sum cannot give (see _pair_mean)
        table, _, act = exact
        layer = AvgPool(v.node.name, (x.tensor,), spec, v.params["kernel"], v.params["stride"], v.params["pads"],
                        act, 0, 0, table, x.dtype.lo)
    else:
        layer = AvgPool(v.node.name, (x.tensor,), spec, v.params["kernel"], v.params["stride"], v.params["pads"],
                        act, int(bias[0]), x.zp)
    return b.emit(layer, v.onnx_shape, t)


def _emit_counts(b: Builder, v: Acc, t: Target) -> QT:
    """A pool whose divisor varies: the Requant of each divisor ``d`` maps the window sum (one
    LSB is ``v.scale / d``) onto ``t``; the integer bias must be the same for all, and so must
    the rounding of ties (half to even where any divisor's multiplier is exact and the quantizer
    rounds so: the others' integer ties are no real ones, either rule serves them)."""
    if t.raw:
        raise node_error(v.node, "an average pool whose divisor varies with the position must be quantized",
                         UnsupportedError)
    counts = v.params["counts"]
    pairs, biases, lsb = [], set(), exact_lsb(v)
    for d in sorted({r * k for r in counts[0] for k in counts[1]}):
        bias, act = b.requant(replace(v, scale=v.scale / d, scale_exact=None if lsb is None else lsb / d), t)
        pairs.append((d, act))
        biases.add(tuple(int(x) for x in bias))
    if len({a.ties for _, a in pairs}) > 1:   # one rule for the block: an inexact multiplier's integer
        pairs = [(d, replace(a, ties="even")) for d, a in pairs]   # ties are no real ones (ties_for)
    bias = biases.pop()
    if biases or len(set(bias)) != 1:
        raise node_error(v.node, "a bias added to an average pool whose divisor varies with the position is not "
                         "supported", UnsupportedError)
    x = v.inputs[0]
    spec = b.new_tensor(t.name, (*v.params["out_hw"], v.onnx_shape[0]), t.dtype)
    layer = AvgPool(v.node.name, (x.tensor,), spec, v.params["kernel"], v.params["stride"], v.params["pads"],
                    pairs[-1][1], bias[0], x.zp, counts=counts, count_acts=tuple(pairs))
    return b.emit(layer, v.onnx_shape, t)


def _float_terms(v: Acc, t: Target, act):
    """The exact float32 form of an AveragePool of kernel area 2 between a DequantizeLinear and a
    QuantizeLinear (onnxruntime's float32 is the QDQ importer's truth; ``None`` for other
    kernels, or when the window sum + Requant is exact already)."""
    if v.node.domain or act is None or not isinstance(act, Requant) or any(v.params["pads"]) \
            or int(np.prod(v.params["kernel"])) != 2 or np.any(v.bias_real) or np.size(t.scale) != 1:
        return None
    x = v.inputs[0]
    return pair_mean_terms(x.dtype, x.scale, x.zp, float(np.reshape(t.scale, ())), t.zp, t.lo, t.hi, act)


def geometry(node: Node, x: QT, *, area_divisor: bool = False):
    """``(kernel, strides, pads, counts)`` of an AveragePool node on ``x`` (a 1-D pool as the 2-D
    one on ``H = 1``): ``pads`` with a ceil-mode partial last window's extent added to the end
    padding, ``counts`` the divisor per output row and column (see the module docstring;
    ``area_divisor``: a pool counting padding divides by the kernel area, as com.microsoft
    QLinearAveragePool does)."""
    node, (_, h, w) = as_image(node, x.onnx_shape)
    kernel = tuple(node.attr("kernel_shape"))
    strides = tuple(node.attr("strides", (1, 1)))
    if tuple(node.attr("dilations", (1, 1))) != (1, 1):
        raise node_error(node, "dilations are not supported", UnsupportedError)
    for what, v in (("kernel_shape", kernel), ("strides", strides)):
        if len(v) != 2 or min(int(d) for d in v) < 1:
            raise node_error(node, f"{what} {list(v)!r} must be two positive integers", UnsupportedError)
    auto = node.attr("auto_pad", "NOTSET")
    if auto in ("SAME_UPPER", "SAME_LOWER") and min(same_begin(auto, n, k, s) for n, k, s in zip((h, w), kernel,
                                                                                               strides)) < 0:
        raise node_error(node, f"auto_pad {auto} with strides {list(strides)!r} beyond the kernel "
                         f"{list(kernel)!r} asks for negative padding at the start (onnxruntime then crops the "
                         f"input)", UnsupportedError)
    floor = {k: v for k, v in node.attrs.items() if k != "ceil_mode"}
    if int(node.attr("ceil_mode", 0)) and auto in ("NOTSET", "VALID"):
        # ceil_mode rounds the window count up with explicit or VALID padding (SAME has ceil(n / s)
        # windows): the floor-mode pool over the extra end padding, checked as such by pads_of
        declared = tuple(int(p) for p in node.attr("pads", (0, 0, 0, 0))) if auto == "NOTSET" else (0, 0, 0, 0)
        if len(declared) != 4 or min(declared) < 0:
            raise node_error(node, f"pads {list(declared)!r} must be four non-negative integers", UnsupportedError)
        ends = [ceil_end_pad(n, kernel[i], strides[i], declared[i], declared[i + 2]) for i, n in enumerate((h, w))]
        if None in ends:
            raise node_error(node, f"ceil_mode=1 with pads {list(declared)!r} as large as the kernel is not "
                             f"supported", UnsupportedError)
        floor = dict(floor, auto_pad="NOTSET", pads=(*declared[:2], *ends))
        pads = pads_of(replace(node, attrs=floor), (h, w), kernel, strides)
    else:
        declared = pads = pads_of(replace(node, attrs=floor), (h, w), kernel, strides)
    include = bool(int(node.attr("count_include_pad", 0)))
    out = [window_out(n, kernel[i], strides[i], pads[i], pads[i + 2]) for i, n in enumerate((h, w))]
    counts = tuple(axis_counts(n, kernel[i], strides[i], declared[i], declared[i + 2], out[i], include)
                   for i, n in enumerate((h, w)))
    if include and area_divisor:
        counts = tuple((kernel[i],) * out[i] for i in range(2))
    if min(min(c) for c in counts) < 1:
        raise node_error(node, f"a window lies wholly in the padding {list(declared)!r} (pads as large as the "
                         f"kernel {list(kernel)!r})", UnsupportedError)
    return kernel, strides, tuple(pads), counts


def _global(b: Builder, node: Node, x: QT) -> Acc:
    _, (_, h, w) = as_image(node, x.onnx_shape)
    return accumulate(b, node, x, (h, w), (1, 1), (0, 0, 0, 0))


def _global_avgpool(b: Builder, node: Node):
    b.set(node, _global(b, node, need(node, b.get(node.inputs[0], node), QT, "input")))


def _reduce_mean(b: Builder, node: Node):
    """ReduceMean over the spatial axes (what torch's dynamo exporter writes for a global average
    pool): a GlobalAveragePool; with ``keepdims=0`` its output is the channel vector."""
    x = need(node, b.get(node.inputs[0], node), QT, "input")
    keep = spatial_reduction(node, b.reduce_axes(node), x.onnx_shape, "a global average pool")
    acc = _global(b, node, x)
    b.set(node, acc if keep else replace(acc, onnx_shape=acc.onnx_shape[:1]))


def _avgpool(b: Builder, node: Node):
    x = need(node, b.get(node.inputs[0], node), QT, "input")
    b.set(node, accumulate(b, node, x, *geometry(node, x)))


def _channels_first(node: Node):
    if int(node.attr("channels_last", 0)):
        raise node_error(node, "channels_last=1 is not supported", UnsupportedError)


def _qlinear_avgpool(b: Builder, node: Node):
    _channels_first(node)
    x = real_view(b, node, 0, 1, 2)
    quantize_output(b, node, accumulate(b, node, x, *geometry(node, x, area_divisor=True)), 3, 4, x)


def _qlinear_global_avgpool(b: Builder, node: Node):
    _channels_first(node)
    x = real_view(b, node, 0, 1, 2)
    quantize_output(b, node, _global(b, node, x), 3, 4, x)


PATTERNS = (
    Pattern("", "AveragePool", "AvgPoolUnit + Requantize, or DivisorRequantize where the divisor varies "
            "(count_include_pad=0 with padding, ceil_mode partial windows; 1-D and 2-D)", _avgpool, ptq="layer"),
    Pattern("", "GlobalAveragePool", "GlobalAvgPoolUnit + Requantize (1-D and 2-D)", _global_avgpool, ptq="layer"),
    Pattern("", "ReduceMean", "GlobalAvgPoolUnit + Requantize (mean over the spatial axes only)", _reduce_mean,
            ptq="layer", const_inputs=1),
    Pattern(MS, "QLinearAveragePool", "AvgPoolUnit + Requantize, or DivisorRequantize where the divisor varies",
            _qlinear_avgpool, {"qoperator"}),
    Pattern(MS, "QLinearGlobalAveragePool", "GlobalAvgPoolUnit + Requantize", _qlinear_global_avgpool, {"qoperator"}),
)

#: the layer kind this module declares
KIND = AvgPool
