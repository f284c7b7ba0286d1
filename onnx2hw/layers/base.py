"""What every layer kind declares: :class:`LayerKind` (its IntegerGraph node), :class:`Pattern`
(an ONNX op it is imported from, and what the post-training quantizer needs to know of its float
form: :class:`Linear` for a linear layer), :class:`Lowered` (its RTL stage at one folding).

A layer kind is a frozen dataclass deriving from :class:`LayerKind` whose first fields are
``name``, ``inputs`` (tensor names, port order) and ``output`` (a :class:`TensorSpec`). It
implements, in its own module of :mod:`onnx2hw.layers`:

* ``validate(ins)``: shapes, types and parameters against its input specs (``self.error``);
* ``reference(*xs)``: the exact integer result over int64 arrays whose leading axis is the batch
  (the golden executor runs integer graphs through it);
* ``hardware_problem(ins)``: why the RTL cannot build it (``None`` when it can);
* ``fold_options(ins)``, ``cycles(ins, pe, simd)``: legal foldings and the folding objective;
* ``mul_options(ins)``: the product styles (``"dsp"``, ``"lut"``) the folder may choose between
  for its multipliers (none by default: a kind without products, or with one way to build them);
* ``lower(ins, pe, simd, family, mul=None)``: the chain of RTL blocks of its stage, with their
  costs; ``mul`` (one of ``mul_options``) builds its products in DSPs or LUTs, ``None`` lets
  the blocks choose by operand width (a kind without ``mul_options`` ignores it).

The helpers below are shared by the kinds (linear layers' checks, activation blocks, window
geometry). Kind modules do not import each other.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..ir.errors import ModelError
from ..rtl.cost import Cost
from ..rtl.mvu import MatrixVectorUnit
from ..rtl.requant import Requantize
from ..rtl.stage import Block
from ..rtl.thresholds import Thresholds as ThresholdsBlock
from .types import (IntType, Requant, TensorSpec, Thresholds, accumulator_bounds, acc_bits_for,
                    act_range, window_out)

__all__ = ["LayerKind", "Lowered", "Pattern", "Linear", "FLAVOURS", "PTQ_ROLES", "FUSES", "MUL_CHOICES", "divisors",
           "check_act", "check_linear", "linear_problem", "act_blocks", "mvu_block", "linear_mul_options", "linear_mul",
           "sum_costs", "window_fill", "check_window", "check_move", "window_problem", "ties_param"]

#: product styles a layer's ``mul_options`` may offer: MULT18X18D blocks or LUT/carry logic
MUL_CHOICES = ("dsp", "lut")

#: the importers (quantized model formats) and ``float`` (ops the post-training quantizer takes)
FLAVOURS = ("qdq", "qoperator", "qonnx", "float")


#: what the post-training quantizer does with a float op (see :class:`Pattern`)
PTQ_ROLES = ("layer", "pass", "fold")
#: how a float op joins the quantizer unit before it (see :class:`Pattern`)
FUSES = ("rescale", "clamp")


@dataclass(frozen=True)
class Linear:
    """A linear layer's canonical float form, as the post-training quantizer reads it: the weight
    is input ``weight`` with its output channels along ``axis``; the bias is input ``bias``
    (``None``: the form has none). ``stat`` is the statistic of the layer's input that low-bit
    weight rounding uses: ``"gram"`` (``E[x x^T]``: sequential error-compensating rounding) or
    ``"mean"`` (per input channel: bias correction)."""

    weight: int = 1
    axis: int = 0
    bias: int | None = 2
    stat: str = "mean"

    def __post_init__(self):
        if self.stat not in ("gram", "mean"):
            raise ValueError(f"linear layer statistic must be gram or mean, not {self.stat!r}")


@dataclass(frozen=True)
class Pattern:
    """One ONNX op a kind (or a folded op) is imported from.

    ``handler(builder, node)`` interprets the node in the importers named by ``flavours``
    (``float`` = the post-training quantizer accepts the float op, with role ``ptq``:
    ``"layer"`` gets its own calibrated output quantizer, ``"pass"`` reuses its input's,
    ``"fold"`` is removed before quantizing). ``hardware`` says what it becomes.

    What the post-training quantizer needs to know of a float op:

    * ``canonical(node, rewrite)``: the node in the form the quantizer writes, or ``None`` when
      it goes (folded, or a view of its input): checks, constant operands made explicit,
      rewrites (:class:`onnx2hw.layers.canonical.Rewrite`). Without it the node stays as it is.
    * ``linear``: a linear layer (:class:`Linear`): its weight is quantized, its bias int32.
    * ``fuse``: the op joins the unit before it, which then has one output quantizer, after it:
      ``"rescale"`` after a linear layer when it multiplies by a positive constant (folded into
      the layer's requantization scale), ``"clamp"`` after a unit of role ``"layer"``.
    * ``const_inputs``: inputs from this index on may be constants, written unquantized (a
      shape, bounds, scales, axes, a slope).
    """

    domain: str
    op_type: str
    hardware: str
    handler: Callable | None
    flavours: frozenset = frozenset(("qdq", "qoperator", "qonnx"))
    ptq: str | None = None
    canonical: Callable | None = None
    linear: Linear | None = None
    fuse: str | None = None
    const_inputs: int | None = None

    def __post_init__(self):
        object.__setattr__(self, "flavours", frozenset(self.flavours) | ({"float"} if self.ptq else set()))
        if not self.flavours <= set(FLAVOURS):
            raise ValueError(f"pattern {self.op_type!r}: unknown flavours {sorted(self.flavours - set(FLAVOURS))!r}")
        if self.ptq not in (None,) + PTQ_ROLES:
            raise ValueError(f"pattern {self.op_type!r}: ptq role must be layer/pass/fold, not {self.ptq!r}")
        if self.flavours - {"float"} and self.handler is None:
            raise ValueError(f"pattern {self.op_type!r}: an importer flavour needs a handler")
        self._check_ptq_facts()

    def _check_ptq_facts(self):
        declared = [k for k in ("canonical", "linear", "fuse", "const_inputs") if getattr(self, k) is not None]
        if declared and not self.ptq:
            raise ValueError(f"pattern {self.op_type!r}: {', '.join(declared)} need a ptq role")
        if self.fuse not in (None,) + FUSES:
            raise ValueError(f"pattern {self.op_type!r}: fuse must be rescale or clamp, not {self.fuse!r}")
        if self.linear is not None and self.ptq != "layer":
            raise ValueError(f"pattern {self.op_type!r}: a linear layer has ptq role layer, not {self.ptq!r}")

    @property
    def key(self) -> tuple[str, str]:
        return (self.domain, self.op_type)


@dataclass(frozen=True)
class Lowered:
    """A layer's stage at one folding: its block chain and what the pipeline needs to know."""

    blocks: tuple[Block, ...]
    cycles: int
    out_bits: int
    out_signed: bool
    fill: float
    macs: int = 0
    multipliers: int = 0
    #: how its products are built ("dsp" or "lut"); None for a kind without a choice
    mul: str | None = None
    #: lanes per transfer on each input; None: ``simd`` on every input
    in_lanes: tuple[int, ...] | None = None


@dataclass(frozen=True)
class LayerKind:
    """Base of the IntegerGraph node classes (see the module docstring)."""

    name: str
    inputs: tuple[str, ...]
    output: TensorSpec

    def __post_init__(self):
        object.__setattr__(self, "inputs", tuple(self.inputs))

    @classmethod
    def kind(cls) -> str:
        """The stage op name: the class name in lower case."""
        return cls.__name__.lower()

    #: the output is one run of values whatever shape its tensor has (a dense layer's vector may be
    #: held as the channels-last image an exporter views it as: :meth:`Builder.view_output`)
    viewable_output = False

    def error(self, message: str) -> ModelError:
        return ModelError(f"{type(self).__name__} layer {self.name!r}: {message}")

    def validate(self, ins: list[TensorSpec]) -> None:
        raise NotImplementedError

    def reference(self, *xs: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def hardware_problem(self, ins: list[TensorSpec]) -> str | None:
        return None

    def fold_options(self, ins: list[TensorSpec]) -> list[tuple[int, int]]:
        """Every legal (pe, simd), cheapest first. Default: channel lanes (pe = simd)."""
        return [(d, d) for d in divisors(ins[0].shape[-1])]

    def cycles(self, ins: list[TensorSpec], pe: int, simd: int) -> int:
        """Analytic cycles per inference at (pe, simd). Default: one pass over the larger tensor."""
        return max(int(np.prod(ins[0].shape)), int(np.prod(self.output.shape))) // simd

    def mul_options(self, ins: list[TensorSpec]) -> tuple[str, ...]:
        """Product styles the folder may choose (``"dsp"``, ``"lut"``); ``()``: no choice."""
        return ()

    def lower(self, ins: list[TensorSpec], pe: int, simd: int, family: str, mul: str | None = None) -> Lowered:
        raise NotImplementedError


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def check_act(layer: LayerKind, act, channels: int, out: TensorSpec) -> None:
    """The activation's channel count and output range agree with ``out``."""
    if isinstance(act, (Requant, Thresholds)):
        if act.channels not in (1, channels):
            raise layer.error(f"activation has {act.channels} channels, output has {channels}")
    if isinstance(act, Thresholds) and act.table.shape[1] > (1 << out.dtype.bits) - 1:
        raise layer.error(f"threshold table has {act.table.shape[1]} steps, more than {out.dtype} can count")
    if act is not None and out.dtype.bipolar != (isinstance(act, Thresholds) and act.bipolar):
        raise layer.error(f"a bipolar output needs a bipolar threshold (and only it gives one), not {act!r} "
                          f"for {out.dtype}")
    lo, hi = act_range(act, -(1 << 62), 1 << 62)
    if act is not None and not (out.dtype.lo <= lo and hi <= out.dtype.hi):
        raise layer.error(f"activation range [{lo}, {hi}] outside output type {out.dtype}")


def check_linear(layer, in_spec: TensorSpec, channels: int, shape: tuple[int, ...]) -> None:
    """Checks shared by Dense and Conv: output shape, bias, weight range, ``acc_bits``, activation."""
    if layer.output.shape != shape:
        raise layer.error(f"output shape {layer.output.shape!r} != expected {shape!r}")
    if layer.bias.shape != (channels,):
        raise layer.error(f"bias shape {layer.bias.shape!r} != ({channels},)")
    if layer.in_type != in_spec.dtype:
        raise layer.error(f"in_type {layer.in_type} != input tensor type {in_spec.dtype}")
    w = layer.weights
    if w.size and not (layer.w_type.lo <= int(w.min()) and int(w.max()) <= layer.w_type.hi):
        raise layer.error(f"weights [{int(w.min())}, {int(w.max())}] outside w_type {layer.w_type}")
    need = acc_bits_for(w, layer.bias, in_spec.dtype)
    if layer.acc_bits != need:
        raise layer.error(f"acc_bits {layer.acc_bits!r} != {need} derived from weights, bias and input range")
    if layer.act is None:
        lo, hi = accumulator_bounds(w, layer.bias, in_spec.dtype.lo, in_spec.dtype.hi)
        if not (layer.output.dtype.lo <= min(lo) and max(hi) <= layer.output.dtype.hi):
            raise layer.error(f"raw accumulator output does not fit {layer.output.dtype}")
    else:
        check_act(layer, layer.act, channels, layer.output)


#: widest accumulator the MVU, Requantize and Thresholds blocks take
MAX_ACC_BITS = 48


def linear_problem(layer) -> str | None:
    """What the MVU cannot do for a Dense or Conv layer."""
    if layer.acc_bits > MAX_ACC_BITS:
        return f"its accumulator needs {layer.acc_bits} bits, more than the {MAX_ACC_BITS} the hardware has"
    if layer.in_type.bipolar and any(getattr(layer, "pads", ())):
        return "zero padding of a bipolar input is not supported (0 is neither -1 nor +1)"
    return None


def ties_param(act) -> dict:
    """The ``ties`` (and ``divisor``) arguments of a requantizing block for ``act`` (a
    :class:`Requant`, or a layer that requantizes: anything with ``ties``): none for round half
    up and no divisor (the blocks' defaults, so such a block's parameters and Verilog do not
    change)."""
    d = getattr(act, "divisor", 1)
    return ({} if act.ties == "up" else {"ties": act.ties}) | ({} if d == 1 else {"divisor": d})


def act_blocks(act, channels: int, pe: int, acc_bits: int, out: IntType, family: str,
               bounds=None) -> tuple[list[Block], int, bool]:
    """Blocks after an accumulator stream; returns (blocks, out_bits, out_signed).

    ``bounds``: the exact reachable accumulator range ``(lo, hi)``, scalars or per channel (e.g.
    :func:`accumulator_bounds`); with it a Requantize may take its narrow one-DSP form, which is
    exact only inside that range."""
    if act is None:
        return [], acc_bits, True
    if isinstance(act, Requant):
        m = act.multiplier if act.multiplier.shape[0] > 1 else int(act.multiplier[0])
        s = act.shift if act.shift.shape[0] > 1 else int(act.shift[0])
        if isinstance(m, np.ndarray) and not isinstance(s, np.ndarray):
            s = np.full(channels, s, np.int64)
        if isinstance(s, np.ndarray) and not isinstance(m, np.ndarray):
            m = np.full(channels, m, np.int64)
        params = dict(channels=channels, pe=pe, acc_bits=acc_bits, multiplier=m, shift=s,
                      zero_point=act.zero_point, out_bits=out.bits, out_signed=out.signed,
                      lo=act.lo, hi=act.hi, **ties_param(act))
        if bounds is not None:
            params.update({k: np.array([int(v) for v in np.broadcast_to(np.asarray(b, dtype=object), (channels,))],
                                       dtype=np.int64) for k, b in zip(("acc_lo", "acc_hi"), bounds)})
        return [Block(Requantize, params, Requantize.estimate(**params, family=family))], out.bits, out.signed
    if act.bipolar:   # the comparison bit is the bipolar code (1 = +1, 0 = -1)
        params = dict(thresholds=act.table, channels=channels, pe=pe, acc_bits=acc_bits,
                      out_bits=1, out_signed=False, lo=0)
        return [Block(ThresholdsBlock, params, ThresholdsBlock.estimate(**params, family=family))], 1, False
    params = dict(thresholds=act.table, channels=channels, pe=pe, acc_bits=acc_bits,
                  out_bits=out.bits, out_signed=out.signed, lo=act.lo)
    return [Block(ThresholdsBlock, params, ThresholdsBlock.estimate(**params, family=family))], out.bits, out.signed


def linear_mul_options(in_t: IntType, w_t: IntType) -> tuple[str, ...]:
    """Product styles of a Dense or Conv layer: DSP or LUT unless an operand is bipolar (then
    products are selects and inversions, no multiplier)."""
    return () if in_t.bipolar or w_t.bipolar else MUL_CHOICES


def mvu_block(weights, bias, in_t: IntType, w_t: IntType, pe: int, simd: int, acc_bits: int, family: str,
              groups: int = 1, mul: str | None = None) -> Block:
    """The matrix-vector unit of a Dense or Conv layer: bipolar x bipolar is XNOR-popcount;
    bipolar weights with integer inputs are stored as one bit each (select/invert, no multiplier);
    bipolar inputs with integer weights select ``w`` or ``-w``; ``groups``: a grouped convolution,
    one input vector per row group; ``mul``: products in "dsp" or "lut" (None: by width)."""
    bipolar = in_t.bipolar and w_t.bipolar
    params = dict(weights=weights, bias=bias, in_bits=in_t.bits, in_signed=in_t.signed,
                  weight_bits=w_t.bits, weight_signed=w_t.signed, bipolar=bipolar,
                  weight_bipolar=w_t.bipolar, input_bipolar=in_t.bipolar, pe=pe, simd=simd, acc_bits=acc_bits)
    if groups != 1:
        params["groups"] = groups
    if mul is not None:
        params["mul_style"] = mul
    return Block(MatrixVectorUnit, params, MatrixVectorUnit.estimate(**params, family=family))


def linear_mul(in_t: IntType, w_t: IntType, mul: str | None) -> str | None:
    """The product style a Dense or Conv layer's unit uses for ``mul`` (None: no products)."""
    if not linear_mul_options(in_t, w_t):
        return None
    return MatrixVectorUnit.product_style(in_t.bits, w_t.bits, mul or "auto")


def sum_costs(blocks) -> Cost:
    c = blocks[0].cost
    for b in blocks[1:]:
        c = c + b.cost
    return c


def window_fill(kernel_rows: int, pad_top: int, rows: int) -> float:
    """Fraction of an image a window stage reads before its first output."""
    return min(1.0, max(1, kernel_rows - pad_top) / rows)


def check_move(layer, ins, shape_of) -> None:
    """One (H, W, C) input whose values the layer moves onto the same type: the output has the type
    of the input and the shape ``shape_of(h, w, c)`` (which raises ``layer.error`` for a geometry
    the layer cannot take)."""
    if len(ins) != 1 or len(ins[0].shape) != 3:
        raise layer.error("needs one (H, W, C) input")
    want = shape_of(*ins[0].shape)
    if layer.output.shape != want:
        raise layer.error(f"output shape {layer.output.shape!r} != expected {want!r}")
    if layer.output.dtype != ins[0].dtype:
        raise layer.error(f"output type {layer.output.dtype} != input type {ins[0].dtype}")


def check_window(layer, ins) -> None:
    """One (H, W, C) input and the output shape of the window geometry (shared by the pools)."""
    if len(ins) != 1 or len(ins[0].shape) != 3:
        raise layer.error("needs one (H, W, C) input")
    h, w, c = ins[0].shape
    kh, kw = layer.kernel
    oh = window_out(h, kh, layer.stride[0], layer.pads[0], layer.pads[2])
    ow = window_out(w, kw, layer.stride[1], layer.pads[1], layer.pads[3])
    if layer.output.shape != (oh, ow, c):
        raise layer.error(f"output shape {layer.output.shape!r} != expected {(oh, ow, c)!r}")


def window_problem(layer) -> str | None:
    if any(p >= k for p, k in zip(layer.pads, layer.kernel * 2)):
        return f"pads {layer.pads} must be smaller than the kernel {layer.kernel}"
    return None
