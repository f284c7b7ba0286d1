"""Sub-pixel reordering (PyTorch ``nn.PixelShuffle``/``PixelUnshuffle``, TensorFlow
``depth_to_space``/``space_to_depth``), NHWC, with ``r`` the block and ``C`` the shallow side's
channels:

* DepthToSpace ``(H, W, C*r*r) -> (H*r, W*r, C)``: ``y[h*r + i, w*r + j, c] = x[h, w, k]``;
* SpaceToDepth ``(H*r, W*r, C) -> (H, W, C*r*r)``: ``y[h, w, k] = x[h*r + i, w*r + j, c]``;

with ``k = (i*r + j)*C + c`` (mode DCR: DepthToSpace's default, SpaceToDepth's only order before
opset 28) or ``k = c*r*r + i*r + j`` (mode CRD: PyTorch's PixelShuffle, as both its exporters
write it). A data move on an integer tensor or its dequantized view: the quantization grid is
kept (the post-training quantizer passes its input's grid through, so QDQ pairs around it share
one scale); ``blocksize`` 1 is the identity.

Hardware: :class:`~onnx2hw.rtl.pixel_shuffle.PixelShuffleUnit` (two banks of rows in block RAM,
one written while the other is read in output order); in CRD order with more than one lane a
:class:`~onnx2hw.rtl.channel_select.ChannelSelectUnit` beside it permutes the deep side's
channels to (DepthToSpace, in front) or from (SpaceToDepth, behind) the DCR order.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..ir.errors import UnsupportedError
from ..ir.graph import Node
from ..rtl.channel_select import ChannelSelectUnit
from ..rtl.pixel_shuffle import MODES, OPS, PixelShuffleUnit
from ..rtl.stage import Block
from .base import LayerKind, Lowered, Pattern, check_move, divisors, sum_costs
from .builder import Builder, image_input, node_error
from .types import elem_shape

__all__ = ["PixelShuffle", "KIND", "PATTERNS", "dcr_order"]


def dcr_order(channels: int, r: int) -> tuple[int, ...]:
    """For each DCR position ``(i*r + j)*C + c`` of a deep pixel, its CRD position ``c*r*r + i*r + j``."""
    rr = r * r
    return tuple(c * rr + s for s in range(rr) for c in range(channels))


@dataclass(frozen=True)
class PixelShuffle(LayerKind):
    """DepthToSpace or SpaceToDepth (``op``) by ``block`` in channel order ``mode`` (module
    docstring) of an ``(H, W, C)`` image."""

    op: str
    block: int
    mode: str = "DCR"

    def __post_init__(self):
        super().__post_init__()
        object.__setattr__(self, "block", int(self.block))
        if self.op not in OPS:
            raise ValueError(f"PixelShuffle {self.name!r}: op must be one of {OPS!r}, not {self.op!r}")
        if self.mode not in MODES:
            raise ValueError(f"PixelShuffle {self.name!r}: mode must be one of {MODES!r}, not {self.mode!r}")
        if self.block < 1:
            raise ValueError(f"PixelShuffle {self.name!r}: block must be >= 1, not {self.block!r}")

    @property
    def _d2s(self) -> bool:
        return self.op == "depth_to_space"

    def validate(self, ins):
        check_move(self, ins, self._out_shape)

    def _out_shape(self, h: int, w: int, c: int) -> tuple[int, int, int]:
        r = self.block
        if self._d2s and c % (r * r):
            raise self.error(f"{c} channels are not a multiple of block^2 = {r * r}")
        if not self._d2s and (h % r or w % r):
            raise self.error(f"image {h}x{w} is not a whole number of {r}x{r} blocks")
        return (h * r, w * r, c // (r * r)) if self._d2s else (h // r, w // r, c * r * r)

    def reference(self, x):
        x = np.asarray(x, dtype=np.int64)
        n, h, w, c = x.shape
        r = self.block
        if self._d2s:
            cs = c // (r * r)
            t = x.reshape(n, h, w, r, r, cs) if self.mode == "DCR" else x.reshape(n, h, w, cs, r, r).transpose(
                0, 1, 2, 4, 5, 3)
            return t.transpose(0, 1, 3, 2, 4, 5).reshape(n, h * r, w * r, cs)
        t = x.reshape(n, h // r, r, w // r, r, c).transpose(0, 1, 3, 2, 4, 5)   # (n, y, x, i, j, c)
        if self.mode == "CRD":
            t = t.transpose(0, 1, 2, 5, 3, 4)
        return t.reshape(n, h // r, w // r, c * r * r)

    def hardware_problem(self, ins):
        if ins[0].dtype.bipolar:
            return f"bipolar {'DepthToSpace' if self._d2s else 'SpaceToDepth'} is not supported"
        return None

    def _shallow(self, ins) -> tuple[int, int, int]:
        """``(H, W, C)``: the deep side's image and the shallow side's channels."""
        (h, w, _), (oh, ow, oc) = ins[0].shape, self.output.shape
        return (h, w, oc) if self._d2s else (oh, ow, ins[0].shape[-1])

    def fold_options(self, ins):
        return [(d, d) for d in divisors(self._shallow(ins)[2])]

    def cycles(self, ins, pe, simd):
        return int(np.prod(ins[0].shape)) // simd

    def lower(self, ins, pe, simd, family, mul=None):
        h, w, c = self._shallow(ins)
        r, shape, dt = self.block, elem_shape(ins[0].dtype), ins[0].dtype
        permute = self.mode == "CRD" and simd > 1 and r > 1
        params = dict(elem_shape=shape, op=self.op, height=h, width=w, channels=c, block=r,
                      mode="DCR" if permute else self.mode, lanes=simd)
        blocks = [Block(PixelShuffleUnit, params, PixelShuffleUnit.estimate(**params, family=family))]
        if permute:
            order = dcr_order(c, r)
            indices = order if self._d2s else tuple(int(i) for i in np.argsort(order))
            sel = dict(elem_shape=shape, in_channels=c * r * r, indices=indices, in_lanes=simd, out_lanes=simd,
                       pixels=h * w)
            block = Block(ChannelSelectUnit, sel, ChannelSelectUnit.estimate(**sel, family=family))
            blocks.insert(0 if self._d2s else 1, block)
        blocks = tuple(blocks)
        return Lowered(blocks, sum_costs(blocks).cycles, dt.bits, dt.signed, fill=1.0 / h)


# ---- import ---------------------------------------------------------------------------------------

def _mode(node: Node) -> str:
    """The node's channel order (DepthToSpace before opset 11 and SpaceToDepth before opset 28
    have only DCR)."""
    if node.op_type == "DepthToSpace" and node.since_version < 11:
        return "DCR"
    mode = node.attr("mode", "DCR")
    mode = mode.decode() if isinstance(mode, bytes) else str(mode)
    if mode not in MODES:
        raise node_error(node, f"mode {mode!r} is neither DCR nor CRD")
    return mode


def _pixel_shuffle(b: Builder, node: Node):
    x = image_input(b, node)
    r = int(node.attr("blocksize", 0))
    if r < 1:
        raise node_error(node, f"blocksize {r!r} must be >= 1")
    mode, (c, h, w) = _mode(node), x.onnx_shape
    if node.op_type == "DepthToSpace":
        if c % (r * r):
            raise node_error(node, f"{c} channels are not a multiple of blocksize^2 = {r * r}")
        out = (c // (r * r), h * r, w * r)
    else:
        if h % r or w % r:
            raise node_error(node, f"image {h}x{w} is not a whole number of {r}x{r} blocks")
        out = (c * r * r, h // r, w // r)
    if r == 1:
        b.set(node, x)
        return
    dtype = b.specs[x.tensor].dtype
    if dtype.bipolar:
        raise node_error(node, f"{node.op_type} of a bipolar tensor is not supported", UnsupportedError)
    spec = b.new_tensor(node.outputs[0], (out[1], out[2], out[0]), dtype)
    op = "depth_to_space" if node.op_type == "DepthToSpace" else "space_to_depth"
    b.layers.append(PixelShuffle(node.name, (x.tensor,), spec, op, r, mode))
    b.set(node, replace(x, tensor=spec.name, onnx_shape=out))


_HW = "PixelShuffleUnit (two banks of rows read in output order; + ChannelSelectUnit for CRD on lanes)"
PATTERNS = (
    Pattern("", "DepthToSpace", _HW, _pixel_shuffle, ptq="pass"),
    Pattern("", "SpaceToDepth", _HW, _pixel_shuffle, ptq="pass"),
)

#: the layer kind this module declares
KIND = PixelShuffle
