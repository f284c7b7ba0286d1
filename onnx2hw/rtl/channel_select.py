"""ChannelSelectUnit: per pixel, a constant list of the input's channels, in that order."""
from __future__ import annotations

from amaranth.hdl import Module, Mux, Signal, signed
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from . import _blockparams as _p
from .cost import Cost

__all__ = ["ChannelSelectUnit", "bench_config"]


class ChannelSelectUnit(wiring.Component):
    """``y[p, j] = x[p, indices[j]]`` for every pixel ``p`` of a channels-last stream.

    Parameters
    ----------
    elem_shape : ShapeLike
        Shape of one channel value (input and output alike).
    in_channels : int
        Channels per input pixel; ``in_lanes`` divides it.
    indices : sequence of int
        The selected input channel of each output channel (any order; repeats allowed);
        ``out_lanes`` divides their number.
    in_lanes, out_lanes : int
        Channels per transfer on ``i`` and on ``o``.
    pixels : int
        Pixels per inference; only used by :meth:`estimate` for the cycle count.
    offset : int
        Subtracted from every output value (a zero point, before a requantizer); the output lane
        shape is then the signed one holding ``x - offset`` (:attr:`out_shape`), else
        ``elem_shape``. The subtraction is combinational on the output payload (no latency).

    Two forms, chosen from the parameters (:attr:`direct`):

    * **direct** (``in_lanes == out_lanes`` and every output word, ``out_lanes`` channels, is a
      whole input word, the words in increasing order: a lane-aligned slice or split, a stride
      over words): the input words not selected are consumed and dropped, the others pass
      through. ``o.valid = i.valid & keep[word]``, ``i.ready = o.ready | ~keep[word]``,
      ``o.payload = i.payload``: no register on the data path, latency 0, one input word per
      cycle (``in_channels / in_lanes`` cycles per pixel).
    * **buffered** (anything else): a double-buffered pixel register file. The input writes one
      bank, word by word, while the output reads the other in ``indices`` order (one constant
      channel per lane and output word, a multiplexer over the output word counter). A bank is
      written only while not full and read only while full, so the payload (registers and the
      word counter) holds until its transfer; ``o.valid`` is the read bank's full flag, a
      register (it never depends on ``o.ready``); ``i.ready`` is the write bank's empty flag.
      Latency ``in_channels / in_lanes`` cycles (the whole pixel, then its first output word
      the next cycle); initiation interval ``max(in_channels / in_lanes, len(indices) /
      out_lanes)`` cycles per pixel.

    Ports: ``i`` (in, ``ArrayLayout(elem_shape, in_lanes)``), ``o`` (out, ``ArrayLayout(out_shape,
    out_lanes)``).
    """

    def __init__(self, elem_shape, in_channels: int, indices, in_lanes: int = 1, out_lanes: int = 1, *,
                 pixels: int = 1, offset: int = 0):
        (self.elem_shape, self.in_channels, self.indices, self.in_lanes, self.out_lanes,
         self.pixels) = _params(elem_shape, in_channels, indices, in_lanes, out_lanes, pixels)
        self.offset = _p.integer(offset, "offset")
        self.out_shape = _p.offset_shape(self.elem_shape, self.offset)
        self.keep = _direct_words(self.in_channels, self.indices, self.in_lanes, self.out_lanes)
        super().__init__({"i": In(stream.Signature(_p.lanes_layout(self.elem_shape, self.in_lanes))),
                          "o": Out(stream.Signature(_p.lanes_layout(self.out_shape, self.out_lanes)))})

    @property
    def direct(self) -> bool:
        """The selection drops whole input words and passes the others (no pixel buffer)."""
        return self.keep is not None

    def elaborate(self, platform):
        return self._direct() if self.direct else self._buffered()

    def _direct(self) -> Module:
        m = Module()
        words = self.in_channels // self.in_lanes
        word = Signal(range(max(words, 2)), name="word")
        keep = Signal(name="keep")
        with m.Switch(word):
            for w, k in enumerate(self.keep):
                with m.Case(w):
                    m.d.comb += keep.eq(int(k))
        m.d.comb += [self.o.payload[j].eq(self.i.payload[j] - self.offset) for j in range(self.out_lanes)]
        m.d.comb += [self.o.valid.eq(self.i.valid & keep),
                     self.i.ready.eq(self.o.ready | ~keep)]
        with m.If(self.i.valid & self.i.ready):
            m.d.sync += word.eq(Mux(word == words - 1, 0, word + 1))
        return m

    def _buffered(self) -> Module:
        m = Module()
        li, lo = self.in_lanes, self.out_lanes
        w_words, r_words = self.in_channels // li, len(self.indices) // lo
        banks = [[Signal(self.elem_shape, name=f"b{k}_c{c}") for c in range(self.in_channels)] for k in range(2)]
        full = [Signal(name=f"full{k}") for k in range(2)]
        wsel, rsel = Signal(name="wsel"), Signal(name="rsel")
        wcnt = Signal(range(max(w_words, 2)), name="wcnt")
        rcnt = Signal(range(max(r_words, 2)), name="rcnt")
        m.d.comb += [self.i.ready.eq(~Mux(wsel, full[1], full[0])), self.o.valid.eq(Mux(rsel, full[1], full[0]))]
        with m.If(self.i.valid & self.i.ready):
            for k in range(2):
                with m.If(wsel == k):
                    with m.Switch(wcnt):
                        for w in range(w_words):
                            with m.Case(w):
                                m.d.sync += [banks[k][w * li + j].eq(self.i.payload[j]) for j in range(li)]
            with m.If(wcnt == w_words - 1):
                m.d.sync += [wcnt.eq(0), wsel.eq(~wsel)]
                for k in range(2):
                    with m.If(wsel == k):
                        m.d.sync += full[k].eq(1)
            with m.Else():
                m.d.sync += wcnt.eq(wcnt + 1)
        with m.Switch(rcnt):
            for r in range(r_words):
                with m.Case(r):
                    for j in range(lo):
                        c = self.indices[r * lo + j]
                        m.d.comb += self.o.payload[j].eq(Mux(rsel, banks[1][c], banks[0][c]) - self.offset)
        with m.If(self.o.valid & self.o.ready):
            with m.If(rcnt == r_words - 1):
                m.d.sync += [rcnt.eq(0), rsel.eq(~rsel)]
                for k in range(2):
                    with m.If(rsel == k):
                        m.d.sync += full[k].eq(0)
            with m.Else():
                m.d.sync += rcnt.eq(rcnt + 1)
        return m

    @staticmethod
    def estimate(elem_shape, in_channels: int, indices, in_lanes: int = 1, out_lanes: int = 1, *, pixels: int = 1,
                 offset: int = 0, family: str = "ecp5") -> Cost:
        """Cost without elaboration. Direct form: a word counter and its keep table (about 2 LUTs
        per counter bit), no data registers; one cycle per input word. Buffered form: two banks
        of ``in_channels`` registers, per output bit a ``2 * words``-input multiplexer (about
        ``words`` LUT4s with the ECP5 wide-function muxes), the bank write decoders; cycles
        ``pixels * max(input words, output words)``. An ``offset`` adds a subtractor (one LUT
        per output bit) per output lane."""
        shape, c, idx, li, lo, pixels = _params(elem_shape, in_channels, indices, in_lanes, out_lanes, pixels)
        _p.family(family)
        sub = lo * _p.offset_shape(shape, _p.integer(offset, "offset")).width if offset else 0
        w_words, r_words = c // li, len(idx) // lo
        if _direct_words(c, idx, li, lo) is not None:
            bits = max(1, (w_words - 1).bit_length())
            return Cost(pixels * w_words, 0, 2 * bits + 2 + sub, bits, 0, 0)
        wbits, rbits = max(1, (w_words - 1).bit_length()), max(1, (r_words - 1).bit_length())
        lut = lo * shape.width * max(1, r_words) + 2 * w_words + 4 * (wbits + rbits) + 6 + sub
        ff = 2 * c * shape.width + wbits + rbits + 4
        return Cost(pixels * max(w_words, r_words), w_words, lut, ff, 0, 0)


def _direct_words(in_channels: int, indices: tuple[int, ...], in_lanes: int, out_lanes: int):
    """The keep flag of every input word when the selection is whole input words in increasing
    order with equal lanes (the direct form), else ``None``."""
    if in_lanes != out_lanes:
        return None
    lanes = in_lanes
    words = []
    for r in range(len(indices) // lanes):
        first = indices[r * lanes]
        if first % lanes or indices[r * lanes:(r + 1) * lanes] != tuple(range(first, first + lanes)):
            return None
        words.append(first // lanes)
    if any(b <= a for a, b in zip(words, words[1:])):
        return None
    keep = [False] * (in_channels // lanes)
    for w in words:
        keep[w] = True
    return tuple(keep)


def _params(elem_shape, in_channels, indices, in_lanes, out_lanes, pixels):
    shape = _p.elem_shape(elem_shape)
    c = _p.positive_int(in_channels, "in_channels")
    idx = tuple(_p.integer(v, "indices entry") for v in indices)
    if not idx:
        raise ValueError(f"indices must select one or more channels, not {indices!r}")
    if any(not 0 <= v < c for v in idx):
        raise ValueError(f"indices {idx!r} must lie in 0..{c - 1} (in_channels {c!r})")
    li = _p.positive_int(in_lanes, "in_lanes")
    lo = _p.positive_int(out_lanes, "out_lanes")
    if c % li:
        raise ValueError(f"in_lanes {li!r} must divide in_channels {c!r}")
    if len(idx) % lo:
        raise ValueError(f"out_lanes {lo!r} must divide the {len(idx)} selected channels")
    return shape, c, idx, li, lo, _p.positive_int(pixels, "pixels")


def bench_config():
    """Representative configuration for ``bench.rtl`` (name, factory, feeds, expect): a channel
    shuffle of 16 8-bit channels in groups of 2, 4 lanes."""
    import numpy as np
    pixels = 64
    x = np.random.default_rng(0).integers(-128, 128, size=(pixels * 4, 4))
    perm = tuple(int(v) for v in np.arange(16).reshape(2, 8).T.reshape(-1))
    return [("ChannelSelect s8 shuffle 16ch x4", lambda: ChannelSelectUnit(signed(8), 16, perm, 4, 4, pixels=pixels),
             {"i": x}, {"o": 4 * pixels})]
