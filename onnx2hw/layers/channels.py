"""Channel selection: per pixel, a constant list of the input's channels, in that order::

    y[..., j] = x[..., indices[j]]

(``indices`` may reorder, drop or repeat channels). The output keeps the input's grid and type
(no arithmetic), unless the quantizers that alone read it put it on another grid: then it is
requantized once, ``act(x[..., indices[j]] - zero)`` with ``act`` a per-tensor
:class:`~onnx2hw.layers.types.Requant` of the scale ratio (31-bit multiplier, round half up or
half to even by ``layers._scale.ties_for``, :func:`onnx2hw.arith.requantize`).

ONNX forms, on the channel axis only (axis 1 of an NCHW image ``(N, C, H, W)``, a 1-D signal
``(N, C, L)`` or a vector ``(N, C)``; the last axis of a channels-last view an NHWC exporter
writes before its Transpose):

* ``Slice`` with constant ``starts``/``ends``/``axes``/``steps`` (opset 10 and up; the
  attributes of opset 1-9); an axis other than the channels may only be kept whole;
* ``Split``: each output the selection of its contiguous part (opset 2/11 ``split`` attribute,
  13 ``split`` input, 18 ``num_outputs``; equal parts when neither is given);
* ``Gather`` with constant 1-D indices (negative ones counted from the end).

Every flavour reads them as pass-through ops of a quantized tensor (onnxruntime's QDQ quantizer
writes ``DequantizeLinear -> op -> QuantizeLinear`` with the input's scale; QONNX the same grid
around it; QOperator the op on integers); Brevitas quantizes a slice with a quantizer of its
own (the requantized form). The post-training quantizer passes its input's quantization
through (role ``pass``); canonicalization writes a ``Split`` as one ``Slice`` per output
(:mod:`onnx2hw.canon.channels`), so the quantizer sees one output per node.

Hardware: :class:`~onnx2hw.rtl.channel_select.ChannelSelectUnit`, lanes on both sides (a
selection of whole, increasing lane words drops transfers and holds no pixel); a requantized
selection subtracts the zero point there and goes on through
:class:`~onnx2hw.rtl.requant.Requantize`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from ..arith import acc_bits
from ..ir.errors import UnsupportedError
from ..ir.graph import Node
from ..rtl.channel_select import ChannelSelectUnit
from ..rtl.stage import Block
from .builder import QT, Acc, Builder, Target, node_error
from ._scale import ratio_to_multiplier_shift, ties_for
from .base import LayerKind, Lowered, Pattern, act_blocks, check_act, divisors, sum_costs
from .types import Requant, apply_act, elem_shape

__all__ = ["ChannelSelect", "KIND", "PATTERNS"]

_QUANTIZERS = frozenset({"QuantizeLinear", "Quant"})


@dataclass(frozen=True)
class ChannelSelect(LayerKind):
    """``y[..., j] = x[..., indices[j]]`` over the last (channel) axis (module docstring); with
    ``act``, that selection requantized onto the output grid: ``act(x[..., indices[j]] - zero)``."""

    indices: tuple[int, ...]
    #: the input's zero point, subtracted before ``act``
    zero: int = 0
    #: the requantization onto another grid (``None``: the input's codes, grid and type kept)
    act: Requant | None = None

    def __post_init__(self):
        super().__post_init__()
        object.__setattr__(self, "indices", tuple(int(i) for i in self.indices))
        object.__setattr__(self, "zero", int(self.zero))
        if not self.indices:
            raise ValueError(f"ChannelSelect {self.name!r}: selects no channels")
        if self.act is not None and not isinstance(self.act, Requant):
            raise ValueError(f"ChannelSelect {self.name!r}: act must be a Requant or None, not {self.act!r}")

    def validate(self, ins):
        if len(ins) != 1 or len(self.inputs) != 1:
            raise self.error("needs one input")
        x, out = ins[0], self.output
        c = x.shape[-1]
        if any(not 0 <= i < c for i in self.indices):
            raise self.error(f"indices {list(self.indices)!r} outside the {c} input channels")
        want = x.shape[:-1] + (len(self.indices),)
        if out.shape != want:
            raise self.error(f"output shape {out.shape!r} != expected {want!r}")
        if self.act is None and out.dtype != x.dtype:
            raise self.error(f"output type {out.dtype} != input type {x.dtype}")
        if self.act is not None:
            check_act(self, self.act, len(self.indices), out)

    def reference(self, x):
        y = np.asarray(x, np.int64)[..., list(self.indices)]
        return y if self.act is None else apply_act(y - self.zero, self.act)

    def hardware_problem(self, ins):
        if ins[0].dtype.bipolar or self.output.dtype.bipolar:
            return "selecting channels of a bipolar tensor is not supported"
        return None

    def fold_options(self, ins):
        return [(d, d) for d in divisors(math.gcd(ins[0].shape[-1], len(self.indices)))]

    def cycles(self, ins, pe, simd):
        pixels = int(np.prod(ins[0].shape[:-1], dtype=np.int64))
        return pixels * max(ins[0].shape[-1] // simd, len(self.indices) // pe)

    def lower(self, ins, pe, simd, family, mul=None):
        x, out = ins[0], self.output.dtype
        params = dict(elem_shape=elem_shape(x.dtype), in_channels=x.shape[-1], indices=self.indices,
                      in_lanes=simd, out_lanes=pe, pixels=int(np.prod(x.shape[:-1], dtype=np.int64)))
        if self.act is None:
            block = Block(ChannelSelectUnit, params, ChannelSelectUnit.estimate(**params, family=family))
            return Lowered((block,), block.cost.cycles, x.dtype.bits, x.dtype.signed, fill=0.0)
        params["offset"] = self.zero
        block = Block(ChannelSelectUnit, params, ChannelSelectUnit.estimate(**params, family=family))
        bounds = (x.dtype.lo - self.zero, x.dtype.hi - self.zero)
        acc = acc_bits(min(bounds[0], 0), max(bounds[1], 0))
        act, bits, sg = act_blocks(self.act, len(self.indices), pe, acc, out, family, bounds=bounds)
        blocks = (block, *act)
        return Lowered(blocks, sum_costs(blocks).cycles, bits, sg, fill=0.0)


# ---- import ---------------------------------------------------------------------------------------

def _source(b: Builder, node: Node) -> tuple[QT, int]:
    """The quantized input (an image, signal or vector) and its channel axis in the ONNX shape
    with the batch (1; the last one of a channels-last view)."""
    x = b.get(node.inputs[0], node)
    if not isinstance(x, QT):
        raise node_error(node, f"{node.op_type} of a value that is not a quantized tensor (only channels of a "
                         f"quantized activation can be selected)", UnsupportedError)
    if x.perm is not None:
        raise node_error(node, "input is a flattened image: only the channels of an image, a signal or a vector "
                         "can be selected", UnsupportedError)
    if len(x.onnx_shape) not in (1, 2, 3):
        raise node_error(node, f"input of shape {x.onnx_shape!r} is neither (N, C), (N, C, L) nor (N, C, H, W)",
                         UnsupportedError)
    return x, (len(x.onnx_shape) if x.hwc else 1)


def _axis(node: Node, axis: int, rank: int) -> int:
    """``axis`` in ``0..rank-1`` (rank counts the batch)."""
    if not -rank <= axis < rank:
        raise node_error(node, f"axis {axis} is out of range for a tensor of rank {rank}")
    return axis % rank


def _select(b: Builder, node: Node, x: QT, channel_axis: int, indices, index: int = 0) -> None:
    """Output ``index`` of ``node``: the channels ``indices`` of ``x`` (a layer, unless every
    channel in order)."""
    indices = tuple(int(i) for i in indices)
    c = x.onnx_shape[channel_axis - 1]
    if not indices:
        raise node_error(node, f"output {node.outputs[index]!r} selects no channels", UnsupportedError)
    shape = list(x.onnx_shape)
    shape[channel_axis - 1] = len(indices)
    if indices == tuple(range(c)):
        b.set(node, x, index)
        return
    if b.specs[x.tensor].dtype.bipolar:
        raise node_error(node, "selecting channels of a bipolar tensor is not supported", UnsupportedError)
    out = node.outputs[index]
    readers = [n for n in b.graph.nodes if out in n.inputs]
    if x.real and readers and all(n.op_type in _QUANTIZERS for n in readers) and out not in b.graph.output_names:
        # its quantizers give the output grid: the input's (a selection) or another (requantized)
        b.set(node, Acc("channelselect", _emit, node, (x,), tuple(shape), params={"indices": indices, "index": index}),
              index)
        return
    b.set(node, replace(_layer(b, node, x, indices, index, out), onnx_shape=tuple(shape)), index)


def _layer(b: Builder, node: Node, x: QT, indices, index: int, name: str, act=None, dtype=None) -> QT:
    """The ChannelSelect layer of output ``index`` writing tensor ``name`` (``act``: onto another
    grid, type ``dtype``)."""
    spec_in = b.specs[x.tensor]
    spec = b.new_tensor(name, spec_in.shape[:-1] + (len(indices),), spec_in.dtype if dtype is None else dtype)
    b.layers.append(ChannelSelect(node.name if index == 0 else f"{node.name}_{index}", (x.tensor,), spec, indices,
                                  x.zp, act))
    return replace(x, tensor=spec.name)


def _emit(b: Builder, v: Acc, t: Target) -> QT:
    """The selection onto the quantizer's grid ``t``: the input's codes where ``t`` is the input's
    grid and type, else requantized (``x.scale / t.scale`` as a 31-bit multiplier and shift)."""
    x, indices, index = v.inputs[0], v.params["indices"], v.params["index"]
    dtype = b.specs[x.tensor].dtype
    if math.isclose(x.scale, t.scale, rel_tol=1e-6) and x.zp == t.zp and dtype == t.dtype \
            and t.lo <= dtype.lo and dtype.hi <= t.hi:
        q = _layer(b, v.node, x, indices, index, t.name)
    else:
        m, s = ratio_to_multiplier_shift(x.scale / t.scale, f"node {v.node.name!r} requantization")
        act = Requant(m[:1], s[:1], t.zp, t.lo, t.hi, ties_for(x.scale, t.scale, m[:1], s[:1], t.half_even))
        q = _layer(b, v.node, x, indices, index, t.name, act, t.dtype)
    return replace(q, scale=t.scale, zp=t.zp, dtype=t.dtype, real=False, onnx_shape=v.onnx_shape)


def _ints(b: Builder, node: Node, i: int, what: str) -> list[int] | None:
    if len(node.inputs) <= i or not node.inputs[i]:
        return None
    return [int(v) for v in np.asarray(b.const(node.inputs[i], node, what)).reshape(-1)]


def _slice(b: Builder, node: Node):
    x, ch = _source(b, node)
    shape = (None,) + tuple(x.onnx_shape)
    rank = len(shape)
    if len(node.inputs) > 1:   # opset 10 and up
        starts, ends = _ints(b, node, 1, "starts"), _ints(b, node, 2, "ends")
        axes, steps = _ints(b, node, 3, "axes"), _ints(b, node, 4, "steps")
    else:
        starts, ends = list(node.attr("starts", ())), list(node.attr("ends", ()))
        axes, steps = node.attr("axes"), None
    axes = list(range(len(starts))) if axes is None else [_axis(node, int(a), rank) for a in axes]
    steps = [1] * len(starts) if steps is None else steps
    if not len(starts) == len(ends) == len(axes) == len(steps) or len(set(axes)) != len(axes):
        raise node_error(node, f"starts {starts!r}, ends {ends!r}, axes {axes!r} and steps {steps!r} must have one "
                         f"entry per distinct axis")
    indices = list(range(shape[ch]))
    for a, s, e, st in zip(axes, starts, ends, steps):
        if st == 0:
            raise node_error(node, "a step of 0 is not allowed")
        if a == 0:
            raise node_error(node, "Slice of the batch axis is not supported", UnsupportedError)
        kept = range(shape[a])[slice(s, e, st)]
        if a == ch:
            indices = list(kept)
        elif list(kept) != list(range(shape[a])):
            raise node_error(node, f"Slice of axis {a} (only the channel axis {ch} may be sliced; other axes are "
                             f"kept whole)", UnsupportedError)
    _select(b, node, x, ch, indices)


def _split_sizes(b: Builder, node: Node, dim: int) -> list[int]:
    """The parts of a Split of an axis of ``dim`` (opsets 2/11: ``split`` attribute, 13: input,
    18: ``num_outputs``; equal parts otherwise)."""
    n = len(node.outputs)
    sizes = _ints(b, node, 1, "split")
    if sizes is None and node.attr("split") is not None:
        sizes = [int(v) for v in node.attr("split")]
    if sizes is None:
        parts = int(node.attr("num_outputs", n))
        if parts != n:
            raise node_error(node, f"num_outputs {parts} but {n} outputs")
        if node.attr("num_outputs") is None and dim % n:
            raise node_error(node, f"{dim} channels do not split into {n} equal parts")
        size = -(-dim // n)
        sizes = [size] * (n - 1) + [dim - size * (n - 1)]
    if len(sizes) != n or sum(sizes) != dim or any(s < 0 for s in sizes):
        raise node_error(node, f"split {sizes!r} does not divide the {dim} channels into {n} outputs")
    return sizes


def _split(b: Builder, node: Node):
    x, ch = _source(b, node)
    axis = _axis(node, int(node.attr("axis", 0)), len(x.onnx_shape) + 1)
    if axis != ch:
        raise node_error(node, f"Split along axis {axis} (only the channel axis {ch} is supported)", UnsupportedError)
    start = 0
    for k, size in enumerate(_split_sizes(b, node, x.onnx_shape[ch - 1])):
        if node.outputs[k]:
            _select(b, node, x, ch, range(start, start + size), k)
        start += size


def _gather(b: Builder, node: Node):
    x, ch = _source(b, node)
    axis = _axis(node, int(node.attr("axis", 0)), len(x.onnx_shape) + 1)
    if axis != ch:
        raise node_error(node, f"Gather along axis {axis} (only the channel axis {ch} is supported)",
                         UnsupportedError)
    idx = np.asarray(b.const(node.inputs[1], node, "indices"))
    if idx.ndim != 1:
        raise node_error(node, f"indices of shape {idx.shape!r} (only a 1-D list of channels keeps the channel "
                         f"axis)", UnsupportedError)
    c = x.onnx_shape[ch - 1]
    idx = [int(i) for i in idx]
    if any(not -c <= i < c for i in idx):
        raise node_error(node, f"indices {idx!r} outside the {c} channels")
    _select(b, node, x, ch, [i % c for i in idx])


_HW = "ChannelSelectUnit (selected channels of each pixel; + Requantize onto another grid)"
PATTERNS = (
    Pattern("", "Slice", _HW, _slice, ptq="pass", const_inputs=1),
    Pattern("", "Split", _HW + ", one per output", _split),
    Pattern("", "Gather", _HW, _gather, ptq="pass", const_inputs=1),
)

#: the layer kind this module declares
KIND = ChannelSelect
