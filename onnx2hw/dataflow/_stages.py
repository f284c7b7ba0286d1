"""Build one :class:`Stage` from one IntegerGraph layer at a given folding (PE, SIMD)."""
from __future__ import annotations

import numpy as np
from amaranth.hdl import signed, unsigned

from ..ir.errors import UnsupportedError
from ..quant import arith
from ..quant.integer_graph import (Add, AvgPool, Conv, Dense, IntType, MaxPool, Requant,
                                   TensorSpec, Thresholds)
from ..rtl.cost import Cost
from .pipeline import Block, Stage

__all__ = ["fold_options", "build_stage", "check_layer", "elem_shape"]


def elem_shape(t: IntType):
    """Stream element shape of an integer type (bipolar: 1 bit, 1 = +1, 0 = -1)."""
    if t.bipolar:
        return unsigned(1)
    return (signed if t.signed else unsigned)(t.bits)


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def check_layer(layer, ins: list[TensorSpec]) -> str | None:
    """Why the hardware cannot build ``layer`` (``None`` when it can)."""
    if isinstance(layer, Conv):
        if layer.group != 1:
            return f"grouped/depthwise convolution (group={layer.group}) is not supported yet"
        if len(ins[0].shape) != 3:
            return "convolution input must be an image (H, W, C)"
    if isinstance(layer, (Dense, Conv)):
        if layer.in_type.bipolar != layer.w_type.bipolar and layer.in_type.bipolar:
            return "bipolar inputs with non-bipolar weights are not supported"
        if layer.act is not None and layer.output.dtype.bipolar:
            return "bipolar activations are not supported yet"
    if isinstance(layer, (MaxPool, AvgPool)):
        if any(p >= k for p, k in zip(layer.pads, layer.kernel * 2)):
            return f"pads {layer.pads} must be smaller than the kernel {layer.kernel}"
    if isinstance(layer, Add):
        if layer.output.dtype.bipolar:
            return "bipolar Add is not supported"
        return _add_problem(layer, ins)
    return None


def fold_options(layer, ins: list[TensorSpec]) -> list[tuple[int, int]]:
    """Every legal (pe, simd) of a layer, cheapest first."""
    if isinstance(layer, Dense):
        n, k = layer.weights.shape
        opts = [(p, s) for p in _divisors(n) for s in _divisors(k)]
    elif isinstance(layer, Conv):
        cout, cin = layer.weights.shape[0], ins[0].shape[-1]
        opts = [(p, s) for p in _divisors(cout) for s in _divisors(cin)]
    else:  # pools and Add: lanes = channel fold
        c = ins[0].shape[-1]
        opts = [(d, d) for d in _divisors(c)]
    return sorted(opts, key=lambda ps: (ps[0] * ps[1], ps))


def _act_blocks(act, channels, pe, acc_bits, out: IntType, family) -> tuple[list[Block], int, bool]:
    """Blocks after an accumulator stream; returns (blocks, out_bits, out_signed)."""
    from ..rtl.requant import Requantize
    from ..rtl.thresholds import Thresholds as ThresholdsBlock

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
                      lo=act.lo, hi=act.hi)
        return [Block("Requantize", params, Requantize.estimate(**params, family=family))], out.bits, out.signed
    assert isinstance(act, Thresholds)
    params = dict(thresholds=act.table, channels=channels, pe=pe, acc_bits=acc_bits,
                  out_bits=out.bits, out_signed=out.signed, lo=act.lo)
    return [Block("Thresholds", params, ThresholdsBlock.estimate(**params, family=family))], out.bits, out.signed


def _mvu_block(weights, bias, in_t: IntType, w_t: IntType, pe, simd, acc_bits, family) -> Block:
    from ..rtl.mvu import MatrixVectorUnit

    bipolar = in_t.bipolar and w_t.bipolar
    wb, ws = (2, True) if w_t.bipolar and not bipolar else (w_t.bits, w_t.signed)
    params = dict(weights=weights, bias=bias, in_bits=in_t.bits, in_signed=in_t.signed,
                  weight_bits=wb, weight_signed=ws, bipolar=bipolar, pe=pe, simd=simd,
                  acc_bits=acc_bits)
    return Block("MatrixVectorUnit", params, MatrixVectorUnit.estimate(**params, family=family))


def _sum_costs(blocks) -> Cost:
    c = blocks[0].cost
    for b in blocks[1:]:
        c = c + b.cost
    return c


def _cast_block(bits, signed_, offset=0) -> Block:
    lut = bits if offset else 0
    return Block("Cast", dict(bits=bits, signed=signed_, offset=offset), Cost(1, 1 if offset else 0, lut, bits if offset else 0, 0, 0))


def build_stage(name: str, layer, ins: list[TensorSpec], pe: int, simd: int, family: str) -> Stage:
    """The stage of ``layer`` folded at (pe, simd); costs from the blocks' cost models."""
    from ..rtl.pool import AvgPool as AvgPoolBlock, GlobalAvgPool, MaxPool as MaxPoolBlock
    from ..rtl.window import SlidingWindow

    why = check_layer(layer, ins)
    if why:
        raise UnsupportedError(f"layer {layer.name!r}: {why}")
    out = layer.output
    spec = ins[0]
    macs, mults = 0, 0
    if isinstance(layer, Dense):
        n, k = layer.weights.shape
        blocks = [_mvu_block(layer.weights, layer.bias, layer.in_type, layer.w_type, pe, simd, layer.acc_bits, family)]
        act, ob, osg = _act_blocks(layer.act, n, pe, layer.acc_bits, out.dtype, family)
        blocks += act
        cycles = blocks[0].cost.cycles
        macs, mults = n * k, pe * simd
        in_lanes, fill = simd, 1.0
    elif isinstance(layer, Conv):
        h, w, c = spec.shape
        cout, kh, kw, _ = layer.weights.shape
        oh, ow, _ = out.shape
        wparams = dict(height=h, width=w, channels=c, kernel=(kh, kw), stride=layer.stride,
                       pads=layer.pads, elem_shape=elem_shape(layer.in_type), simd=simd,
                       pad_value=layer.pad_value)
        blocks = [Block("SlidingWindow", wparams, SlidingWindow.estimate(**wparams, family=family)),
                  _mvu_block(layer.weights.reshape(cout, -1), layer.bias, layer.in_type, layer.w_type,
                             pe, simd, layer.acc_bits, family)]
        act, ob, osg = _act_blocks(layer.act, cout, pe, layer.acc_bits, out.dtype, family)
        blocks += act
        cycles = max(blocks[0].cost.cycles, oh * ow * blocks[1].cost.cycles)
        macs, mults = oh * ow * cout * kh * kw * c, pe * simd
        in_lanes, fill = simd, _window_fill(kh, layer.pads[0], h)
    elif isinstance(layer, MaxPool):
        h, w, c = spec.shape
        params = dict(height=h, width=w, channels=c, kernel=layer.kernel, stride=layer.stride,
                      pads=layer.pads, elem_shape=elem_shape(spec.dtype), simd=simd)
        blocks = [Block("MaxPool", params, MaxPoolBlock.estimate(**params, family=family))]
        ob, osg = spec.dtype.bits, spec.dtype.signed
        cycles, in_lanes = blocks[0].cost.cycles, simd
        fill = _window_fill(layer.kernel[0], layer.pads[0], h)
    elif isinstance(layer, AvgPool):
        h, w, c = spec.shape
        es = elem_shape(spec.dtype)
        area = layer.kernel[0] * layer.kernel[1]
        if layer.kernel == (h, w) and layer.pads == (0, 0, 0, 0):
            params = dict(height=h, width=w, channels=c, elem_shape=es, simd=simd)
            blocks = [Block("GlobalAvgPool", params, GlobalAvgPool.estimate(**params, family=family))]
        else:
            params = dict(height=h, width=w, channels=c, kernel=layer.kernel, stride=layer.stride,
                          pads=layer.pads, elem_shape=es, simd=simd, pad_value=layer.pad_value)
            blocks = [Block("AvgPool", params, AvgPoolBlock.estimate(**params, family=family))]
        lo, hi = spec.dtype.lo * area + layer.bias, spec.dtype.hi * area + layer.bias
        acc_bits = arith.acc_bits(min(lo, 0), max(hi, 0))
        blocks.append(_cast_block(acc_bits, True, layer.bias))
        act, ob, osg = _act_blocks(layer.act, c, simd, acc_bits, out.dtype, family)
        blocks += act
        cycles, in_lanes = blocks[0].cost.cycles, simd
        fill = _window_fill(layer.kernel[0], layer.pads[0], h)
    elif isinstance(layer, Add):
        from ..rtl.add import Add as AddBlock

        h_w_c = spec.shape
        c = h_w_c[-1]
        params = _add_params(layer, ins, simd)
        blocks = [Block("Add", params, AddBlock.estimate(**params, family=family))]
        ob, osg = out.dtype.bits, out.dtype.signed
        cycles = int(np.prod(h_w_c)) // simd
        in_lanes, fill = simd, 0.0
    else:
        raise UnsupportedError(f"layer {layer.name!r}: {type(layer).__name__} has no hardware stage")
    cost = _sum_costs(blocks)
    # window blocks' own latency is the wait for their first rows, which ``fill`` models
    delay = sum(b.cost.latency for b in blocks if b.kind not in _WINDOWED)
    cost = Cost(cycles, delay, cost.lut, cost.ff, cost.dsp, cost.ebr)
    return Stage(name=name, layer=layer.name, op=type(layer).__name__.lower(), inputs=tuple(layer.inputs),
                 output=out.name, pe=pe, simd=simd, in_lanes=(in_lanes,) * len(layer.inputs),
                 out_lanes=pe, out_bits=ob, out_signed=osg, blocks=tuple(blocks), cycles=cycles,
                 latency=cost.latency, cost=cost, macs=macs, multipliers=mults, fill=fill)


_WINDOWED = ("SlidingWindow", "MaxPool", "AvgPool", "GlobalAvgPool")


def _window_fill(kernel_rows: int, pad_top: int, rows: int) -> float:
    """Fraction of an image a window stage reads before its first output."""
    return min(1.0, max(1, kernel_rows - pad_top) / rows)


def _add_params(layer: Add, ins, lanes) -> dict:
    """Constructor arguments of the RTL Add for an IntegerGraph Add (exact same semantics)."""
    ra, rb = layer.requants
    return dict(
        a_shape=elem_shape(ins[0].dtype), b_shape=elem_shape(ins[1].dtype),
        out_shape=elem_shape(layer.output.dtype), lanes=lanes,
        a_zero=layer.zero_points[0], a_mult=int(ra.multiplier[0]),
        b_zero=layer.zero_points[1], b_mult=int(rb.multiplier[0]),
        shift=layer.shift, zero_point=layer.zero_point, lo=layer.lo, hi=layer.hi,
    )


def _add_problem(layer: Add, ins) -> str | None:
    """The RTL Add scales each input by an exact integer multiply; other Add forms are rejected."""
    for r, spec, z in zip(layer.requants, ins, layer.zero_points):
        span = (spec.dtype.lo - z, spec.dtype.hi - z)
        m = int(r.multiplier[0])
        reach = sorted(v * m for v in span)
        if (r.channels != 1 or int(r.shift[0]) != 0 or r.zero_point != 0
                or r.lo > reach[0] or r.hi < reach[1] or abs(m) >= 1 << 31):
            return "input scaling is not a plain integer multiply (per-channel, shifted or clamped)"
    return None
