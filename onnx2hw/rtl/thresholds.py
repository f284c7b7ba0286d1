"""Multi-threshold activation: ``y = lo + count(acc >= T[c, i])`` (``onnx2hw.arith.multithreshold``)."""
from __future__ import annotations

import numpy as np
from amaranth.hdl import Cat, Const, Module, Shape, Signal, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .. import arith
from ._arith_pipe import channel_front, delay, pack_words, queued, rom
from .cost import FAMILIES, Cost, unelaborated

__all__ = ["Thresholds", "bench_config"]


class Thresholds(wiring.Component):
    """Per-channel or per-tensor multi-threshold activation of a channel-folded stream.

    Every lane compares its accumulator with all ``steps`` thresholds of its channel in parallel
    and outputs ``lo`` plus the number of thresholds reached. Channel ``c`` of a pixel is lane
    ``c % pe`` of transfer ``c // pe``; per-channel thresholds live in a ROM addressed by the fold
    counter (constants when ``channels == pe`` or per tensor). Thresholds outside the accumulator
    range are clipped to ``[min, max + 1]`` (same result), so each is ``acc_bits + 1`` bits.

    Parameters
    ----------
    thresholds : int ndarray, shape (channels, steps) or (1, steps)
    channels, pe : int
        Channels per pixel and lanes per transfer (``pe`` divides ``channels``).
    acc_bits : int
        Width of the signed input lanes (1..48).
    out_bits, out_signed : int, bool
        Output lane shape; ``lo .. lo + steps`` must fit it.
    lo : int
        Output for an input below every threshold.

    Ports
    -----
    i : In(stream.Signature(ArrayLayout(signed(acc_bits), pe)))
    o : Out(stream.Signature(ArrayLayout(out_shape, pe)))

    Timing
    ------
    One transfer per cycle; latency 3 cycles (input/ROM register, comparison register, output
    register) plus the output queue's 2. The datapath runs free; ``i.ready`` is the output
    queue's credit register (``_arith_pipe.channel_front``).
    """

    STAGES = 3

    def __init__(self, thresholds, *, channels, pe=1, acc_bits, out_bits, out_signed, lo=0):
        t = np.asarray(thresholds)
        if t.dtype.kind not in "iub":
            raise TypeError(f"thresholds must be an integer array, not dtype {t.dtype!r}")
        if not isinstance(channels, int) or isinstance(channels, bool) or channels < 1:
            raise ValueError(f"channels must be a positive int, not {channels!r}")
        if t.ndim != 2 or t.shape[0] not in (1, channels) or t.shape[1] < 1:
            raise ValueError(f"thresholds must have shape ({channels}, steps) or (1, steps), "
                             f"not {t.shape!r}")
        if not isinstance(pe, int) or isinstance(pe, bool) or pe < 1 or channels % pe:
            raise ValueError(f"pe must be a positive divisor of {channels}, not {pe!r}")
        if not isinstance(acc_bits, int) or isinstance(acc_bits, bool) or not 1 <= acc_bits <= 48:
            raise ValueError(f"acc_bits must be an int in 1..48, not {acc_bits!r}")
        if not isinstance(out_bits, int) or isinstance(out_bits, bool) or not 1 <= out_bits <= 8:
            raise ValueError(f"out_bits must be an int in 1..8, not {out_bits!r}")
        olo, ohi = arith.int_range(out_bits, out_signed)
        steps = t.shape[1]
        if not isinstance(lo, (int, np.integer)) or lo < olo or lo + steps > ohi:
            raise ValueError(f"lo={lo!r} with {steps} thresholds does not fit the {out_bits}-bit "
                             f"{'signed' if out_signed else 'unsigned'} range [{olo}, {ohi}]")
        amin, amax = arith.int_range(acc_bits, True)
        self.thresholds = np.clip(t.astype(np.int64), amin, amax + 1)
        self.channels, self.pe, self.acc_bits, self.steps = channels, pe, acc_bits, steps
        self.out_bits, self.out_signed, self.lo = out_bits, bool(out_signed), int(lo)
        self.per_tensor = t.shape[0] == 1
        out_shape = Shape(out_bits, out_signed)
        super().__init__({
            "i": In(stream.Signature(data.ArrayLayout(signed(acc_bits), pe))),
            "o": Out(stream.Signature(data.ArrayLayout(out_shape, pe))),
        })

    def pipeline_stages(self):
        return self.STAGES

    def _uses_rom(self):
        return not self.per_tensor and self.channels > self.pe

    def elaborate(self, platform):
        m = Module()
        pe, nf, ab, n = self.pe, self.channels // self.pe, self.acc_bits, self.steps
        tw = ab + 1
        q, fold, x1, v1 = channel_front(m, self.i, self.o, pe, nf, ab, self.pipeline_stages())
        en, out_valid = Const(1), q.valid
        if self._uses_rom():
            rows = [self.thresholds[f * pe:(f + 1) * pe].reshape(-1) for f in range(nf)]
            word = rom(m, pack_words(rows, tw), pe * n * tw, fold, en, "thresholds")
            thr = [[word[(p * n + i) * tw:(p * n + i + 1) * tw].as_signed() for i in range(n)]
                   for p in range(pe)]
        else:
            tab = np.broadcast_to(self.thresholds, (pe, n)) if self.per_tensor else self.thresholds
            thr = [[Const(int(tab[p, i]), signed(tw)) for i in range(n)] for p in range(pe)]

        outs = []
        for p in range(pe):
            acc = x1[p * ab:(p + 1) * ab].as_signed()
            hits = Signal(n, name=f"hits{p}")
            with m.If(en):
                m.d.sync += hits.eq(Cat(*[acc >= thr[p][i] for i in range(n)]))
            count = _popcount([hits[i] for i in range(n)])
            y = Signal(self.o.payload[p].shape(), name=f"y{p}")
            with m.If(en):
                m.d.sync += y.eq(self.lo + count)
            outs.append(y)
        v_out = delay(m, en, v1, 1, name="v_cmp")[-1]
        with m.If(en):
            m.d.sync += out_valid.eq(v_out)
        for p in range(pe):
            m.d.comb += q.data[p].eq(outs[p])
        return m

    @classmethod
    def estimate(cls, thresholds, *, channels, pe=1, acc_bits, out_bits, out_signed, lo=0,
                 family="ecp5"):
        """Cost without elaboration, calibrated against Yosys ``synth_ecp5`` (YoWASP 0.70).

        ``lut`` counts LUT4 equivalents: ``yosys_stat()["lut"] + 2 * yosys_stat()["ccu2c"]``
        (LUT4, 6 per distributed-RAM cell, 2 per CCU2C carry cell). ``family="ice40"`` scales
        the ECP5 figures (not calibrated separately).
        """
        if family not in FAMILIES:
            raise ValueError(f"family must be one of {FAMILIES!r}, not {family!r}")
        self = unelaborated(cls, thresholds, channels=channels, pe=pe, acc_bits=acc_bits,
                     out_bits=out_bits, out_signed=out_signed, lo=lo)
        return self._cost(family)

    def _cost(self, family):
        pe, nf, ab, n = self.pe, self.channels // self.pe, self.acc_bits, self.steps
        tw = ab + 1
        # LUT4 equivalents (a CCU2C carry cell counts 2), fitted to Yosys synth_ecp5 stat
        cmp_lut = 0.85 * pe * n * tw                 # one carry-chain comparison each (constants fold)
        rom_lut, ebr = 0, 0
        if self._uses_rom():
            width = pe * n * tw
            if nf <= 64:
                rom_lut = 1.1 * width * -(-nf // 16)
            else:
                ebr = min(-(-width // dw) * -(-nf // dd)
                          for dw, dd in ((36, 512), (18, 1024), (9, 2048), (4, 4096)))
                rom_lut = width * 0.8                # output registers / read muxing
        pop_lut = pe * (n + self.out_bits)
        lut = cmp_lut + rom_lut + pop_lut + 10
        ff = pe * (2 * ab + n + self.out_bits) + 10 + (pe * n * tw if self._uses_rom() else 0)
        if family == "ice40":
            lut *= 1.1
        return queued(Cost(cycles=1, latency=self.STAGES, lut=int(round(lut)), ff=int(ff), dsp=0, ebr=ebr),
                      Shape(self.out_bits, self.out_signed), pe, self.STAGES, family=family)


def bench_config():
    """Bench entries ``[(name, factory, feeds, expect)]``."""
    rng = np.random.default_rng(3)
    c, pe, ab = 64, 4, 20
    t = np.sort(rng.integers(-(1 << 16), 1 << 16, size=(c, 15)), axis=1)
    x = rng.integers(-(1 << 17), 1 << 17, size=(256, pe))

    def factory():
        return Thresholds(t, channels=c, pe=pe, acc_bits=ab, out_bits=4, out_signed=False)
    return [("thresholds_c64_pe4_4b", factory, {"i": x}, {"o": len(x)})]


def _popcount(bits):
    """Balanced sum of 1-bit values (a linear chain nests too deep for Amaranth at 255 steps)."""
    items = list(bits)
    while len(items) > 1:
        pairs = [items[k] + items[k + 1] for k in range(0, len(items) - 1, 2)]
        items = pairs + ([items[-1]] if len(items) % 2 else [])
    return items[0]
