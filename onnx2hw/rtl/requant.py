"""Requantization: exact multiply-and-shift with round half up (``onnx2hw.arith.requantize``)."""
from __future__ import annotations

import numpy as np
from amaranth.hdl import Const, Module, Mux, Shape, Signal, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .. import arith
from ._arith_pipe import channel_front, delay, rom
from ._mul import n_dsp, split_product, split_product_latency
from .cost import FAMILIES, Cost, unelaborated

__all__ = ["Requantize", "bench_config"]


def _bits_for(values, force_signed=False):
    """(width, signed) of the narrowest shape holding every integer in ``values``."""
    lo, hi = int(min(values)), int(max(values))
    if lo < 0 or force_signed:
        return arith.acc_bits(min(lo, 0), max(hi, 0)), True
    return max(1, hi.bit_length()), False


def _per_channel(name, value, channels):
    arr = np.asarray(value)
    if arr.dtype.kind not in "iub":
        raise TypeError(f"{name} must be an integer or integer array, not {value!r}")
    arr = arr.astype(np.int64).reshape(-1) if arr.ndim else np.full(1, int(arr), dtype=np.int64)
    if arr.size == 1:
        return np.full(channels, int(arr[0]), dtype=np.int64), True
    if arr.shape != (channels,):
        raise ValueError(f"{name} must be a scalar or have shape ({channels},), "
                         f"not {np.shape(value)!r}")
    return arr, False


class Requantize(wiring.Component):
    """Per-tensor or per-channel requantization of a channel-folded stream.

    ``y = clamp(zp + ((acc * M + 2**(s-1)) >> s), lo, hi)`` (``s = 0``: no rounding term), exactly
    as :func:`onnx2hw.arith.requantize`. Channel ``c`` of a pixel is lane ``c % pe`` of
    transfer ``c // pe``; per-channel parameters live in a ROM addressed by the fold counter.

    Per-channel shifts are equalised to the largest shift ``S`` by using ``M << (S - s)``, which is
    exact for round half up, so the shift is a fixed wire shift. Products are split into signed
    18×18 pieces (one ECP5 ``MULT18X18D`` each), registered in and out, and summed in a pipeline.

    Parameters
    ----------
    channels, pe : int
        Channels per pixel and lanes per transfer (``pe`` divides ``channels``).
    acc_bits : int
        Width of the signed input lanes (1..48).
    multiplier, shift, zero_point : int or int array of shape (channels,)
        ``|M| < 2**32``, ``0 <= s <= 62``.
    out_bits, out_signed : int, bool
        Output lane shape.
    lo, hi : int, optional
        Clamp bounds (default: the output range); must lie within the output range.

    Ports
    -----
    i : In(stream.Signature(ArrayLayout(signed(acc_bits), pe)))
    o : Out(stream.Signature(ArrayLayout(out_shape, pe)))

    Timing
    ------
    One transfer per cycle; latency :meth:`pipeline_stages` cycles. A global enable
    ``~o.valid | o.ready`` stalls the pipeline; ``i.ready`` is a register (one-entry skid).
    """

    def __init__(self, *, channels, pe=1, acc_bits, multiplier, shift, zero_point=0,
                 out_bits, out_signed, lo=None, hi=None):
        if not isinstance(channels, int) or isinstance(channels, bool) or channels < 1:
            raise ValueError(f"channels must be a positive int, not {channels!r}")
        if not isinstance(pe, int) or isinstance(pe, bool) or pe < 1 or channels % pe:
            raise ValueError(f"pe must be a positive divisor of {channels}, not {pe!r}")
        if not isinstance(acc_bits, int) or isinstance(acc_bits, bool) or not 1 <= acc_bits <= 48:
            raise ValueError(f"acc_bits must be an int in 1..48, not {acc_bits!r}")
        if not isinstance(out_bits, int) or isinstance(out_bits, bool) or not 1 <= out_bits <= 32:
            raise ValueError(f"out_bits must be an int in 1..32, not {out_bits!r}")
        m_arr, m_scalar = _per_channel("multiplier", multiplier, channels)
        s_arr, s_scalar = _per_channel("shift", shift, channels)
        z_arr, z_scalar = _per_channel("zero_point", zero_point, channels)
        if np.any(np.abs(m_arr) >= (1 << 32)):
            raise ValueError(f"multiplier must satisfy |M| < 2**32, not {multiplier!r}")
        if np.any(s_arr < 0) or np.any(s_arr > 62):
            raise ValueError(f"shift must be in 0..62, not {shift!r}")
        olo, ohi = arith.int_range(out_bits, out_signed)
        lo = olo if lo is None else lo
        hi = ohi if hi is None else hi
        for name, v in (("lo", lo), ("hi", hi)):
            if not isinstance(v, (int, np.integer)) or not olo <= int(v) <= ohi:
                raise ValueError(f"{name} must be an int in [{olo}, {ohi}], not {v!r}")
        if lo > hi:
            raise ValueError(f"lo must not exceed hi, not lo={lo!r}, hi={hi!r}")
        if np.any(np.abs(z_arr) >= (1 << 40)):
            raise ValueError(f"zero_point out of range: {zero_point!r}")
        self.channels, self.pe, self.acc_bits = channels, pe, acc_bits
        self.multiplier, self.shift, self.zero_point = m_arr, s_arr, z_arr
        self.per_tensor = m_scalar and s_scalar and z_scalar
        self.out_bits, self.out_signed, self.lo, self.hi = out_bits, bool(out_signed), int(lo), int(hi)
        self.max_shift = int(s_arr.max())
        self.m_norm = [int(m) << (self.max_shift - int(s)) for m, s in zip(m_arr, s_arr)]
        self.m_width, self.m_signed = _bits_for(self.m_norm)
        self.z_width, self.z_signed = _bits_for(z_arr, force_signed=True)
        out_shape = Shape(out_bits, out_signed)
        super().__init__({
            "i": In(stream.Signature(data.ArrayLayout(signed(acc_bits), pe))),
            "o": Out(stream.Signature(data.ArrayLayout(out_shape, pe))),
        })

    def _mshape(self):
        return Shape(self.m_width, self.m_signed)

    def pipeline_stages(self):
        # input register, split product, rounding shift, + zero point, clamp (= output register)
        return 1 + split_product_latency(signed(self.acc_bits), self._mshape()) + 3

    def elaborate(self, platform):
        m = Module()
        pe, nf, ab = self.pe, self.channels // self.pe, self.acc_bits
        # Stage 1: input register and parameter ROM.
        en, out_valid, fold, x1, v1 = channel_front(m, self.i, self.o, pe, nf, ab)
        mw, zw = self.m_width, self.z_width
        if self.per_tensor or nf == 1:
            ms = [Const(self.m_norm[p], self._mshape()) for p in range(pe)]
            zs = [Const(int(self.zero_point[p]), signed(zw)) for p in range(pe)]
        else:
            rows = []
            for f in range(nf):
                ch = range(f * pe, (f + 1) * pe)
                rows.append([self.m_norm[c] for c in ch] + [int(self.zero_point[c]) for c in ch])
            words = []
            for row in rows:
                w = 0
                for p in range(pe):
                    w |= (row[p] & ((1 << mw) - 1)) << (p * mw)
                    w |= (row[pe + p] & ((1 << zw) - 1)) << (pe * mw + p * zw)
                words.append(w)
            word = rom(m, words, pe * (mw + zw), fold, en, "params")
            ms = [word[p * mw:(p + 1) * mw] for p in range(pe)]
            ms = [v.as_signed() if self.m_signed else v for v in ms]
            zs = [word[pe * mw + p * zw:pe * mw + (p + 1) * zw].as_signed() for p in range(pe)]

        prods = []
        lat = None
        for p in range(pe):
            acc = x1[p * ab:(p + 1) * ab].as_signed()
            prod, lat = split_product(m, en, acc, ms[p], name=f"mul{p}")
            prods.append(prod)
        zd = [delay(m, en, zs[p], lat, name=f"zp{p}_")[-1] if lat else zs[p] for p in range(pe)]
        valid = delay(m, en, v1, lat, name="v_mul")[-1]

        s = self.max_shift
        outs = []
        for p in range(pe):
            rounded = (prods[p] + (1 << (s - 1))) >> s if s else prods[p]
            r = Signal(rounded.shape(), name=f"rnd{p}")
            z = Signal(zd[p].shape(), name=f"zp_r{p}")
            t = Signal(signed(max(rounded.shape().width, zw) + 2), name=f"sum{p}")
            y = Signal(self.o.payload[p].shape(), name=f"y{p}")
            with m.If(en):
                m.d.sync += [r.eq(rounded), z.eq(zd[p]), t.eq(r + z),
                             y.eq(Mux(t < self.lo, self.lo, Mux(t > self.hi, self.hi, t)))]
            outs.append(y)
        vr = delay(m, en, valid, 2, name="v_out")[-1]
        with m.If(en):
            m.d.sync += out_valid.eq(vr)
        for p in range(pe):
            m.d.comb += self.o.payload[p].eq(outs[p])
        return m

    @classmethod
    def estimate(cls, *, channels, pe=1, acc_bits, multiplier, shift, zero_point=0, out_bits,
                 out_signed, lo=None, hi=None, family="ecp5"):
        """Cost without elaboration, calibrated against Yosys ``synth_ecp5`` (YoWASP 0.70).

        ``lut`` counts LUT4 equivalents: ``yosys_stat()["lut"] + 2 * yosys_stat()["ccu2c"]``
        (LUT4, 6 per distributed-RAM cell, 2 per CCU2C carry cell). ``family="ice40"`` scales
        the ECP5 figures (not calibrated separately).
        """
        if family not in FAMILIES:
            raise ValueError(f"family must be one of {FAMILIES!r}, not {family!r}")
        self = unelaborated(cls, channels=channels, pe=pe, acc_bits=acc_bits, multiplier=multiplier,
                     shift=shift, zero_point=zero_point, out_bits=out_bits, out_signed=out_signed,
                     lo=lo, hi=hi)
        return self._cost(family)

    def _cost(self, family):
        pe, nf, ab = self.pe, self.channels // self.pe, self.acc_bits
        mw, zw = self.m_width, self.z_width
        pieces = n_dsp(ab, True, mw, self.m_signed)
        pw = ab + mw
        rw = max(pw - self.max_shift, 1) + 2
        # LUT4 equivalents (a CCU2C carry cell counts 2), fitted to Yosys synth_ecp5 stat:
        # partial-product adders, rounding add (half of it constant), zero-point add and the
        # clamp compares, output mux
        lane = (pieces - 1) * pw + pw / 2 + 2 * rw + 2 * self.out_bits
        lut = pe * lane + pe * ab + 20
        ebr = 0
        if not (self.per_tensor or nf == 1):
            width = pe * (mw + zw)
            if nf <= 64:
                lut += 1.4 * width * -(-nf // 16)
            else:
                ebr = -(-width // 36) * -(-nf // 512)
        ff = pe * (2 * ab + mw + pieces * 36 + (pieces > 1) * pw + rw * 2 + zw * 4
                   + self.out_bits) + 20
        if family == "ice40":
            lut *= 1.1
        return Cost(cycles=1, latency=self.pipeline_stages(), lut=int(round(lut)), ff=int(ff),
                    dsp=pe * pieces, ebr=ebr)


def bench_config():
    """Bench entries ``[(name, factory, feeds, expect)]``."""
    rng = np.random.default_rng(2)
    c, pe, ab = 64, 4, 24
    m_ = rng.integers(1 << 20, 1 << 24, size=c)
    s_ = rng.integers(20, 30, size=c)
    z_ = rng.integers(-5, 5, size=c)
    x = rng.integers(-(1 << 23), 1 << 23, size=(256, pe))

    def factory():
        return Requantize(channels=c, pe=pe, acc_bits=ab, multiplier=m_, shift=s_, zero_point=z_,
                          out_bits=8, out_signed=True)
    return [("requant_c64_pe4_acc24", factory, {"i": x}, {"o": len(x)})]
