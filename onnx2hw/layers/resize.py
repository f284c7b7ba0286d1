"""Resize (nearest neighbour) by integer factors, NHWC: ``y[h, w, c] = x[h // scale_h, w // scale_w, c]``.

ONNX forms: Resize (opset 10 on; scales or sizes) and Upsample with ``mode="nearest"``, on an
integer tensor or its dequantized view (a data move: the quantization grid is kept, so the
post-training quantizer passes its input's grid through). Whether a node repeats every pixel an
integer number of times is decided by the node's own semantics: the golden executor runs it on
a tensor of source indices (every coordinate_transformation_mode and nearest_mode, e.g. torch's
``asymmetric``/``floor`` or Keras' ``UpSampling2D``); any other mapping (and modes linear and
cubic) is refused with one error naming the node and the mode. Hardware: the UpsampleUnit (a
one-row buffer, each row read ``scale_h`` times, each pixel repeated ``scale_w`` times).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..ir.errors import UnsupportedError
from ..ir.graph import Node
from ..rtl.stage import Block
from ..rtl.upsample import UpsampleUnit
from .builder import Builder, Const, QConst, image_input, node_error
from .base import LayerKind, Lowered, Pattern, check_move
from .canonical import Rewrite
from .types import elem_shape

__all__ = ["Resize", "KIND", "PATTERNS"]


@dataclass(frozen=True)
class Resize(LayerKind):
    """Nearest-neighbour upsampling of an ``(H, W, C)`` image by ``scale = (scale_h, scale_w)``."""

    scale: tuple[int, int]

    def __post_init__(self):
        super().__post_init__()
        object.__setattr__(self, "scale", tuple(int(v) for v in self.scale))
        if len(self.scale) != 2 or min(self.scale) < 1:
            raise ValueError(f"Resize {self.name!r}: scale must be two integers >= 1, not {self.scale!r}")

    def validate(self, ins):
        check_move(self, ins, lambda h, w, c: (h * self.scale[0], w * self.scale[1], c))

    def reference(self, x):
        x = np.asarray(x, dtype=np.int64)
        return np.repeat(np.repeat(x, self.scale[0], axis=1), self.scale[1], axis=2)

    def hardware_problem(self, ins):
        if ins[0].dtype.bipolar:
            return "bipolar Resize is not supported"
        return None

    def cycles(self, ins, pe, simd):
        return int(np.prod(self.output.shape)) // simd

    def lower(self, ins, pe, simd, family, mul=None):
        h, w, c = ins[0].shape
        params = dict(elem_shape=elem_shape(ins[0].dtype), height=h, width=w, channels=c, scale_h=self.scale[0],
                      scale_w=self.scale[1], lanes=simd)
        block = Block(UpsampleUnit, params, UpsampleUnit.estimate(**params, family=family))
        return Lowered((block,), block.cost.cycles, ins[0].dtype.bits, ins[0].dtype.signed,
                       fill=1.0 / (h * w))


# ---- import ---------------------------------------------------------------------------------------

def _constant(b: Builder, node: Node, i: int):
    """Input ``i`` as a constant array, or ``None`` when omitted or empty."""
    if len(node.inputs) <= i or not node.inputs[i]:
        return None
    v = b.get(node.inputs[i], node)
    if not isinstance(v, (Const, QConst)):
        raise node_error(node, f"input {node.inputs[i]!r} (roi/scales/sizes) must be a constant", UnsupportedError)
    arr = np.asarray(v.value if isinstance(v, Const) else v.real())
    return None if arr.size == 0 else arr


def _resize(b: Builder, node: Node):
    x = image_input(b, node)
    mode = node.attr("mode", "nearest")
    mode = mode.decode() if isinstance(mode, bytes) else str(mode)
    if mode != "nearest":
        raise node_error(node, f"mode {mode!r} is not supported (only nearest, by integer factors)", UnsupportedError)
    consts = [_constant(b, node, i) for i in range(1, len(node.inputs))]
    sizes = consts[2] if node.op_type == "Resize" and node.since_version >= 11 and len(consts) > 2 else None
    if sizes is not None:  # the batch entry: evaluate one sample
        sizes = np.asarray(sizes, np.int64).copy()
        if node.attr("axes") is None and sizes.size == 4:
            if sizes[0] not in (1, b.batch):
                raise node_error(node, f"sizes {sizes.tolist()!r} resize the batch", UnsupportedError)
            sizes[0] = 1
        consts[2] = sizes
    c, h, w = x.onnx_shape
    idx = np.arange(c * h * w, dtype=np.float32).reshape(1, c, h, w)
    if b.evaluate is None:
        raise node_error(node, "no evaluator to interpret the resize with", UnsupportedError)
    try:
        y = np.asarray(b.evaluate(node, idx, *consts)[0])
    except (ValueError, IndexError) as exc:
        raise node_error(node, str(exc), UnsupportedError) from None
    oc, oh, ow = y.shape[1:] if y.ndim == 4 else (0, 0, 0)
    ok = y.ndim == 4 and y.shape[0] == 1 and oc == c and oh % h == 0 and ow % w == 0 and oh >= h and ow >= w
    if ok:
        sh, sw = oh // h, ow // w
        ok = np.array_equal(y, np.repeat(np.repeat(idx, sh, axis=2), sw, axis=3))
    if not ok:
        ctm = node.attr("coordinate_transformation_mode", "half_pixel" if node.since_version >= 11 else "asymmetric")
        nm = node.attr("nearest_mode", "round_prefer_floor" if node.since_version >= 11 else "floor")
        ctm, nm = (v.decode() if isinstance(v, bytes) else v for v in (ctm, nm))
        raise node_error(node, f"mode nearest with coordinate_transformation_mode {ctm!r} and nearest_mode {nm!r} "
                         f"maps ({c}, {h}, {w}) to {tuple(y.shape[1:])!r}, which is not each pixel repeated an "
                         f"integer number of times (only integer upsampling is supported)", UnsupportedError)
    spec = b.new_tensor(node.outputs[0], (oh, ow, c), b.specs[x.tensor].dtype)
    b.layers.append(Resize(node.name, (x.tensor,), spec, (sh, sw)))
    b.set(node, replace(x, tensor=spec.name, onnx_shape=(c, oh, ow)))


def _canonical_upsample(node: Node, rw: Rewrite) -> Node:
    """Upsample (nearest; opset 7 scales attribute, opset 9 scales input) as the equivalent
    Resize-13 (Upsample is gone from opset 10 on): asymmetric coordinates, nearest_mode floor."""
    mode = node.attr("mode", "nearest")
    mode = mode.decode() if isinstance(mode, bytes) else str(mode)
    if mode != "nearest":
        raise node_error(node, f"mode {mode!r} is not supported (only nearest)", UnsupportedError)
    if node.since_version < 9:
        scales = rw.add(f"{node.name or 'upsample'}_scales", np.asarray(node.attr("scales"), np.float32))
    else:
        scales = node.inputs[1]
    return Node(node.name, "Resize", "", (node.inputs[0], "", scales), node.outputs[:1],
                {"mode": "nearest", "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"},
                since_version=13)


_HW = "UpsampleUnit (nearest, integer factors; one row buffered)"
PATTERNS = (
    Pattern("", "Resize", _HW, _resize, ptq="pass", const_inputs=1),
    Pattern("", "Upsample", _HW, _resize, ptq="pass", canonical=_canonical_upsample),
)

#: the layer kind this module declares
KIND = Resize
