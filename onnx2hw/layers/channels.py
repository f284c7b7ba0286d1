"""Channel selection: per pixel of a window of rows and columns, a constant list of the input's
channels, in that order::

    y[r, c, j] = x[rows[0] + r, cols[0] + c, indices[j]]

(``indices`` may reorder, drop or repeat channels; the window is every pixel unless a spatial
axis is selected). The output keeps the input's grid and type
(no arithmetic), unless the quantizers that alone read it put it on another grid: then it is
requantized once, ``act(x[..., indices[j]] - zero)`` with ``act`` a per-tensor
:class:`~onnx2hw.layers.types.Requant` of the scale ratio (31-bit multiplier, round half up or
half to even by ``layers._scale.ties_for``, :func:`onnx2hw.arith.requantize`).

ONNX forms, on the channel axis (axis 1 of an NCHW image ``(N, C, H, W)``, a 1-D signal
``(N, C, L)`` or a vector ``(N, C)``; the last axis of a channels-last view an NHWC exporter
writes before its Transpose) and on the spatial axes of an image or signal, channels first or
such a channels-last view (a signal is held as the ``H = 1`` image: its axis is the columns):

* ``Slice`` with constant ``starts``/``ends``/``axes``/``steps`` (opset 10 and up; the
  attributes of opset 1-9); a spatial axis with step 1 (a crop: the part of a crop
  :mod:`onnx2hw.canon.crops` does not fold into a neighbouring convolution's padding);
* ``Split``: each output the selection of its contiguous part (opset 2/11 ``split`` attribute,
  13 ``split`` input, 18 ``num_outputs``; equal parts when neither is given), channels only;
* ``Gather`` with constant indices, negative ones counted from the end: a 1-D list of channels;
  along a spatial axis one index (a scalar: the axis leaves the result, so ``y[:, :, -1]`` of a
  signal is the vector of its ``C`` channels, which a Gemm reads) or a 1-D list of consecutive
  increasing positions (a crop).

The result of a window is held channels-last in stream order: an image ``(H', W', C')``, one row
or column of an image or a Gather of one index of it as the signal ``(1, L, C')``, one position
of a signal as the vector ``(C',)``.

Every flavour reads them as pass-through ops of a quantized tensor (onnxruntime's QDQ quantizer
writes ``DequantizeLinear -> op -> QuantizeLinear`` with the input's scale; QONNX the same grid
around it; QOperator the op on integers); Brevitas quantizes a slice with a quantizer of its
own (the requantized form). The post-training quantizer passes its input's quantization
through (role ``pass``); canonicalization writes a ``Split`` as one ``Slice`` per output
(:mod:`onnx2hw.canon.channels`), so the quantizer sees one output per node.

Hardware: :class:`~onnx2hw.rtl.crop.SpatialCrop` for a window (counters over rows, columns and
lane words; transfers outside the window are taken and dropped, no buffer), then
:class:`~onnx2hw.rtl.channel_select.ChannelSelectUnit` unless every channel is kept in order,
lanes on both sides (a selection of whole, increasing lane words drops transfers and holds no
pixel); a requantized selection subtracts the zero point in the last of the two and goes on
through :class:`~onnx2hw.rtl.requant.Requantize`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from ..arith import acc_bits
from ..ir.errors import UnsupportedError
from ..ir.graph import Node
from ..rtl.channel_select import ChannelSelectUnit
from ..rtl.crop import SpatialCrop
from ..rtl.stage import Block
from .builder import QT, Acc, Builder, Target, node_error
from ._scale import ratio_to_multiplier_shift, ties_for
from .base import LayerKind, Lowered, Pattern, act_blocks, check_act, divisors, sum_costs
from ._layout import nhwc
from .types import Requant, apply_act, elem_shape

__all__ = ["ChannelSelect", "KIND", "PATTERNS"]

_QUANTIZERS = frozenset({"QuantizeLinear", "Quant"})


@dataclass(frozen=True)
class ChannelSelect(LayerKind):
    """``y[..., j] = x[..., indices[j]]`` over the last (channel) axis of the pixels of the window
    ``rows x cols`` of an ``(H, W, C)`` input (module docstring); with ``act``, that selection
    requantized onto the output grid: ``act(x[..., indices[j]] - zero)``. The output holds the
    selected values in stream order (row, column, channel) in any shape of that many elements
    whose last axis is the channels (a window of one row or column is a signal ``(1, L, C)``,
    of one pixel the vector ``(C,)``)."""

    indices: tuple[int, ...]
    #: the input's zero point, subtracted before ``act``
    zero: int = 0
    #: the requantization onto another grid (``None``: the input's codes, grid and type kept)
    act: Requant | None = None
    #: the half-open ranges of rows and of columns kept (``None``: every pixel)
    rows: tuple[int, int] | None = None
    cols: tuple[int, int] | None = None

    def __post_init__(self):
        super().__post_init__()
        object.__setattr__(self, "indices", tuple(int(i) for i in self.indices))
        object.__setattr__(self, "zero", int(self.zero))
        if not self.indices:
            raise ValueError(f"ChannelSelect {self.name!r}: selects no channels")
        if self.act is not None and not isinstance(self.act, Requant):
            raise ValueError(f"ChannelSelect {self.name!r}: act must be a Requant or None, not {self.act!r}")
        if (self.rows is None) != (self.cols is None):
            raise ValueError(f"ChannelSelect {self.name!r}: rows and cols are given together or not at all")
        if self.rows is not None:
            object.__setattr__(self, "rows", tuple(int(v) for v in self.rows))
            object.__setattr__(self, "cols", tuple(int(v) for v in self.cols))

    def validate(self, ins):
        if len(ins) != 1 or len(self.inputs) != 1:
            raise self.error("needs one input")
        x, out = ins[0], self.output
        c = x.shape[-1]
        if any(not 0 <= i < c for i in self.indices):
            raise self.error(f"indices {list(self.indices)!r} outside the {c} input channels")
        if self.rows is None:
            want = x.shape[:-1] + (len(self.indices),)
            if out.shape != want:
                raise self.error(f"output shape {out.shape!r} != expected {want!r}")
        else:
            if len(x.shape) != 3:
                raise self.error(f"a window of rows and columns needs an (H, W, C) input, not {x.shape!r}")
            for what, (lo, hi), n in (("rows", self.rows, x.shape[0]), ("cols", self.cols, x.shape[1])):
                if not 0 <= lo < hi <= n:
                    raise self.error(f"{what} {(lo, hi)!r} is not a non-empty range inside 0..{n}")
            pixels = (self.rows[1] - self.rows[0]) * (self.cols[1] - self.cols[0])
            if out.shape[-1:] != (len(self.indices),) or int(np.prod(out.shape[:-1], dtype=np.int64)) != pixels:
                raise self.error(f"output shape {out.shape!r} does not hold {pixels} pixels of "
                                 f"{len(self.indices)} channels")
        if self.act is None and out.dtype != x.dtype:
            raise self.error(f"output type {out.dtype} != input type {x.dtype}")
        if self.act is not None:
            check_act(self, self.act, len(self.indices), out)

    def reference(self, x):
        y = np.asarray(x, np.int64)
        if self.rows is not None:   # (..., H, W, C): any leading batch axes kept
            y = y[..., slice(*self.rows), slice(*self.cols), :]
            y = y.reshape(y.shape[:-3] + (-1, y.shape[-1]))
        y = y[..., list(self.indices)]
        if self.rows is not None:
            y = y.reshape(y.shape[:-2] + self.output.shape)
        return y if self.act is None else apply_act(y - self.zero, self.act)

    def _pixels(self, ins) -> tuple[int, int]:
        """Input and output pixels per inference."""
        pixels = int(np.prod(ins[0].shape[:-1], dtype=np.int64))
        if self.rows is None:
            return pixels, pixels
        return pixels, (self.rows[1] - self.rows[0]) * (self.cols[1] - self.cols[0])

    def hardware_problem(self, ins):
        if ins[0].dtype.bipolar or self.output.dtype.bipolar:
            return "selecting channels of a bipolar tensor is not supported"
        return None

    def fold_options(self, ins):
        return [(d, d) for d in divisors(math.gcd(ins[0].shape[-1], len(self.indices)))]

    def cycles(self, ins, pe, simd):
        pixels_in, pixels_out = self._pixels(ins)
        return max(pixels_in * (ins[0].shape[-1] // simd), pixels_out * (len(self.indices) // pe))

    def lower(self, ins, pe, simd, family, mul=None):
        """A SpatialCrop where a window is kept, a ChannelSelectUnit where the channels are not all
        kept in order, then the requantization; the zero point is subtracted by the last of the
        two selection blocks (``pe == simd``: :meth:`fold_options`)."""
        x, out = ins[0], self.output.dtype
        offset = 0 if self.act is None else self.zero
        every_channel = self.indices == tuple(range(x.shape[-1]))
        blocks = []
        if self.rows is not None:
            crop = dict(elem_shape=elem_shape(x.dtype), height=x.shape[0], width=x.shape[1], channels=x.shape[-1],
                        rows=self.rows, cols=self.cols, lanes=simd, offset=offset if every_channel else 0)
            blocks.append(Block(SpatialCrop, crop, SpatialCrop.estimate(**crop, family=family)))
        if self.rows is None or not every_channel:
            select = dict(elem_shape=elem_shape(x.dtype), in_channels=x.shape[-1], indices=self.indices,
                          in_lanes=simd, out_lanes=pe, pixels=self._pixels(ins)[1], offset=offset)
            blocks.append(Block(ChannelSelectUnit, select, ChannelSelectUnit.estimate(**select, family=family)))
        if self.act is None:
            return Lowered(tuple(blocks), sum_costs(blocks).cycles, x.dtype.bits, x.dtype.signed, fill=0.0)
        bounds = (x.dtype.lo - self.zero, x.dtype.hi - self.zero)
        acc = acc_bits(min(bounds[0], 0), max(bounds[1], 0))
        act, bits, sg = act_blocks(self.act, len(self.indices), pe, acc, out, family, bounds=bounds)
        blocks = (*blocks, *act)
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


@dataclass(frozen=True)
class _Window:
    """The pixels a selection keeps: half-open ``rows`` and ``cols`` of the input's ``(H, W, C)``
    tensor, and the ONNX shape (without the batch) of the result."""
    rows: tuple[int, int]
    cols: tuple[int, int]
    shape: tuple[int, ...]


def _held(shape: tuple[int, ...], hwc: bool) -> tuple[int, ...]:
    """The IntegerGraph shape of a tensor of ONNX shape ``shape`` (without the batch): ``(H, W,
    C)``, a signal as ``(1, L, C)``, a vector ``(C,)``; ``hwc``: ``shape`` is channels-last."""
    if not hwc:
        return nhwc(shape)
    return (1,) + tuple(shape) if len(shape) == 2 else tuple(shape)


def _spatial(b: Builder, node: Node, x: QT, axis: int) -> int:
    """Spatial ONNX axis ``axis`` of ``x`` (an image or signal, channels first or a channels-last
    view) as the axis of its ``(H, W, C)`` tensor: 0 (rows) or 1 (columns; the one axis of a
    signal)."""
    rank = len(x.onnx_shape)
    if rank not in (2, 3) or b.specs[x.tensor].shape != _held(x.onnx_shape, x.hwc):
        raise node_error(node, f"{node.op_type} along axis {axis} of a tensor of shape {x.onnx_shape!r} (only the "
                         f"spatial axes of an image (N, C, H, W) or a signal (N, C, L), or of their channels-last "
                         f"views, can be selected)", UnsupportedError)
    first = 1 if x.hwc else 2     # the first spatial axis (with the batch)
    return axis - first if rank == 3 else 1


def _window(b: Builder, node: Node, x: QT, kept: dict[int, range], removed: tuple[int, ...] = ()) -> _Window | None:
    """The window keeping ``kept[axis]`` (a range of step 1, or of one position) of spatial ONNX
    axes (those absent whole), ``removed`` axes dropped from the result's shape (a Gather of one
    index); ``None`` when every pixel is kept."""
    grid = _held(x.onnx_shape, x.hwc)[:2]
    box = [(0, grid[0]), (0, grid[1])]
    shape = list(x.onnx_shape)
    for axis, r in kept.items():
        if len(r) == 0:
            raise node_error(node, f"selects no positions along axis {axis}", UnsupportedError)
        if len(r) > 1 and r.step != 1:
            raise node_error(node, f"step {r.step} along axis {axis} (only a contiguous range of positions, step 1, "
                             f"of a spatial axis is supported)", UnsupportedError)
        box[_spatial(b, node, x, axis)] = (r[0], r[-1] + 1)
        shape[axis - 1] = len(r)
    if all(box[k] == (0, grid[k]) for k in (0, 1)):
        return None
    shape = tuple(d for a, d in enumerate(shape, 1) if a not in removed)
    return _Window(box[0], box[1], shape)


def _select(b: Builder, node: Node, x: QT, channel_axis: int, indices, index: int = 0,
            window: _Window | None = None) -> None:
    """Output ``index`` of ``node``: the channels ``indices`` of the pixels of ``window`` of
    ``x`` (a layer, unless every channel of every pixel in order)."""
    indices = tuple(int(i) for i in indices)
    c = x.onnx_shape[channel_axis - 1]
    if not indices:
        raise node_error(node, f"output {node.outputs[index]!r} selects no channels", UnsupportedError)
    if window is not None and len(window.shape) < len(x.onnx_shape) and x.hwc:
        channel_axis -= 1   # the channels-last view lost an axis before its channels
    shape = list(x.onnx_shape if window is None else window.shape)
    shape[channel_axis - 1] = len(indices)
    if indices == tuple(range(c)) and window is None:
        b.set(node, x, index)
        return
    if b.specs[x.tensor].dtype.bipolar:
        raise node_error(node, "selecting channels of a bipolar tensor is not supported", UnsupportedError)
    out = node.outputs[index]
    readers = [n for n in b.graph.nodes if out in n.inputs]
    if x.real and readers and all(n.op_type in _QUANTIZERS for n in readers) and out not in b.graph.output_names:
        # its quantizers give the output grid: the input's (a selection) or another (requantized)
        b.set(node, Acc("channelselect", _emit, node, (x,), tuple(shape),
                        params={"indices": indices, "index": index, "window": window}), index)
        return
    b.set(node, _shaped(_layer(b, node, x, indices, index, out, window, tuple(shape)), tuple(shape)), index)


def _shaped(q: QT, shape: tuple[int, ...]) -> QT:
    """``q`` with the ONNX shape ``shape``; a vector has no channels-last view."""
    return replace(q, onnx_shape=shape, hwc=q.hwc and len(shape) > 1)


def _layer(b: Builder, node: Node, x: QT, indices, index: int, name: str, window: _Window | None,
           shape: tuple[int, ...], act=None, dtype=None) -> QT:
    """The ChannelSelect layer of output ``index`` writing tensor ``name`` (``act``: onto another
    grid, type ``dtype``); a window's result, of ONNX shape ``shape``, is held channels-last (an
    image, the ``(1, L, C)`` signal, or the vector ``(C,)``)."""
    spec_in = b.specs[x.tensor]
    if window is None:
        held, rows, cols = spec_in.shape[:-1] + (len(indices),), None, None
    else:
        held, rows, cols = _held(shape, x.hwc), window.rows, window.cols
    spec = b.new_tensor(name, held, spec_in.dtype if dtype is None else dtype)
    b.layers.append(ChannelSelect(node.name if index == 0 else f"{node.name}_{index}", (x.tensor,), spec, indices,
                                  x.zp, act, rows, cols))
    return replace(x, tensor=spec.name)


def _emit(b: Builder, v: Acc, t: Target) -> QT:
    """The selection onto the quantizer's grid ``t``: the input's codes where ``t`` is the input's
    grid and type, else requantized (``x.scale / t.scale`` as a 31-bit multiplier and shift)."""
    x, indices, index, window = v.inputs[0], v.params["indices"], v.params["index"], v.params["window"]
    dtype = b.specs[x.tensor].dtype
    if math.isclose(x.scale, t.scale, rel_tol=1e-6) and x.zp == t.zp and dtype == t.dtype \
            and t.lo <= dtype.lo and dtype.hi <= t.hi:
        q = _layer(b, v.node, x, indices, index, t.name, window, v.onnx_shape)
    else:
        m, s = ratio_to_multiplier_shift(x.scale / t.scale, f"node {v.node.name!r} requantization")
        act = Requant(m[:1], s[:1], t.zp, t.lo, t.hi, ties_for(x.scale, t.scale, m[:1], s[:1], t.half_even))
        q = _layer(b, v.node, x, indices, index, t.name, window, v.onnx_shape, act, t.dtype)
    return _shaped(replace(q, scale=t.scale, zp=t.zp, dtype=t.dtype, real=False), v.onnx_shape)


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
    indices, spatial = list(range(shape[ch])), {}
    for a, s, e, st in zip(axes, starts, ends, steps):
        if st == 0:
            raise node_error(node, "a step of 0 is not allowed")
        if a == 0:
            if st == 1 and s in (0, -(1 << 63)) and e >= (1 << 31) - 1:
                continue    # the whole batch (tf2onnx lists every axis of a Keras Cropping2D)
            raise node_error(node, "Slice of the batch axis is not supported", UnsupportedError)
        kept = range(shape[a])[slice(s, e, st)]
        if a == ch:
            indices = list(kept)
        elif kept != range(shape[a]):
            spatial[a] = kept
    _select(b, node, x, ch, indices, window=_window(b, node, x, spatial) if spatial else None)


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
    if axis == 0:
        raise node_error(node, "Gather along the batch axis is not supported", UnsupportedError)
    idx = np.asarray(b.const(node.inputs[1], node, "indices"))
    if axis != ch:
        _gather_positions(b, node, x, ch, axis, idx)
        return
    if idx.ndim != 1:
        raise node_error(node, f"indices of shape {idx.shape!r} (only a 1-D list of channels keeps the channel "
                         f"axis)", UnsupportedError)
    c = x.onnx_shape[ch - 1]
    idx = [int(i) for i in idx]
    if any(not -c <= i < c for i in idx):
        raise node_error(node, f"indices {idx!r} outside the {c} channels")
    _select(b, node, x, ch, [i % c for i in idx])


def _gather_positions(b: Builder, node: Node, x: QT, ch: int, axis: int, idx: np.ndarray) -> None:
    """A Gather along a spatial axis: one index (a scalar; the axis leaves the result) or a 1-D
    list of consecutive increasing positions (a crop), negative ones counted from the end."""
    n = x.onnx_shape[axis - 1]
    if idx.ndim > 1:
        raise node_error(node, f"indices of shape {idx.shape!r} along axis {axis} (only one index or a 1-D list of "
                         f"consecutive positions is supported)", UnsupportedError)
    flat = [int(i) for i in idx.reshape(-1)]
    if any(not -n <= i < n for i in flat):
        raise node_error(node, f"indices {flat!r} outside the {n} positions of axis {axis}")
    flat = [i % n for i in flat]
    if not flat or flat != list(range(flat[0], flat[0] + len(flat))):
        raise node_error(node, f"indices {flat!r} along axis {axis} are not consecutive increasing positions (only "
                         f"a contiguous range of a spatial axis is supported)", UnsupportedError)
    removed = (axis,) if idx.ndim == 0 else ()
    window = _window(b, node, x, {axis: range(flat[0], flat[0] + len(flat))}, removed)
    if window is None and removed:   # the one position of an axis of length 1: the tensor without that axis
        shape = tuple(d for a, d in enumerate(x.onnx_shape, 1) if a != axis)
        if _held(shape, x.hwc and len(shape) > 1) == b.specs[x.tensor].shape:   # (C, 1, W) as (C, W): one tensor
            b.set(node, _shaped(x, shape))
            return
        h, w = _held(x.onnx_shape, x.hwc)[:2]   # a one-pixel image or signal as the vector (C,)
        window = _Window((0, h), (0, w), shape)
    _select(b, node, x, ch, range(x.onnx_shape[ch - 1]), window=window)


_HW = "ChannelSelectUnit (selected channels of each pixel; + Requantize onto another grid)"
_WINDOW = "SpatialCrop (a window of rows and columns) and/or " + _HW
PATTERNS = (
    Pattern("", "Slice", _WINDOW, _slice, ptq="pass", const_inputs=1),
    Pattern("", "Split", _HW + ", one per output", _split),
    Pattern("", "Gather", _WINDOW, _gather, ptq="pass", const_inputs=1),
)

#: the layer kind this module declares
KIND = ChannelSelect
