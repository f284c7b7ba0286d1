"""The requantizer of an average pool whose divisor depends on the output position.

An ONNX ``AveragePool`` divides each window sum by the positions it counts: with
``count_include_pad=0`` those inside the image, and with ceil-mode partial last windows those
inside the padded image. The divisor of output ``(i, j)`` is ``rows_count[i] * cols_count[j]``,
and along an axis only the first and last few windows differ from the rest, so a pool has a
few divisor classes (corner, edge, interior). :class:`DivisorRequantize` is the
:class:`~onnx2hw.rtl.requant.Requantize` wide form whose multiplier is chosen per output pixel
from those classes; the window sum before it is unchanged (padding adds the input zero point,
so the sum less ``area * zp`` is the exact real sum over the counted positions).
"""
from __future__ import annotations

import numpy as np
from amaranth.hdl import Cat, Const, Mux, Signal, signed

from .. import arith
from ._arith_pipe import rom, rom_cost
from ._linebuf import clog2
from .cost import Cost
from .requant import Requantize

__all__ = ["DivisorRequantize", "bench_config"]


def _classes(name, values) -> tuple[int, ...]:
    try:
        out = tuple(int(v) for v in values)
    except TypeError:
        raise TypeError(f"{name} must be a sequence of ints, not {values!r}") from None
    if not out or min(out) < 0 or any(isinstance(v, bool) for v in values):
        raise ValueError(f"{name} must be a non-empty sequence of non-negative class indices, not {values!r}")
    return out


def _table(name, value, r: int, k: int, channels: int) -> np.ndarray:
    """``value`` as an int64 ``(R, K, channels)`` array (from ``(R, K)`` or ``(R, K, channels)``)."""
    arr = np.asarray(value)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"{name} must be an integer array, not {value!r}")
    if arr.shape == (r, k):
        arr = arr[:, :, None]
    if arr.shape not in ((r, k, 1), (r, k, channels)):
        raise ValueError(f"{name} must have shape ({r}, {k}) or ({r}, {k}, {channels}), not {arr.shape!r}")
    return np.broadcast_to(arr.astype(np.int64), (r, k, channels))


class DivisorRequantize(Requantize):
    """Requantization of an NHWC pixel stream with one multiplier and shift per divisor class.

    ``y = clamp(zp + ((acc * M + 2**(s-1)) >> s), lo, hi)`` (:func:`onnx2hw.arith.requantize`;
    ``ties="even"``: round half to even) with ``M = multiplier[rows[i], cols[j]]`` (and
    ``shift`` alike; per channel when the tables have a channel axis) for the pixels of output
    row ``i``, column ``j``.

    A column and a row counter advance as a pixel's last transfer is taken and keep the class
    pair of the pixel being taken in registers (the class of the next column is looked up from
    the current column, so a register feeds each lookup). The pair (and, with per-channel
    tables, the fold counter) addresses a table of normalised multipliers ``M << (S - s)``
    (``S`` the largest shift, a fixed wire shift after the product: exact for both rules, see
    :class:`Requantize`),
    read as the transfer is taken: the multiplier reaches the product's operand register beside
    the registered input word, as the per-channel parameters of :class:`Requantize` do.

    Parameters
    ----------
    channels, pe, acc_bits, out_bits, out_signed, lo, hi, ties
        As :class:`Requantize`.
    rows, cols : sequence of int
        Class index of each output row (``0..R-1``) and column (``0..K-1``), ``R = max(rows) + 1``.
    multiplier, shift : int array of shape ``(R, K)`` or ``(R, K, channels)``
        ``|M| < 2**32``, ``0 <= s <= 62``.
    divisor : int or int array of shape ``(R, K)``
        Divides each class's ratio exactly (as :class:`Requantize`'s ``divisor``); other than 1
        anywhere, every class takes the divided form (one shift; per-channel tables refused), its
        table words holding multiplier, rounding constant and tie bound.
    zero_point : int
        Output zero point (one for all channels).

    Ports
    -----
    i : In(stream.Signature(ArrayLayout(signed(acc_bits), pe))), ``len(rows) * len(cols) *
        channels / pe`` transfers per image.
    o : Out(stream.Signature(ArrayLayout(out_shape, pe)))

    Timing
    ------
    As the wide form of :class:`Requantize`: one transfer per cycle, latency
    :meth:`pipeline_stages` plus the output queue's 2; ``i.ready`` is the output queue's credit
    register, ``o`` comes from the queue's registers (valid never depends on ready, the payload
    holds until taken).
    """

    def __init__(self, *, channels, pe=1, acc_bits, rows, cols, multiplier, shift, zero_point=0,
                 out_bits, out_signed, lo=None, hi=None, ties="up", divisor=1):
        rows, cols = _classes("rows", rows), _classes("cols", cols)
        nr, nk = max(rows) + 1, max(cols) + 1
        if not isinstance(channels, int) or isinstance(channels, bool) or channels < 1:
            raise ValueError(f"channels must be a positive int, not {channels!r}")
        m = _table("multiplier", multiplier, nr, nk, channels)
        s = _table("shift", shift, nr, nk, channels)
        if np.any(np.abs(m) >= (1 << 32)):
            raise ValueError(f"multiplier must satisfy |M| < 2**32, not {multiplier!r}")
        if np.any(s < 0) or np.any(s > 62):
            raise ValueError(f"shift must be in 0..62, not {shift!r}")
        if np.size(zero_point) != 1:
            raise ValueError(f"zero_point must be one int, not {zero_point!r}")
        super().__init__(channels=channels, pe=pe, acc_bits=acc_bits, multiplier=int(m.flat[0]),
                         shift=int(s.flat[0]), zero_point=zero_point, out_bits=out_bits,
                         out_signed=out_signed, lo=lo, hi=hi, ties=ties)
        self.rows, self.cols = rows, cols
        self.table_multiplier, self.table_shift = m, s
        #: the multipliers vary by channel too (the table is addressed by the fold as well)
        self.per_channel = bool(np.any(m != m[:, :, :1])) or bool(np.any(s != s[:, :, :1]))
        self.max_shift = int(s.max())
        self.m_norm = [[int(m[r, k, c]) << (self.max_shift - int(s[r, k, c])) for c in range(channels)]
                       for r in range(nr) for k in range(nk)]     # class r * K + k, then channel
        flat = [v for row in self.m_norm for v in row]
        lo_m, hi_m = min(flat), max(flat)
        self.m_signed = lo_m < 0
        self.m_width = arith.acc_bits(min(lo_m, 0), max(hi_m, 0)) if self.m_signed else max(1, hi_m.bit_length())
        d = _table("divisor", np.asarray(divisor) if np.ndim(divisor) else np.full((nr, nk), divisor), nr, nk, 1)
        if np.any(d < 1):
            raise ValueError(f"divisor must be positive, not {divisor!r}")
        if np.any(d != 1):
            if self.per_channel or np.any(m == 0):
                raise ValueError("a divisor needs one non-zero multiplier and shift per class for all channels")
            self._divide([(int(m[r, k, 0]), int(s[r, k, 0]), int(d[r, k, 0])) for r in range(nr) for k in range(nk)],
                         *arith.int_range(acc_bits, True))
            self.m_norm = [[v] * channels for v in self.divided.mult]
        # the constant-parameter cost of the base class; the class table is costed in _cost
        self.per_tensor = True

    # -- the class table ----------------------------------------------------------------------

    def _fold_bits(self) -> int:
        return clog2(self.channels // self.pe) if self.per_channel else 0

    def _word_bits(self) -> int:
        """Bits of one lane's table field: the multiplier (divided form: then the rounding
        constant and the tie bound)."""
        return self.m_width + (0 if self.divided is None else self.half_width + self.tie_width)

    def _table_words(self) -> list[int]:
        """Table words at address ``(r, k, fold)`` packed ``fold | k << fb | r << (fb + kb)``:
        the ``pe`` lanes' fields (:meth:`_word_bits`; per-tensor: one, shared by the lanes)."""
        nr, nk = max(self.rows) + 1, max(self.cols) + 1
        kb, fb = clog2(nk), self._fold_bits()
        nf, pe, mw, fw = self.channels // self.pe, self.pe, self.m_width, self._word_bits()
        lanes = pe if self.per_channel else 1
        words = []
        for r in range(nr):
            for k in range(1 << kb):
                for f in range(1 << fb):
                    w = 0
                    if k < nk and f < nf:
                        for lane in range(lanes):
                            v = self.m_norm[r * nk + k][f * pe + lane] & ((1 << mw) - 1)
                            if self.divided is not None:
                                c = r * nk + k
                                v |= ((self.divided.half[c] & ((1 << self.half_width) - 1)) << mw
                                      | self.divided.tie_below[c] << (mw + self.half_width))
                            w |= v << (lane * fw)
                    words.append(w)
        return words

    def _wide_params(self, m, fold, en):
        """Each lane's normalised multiplier, read from the class table at the registered class
        pair (and the fold), and the zero point (a constant)."""
        take = self.i.valid & self.i.ready
        nf = self.channels // self.pe
        oh, ow = len(self.rows), len(self.cols)
        nr, nk = max(self.rows) + 1, max(self.cols) + 1
        col = Signal(range(max(ow, 2)), name="col")
        row = Signal(range(max(oh, 2)), name="row")
        cc = Signal(range(max(nk, 2)), name="col_class", init=self.cols[0])
        rc = Signal(range(max(nr, 2)), name="row_class", init=self.rows[0])
        next_cc = _lookup(m, [self.cols[(j + 1) % ow] for j in range(ow)], col, cc.shape(), "next_col_class")
        next_rc = _lookup(m, [self.rows[(i + 1) % oh] for i in range(oh)], row, rc.shape(), "next_row_class")
        with m.If(take & (fold == nf - 1)):
            m.d.sync += [col.eq(Mux(col == ow - 1, 0, col + 1)), cc.eq(next_cc)]
            with m.If(col == ow - 1):
                m.d.sync += [row.eq(Mux(row == oh - 1, 0, row + 1)), rc.eq(next_rc)]
        kb, fb = clog2(nk), self._fold_bits()
        addr = Cat(*(part for part, bits in ((fold, fb), (cc, kb), (rc, clog2(nr))) if bits))
        lanes = self.pe if self.per_channel else 1
        mw, fw = self.m_width, self._word_bits()
        word = rom(m, self._table_words(), lanes * fw, addr if len(addr) else Const(0, 1), en, "div_params")
        fields = [word[(lane if self.per_channel else 0) * fw:((lane if self.per_channel else 0) + 1) * fw]
                  for lane in range(self.pe)]
        ms = [f[:mw].as_signed() if self.m_signed else f[:mw] for f in fields]
        zs = [Const(int(self.zero_point[0]), signed(self.z_width)) for _ in range(self.pe)]
        hw = self.half_width if self.divided is not None else 0
        hts = None if self.divided is None else [(f[mw:mw + hw].as_signed(), f[mw + hw:]) for f in fields]
        return ms, zs, hts

    def _cost(self, family):
        base = super()._cost(family)
        nr, nk = max(self.rows) + 1, max(self.cols) + 1
        kb, rb, fb = clog2(nk), clog2(nr), self._fold_bits()
        depth = nr * (1 << kb) * (1 << fb)
        width = (self.pe if self.per_channel else 1) * self._word_bits()
        ebr, lut = rom_cost(depth, width)
        oh, ow = len(self.rows), len(self.cols)
        cb, hb = clog2(ow), clog2(oh)
        # counters (incrementer, wrap compare, select) and the next-class lookups (LUT ROMs)
        lut += 3 * (cb + hb) + int(1.4 * (kb * -(-ow // 16) + rb * -(-oh // 16)))
        ff = cb + hb + kb + rb + (width if depth > 1 else 0)
        return base + Cost(cycles=0, latency=0, lut=lut, ff=ff, dsp=0, ebr=ebr)


def _lookup(m, values, index, shape, name):
    """``values[index]`` as a combinational table (a LUT ROM of small words)."""
    out = Signal(shape, name=name)
    if len(set(values)) == 1:
        m.d.comb += out.eq(values[0])
        return out
    with m.Switch(index):
        for i, v in enumerate(values):
            with m.Case(i):
                m.d.comb += out.eq(v)
    return out


def bench_config():
    """A 3x3 stride-1 pool with ``count_include_pad=0`` and padding 1 on a 16x16 map: divisors
    4 (corners), 6 (edges) and 9 (interior); 8 channels, 4 lanes, 12-bit sums."""
    rng = np.random.default_rng(3)
    rows = (0,) + (1,) * 14 + (0,)
    counts = np.array([2, 3])
    ratio = 0.7 / np.multiply.outer(counts, counts)
    shift = np.full((2, 2), 30)
    mult = np.rint(ratio * 2.0 ** 30).astype(np.int64)

    def factory():
        return DivisorRequantize(channels=8, pe=4, acc_bits=12, rows=rows, cols=rows, multiplier=mult,
                                 shift=shift, zero_point=-3, out_bits=8, out_signed=True)
    x = rng.integers(-2048, 2048, size=(2 * 16 * 16 * 2, 4))
    return [("divisor_requant_3x3_p1_16x16x8_pe4", factory, {"i": x}, {"o": len(x)})]
