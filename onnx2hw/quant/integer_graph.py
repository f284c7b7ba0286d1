"""``IntegerGraph``: the exact integer contract between quantization, dataflow, RTL and golden.

Integer semantics
-----------------
* **Layout.** Tensors are channels-last: ``(H, W, C)`` for images, ``(F,)`` for vectors. The
  batch is the leading run-time dimension and is not part of any recorded shape. ONNX NCHW
  models are converted by the importers (conv weights become ``(Cout, kh, kw, Cin/group)``; a
  dense layer after a flatten of an image reads the ``(H, W, C)`` tensor in NHWC row-major
  order, its weight columns permuted accordingly), so there are no layout layers.
* **Types.** :class:`IntType` is 1..16 bits, signed or unsigned; ``bipolar`` is the 1-bit
  type whose two codes mean -1 and +1 (stored as the integers -1 and +1).
* **Host quantizer** (:class:`InputQuant`, ONNX QuantizeLinear semantics, done by the driver):
  ``q = clamp(round_half_to_even(x / scale) + zero_point, lo, hi)``.
* **Host dequantizer** (:class:`OutputDequant`): ``x = (q - zero_point) * scale``.
* **Dense / Conv.** The hardware computes ``acc = sum(w * x) + bias`` over the raw input
  integers ``x`` (zero points of the input and of the weights were folded into ``weights``
  and ``bias`` at compile time; conv padding uses ``pad_value``, the input zero point, so the
  fold stays exact at borders). ``acc_bits`` is the smallest two's-complement width that
  holds ``acc`` for every input in the input type's range (:func:`accumulator_bounds`);
  partial sums may wrap in that width, the final sum is exact.
* **Activation** ``act`` maps the accumulator to the output type:
  :class:`Requant` -> :func:`onnx2hw.quant.arith.requantize` (round half up; ReLU / Clip
  are folded into its ``lo``/``hi``), :class:`Thresholds` ->
  :func:`onnx2hw.quant.arith.multithreshold`, ``None`` -> the accumulator itself.
* **MaxPool**: integer maximum over the window (padding never wins).
* **AvgPool**: ``acc = sum(window) + bias`` (``bias = -kernel_area * input_zero_point``),
  then ``act`` (a :class:`Requant` whose ratio includes ``1 / kernel_area``). GlobalAvgPool is
  an AvgPool whose kernel is the whole image.
* **Add** (single rounding, see :func:`add_reference`)::

      acc = requantize(a - za, Ra) + requantize(b - zb, Rb)      # common accumulator
      y   = clamp(zero_point + ((acc + 2**(shift-1)) >> shift), lo, hi)   # (shift >= 1)

  ``Ra``/``Rb`` map each input onto an accumulator grid with ``shift`` fractional bits; the
  importers use ``Requant(shift=0)`` (an exact multiply) so the only rounding is the final one.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping, Union

import numpy as np

from ..ir.errors import ModelError
from . import arith

__all__ = ["IntType", "TensorSpec", "InputQuant", "OutputDequant", "Requant", "Thresholds",
           "Dense", "Conv", "MaxPool", "AvgPool", "Add", "Layer", "IntegerGraph",
           "accumulator_bounds", "int_type_for", "add_reference", "apply_act",
           "quantize_inputs", "dequantize_outputs"]


def _ro(a, dtype=np.int64) -> np.ndarray:
    arr = np.array(a, dtype=dtype)
    arr.setflags(write=False)
    return arr


@dataclass(frozen=True)
class IntType:
    """An integer element type: ``bits`` (1..16), ``signed``; ``bipolar`` = 1-bit {-1, +1}."""

    bits: int
    signed: bool
    bipolar: bool = False

    def __post_init__(self):
        if not isinstance(self.bits, (int, np.integer)) or not 1 <= self.bits <= 16:
            raise ValueError(f"IntType bits must be 1..16, not {self.bits!r}")
        if self.bipolar and (self.bits != 1 or self.signed):
            raise ValueError(f"a bipolar IntType is 1-bit unsigned-coded, not bits={self.bits!r} signed={self.signed!r}")

    @property
    def lo(self) -> int:
        return -1 if self.bipolar else arith.int_range(self.bits, self.signed)[0]

    @property
    def hi(self) -> int:
        return 1 if self.bipolar else arith.int_range(self.bits, self.signed)[1]

    def __str__(self) -> str:
        return "bipolar" if self.bipolar else f"{'int' if self.signed else 'uint'}{self.bits}"


def int_type_for(lo: int, hi: int) -> IntType:
    """Smallest :class:`IntType` holding ``[lo, hi]`` (unsigned when ``lo >= 0``)."""
    lo, hi = int(lo), int(hi)
    if lo >= 0:
        bits = max(1, int(hi).bit_length())
        return IntType(bits, False)
    return IntType(arith.acc_bits(lo, hi), True)


@dataclass(frozen=True)
class TensorSpec:
    """A run-time integer tensor: ``shape`` excludes the batch, channels last."""

    name: str
    shape: tuple[int, ...]
    dtype: IntType

    def __post_init__(self):
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))
        if any(d < 1 for d in self.shape):
            raise ValueError(f"tensor {self.name!r}: bad shape {self.shape!r}")


@dataclass(frozen=True)
class InputQuant:
    """Host-side float -> int for one model input (``name`` is the ONNX input name)."""

    name: str
    scale: float
    zero_point: int
    dtype: IntType
    nchw_to_nhwc: bool


@dataclass(frozen=True)
class OutputDequant:
    """Host-side int -> float for one model output (``name`` is the ONNX output name).

    ``scale`` is a float or a per-channel array over the last (NHWC) axis. When
    ``integer_output`` the model's output is the integer tensor itself (no dequantization).
    ``shape`` is the ONNX output shape without the batch (applied after the optional
    NHWC -> NCHW transpose).
    """

    name: str
    scale: Union[float, np.ndarray]
    zero_point: Union[int, np.ndarray]
    nhwc_to_nchw: bool
    onnx_dtype: int
    integer_output: bool = False
    shape: tuple[int, ...] | None = None


@dataclass(frozen=True)
class Requant:
    """``arith.requantize`` parameters; ``multiplier``/``shift`` are ``(C,)`` or ``(1,)``."""

    multiplier: np.ndarray
    shift: np.ndarray
    zero_point: int
    lo: int
    hi: int

    def __post_init__(self):
        m = _ro(np.atleast_1d(self.multiplier))
        s = _ro(np.atleast_1d(self.shift))
        if m.ndim != 1 or s.shape != m.shape and s.shape != (1,) and m.shape != (1,):
            raise ValueError(f"Requant multiplier {m.shape!r} and shift {s.shape!r} must be (C,) or (1,)")
        if np.any(np.abs(m) >= (1 << 32)):
            raise ValueError(f"Requant multiplier must be below 2**32 in magnitude, not {int(np.max(np.abs(m)))!r}")
        if np.any(s < 0) or np.any(s > 62):
            raise ValueError(f"Requant shift must be in 0..62, not {s.tolist()!r}")
        if self.lo > self.hi:
            raise ValueError(f"Requant lo {self.lo!r} > hi {self.hi!r}")
        object.__setattr__(self, "multiplier", m)
        object.__setattr__(self, "shift", s)
        object.__setattr__(self, "zero_point", int(self.zero_point))
        object.__setattr__(self, "lo", int(self.lo))
        object.__setattr__(self, "hi", int(self.hi))

    @property
    def channels(self) -> int:
        return max(self.multiplier.shape[0], self.shift.shape[0])

    def __call__(self, acc) -> np.ndarray:
        return arith.requantize(acc, self.multiplier, self.shift, self.zero_point, self.lo, self.hi)


@dataclass(frozen=True)
class Thresholds:
    """``arith.multithreshold`` parameters: ``table`` is ``(C or 1, steps)`` with ``steps <= 2**bits - 1``
    (fewer for a narrow-range output), rows non-decreasing; outputs run from ``lo`` to ``lo + steps``."""

    table: np.ndarray
    lo: int

    def __post_init__(self):
        t = _ro(self.table)
        if t.ndim != 2 or t.shape[1] < 1:
            raise ValueError(f"threshold table must be (channels, steps), not shape {t.shape!r}")
        if np.any(np.diff(t, axis=1) < 0):
            raise ValueError("threshold table rows must be non-decreasing")
        object.__setattr__(self, "table", t)
        object.__setattr__(self, "lo", int(self.lo))

    @property
    def channels(self) -> int:
        return self.table.shape[0]

    def __call__(self, acc) -> np.ndarray:
        return arith.multithreshold(acc, self.table, self.lo)


Act = Union[Requant, Thresholds, None]


def apply_act(acc: np.ndarray, act: Act) -> np.ndarray:
    """Map an accumulator (channels last) through ``act``."""
    return np.asarray(acc, dtype=np.int64) if act is None else act(acc)


def _act_range(act: Act, acc_lo: int, acc_hi: int) -> tuple[int, int]:
    if act is None:
        return acc_lo, acc_hi
    if isinstance(act, Requant):
        return act.lo, act.hi
    return act.lo, act.lo + act.table.shape[1]


def accumulator_bounds(weights: np.ndarray, bias: np.ndarray, in_lo: int, in_hi: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact per-output-channel ``(min, max)`` of ``sum(w * x) + bias`` for ``x`` in ``[in_lo, in_hi]``.

    ``weights`` is ``(C, ...)`` (one row per output channel). Python integers are used so the
    bounds never overflow.
    """
    w = np.asarray(weights, dtype=np.int64).reshape(len(weights), -1).astype(object)
    b = np.asarray(bias, dtype=np.int64).astype(object)
    pos = np.where(w > 0, w, 0).sum(axis=1)
    neg = np.where(w < 0, w, 0).sum(axis=1)
    hi = pos * int(in_hi) + neg * int(in_lo) + b
    lo = pos * int(in_lo) + neg * int(in_hi) + b
    return lo, hi


def _acc_bits(weights, bias, in_type: IntType) -> int:
    lo, hi = accumulator_bounds(weights, bias, in_type.lo, in_type.hi)
    return arith.acc_bits(int(min(lo)), int(max(hi)))


@dataclass(frozen=True)
class Dense:
    """``acc[n] = sum_k weights[n, k] * x[k] + bias[n]``; ``x`` is the input flattened (NHWC order)."""

    name: str
    inputs: tuple[str, ...]
    output: TensorSpec
    weights: np.ndarray
    bias: np.ndarray
    in_type: IntType
    w_type: IntType
    acc_bits: int
    act: Act

    def __post_init__(self):
        object.__setattr__(self, "weights", _ro(self.weights))
        object.__setattr__(self, "bias", _ro(self.bias))
        object.__setattr__(self, "inputs", tuple(self.inputs))


@dataclass(frozen=True)
class Conv:
    """2-D convolution, NHWC; ``weights`` ``(Cout, kh, kw, Cin/group)``; ``pads`` ``(t, l, b, r)``."""

    name: str
    inputs: tuple[str, ...]
    output: TensorSpec
    weights: np.ndarray
    bias: np.ndarray
    stride: tuple[int, int]
    pads: tuple[int, int, int, int]
    pad_value: int
    group: int
    dilation: tuple[int, int]
    in_type: IntType
    w_type: IntType
    acc_bits: int
    act: Act

    def __post_init__(self):
        object.__setattr__(self, "weights", _ro(self.weights))
        object.__setattr__(self, "bias", _ro(self.bias))
        object.__setattr__(self, "inputs", tuple(self.inputs))
        for f in ("stride", "pads", "dilation"):
            object.__setattr__(self, f, tuple(int(v) for v in getattr(self, f)))
        if self.dilation != (1, 1):
            raise ValueError(f"Conv {self.name!r}: only dilation (1, 1) is supported, not {self.dilation!r}")


@dataclass(frozen=True)
class MaxPool:
    name: str
    inputs: tuple[str, ...]
    output: TensorSpec
    kernel: tuple[int, int]
    stride: tuple[int, int]
    pads: tuple[int, int, int, int]

    def __post_init__(self):
        object.__setattr__(self, "inputs", tuple(self.inputs))
        for f in ("kernel", "stride", "pads"):
            object.__setattr__(self, f, tuple(int(v) for v in getattr(self, f)))


@dataclass(frozen=True)
class AvgPool:
    """Window sum + ``bias`` (the input zero point correction), then ``act``; padding adds ``pad_value``."""

    name: str
    inputs: tuple[str, ...]
    output: TensorSpec
    kernel: tuple[int, int]
    stride: tuple[int, int]
    pads: tuple[int, int, int, int]
    act: Requant
    bias: int = 0
    pad_value: int = 0

    def __post_init__(self):
        object.__setattr__(self, "inputs", tuple(self.inputs))
        for f in ("kernel", "stride", "pads"):
            object.__setattr__(self, f, tuple(int(v) for v in getattr(self, f)))
        object.__setattr__(self, "bias", int(self.bias))
        object.__setattr__(self, "pad_value", int(self.pad_value))


@dataclass(frozen=True)
class Add:
    """Elementwise sum of two requantized inputs (module docstring); ``shift`` = accumulator fraction bits."""

    name: str
    inputs: tuple[str, ...]
    output: TensorSpec
    zero_points: tuple[int, int]
    requants: tuple[Requant, Requant]
    zero_point: int
    lo: int
    hi: int
    shift: int = 0

    def __post_init__(self):
        object.__setattr__(self, "inputs", tuple(self.inputs))
        object.__setattr__(self, "zero_points", tuple(int(v) for v in self.zero_points))
        if not 0 <= int(self.shift) <= 62:
            raise ValueError(f"Add {self.name!r}: shift must be 0..62, not {self.shift!r}")


Layer = Union[Dense, Conv, MaxPool, AvgPool, Add]


def add_reference(a, b, layer: Add) -> np.ndarray:
    """The exact integer Add (see module docstring)."""
    za, zb = layer.zero_points
    ra, rb = layer.requants
    acc = ra(np.asarray(a, np.int64) - za) + rb(np.asarray(b, np.int64) - zb)
    s = int(layer.shift)
    if s:
        acc = (acc + (1 << (s - 1))) >> s
    return np.clip(acc + layer.zero_point, layer.lo, layer.hi)


def _window_out(size: int, k: int, stride: int, pad0: int, pad1: int) -> int:
    return (size + pad0 + pad1 - k) // stride + 1


@dataclass(frozen=True)
class IntegerGraph:
    """A quantized network as exact integer layers (see the module docstring)."""

    inputs: tuple[InputQuant, ...]
    input_specs: tuple[TensorSpec, ...]
    layers: tuple[Layer, ...]
    outputs: tuple[OutputDequant, ...]
    output_specs: tuple[TensorSpec, ...]
    source: str
    model_name: str = ""
    metadata: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self):
        for f in ("inputs", "input_specs", "layers", "outputs", "output_specs"):
            object.__setattr__(self, f, tuple(getattr(self, f)))
        object.__setattr__(self, "metadata", MappingProxyType(dict(self.metadata)))
        if self.source not in ("qdq", "qoperator", "qonnx", "float"):
            raise ValueError(f"IntegerGraph source must be qdq/qoperator/qonnx/float, not {self.source!r}")

    def specs(self) -> dict[str, TensorSpec]:
        """Every tensor spec by name (inputs and layer outputs)."""
        out = {s.name: s for s in self.input_specs}
        for layer in self.layers:
            out[layer.output.name] = layer.output
        return out

    def validate(self) -> "IntegerGraph":
        """Check names, topological order, shapes, widths and parameter ranges; returns ``self``.

        Raises :class:`ModelError` naming the first bad layer.
        """
        if len(self.inputs) != len(self.input_specs) or len(self.outputs) != len(self.output_specs):
            raise ModelError("IntegerGraph: inputs/outputs and their specs differ in length")
        known: dict[str, TensorSpec] = {}
        for q, s in zip(self.inputs, self.input_specs):
            if q.dtype != s.dtype:
                raise ModelError(f"input {q.name!r}: quantizer type {q.dtype} != tensor type {s.dtype}")
            if not np.isfinite(q.scale) or q.scale <= 0:
                raise ModelError(f"input {q.name!r}: bad scale {q.scale!r}")
            if not s.dtype.lo <= q.zero_point <= s.dtype.hi:
                raise ModelError(f"input {q.name!r}: zero point {q.zero_point!r} outside {s.dtype}")
            known[s.name] = s
        for layer in self.layers:
            def bad(msg, layer=layer):
                return ModelError(f"{type(layer).__name__} layer {layer.name!r}: {msg}")
            for name in layer.inputs:
                if name not in known:
                    raise bad(f"input {name!r} is not defined before it")
            if layer.output.name in known:
                raise bad(f"output {layer.output.name!r} is defined twice")
            ins = [known[n] for n in layer.inputs]
            out = layer.output
            if isinstance(layer, Dense):
                if len(ins) != 1:
                    raise bad("needs exactly one input")
                k = int(np.prod(ins[0].shape))
                if layer.weights.ndim != 2 or layer.weights.shape[1] != k:
                    raise bad(f"weights {layer.weights.shape!r} do not match input {ins[0].shape!r} ({k} features)")
                n = layer.weights.shape[0]
                self._check_linear(layer, ins[0], n, (n,), bad)
            elif isinstance(layer, Conv):
                if len(ins) != 1 or len(ins[0].shape) != 3:
                    raise bad("needs one (H, W, C) input")
                h, w, c = ins[0].shape
                co, kh, kw, cg = layer.weights.shape if layer.weights.ndim == 4 else (0, 0, 0, 0)
                if layer.weights.ndim != 4 or layer.group < 1 or cg * layer.group != c or co % layer.group:
                    raise bad(f"weights {layer.weights.shape!r} / group {layer.group!r} do not match input channels {c}")
                if not ins[0].dtype.lo <= layer.pad_value <= ins[0].dtype.hi:
                    raise bad(f"pad value {layer.pad_value!r} outside input type {ins[0].dtype}")
                oh = _window_out(h, kh, layer.stride[0], layer.pads[0], layer.pads[2])
                ow = _window_out(w, kw, layer.stride[1], layer.pads[1], layer.pads[3])
                self._check_linear(layer, ins[0], co, (oh, ow, co), bad)
            elif isinstance(layer, (MaxPool, AvgPool)):
                if len(ins) != 1 or len(ins[0].shape) != 3:
                    raise bad("needs one (H, W, C) input")
                h, w, c = ins[0].shape
                kh, kw = layer.kernel
                oh = _window_out(h, kh, layer.stride[0], layer.pads[0], layer.pads[2])
                ow = _window_out(w, kw, layer.stride[1], layer.pads[1], layer.pads[3])
                if out.shape != (oh, ow, c):
                    raise bad(f"output shape {out.shape!r} != expected {(oh, ow, c)!r}")
                if isinstance(layer, MaxPool):
                    if out.dtype != ins[0].dtype:
                        raise bad(f"output type {out.dtype} != input type {ins[0].dtype}")
                else:
                    self._check_act(layer.act, c, out, bad)
            elif isinstance(layer, Add):
                if len(ins) != 2 or ins[0].shape != ins[1].shape or out.shape != ins[0].shape:
                    raise bad(f"input shapes {[s.shape for s in ins]!r} / output {out.shape!r} must all match")
                if not out.dtype.lo <= layer.lo <= layer.hi <= out.dtype.hi:
                    raise bad(f"clamp [{layer.lo}, {layer.hi}] outside output type {out.dtype}")
            else:
                raise bad("unknown layer kind")
            known[out.name] = out
        for s in self.output_specs:
            if s.name not in known:
                raise ModelError(f"output {s.name!r} is not computed by any layer or input")
            if known[s.name] != s:
                raise ModelError(f"output spec {s!r} differs from the tensor that computes it")
        return self

    @staticmethod
    def _check_act(act, channels, out, bad):
        if isinstance(act, (Requant, Thresholds)):
            if act.channels not in (1, channels):
                raise bad(f"activation has {act.channels} channels, output has {channels}")
        if isinstance(act, Thresholds) and act.table.shape[1] > (1 << out.dtype.bits) - 1:
            raise bad(f"threshold table has {act.table.shape[1]} steps, more than {out.dtype} can count")
        lo, hi = _act_range(act, -(1 << 62), 1 << 62)
        if act is not None and not (out.dtype.lo <= lo and hi <= out.dtype.hi):
            raise bad(f"activation range [{lo}, {hi}] outside output type {out.dtype}")

    def _check_linear(self, layer, in_spec, channels, shape, bad):
        if layer.output.shape != shape:
            raise bad(f"output shape {layer.output.shape!r} != expected {shape!r}")
        if layer.bias.shape != (channels,):
            raise bad(f"bias shape {layer.bias.shape!r} != ({channels},)")
        if layer.in_type != in_spec.dtype:
            raise bad(f"in_type {layer.in_type} != input tensor type {in_spec.dtype}")
        w = layer.weights
        if w.size and not (layer.w_type.lo <= int(w.min()) and int(w.max()) <= layer.w_type.hi):
            raise bad(f"weights [{int(w.min())}, {int(w.max())}] outside w_type {layer.w_type}")
        need = _acc_bits(w, layer.bias, in_spec.dtype)
        if layer.acc_bits != need:
            raise bad(f"acc_bits {layer.acc_bits!r} != {need} derived from weights, bias and input range")
        if layer.act is None:
            lo, hi = accumulator_bounds(w, layer.bias, in_spec.dtype.lo, in_spec.dtype.hi)
            if not (layer.output.dtype.lo <= min(lo) and max(hi) <= layer.output.dtype.hi):
                raise bad(f"raw accumulator output does not fit {layer.output.dtype}")
        else:
            IntegerGraph._check_act(layer.act, channels, layer.output, bad)


def quantize_inputs(graph: IntegerGraph, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Host-side input quantization: ONNX float feeds -> integer feeds (NHWC) for :func:`golden.execute`."""
    out = {}
    for q, spec in zip(graph.inputs, graph.input_specs):
        if q.name not in feeds:
            raise ModelError(f"no value fed for model input {q.name!r}")
        x = np.asarray(feeds[q.name], dtype=np.float32)
        if q.nchw_to_nhwc:
            x = np.moveaxis(x, 1, -1)
        v = np.rint(x / np.float32(q.scale)).astype(np.int64) + q.zero_point
        out[spec.name] = np.clip(v, spec.dtype.lo, spec.dtype.hi).reshape((x.shape[0],) + spec.shape)
    return out


def dequantize_outputs(graph: IntegerGraph, results: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Host-side output dequantization: integer results (by spec name) -> ONNX outputs (by ONNX name)."""
    out = {}
    for d, spec in zip(graph.outputs, graph.output_specs):
        q = np.asarray(results[spec.name])
        if d.integer_output:
            y = q
        else:
            y = ((q - np.asarray(d.zero_point, np.int64)) * np.asarray(d.scale, np.float32)).astype(np.float32)
        if d.nhwc_to_nchw:
            y = np.moveaxis(y, -1, 1)
        if d.shape is not None:
            y = y.reshape((y.shape[0],) + tuple(d.shape))
        out[d.name] = y
    return out
