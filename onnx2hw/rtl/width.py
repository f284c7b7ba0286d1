"""Lane-count conversion between stages with different folding."""
from __future__ import annotations

import math

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from . import _blockparams as _p
from .replicate import banks_of, replicas
from .cost import Cost

__all__ = ["WidthConverter"]


class WidthConverter(wiring.Component):
    """Repack a stream of ``in_lanes`` elements per transfer into ``out_lanes`` per transfer.

    Element order is kept: element ``t*in_lanes + j`` (lane ``j`` of input transfer ``t``)
    leaves as lane ``e % out_lanes`` of output transfer ``e // out_lanes``. A stream must
    carry a multiple of ``lcm(in_lanes, out_lanes)`` elements to come out whole.

    Parameters
    ----------
    elem_shape : ShapeLike
        Shape of one lane.
    in_lanes, out_lanes : int
        Lanes on ``i`` and ``o`` (>= 1).

    Structure and timing:

    * equal: wires (latency 0);
    * ``out_lanes = k * in_lanes`` (gather): a shift register of ``k - 1`` pieces and an
      output register; accepts one input per cycle, emits every ``k`` cycles; latency 1;
      ``i.ready`` is a register (the last piece waits for a free output register);
    * ``in_lanes = k * out_lanes`` (split): the input word is loaded into a register whose
      pieces a counter selects, one per output transfer; emits one output per cycle and
      accepts the next input during the last piece; latency 1;
    * otherwise: gather to ``lcm`` lanes, then split (latency 2).

    Throughput is ``min(in_lanes, out_lanes)`` elements per cycle. Outputs are registers that
    change only on an output transfer (stream rules hold); a split's ``i.ready`` depends
    combinationally on ``o.ready``.

    Ports: ``i`` (in), ``o`` (out).
    """

    def __init__(self, elem_shape, in_lanes: int, out_lanes: int):
        self.elem_shape = _p.elem_shape(elem_shape)
        self.in_lanes = _p.positive_int(in_lanes, "in_lanes")
        self.out_lanes = _p.positive_int(out_lanes, "out_lanes")
        super().__init__({
            "i": In(stream.Signature(_p.lanes_layout(self.elem_shape, self.in_lanes))),
            "o": Out(stream.Signature(_p.lanes_layout(self.elem_shape, self.out_lanes))),
        })

    def elaborate(self, platform):
        m = Module()
        n_in, n_out, w = self.in_lanes, self.out_lanes, self.elem_shape.width
        if n_in == n_out:
            wiring.connect(m, wiring.flipped(self.i), wiring.flipped(self.o))
        elif n_out % n_in == 0:
            self._gather(m, self.i, self.o, n_out // n_in, n_in * w)
        elif n_in % n_out == 0:
            self._split(m, self.i, self.o, n_in // n_out, n_out * w)
        else:
            lcm = math.lcm(n_in, n_out)
            mid = stream.Signature(_p.lanes_layout(self.elem_shape, lcm)).create(path=("mid",))
            self._gather(m, self.i, mid, lcm // n_in, n_in * w)
            self._split(m, mid, self.o, lcm // n_out, n_out * w)
        return m

    @staticmethod
    def _gather(m, i, o, k, piece):
        """``i.ready`` is a register: the last piece is taken only once the output register is
        free (not in the cycle it is taken, so the output may wait one cycle more when
        ``o.ready`` falls); then ``o.ready`` reaches no further upstream and the shift and load
        enables come from per-bank copies of registered flags (the input's valid only joins
        them): a count through the output's valid into the upstream FIFO and back to every
        output bit's enable would be a loop across the chip."""
        buf = Signal((k - 1) * piece)
        count = Signal(range(k))
        fire = i.valid & i.ready
        count_next = Mux(fire, Mux(count == k - 1, 0, count + 1), count)
        valid_next = Mux(fire & (count == k - 1), 1, Mux(o.ready, 0, o.valid))
        ready_next = (count_next != k - 1) | ~valid_next
        m.d.sync += [count.eq(count_next), o.valid.eq(valid_next)]
        ready = Signal(init=1, name="ready")
        m.d.sync += ready.eq(ready_next)
        m.d.comb += i.ready.eq(ready)
        flat = o.payload.as_value()
        banks = banks_of(k * piece)
        shifts = replicas(m, ready_next & (count_next != k - 1), len(banks), "shift", init=1)
        loads = replicas(m, ready_next & (count_next == k - 1), len(banks), "load")
        whole = Cat(buf, i.payload)
        for b, (lo, hi) in enumerate(banks):
            with m.If(i.valid & loads[b]):
                m.d.sync += flat[lo:hi].eq(whole[lo:hi])
            if lo < (k - 1) * piece:
                top = min(hi, (k - 1) * piece)
                shifted = Cat(buf[piece:], i.payload) if k > 2 else i.payload
                with m.If(i.valid & shifts[b]):
                    m.d.sync += buf[lo:top].eq(shifted[lo:top])

    @staticmethod
    def _split(m, i, o, k, piece):
        """The word is loaded whole and its pieces are selected by ``count`` (a multiplexer on
        the way out) rather than shifted, so that only a load enables the word's registers; the
        word is split into banks, each loaded under its own copies of ``o.valid`` and of
        ``o.valid & last`` (registers): ``i.valid`` and ``o.ready`` reach one enable per bank
        rather than every bit of the word."""
        word = Signal(k * piece)
        count = Signal(range(k))
        last = count == k - 1
        m.d.comb += [o.payload.eq(word.word_select(count, piece)), i.ready.eq(~o.valid | (last & o.ready))]
        fire_in, fire_out = i.valid & i.ready, o.valid & o.ready
        count_next = Mux(fire_in, 0, Mux(fire_out, count + 1, count))
        valid_next = Mux(fire_in, 1, Mux(fire_out & last, 0, o.valid))
        m.d.sync += [count.eq(count_next), o.valid.eq(valid_next)]
        banks = banks_of(k * piece)
        valids = replicas(m, valid_next, len(banks), "valid")
        lasts = replicas(m, valid_next & (count_next == k - 1), len(banks), "last")
        for b, (lo, hi) in enumerate(banks):
            with m.If(i.valid & (~valids[b] | (lasts[b] & o.ready))):
                m.d.sync += word[lo:hi].eq(i.payload.as_value()[lo:hi])

    @staticmethod
    def estimate(elem_shape, in_lanes: int, out_lanes: int, family: str = "ecp5") -> Cost:
        """Cycles per input transfer and resources (calibrated against Yosys ``synth_ecp5``)."""
        w = _p.elem_shape(elem_shape).width
        n_in = _p.positive_int(in_lanes, "in_lanes")
        n_out = _p.positive_int(out_lanes, "out_lanes")
        family = _p.family(family)
        if n_in == n_out:
            return Cost(1, 0, 0, 0, 0, 0)
        lcm = math.lcm(n_in, n_out)
        # cycles per input transfer: gather takes 1; split takes in/out
        cycles = max(1, n_in // n_out) if n_in % n_out == 0 else max(1, -(-n_in // n_out))
        cost = Cost(cycles, 0, 0, 0, 0, 0)
        if lcm != n_in:     # gather: (k-1)-piece shift register + output register (enables)
            k, piece = lcm // n_in, n_in * w
            cbits = max(1, (k - 1).bit_length())
            # (+ the ready register and two enable flags per bank)
            banks = len(banks_of(lcm * w))
            cost = Cost(cycles, 1, lut=2 * cbits + 9 + int(1.5 * banks),
                        ff=(k - 1) * piece + lcm * w + cbits + 2 + 2 * banks, dsp=0, ebr=0)
        if lcm != n_out:    # split: word register, k:1 piece multiplexer (ECP5: 4/3 LUT4 per input)
            k, piece = lcm // n_out, n_out * w
            cbits = max(1, (k - 1).bit_length())
            bits = lcm * w
            per_bit = 4 / 3 if family == "ecp5" else 1
            cost = Cost(cycles, cost.latency + 1,
                        cost.lut + int(per_bit * (bits - piece)) + cbits + 6,
                        cost.ff + bits + cbits + 1 + 2 * len(banks_of(bits)), 0, 0)
        return cost


def bench_config():
    """Representative configurations for ``bench.rtl`` (name, factory, feeds, expect)."""
    import numpy as np
    from amaranth.hdl import signed
    e = np.random.default_rng(0).integers(-128, 128, size=2400)
    return [("WidthConverter s8 4->6", lambda: WidthConverter(signed(8), 4, 6),
             {"i": e.reshape(-1, 4)}, {"o": len(e) // 6}),
            ("WidthConverter s8 16->4", lambda: WidthConverter(signed(8), 16, 4),
             {"i": e.reshape(-1, 16)}, {"o": len(e) // 4})]
