"""``IntegerGraph``: the exact integer contract between quantization, dataflow, RTL and golden.

Its layers are instances of the layer kinds registered in :mod:`onnx2hw.layers` (one module
per kind); each kind validates itself and defines its exact integer reference.

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
  ``q = clamp(round_half_to_even(pre(x) / scale) + zero_point, lo, hi)`` (``[lo, hi]`` the type's
  range, narrowed by one code for a narrow-range QONNX quantizer; ``pre`` the model's own float
  scaling of the input, if any).
* **Host dequantizer** (:class:`OutputDequant`): ``x = (q - zero_point) * scale + bias`` in
  float32 (``bias`` is a float last layer's own bias when the hardware streams that layer's raw
  accumulator); an integer output keeps ``q`` in the model's integer type.
* **Host tail** (``IntegerGraph.tail``, :mod:`onnx2hw.quant.partition`): an ONNX graph from the
  dequantized output to the model's outputs (Softmax, TensorNorm, ...) that the host runs with
  the golden executor.
* **Dense / Conv.** The hardware computes ``acc = sum(w * x) + bias`` over the raw input
  integers ``x`` (zero points of the input and of the weights were folded into ``weights``
  and ``bias`` at compile time; conv padding uses ``pad_value``, the input zero point, so the
  fold stays exact at borders). ``acc_bits`` is the smallest two's-complement width that
  holds ``acc`` for every input in the input type's range (:func:`accumulator_bounds`);
  partial sums may wrap in that width, the final sum is exact.
* **Activation** ``act`` maps the accumulator to the output type:
  :class:`Requant` -> :func:`onnx2hw.arith.requantize` (round half up, or half to even:
  ``Requant.ties``; ReLU / Clip are folded into its ``lo``/``hi``), :class:`Thresholds` ->
  :func:`onnx2hw.arith.multithreshold`, ``None`` -> the accumulator itself.
* **MaxPool**: integer maximum over the window (padding never wins).
* **AvgPool**: ``acc = sum(window) + bias`` (``bias = -kernel_area * input_zero_point``),
  then ``act`` (a :class:`Requant` whose ratio includes ``1 / kernel_area``). GlobalAvgPool is
  an AvgPool whose kernel is the whole image.
* **Add** (single rounding, :func:`onnx2hw.arith.add_requantized`)::

      acc = (a - za) * ma + (b - zb) * mb                                # common accumulator
      y   = clamp(zero_point + ((acc + 2**(shift-1)) >> shift), lo, hi)   # (shift >= 1)

  ``ma``/``mb`` map each input onto an accumulator grid with ``shift`` fractional bits, so the
  only rounding is the final one.
* **Concat** (channels last): input ``k`` becomes ``requantize(x_k - zeros[k], multipliers[k],
  shifts[k], zero_point, lo, hi)`` (one rounding; ``1 / 2**0`` copies an input already on the
  output grid), then the channels are concatenated in input order.
* **Resize**: ``y[h, w, c] = x[h // scale_h, w // scale_w, c]`` (nearest, integer factors).
* **Mul** (by a constant): ``requantize(x - in_zero, M[c], s[c], zero_point, lo, hi)`` with signed
  per-channel multipliers.
* **Lookup**: ``table[x - in_lo]`` (an elementwise function of an input of at most 8 bits).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping, Union

import numpy as np

from onnx import helper

from .. import arith
from ..ir.errors import ModelError
from ..ir.graph import Graph
from .base import LayerKind
from .types import IntType, TensorSpec

__all__ = ["InputQuant", "OutputDequant", "IntegerGraph", "quantize_inputs", "dequantize_outputs", "apply_pre",
           "PRE_OPS"]


#: elementwise float32 steps a model may apply to an input before quantizing it (``pre``)
PRE_OPS = {"mul": np.multiply, "add": np.add, "sub": np.subtract, "div": np.divide,
           "rsub": lambda x, c: np.subtract(c, x)}


def apply_pre(x, pre) -> np.ndarray:
    """``x`` in float32 through an input's scaling steps ``(op, constant)``, each computed in
    float32 in the model's order (so the result is the model's own, bit for bit)."""
    x = np.asarray(x, dtype=np.float32)
    for op, c in pre:
        x = PRE_OPS[op](x, np.float32(c)).astype(np.float32, copy=False)
    return x


@dataclass(frozen=True)
class InputQuant:
    """Host-side float -> int for one model input (``name`` is the ONNX input name): the model's
    scaling steps ``pre`` (e.g. ``2x - 1``: ``(("mul", 2.0), ("sub", 1.0))``), then
    ``clamp(round_half_to_even(x / scale) + zero_point)``; the channels are moved last when
    ``nchw_to_nhwc`` (an NCHW image; a model whose input is already NHWC, read through a
    Transpose, has them last already). An integer model input passes unchanged."""

    name: str
    scale: float
    zero_point: int
    dtype: IntType
    nchw_to_nhwc: bool
    pre: tuple[tuple[str, float], ...] = ()
    #: the model input's shape (without batch) when the model flattens it before quantizing
    model_shape: tuple[int, ...] | None = None
    #: narrow range: the most negative (signed) or the largest (unsigned) code is never produced
    narrow: bool = False
    #: the model input is already the integer codes (a TFLite int8 model): they pass unchanged
    integer_input: bool = False

    @property
    def clamp(self) -> tuple[int, int]:
        """The codes the quantizer produces."""
        if self.dtype.bipolar:
            return -1, 1
        return arith.int_range(self.dtype.bits, self.dtype.signed, self.narrow)

    def quantize(self, x, shape) -> np.ndarray:
        """Float input (batch first, ONNX layout) -> int64 codes shaped ``(N, *shape)`` (NHWC);
        a bipolar input maps ``>= 0`` to +1, the rest to -1. The one host quantizer: the golden
        flow and the driver both call it. An ``integer_input`` takes the model's integer codes
        and passes them through (checked to lie in the type's range)."""
        if self.integer_input:
            v = np.asarray(x)
            if v.dtype.kind not in "iu":
                raise ValueError(f"input {self.name!r} takes the model's integer codes ({self.dtype}), not {v.dtype}")
            v = v.astype(np.int64)
            lo, hi = self.clamp
            if v.size and (v.min() < lo or v.max() > hi):
                raise ValueError(f"input {self.name!r}: codes outside [{lo}, {hi}]")
            if self.nchw_to_nhwc:
                v = np.moveaxis(v, 1, -1)
            return v.reshape((v.shape[0],) + tuple(shape))
        x = apply_pre(x, self.pre)
        if self.nchw_to_nhwc:
            x = np.moveaxis(x, 1, -1)
        if self.dtype.bipolar:   # QONNX BipolarQuant: the sign of x itself (x = -0.3 gives -1)
            v = np.where(x / np.float32(self.scale) + self.zero_point >= 0, 1, -1).astype(np.int64)
        else:
            v = np.clip(np.rint(x / np.float32(self.scale)).astype(np.int64) + self.zero_point, *self.clamp)
        return v.reshape((x.shape[0],) + tuple(shape))

    def __post_init__(self):
        pre = tuple((str(op), float(c)) for op, c in self.pre)
        for op, c in pre:
            if op not in PRE_OPS or not np.isfinite(c) or (op == "div" and c == 0):
                raise ValueError(f"input {self.name!r}: bad scaling step {op!r} {c!r}")
        object.__setattr__(self, "pre", pre)


@dataclass(frozen=True)
class OutputDequant:
    """Host-side int -> float for one model output (``name`` is the ONNX output name).

    ``scale`` (and ``bias``) is a float or a per-channel array over the last (NHWC) axis. When
    ``integer_output`` the model's output is the integer tensor itself (no dequantization), in
    the model's integer type. ``shape`` is the ONNX output shape without the batch (applied
    after the optional NHWC -> NCHW transpose).
    """

    name: str
    scale: Union[float, np.ndarray]
    zero_point: Union[int, np.ndarray]
    nhwc_to_nchw: bool
    onnx_dtype: int
    integer_output: bool = False
    shape: tuple[int, ...] | None = None
    bias: Union[float, np.ndarray] = 0.0

    def dequantize(self, q) -> np.ndarray:
        """Integer NHWC results (batch first) -> the model's output (ONNX layout and shape)."""
        q = np.asarray(q)
        if self.integer_output:
            y = q.astype(helper.tensor_dtype_to_np_dtype(self.onnx_dtype))
        else:
            y = ((q - np.asarray(self.zero_point, np.int64)) * np.asarray(self.scale, np.float32)).astype(np.float32)
            if np.any(self.bias):
                y = (y + np.asarray(self.bias, np.float32)).astype(np.float32)
        if self.nhwc_to_nchw:
            y = np.moveaxis(y, -1, 1)
        if self.shape is not None:
            y = y.reshape((y.shape[0],) + tuple(self.shape))
        return y


@dataclass(frozen=True)
class IntegerGraph:
    """A quantized network as exact integer layers (see the module docstring)."""

    inputs: tuple[InputQuant, ...]
    input_specs: tuple[TensorSpec, ...]
    layers: tuple[LayerKind, ...]
    outputs: tuple[OutputDequant, ...]
    output_specs: tuple[TensorSpec, ...]
    source: str
    model_name: str = ""
    metadata: Mapping[str, str] = field(default_factory=dict)
    #: the host's part of the model after the outputs (see the module docstring), or None
    tail: Graph | None = None

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

    def input_specs_of(self, layer: LayerKind) -> list[TensorSpec]:
        """The specs of the tensors ``layer`` reads, in port order."""
        specs = self.specs()
        return [specs[n] for n in layer.inputs]

    def validate(self) -> "IntegerGraph":
        """Check names, topological order, and every layer (its kind's ``validate``); returns ``self``.

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
            if not isinstance(layer, LayerKind):
                raise ModelError(f"layer {getattr(layer, 'name', layer)!r}: {type(layer).__name__} is not a layer kind")
            for name in layer.inputs:
                if name not in known:
                    raise layer.error(f"input {name!r} is not defined before it")
            if layer.output.name in known:
                raise layer.error(f"output {layer.output.name!r} is defined twice")
            layer.validate([known[n] for n in layer.inputs])
            known[layer.output.name] = layer.output
        for s in self.output_specs:
            if s.name not in known:
                raise ModelError(f"output {s.name!r} is not computed by any layer or input")
            if known[s.name] != s:
                raise ModelError(f"output spec {s!r} differs from the tensor that computes it")
        return self


def quantize_inputs(graph: IntegerGraph, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Host-side input quantization: ONNX float feeds -> integer feeds (NHWC) for :func:`golden.execute`."""
    out = {}
    for q, spec in zip(graph.inputs, graph.input_specs):
        if q.name not in feeds:
            raise ModelError(f"no value fed for model input {q.name!r}")
        out[spec.name] = q.quantize(feeds[q.name], spec.shape)
    return out


def dequantize_outputs(graph: IntegerGraph, results: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Host-side output dequantization: integer results (by spec name) -> ONNX outputs (by ONNX name)."""
    return {d.name: d.dequantize(results[spec.name]) for d, spec in zip(graph.outputs, graph.output_specs)}
