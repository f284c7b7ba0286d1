"""SpatialCrop: the pixels of a channels-last image stream inside a window of rows and columns."""
from __future__ import annotations

from amaranth.hdl import C, Module, Signal, signed
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from . import _blockparams as _p
from .cost import Cost

__all__ = ["SpatialCrop", "bench_config"]


class SpatialCrop(wiring.Component):
    """``y[r, c, :] = x[rows[0] + r, cols[0] + c, :] - offset`` for the window ``rows x cols`` of
    an ``height x width`` image streamed channels-last (pixel-major, ``channels / lanes`` words
    per pixel); a 1-D signal is the ``height = 1`` image.

    Parameters
    ----------
    elem_shape : ShapeLike
        Shape of one channel value on the input.
    height, width, channels : int
        The input image; ``lanes`` divides ``channels``.
    rows, cols : (int, int)
        The half-open ranges of rows and columns kept, non-empty, inside the image.
    lanes : int
        Channels per transfer on ``i`` and on ``o``.
    offset : int
        Subtracted from every output value (a zero point, before a requantizer); the output lane
        shape is then the signed one holding ``x - offset`` (:attr:`out_shape`), else
        ``elem_shape``.

    Three counters (word of the pixel, column, row) advance on every input transfer and wrap
    with the image; ``keep`` is their row and column inside the window. ``o.valid = i.valid &
    keep``, ``i.ready = o.ready | ~keep``, ``o.payload = i.payload - offset``: a kept transfer
    is one output transfer, a dropped one is taken without being offered downstream, and the
    payload is the input's, held while the producer holds it. No register on the data path:
    latency 0, one input word per cycle (``height * width * channels / lanes`` cycles per image).

    Ports: ``i`` (in, ``ArrayLayout(elem_shape, lanes)``), ``o`` (out, ``ArrayLayout(out_shape,
    lanes)``).
    """

    def __init__(self, elem_shape, height: int, width: int, channels: int, rows, cols, lanes: int = 1, *,
                 offset: int = 0):
        (self.elem_shape, self.height, self.width, self.channels, self.rows, self.cols,
         self.lanes) = _params(elem_shape, height, width, channels, rows, cols, lanes)
        self.offset = _p.integer(offset, "offset")
        self.out_shape = _p.offset_shape(self.elem_shape, self.offset)
        super().__init__({"i": In(stream.Signature(_p.lanes_layout(self.elem_shape, self.lanes))),
                          "o": Out(stream.Signature(_p.lanes_layout(self.out_shape, self.lanes)))})

    def elaborate(self, platform):
        m = Module()
        words = self.channels // self.lanes
        word = Signal(range(max(words, 2)), name="word")
        col = Signal(range(max(self.width, 2)), name="col")
        row = Signal(range(max(self.height, 2)), name="row")
        keep = Signal(name="keep")
        m.d.comb += keep.eq(_inside(row, self.rows, self.height) & _inside(col, self.cols, self.width))
        m.d.comb += [self.o.payload[j].eq(self.i.payload[j] - self.offset) for j in range(self.lanes)]
        m.d.comb += [self.o.valid.eq(self.i.valid & keep),
                     self.i.ready.eq(self.o.ready | ~keep)]
        with m.If(self.i.valid & self.i.ready):
            with m.If(word == words - 1):
                m.d.sync += word.eq(0)
                with m.If(col == self.width - 1):
                    m.d.sync += [col.eq(0), row.eq(0)]
                    with m.If(row != self.height - 1):
                        m.d.sync += row.eq(row + 1)
                with m.Else():
                    m.d.sync += col.eq(col + 1)
            with m.Else():
                m.d.sync += word.eq(word + 1)
        return m

    @property
    def in_transfers(self) -> int:
        """Input transfers per image."""
        return self.height * self.width * self.channels // self.lanes

    @property
    def out_transfers(self) -> int:
        """Output transfers per image."""
        return (self.rows[1] - self.rows[0]) * (self.cols[1] - self.cols[0]) * self.channels // self.lanes

    @staticmethod
    def estimate(elem_shape, height: int, width: int, channels: int, rows, cols, lanes: int = 1, *,
                 offset: int = 0, family: str = "ecp5") -> Cost:
        """Cost without elaboration: three counters (about 2 LUTs and 1 flip-flop per bit, with
        their wrap compares), two range compares per bounded side of the window (a LUT per two
        counter bits each), no data registers; one cycle per input word. An ``offset`` adds a
        subtractor (one LUT per output bit) per lane."""
        shape, h, w, c, rows, cols, lanes = _params(elem_shape, height, width, channels, rows, cols, lanes)
        _p.family(family)
        bits = [max(1, (n - 1).bit_length()) for n in (c // lanes, w, h)]
        sides = [(b, lo > 0, hi < n) for b, (lo, hi), n in ((bits[1], cols, w), (bits[2], rows, h))]
        compares = sum((b + 1) // 2 * (int(a) + int(z)) for b, a, z in sides)
        sub = lanes * _p.offset_shape(shape, _p.integer(offset, "offset")).width if offset else 0
        return Cost(h * w * c // lanes, 0, 2 * sum(bits) + compares + 2 + sub, sum(bits), 0, 0)


def _inside(counter: Signal, bounds: tuple[int, int], n: int):
    """``bounds[0] <= counter < bounds[1]``, leaving out a comparison that holds for every
    position of the axis (``1`` for a whole axis)."""
    lo, hi = bounds
    terms = ([counter >= lo] if lo > 0 else []) + ([counter < hi] if hi < n else [])
    if not terms:
        return C(1, 1)
    return terms[0] if len(terms) == 1 else terms[0] & terms[1]


def _range(value, n: int, what: str) -> tuple[int, int]:
    try:
        lo, hi = (_p.integer(v, what) for v in value)
    except (TypeError, ValueError):
        raise TypeError(f"{what} must be a pair (start, stop) of integers, not {value!r}") from None
    if not 0 <= lo < hi <= n:
        raise ValueError(f"{what} {value!r} must be a non-empty range inside 0..{n}")
    return lo, hi


def _params(elem_shape, height, width, channels, rows, cols, lanes):
    shape = _p.elem_shape(elem_shape)
    h, w = _p.positive_int(height, "height"), _p.positive_int(width, "width")
    c, lanes = _p.positive_int(channels, "channels"), _p.positive_int(lanes, "lanes")
    if c % lanes:
        raise ValueError(f"lanes {lanes!r} must divide channels {c!r}")
    return shape, h, w, c, _range(rows, h, "rows"), _range(cols, w, "cols"), lanes


def bench_config():
    """Representative configuration for ``bench.rtl`` (name, factory, feeds, expect): the centre
    24x24 of a 32x32 image of 16 8-bit channels, 4 lanes."""
    import numpy as np
    x = np.random.default_rng(0).integers(-128, 128, size=(32 * 32 * 4, 4))
    return [("SpatialCrop s8 32x32x16 -> 24x24 x4",
             lambda: SpatialCrop(signed(8), 32, 32, 16, (4, 28), (4, 28), 4), {"i": x}, {"o": 24 * 24 * 4})]
