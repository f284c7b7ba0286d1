"""The stream blocks of :mod:`onnx2hw.rtl` in small configurations, each with its stream contract
(:class:`onnx2hw.sim.formal.Contract`): transfers per round of every port, the drain bound and,
where it applies, the element map.

Configurations are small enough that bounded model checking reaches a whole round (an image, a
vector, a segment) plus its drain, and each still exercises every state of its block's
control (a full FIFO, a wrapped pointer, a window's padded border and its stride, every
segment). ``drain`` is the bound asserted: cycles, once the inputs stop at a round boundary and
every output is ready, until every output has completed the same rounds; it is the block's
documented latency plus the transfers it may hold, plus one cycle for the bench's own counters.
``depth`` spans a round and its drain; ``make test`` runs :func:`contracts`, which caps it at
:data:`QUICK_DEPTH`, ``make bench`` runs ``contracts(deep=True)``, deeper still.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
from amaranth.hdl import signed, unsigned

from onnx2hw.rtl.add import AddUnit
from onnx2hw.rtl.cast import Cast
from onnx2hw.rtl.concat import ConcatUnit
from onnx2hw.rtl.crop import SpatialCrop
from onnx2hw.rtl.depthwise import DepthwiseUnit
from onnx2hw.rtl.fifo import StreamFIFO
from onnx2hw.rtl.fork import Fork
from onnx2hw.rtl.framing import BytesToLanes, Deframer, Framer, LanesToBytes
from onnx2hw.rtl.lookup import LookupUnit
from onnx2hw.rtl.mvu import MatrixVectorUnit
from onnx2hw.rtl.pool import AvgPoolUnit, GlobalAvgPoolUnit, MaxPoolUnit
from onnx2hw.rtl.requant import Requantize
from onnx2hw.rtl.segments import SegmentJoin, SegmentSplit
from onnx2hw.rtl.thresholds import Thresholds
from onnx2hw.rtl.uart import UARTRx
from onnx2hw.rtl.pixel_shuffle import PixelShuffleUnit
from onnx2hw.rtl.upsample import UpsampleUnit
from onnx2hw.rtl.width import WidthConverter
from onnx2hw.rtl.window import SlidingWindow

from .formal import Contract

__all__ = ["contracts", "tasks", "QUICK_DEPTH"]


def _same(x):
    return x


def _fifo(entries, lanes=1, bits=2):
    return Contract(f"StreamFIFO u{bits}x{lanes} depth {entries}",
                    lambda: StreamFIFO(unsigned(bits), lanes, entries),
                    {"i": 1, "o": 1}, drain=entries + 2, lag=entries + 1, element=_same, depth=entries + 5)


def _width(n_in, n_out, **kw):
    lcm = int(np.lcm(n_in, n_out))
    return Contract(f"WidthConverter u2 {n_in}->{n_out}", lambda: WidthConverter(unsigned(2), n_in, n_out),
                    {"i": lcm // n_in, "o": lcm // n_out}, drain=lcm // n_out + 3, lag=2, element=_same, **kw)


def _window(name, cls, per_output, **params):
    """A window, pool: ``per_output`` cycles per output transfer at most (a pool reduces a
    window's ``k*k`` transfers into one)."""
    blk = cls(**params)
    for made in (blk, getattr(blk, "_window", None)):      # (made for the transfer counts only)
        if made is not None:
            made._MustUse__silence = True
    i, o = blk.in_transfers, blk.out_transfers
    drain = o * per_output + 12
    return Contract(name, lambda: cls(**params), {"i": i, "o": o}, drain=drain, lag=2,
                    k=4, depth=i + drain + 4)


def contracts(deep: bool = False) -> list[Contract]:
    """Every configuration; ``deep``: BMC twice as deep (the bench's run)."""
    rng = np.random.default_rng(33)
    out = [
        _fifo(0), _fifo(1), _fifo(2), _fifo(3), _fifo(5),
        Contract("Fork u2x2", lambda: Fork(unsigned(2), 2), {"i": 1, "o0": 1, "o1": 1}, drain=1, lag=1,
                 element=_same, depth=10),
        _width(2, 2, depth=10), _width(1, 3, depth=10), _width(3, 1, depth=10), _width(2, 3, depth=10),
        Contract("Cast u2->u3 +5 x2", lambda: Cast(bits=3, signed=False, offset=5, in_shape=unsigned(2), lanes=2),
                 {"i": 1, "o": 1}, drain=2, lag=1, element=lambda x: x + 5, depth=10),
        Contract("SegmentSplit s3x1 -> u2/s2 (2+3)",
                 lambda: SegmentSplit(signed(3), 1, (unsigned(2), signed(2)), (2, 3)),
                 {"i": 5, "o0": 2, "o1": 3}, drain=1, lag=1, depth=16),
        Contract("SegmentJoin u2/s2 -> s3 (2+3)",
                 lambda: SegmentJoin((unsigned(2), signed(2)), 1, signed(3), (2, 3)),
                 {"i0": 2, "i1": 3, "o": 5}, drain=1, lag=1, depth=16),
        Contract("AddUnit s4+s4->s4 x2", lambda: AddUnit(signed(4), signed(4), signed(4), 2, a_zero=1, a_mult=3,
                                                         b_zero=-2, b_mult=5, shift=2, zero_point=1),
                 {"a": 1, "b": 1, "o": 1}, drain=22, lag=16, depth=30),
        Contract("ConcatUnit s4,s4 2+4ch x2", lambda: ConcatUnit((signed(4), signed(4)), (2, 4), signed(4), 2,
                                                                 zeros=(1, 0), mults=(3, 1), shifts=(1, 0)),
                 {"i0": 1, "i1": 2, "o": 3}, drain=6, lag=3, depth=14),
        Contract("Requantize c2 pe1 acc8", lambda: Requantize(channels=2, pe=1, acc_bits=8, multiplier=[3, 5],
                                                              shift=[2, 3], out_bits=4, out_signed=True),
                 {"i": 2, "o": 2}, drain=12, lag=8, depth=16),
        Contract("Thresholds c2 pe1 2b", lambda: Thresholds(np.array([[-3, 0, 4], [-1, 1, 2]]), channels=2, pe=1,
                                                            acc_bits=5, out_bits=2, out_signed=False),
                 {"i": 2, "o": 2}, drain=6, lag=4, depth=14),
        Contract("LookupUnit u3->s3 x2", lambda: LookupUnit(unsigned(3), signed(3),
                                                            [int(v) for v in rng.integers(-4, 4, size=8)], 2),
                 {"i": 1, "o": 1}, drain=3, lag=2, depth=12),
        Contract("SpatialCrop u2 2x3x2 rows 1:2 cols 1:3 x1 -1",
                 lambda: SpatialCrop(unsigned(2), 2, 3, 2, (1, 2), (1, 3), 1, offset=1),
                 {"i": 12, "o": 4}, drain=2, lag=1, depth=18),
        Contract("UpsampleUnit u2 2x2x1 x2", lambda: UpsampleUnit(unsigned(2), 2, 2, 1, 2, 2, 1),
                 {"i": 4, "o": 16}, drain=16 + 4, lag=1, depth=36),
        Contract("PixelShuffleUnit u2 depth_to_space 1x1x1 r2", lambda: PixelShuffleUnit(unsigned(2), "depth_to_space",
                                                                                    1, 1, 1, 2),
                 {"i": 4, "o": 4}, drain=4 + 4, lag=3, depth=24),
        _window("SlidingWindow 3x3x1 k2 p0", SlidingWindow, 1,
                height=3, width=3, channels=1, kernel=2, elem_shape=unsigned(2)),
        _window("SlidingWindow 3x3x2 k3 s2 p1 simd2", SlidingWindow, 1,
                height=3, width=3, channels=2, kernel=3, stride=2, pads=1, simd=2, elem_shape=unsigned(2)),
        _window("MaxPoolUnit 4x4x1 k2", MaxPoolUnit, 4,
                height=4, width=4, channels=1, kernel=2, elem_shape=unsigned(2)),
        _window("AvgPoolUnit 3x3x1 k2 s1", AvgPoolUnit, 4,
                height=3, width=3, channels=1, kernel=2, stride=1, elem_shape=unsigned(2)),
        _window("GlobalAvgPoolUnit 2x2x2 simd2", GlobalAvgPoolUnit, 1,
                height=2, width=2, channels=2, elem_shape=unsigned(2), simd=2),
        Contract("DepthwiseUnit c2 k2 pe1", lambda: DepthwiseUnit(np.array([[1, -2], [3, 1]]), np.array([1, -1]),
                                                                  in_bits=2, in_signed=False, weight_bits=3,
                                                                  weight_signed=True, pe=1, mul_style="lut"),
                 {"i": 4, "o": 2}, drain=16, lag=4, depth=28, k=4),
        Contract("MatrixVectorUnit 2x4 pe1 simd2", lambda: MatrixVectorUnit(np.array([[1, -2, 0, 3], [2, 1, -1, 0]]),
                                                                            np.array([1, -1]), in_bits=2,
                                                                            in_signed=False, weight_bits=3,
                                                                            weight_signed=True, pe=1, simd=2,
                                                                            mul_style="lut"),
                 {"i": 2, "o": 2}, drain=16, lag=4, depth=28, k=4),
        Contract("BytesToLanes s4x2", lambda: BytesToLanes(elem_shape=signed(4), lanes=2), {"i": 2, "o": 1},
                 drain=5, lag=2, depth=16),
        Contract("LanesToBytes s4x2", lambda: LanesToBytes(elem_shape=signed(4), lanes=2), {"i": 1, "o": 2},
                 drain=4, lag=2, depth=12),
        # frame parsers: counts depend on the bytes, so the handshake only
        Contract("Deframer in 2 B buffer 8 B", lambda: Deframer(in_bytes=2, buffer_bytes=8, timeout=4),
                 {}, depth=16, cover_depth=40),
        Contract("Framer out 2 B", lambda: Framer(out_bytes=2), {}, depth=16),
        Contract("UARTRx divisor 4", lambda: UARTRx(4), {}, depth=24, cover_depth=60),
    ]
    if deep:
        return [replace(c, depth=_deeper(c), cover_depth=_deeper(c, c.cover_depth)) for c in out]
    # ``make test``: the configurations whose round and drain need a deep BMC are proved to
    # QUICK_DEPTH there (handshake by induction, counts ahead and lag to that depth); their
    # drain, element order and covers are ``make bench``'s (bench/formal.py)
    return [replace(c, depth=QUICK_DEPTH, cover=False) if c.depth > QUICK_DEPTH + 8 else c for c in out]


#: BMC depth in ``make test`` of the configurations that need more (windows, pools, the MVU)
QUICK_DEPTH = 14


def _deeper(c: Contract, depth: int | None = None) -> int:
    """The bench's depth: six cycles past the one that spans a round and its drain; two with
    the element-order check, whose BMC grows about threefold a cycle on a FIFO past that."""
    return (depth or c.depth) + (2 if c.element is not None else 6)


def tasks(contract: Contract) -> tuple[str, ...]:
    """The checks to run: covers only where the depth reaches a whole round and its drain."""
    every = ("basecase", "induction", "bmc", "cover")
    return every if contract.cover else every[:3]
