"""Requantization: exact multiply-and-shift, ties rounded half up or half to even
(``onnx2hw.arith.requantize``)."""
from __future__ import annotations

import numpy as np
from amaranth.hdl import Const, Module, Mux, Shape, Signal, Value, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .. import arith
from ._arith_pipe import channel_front, delay, queued, rom
from ._dsp import PRODUCT_LATENCY, registered_product
from ._mul import adder_tree, n_dsp, split_product, split_product_latency, tree_registers
from .cost import FAMILIES, Cost, unelaborated
from .requant_divided import divided_form
from .requant_plan import narrow_plan

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
    as :func:`onnx2hw.arith.requantize`; with ``ties="even"`` the rounding term is
    ``2**(s-1) - 1 + bit s of acc * M`` (round half to even). Channel ``c`` of a pixel is lane
    ``c % pe`` of transfer ``c // pe``; per-channel parameters live in a ROM addressed by the fold
    counter.

    **Wide form** (default). Per-channel shifts are equalised to the largest shift ``S`` by using
    ``M << (S - s)``, so the shift is a fixed wire shift. That is exact for both rules: the
    product gains ``d = S - s`` zero bits, bit ``S`` of it is bit ``s`` of ``acc * M``, and
    ``((N << d) - 1) >> S == (N - 1) >> s`` for every integer ``N``.
    Products are split into signed 18×18 pieces (one ECP5 ``MULT18X18D`` each), registered in
    and out, and summed in a pipeline: 1 to 4 DSPs per lane for 32-bit multipliers.

    **Narrow form** (``acc_lo``/``acc_hi`` given and
    :func:`~onnx2hw.rtl.requant_plan.narrow_plan` finds one): the
    accumulator is clamped to the window where the output is not saturated (at most 18 signed
    bits), multiplied on one signed 18×18 DSP by a narrowed multiplier (plus a constant low part
    of at most three signed digits as LUT shift-and-add; no DSP at all when the multiplier has at
    most two signed digits), a bias carrying the rounding and zero point is added, and the sum is
    shifted and clamped. :func:`narrow_plan` checks at construction that this equals the spec
    at every reachable accumulator (see its docstring for the argument); if no such form exists
    the wide form is used (as for half to even with ties in reach of ``acc / 4``: its runs of
    equal outputs are 3 and 5 long, a floor of a line's differ by at most one). ``self.plan`` is the
    :class:`~onnx2hw.rtl.requant_plan.NarrowPlan` or ``None``.

    **Divided form** (``divisor`` other than 1, per tensor): ``acc * M / (divisor * 2**s)``
    rounded exactly (:mod:`~onnx2hw.rtl.requant_divided`): the product by a magic multiplier plus
    a constant, shifted; a compare of its low bits finds the ties, an odd quotient there loses
    one. One stage more than the wide form. ``self.divided`` is the
    :class:`~onnx2hw.rtl.requant_divided.DividedForm` or ``None``.

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
    ties : str
        ``"up"`` (round half up, default) or ``"even"`` (round half to even).
    divisor : int
        Divides the ratio ``M / 2**s`` exactly (default 1); other than 1 only per tensor.
    acc_lo, acc_hi : int or int array of shape (channels,), optional
        Exact reachable accumulator range per channel (both or neither). The narrow form is
        exact only for accumulators in this range.

    Ports
    -----
    i : In(stream.Signature(ArrayLayout(signed(acc_bits), pe)))
    o : Out(stream.Signature(ArrayLayout(out_shape, pe)))

    Timing
    ------
    One transfer per cycle; latency :meth:`pipeline_stages` cycles (narrow form: input register,
    clamp, product, the sum's adder levels, output clamp: 5 for one DSP and a bias), plus the output
    queue's 2. The datapath runs free; ``i.ready`` is the output queue's credit register
    (``_arith_pipe.channel_front``).
    """

    def __init__(self, *, channels, pe=1, acc_bits, multiplier, shift, zero_point=0,
                 out_bits, out_signed, lo=None, hi=None, ties="up", divisor=1, acc_lo=None, acc_hi=None):
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
        if ties not in arith.TIES:
            raise ValueError(f"ties must be one of {arith.TIES!r}, not {ties!r}")
        self.ties = ties
        self.channels, self.pe, self.acc_bits = channels, pe, acc_bits
        self.multiplier, self.shift, self.zero_point = m_arr, s_arr, z_arr
        self.per_tensor = m_scalar and s_scalar and z_scalar
        self.out_bits, self.out_signed, self.lo, self.hi = out_bits, bool(out_signed), int(lo), int(hi)
        self.max_shift = int(s_arr.max())
        self.m_norm = [int(m) << (self.max_shift - int(s)) for m, s in zip(m_arr, s_arr)]
        self.m_width, self.m_signed = _bits_for(self.m_norm)
        self.z_width, self.z_signed = _bits_for(z_arr, force_signed=True)
        if (acc_lo is None) != (acc_hi is None):
            raise ValueError(f"acc_lo and acc_hi go together, not acc_lo={acc_lo!r}, acc_hi={acc_hi!r}")
        self.plan = self.divided = None
        alo = ahi = None
        if acc_lo is not None:
            alo, _ = _per_channel("acc_lo", acc_lo, channels)
            ahi, _ = _per_channel("acc_hi", acc_hi, channels)
            amin, amax = arith.int_range(acc_bits, True)
            if np.any(alo > ahi) or np.any(alo < amin) or np.any(ahi > amax):
                raise ValueError(f"acc_lo..acc_hi must be non-empty ranges within {acc_bits}-bit "
                                 f"signed, not {acc_lo!r}..{acc_hi!r}")
        if not isinstance(divisor, (int, np.integer)) or isinstance(divisor, bool) or divisor < 1:
            raise ValueError(f"divisor must be a positive int, not {divisor!r}")
        if divisor != 1:
            if not (m_scalar and s_scalar) or int(m_arr[0]) == 0:
                raise ValueError(f"a divisor ({divisor}) needs one non-zero multiplier and shift for all channels")
            lo_acc, hi_acc = arith.int_range(acc_bits, True) if alo is None else (int(alo.min()), int(ahi.max()))
            self._divide([(int(m_arr[0]), int(s_arr[0]), int(divisor))], lo_acc, hi_acc)
            self.m_norm = [self.divided.mult[0]] * channels
        elif alo is not None:
            self.plan = narrow_plan(m_arr, s_arr, z_arr, self.lo, self.hi, alo, ahi, ties)
        out_shape = Shape(out_bits, out_signed)
        super().__init__({
            "i": In(stream.Signature(data.ArrayLayout(signed(acc_bits), pe))),
            "o": Out(stream.Signature(data.ArrayLayout(out_shape, pe))),
        })

    def _divide(self, ratios, acc_lo: int, acc_hi: int) -> None:
        """Take the divided form of the classes ``ratios`` (``(M, s, d)``): its multipliers as
        the normalised ones (one shift, the form's)."""
        self.divided = divided_form(ratios, acc_lo, acc_hi, self.ties)
        self.max_shift = self.divided.shift
        self.m_width, self.m_signed = _bits_for(self.divided.mult)
        self.half_width = _bits_for(self.divided.half, force_signed=True)[0]
        self.tie_width = _bits_for(self.divided.tie_below)[0]

    def _mshape(self):
        return Shape(self.m_width, self.m_signed)

    def pipeline_stages(self):
        if self.plan is not None:
            # input register, clamp, (DSP input register,) product and LUT pair sums, adder
            # levels, output clamp
            return 3 + self._dsp_in() + self._narrow_tree_stages() + 1
        # input register, split product, rounding shift (divided: the constant added, then the
        # shift and tie), + zero point, clamp (= output register)
        return 1 + split_product_latency(signed(self.acc_bits), self._mshape()) + 3 + (self.divided is not None)

    # -- narrow form --------------------------------------------------------------------------

    def _dsp_in(self) -> int:
        """Stages a DSP product adds in the narrow form (its input registers, the landing
        registers: ``rtl._dsp.registered_product``)."""
        return (PRODUCT_LATENCY - 1) * int(self.plan.dsp)

    def _narrow_items(self) -> int:
        """Values summed after the product stage: the DSP product and the LUT pair sums."""
        p = self.plan
        terms = len(p.low_digits) + (1 if any(p.bias) else 0)
        return int(p.dsp) + -(-terms // 2)

    def _narrow_tree_stages(self) -> int:
        n = self._narrow_items()
        return 0 if n <= 1 else tree_registers(n, 1, 0) + 1

    def _narrow_widths(self):
        """(mult_hi width, bias width, shifted-sum width), all signed."""
        p = self.plan
        mw = _bits_for(p.mult_hi, force_signed=True)[0]
        bw = _bits_for(p.bias, force_signed=True)[0]
        gw = arith.acc_bits(min(p.g_lo, 0), max(p.g_hi, 0))
        return mw, bw, gw

    def _narrow_rom(self) -> bool:
        """Whether the per-channel narrow parameters need a ROM (else constants per lane)."""
        p, pe, nf = self.plan, self.pe, self.channels // self.pe
        par = list(zip(p.mult_hi, p.bias, p.shift))
        return nf > 1 and any(par[c] != par[c % pe] for c in range(self.channels))

    def _narrow_shifts(self):
        """(distinct shifts, index width): a lane selects its channel's shift when they differ."""
        shifts = sorted(set(self.plan.shift))
        return shifts, (len(shifts) - 1).bit_length() if self._narrow_rom() else 0

    def _elaborate_narrow(self, m, q, fold, x1, v1, platform):
        """The narrow form after the input register ``x1``: each lane's parameters
        (:meth:`_narrow_params`), clamped operand (:meth:`_narrow_operand`), sum of the product,
        the LUT terms and the bias (:meth:`_narrow_sum`) and shifted, clamped output
        (:meth:`_narrow_output`); the valid bit delayed alongside."""
        en, out_valid = Const(1), q.valid
        mhs, bs, xs = self._narrow_params(m, fold, en)
        outs = []
        for k in range(self.pe):
            a = self._narrow_operand(m, en, x1, k)
            t = self._narrow_sum(m, en, a, mhs[k], bs[k], k, platform)
            outs.append(self._narrow_output(m, en, t, xs[k], k))
        vd = delay(m, en, v1, 2 + self._dsp_in() + self._narrow_tree_stages(), name="v_n")[-1]
        with m.If(en):
            m.d.sync += out_valid.eq(vd)
        for k in range(self.pe):
            m.d.comb += q.data[k].eq(outs[k])
        return m

    def _narrow_params(self, m, fold, en):
        """Each lane's (high multiplier, bias, shift index): constants, or with a ROM
        (:meth:`_narrow_rom`) read at ``fold`` and registered in stage 2 (beside the clamp), the
        shift index (``None`` if every shift is the same) delayed with the data to the output."""
        p, pe = self.plan, self.pe
        mw, bw, _ = self._narrow_widths()
        shifts, xw = self._narrow_shifts()
        if not self._narrow_rom():
            return [Const(p.mult_hi[k], signed(mw)) for k in range(pe)], [p.bias[k] for k in range(pe)], [None] * pe
        fw = mw + bw + xw
        words = []
        for f in range(self.channels // pe):
            w = 0
            for k, c in enumerate(range(f * pe, (f + 1) * pe)):
                w |= (((p.mult_hi[c] & ((1 << mw) - 1)) | ((p.bias[c] & ((1 << bw) - 1)) << mw)
                       | (shifts.index(p.shift[c]) << (mw + bw))) << (k * fw))
            words.append(w)
        word = rom(m, words, pe * fw, fold, en, "params")
        late = 2 + self._dsp_in() + self._narrow_tree_stages()     # from stage 2 to the output clamp
        mhs, bs, xs = [], [], []
        for k in range(pe):
            mh = Signal(signed(mw), name=f"mh{k}")
            b = Signal(signed(bw), name=f"b{k}")
            with m.If(en):
                m.d.sync += [mh.eq(word[k * fw:k * fw + mw].as_signed()),
                             b.eq(word[k * fw + mw:k * fw + mw + bw].as_signed())]
            mhs.append(mh)
            bs.append(b)
            xs.append(delay(m, en, word[k * fw + mw + bw:(k + 1) * fw], late, name=f"x{k}_")[-1] if xw else None)
        return mhs, bs, xs

    def _narrow_operand(self, m, en, x1, k):
        """Stage 2: lane ``k``'s accumulator clamped to the unsaturated window, less the plan's
        offset (subtracted beside the compares, not after them)."""
        p, ab = self.plan, self.acc_bits
        acc = x1[k * ab:(k + 1) * ab].as_signed()
        v = acc - p.offset if p.offset else acc
        if p.clamp_lo is not None:
            v = Mux(acc < p.clamp_lo, p.clamp_lo - p.offset, v)
        if p.clamp_hi is not None:
            v = Mux(acc > p.clamp_hi, p.clamp_hi - p.offset, v)
        a = Signal(signed(p.a_bits), name=f"a{k}")
        with m.If(en):
            m.d.sync += a.eq(v)
        return a

    def _narrow_sum(self, m, en, a, mh, b, k, platform):
        """Stage 3 (with a DSP: 3-4): the DSP product ``a * mh`` and the LUT terms (the low
        digits' shifts of ``a`` and the bias ``b``) summed in pairs, registered (with a DSP,
        once more to meet the product); then the adder levels, a register after each."""
        p, dl = self.plan, self._dsp_in()
        _, bw, _ = self._narrow_widths()
        items = []
        if p.dsp:
            pr = registered_product(m, a, mh, platform=platform, name=f"prod{k}")
            items.append(pr << p.low_bits if p.low_bits else pr)
        terms = [(a << e) if sg > 0 else -(a << e) for sg, e in p.low_digits]
        if any(p.bias):
            terms.append(b)
        for j in range(0, len(terms), 2):
            pair = terms[j] + terms[j + 1] if j + 1 < len(terms) else terms[j]
            if isinstance(pair, int):
                items.append(Const(pair, signed(bw)))
                continue
            items.append(delay(m, en, pair, 1 + dl, name=f"pair{k}_{j // 2}_")[-1])
        if len(items) == 1:
            return items[0]
        total = adder_tree(m, en, items, per_stage=1, extra_levels=0, name=f"t{k}")
        t = Signal(total.shape(), name=f"sum{k}")
        with m.If(en):
            m.d.sync += t.eq(total)
        return t

    def _narrow_output(self, m, en, t, x, k):
        """Lane ``k``'s sum shifted (by its channel's shift, selected by the index ``x`` when
        the shifts differ; exact: the shifted sum lies in [g_lo, g_hi]) and clamped to the
        output range, registered."""
        p = self.plan
        _, _, gw = self._narrow_widths()
        shifts, _ = self._narrow_shifts()
        g = Signal(signed(gw), name=f"g{k}")
        if x is None:
            m.d.comb += g.eq(t >> p.shift[k])
        else:
            with m.Switch(x):
                for j, sh in enumerate(shifts):
                    with m.Case(j):
                        m.d.comb += g.eq(t >> sh)
        y = Signal(self.o.payload[k].shape(), name=f"y{k}")
        yv = g
        if p.g_lo < self.lo:
            yv = Mux(g < self.lo, self.lo, yv)
        if p.g_hi > self.hi:
            yv = Mux(g > self.hi, self.hi, yv)
        with m.If(en):
            m.d.sync += y.eq(yv)
        return y

    def elaborate(self, platform):
        """Stage 1, the input register and the fold counter (``_arith_pipe.channel_front``),
        then the narrow form (:meth:`_elaborate_narrow`) or the wide one: the multipliers and
        zero points (:meth:`_wide_params`), the split products, and the rounding shift, zero
        point and clamp (:meth:`_wide_output`)."""
        m = Module()
        pe, nf, ab = self.pe, self.channels // self.pe, self.acc_bits
        q, fold, x1, v1 = channel_front(m, self.i, self.o, pe, nf, ab, self.pipeline_stages())
        en, out_valid = Const(1), q.valid
        if self.plan is not None:
            return self._elaborate_narrow(m, q, fold, x1, v1, platform)
        ms, zs, hts = self._wide_params(m, fold, en)
        prods = []
        lat = None
        for p in range(pe):
            acc = x1[p * ab:(p + 1) * ab].as_signed()
            prod, lat = split_product(m, en, acc, ms[p], name=f"mul{p}", platform=platform)
            prods.append(prod)
        zd = [delay(m, en, zs[p], lat, name=f"zp{p}_")[-1] if lat else zs[p] for p in range(pe)]
        valid = delay(m, en, v1, lat, name="v_mul")[-1]
        if hts is None:
            outs = self._wide_output(m, en, prods, zd)
        else:
            hts = [tuple(delay(m, en, v, lat, name=f"{n}{p}_")[-1] if lat and not isinstance(v, Const) else v
                         for v, n in zip(ht, ("half", "tie"))) for p, ht in enumerate(hts)]
            outs = self._divided_output(m, en, prods, zd, hts)
        vr = delay(m, en, valid, 2 + (hts is not None), name="v_out")[-1]
        with m.If(en):
            m.d.sync += out_valid.eq(vr)
        for p in range(pe):
            m.d.comb += q.data[p].eq(outs[p])
        return m

    def _wide_params(self, m, fold, en):
        """Each lane's (normalised multiplier, zero point) and, in the divided form, (rounding
        constant, tie bound) (else ``None``): constants when per-tensor or one fold, else fields of
        a ROM read at ``fold``."""
        pe, nf = self.pe, self.channels // self.pe
        mw, zw = self.m_width, self.z_width
        hts = None if self.divided is None else \
            [(Const(self.divided.half[0], signed(self.half_width)), Const(self.divided.tie_below[0], self.tie_width))] * pe
        if self.per_tensor or nf == 1:
            return ([Const(self.m_norm[p], self._mshape()) for p in range(pe)],
                    [Const(int(self.zero_point[p]), signed(zw)) for p in range(pe)], hts)
        words = []
        for f in range(nf):
            ch = range(f * pe, (f + 1) * pe)
            row = [self.m_norm[c] for c in ch] + [int(self.zero_point[c]) for c in ch]
            w = 0
            for p in range(pe):
                w |= (row[p] & ((1 << mw) - 1)) << (p * mw)
                w |= (row[pe + p] & ((1 << zw) - 1)) << (pe * mw + p * zw)
            words.append(w)
        word = rom(m, words, pe * (mw + zw), fold, en, "params")
        ms = [word[p * mw:(p + 1) * mw] for p in range(pe)]
        ms = [v.as_signed() if self.m_signed else v for v in ms]
        zs = [word[pe * mw + p * zw:pe * mw + (p + 1) * zw].as_signed() for p in range(pe)]
        return ms, zs, hts

    def _wide_output(self, m, en, prods, zd):
        """Each lane's product with the rounding term added and shifted by the largest shift,
        plus its zero point (``zd``, delayed with the product), clamped: three registers."""
        s = self.max_shift
        outs = []
        for p in range(self.pe):
            if not s:
                rounded = prods[p]
            elif self.ties == "even":   # 2**(s-1) - 1 + bit s: a tie rounds up from an odd quotient
                rounded = (prods[p] + ((1 << (s - 1)) - 1) + (prods[p] >> s)[0]) >> s
            else:
                rounded = (prods[p] + (1 << (s - 1))) >> s
            r = Signal(rounded.shape(), name=f"rnd{p}")
            z = Signal(zd[p].shape(), name=f"zp_r{p}")
            t = Signal(signed(max(rounded.shape().width, self.z_width) + 2), name=f"sum{p}")
            y = Signal(self.o.payload[p].shape(), name=f"y{p}")
            with m.If(en):
                m.d.sync += [r.eq(rounded), z.eq(zd[p]), t.eq(r + z),
                             y.eq(Mux(t < self.lo, self.lo, Mux(t > self.hi, self.hi, t)))]
            outs.append(y)
        return outs

    def _divided_output(self, m, en, prods, zd, hts):
        """The divided form after the product: ``v = prod + half`` registered; its quotient and
        the one taken off an odd quotient at a tie (low bits below the tie bound) registered;
        plus the zero point; clamped: four registers."""
        s = self.max_shift
        outs = []
        for p in range(self.pe):
            half, tie_below = hts[p]
            v = Signal(signed(max(prods[p].shape().width, self.half_width) + 1), name=f"v{p}")
            q = Signal(signed(max(len(v) - s, 1)), name=f"q{p}")
            off = Signal(name=f"tie_odd{p}")
            z1, z2 = (Signal(zd[p].shape(), name=f"zp_d{p}_{i}") for i in range(2))
            tie1 = Signal(Value.cast(tie_below).shape(), name=f"tie_d{p}")     # beside v
            t = Signal(signed(max(len(q), self.z_width) + 2), name=f"sum{p}")
            y = Signal(self.o.payload[p].shape(), name=f"y{p}")
            with m.If(en):
                m.d.sync += [v.eq(prods[p] + half), z1.eq(zd[p]), tie1.eq(tie_below),
                             q.eq(v >> s), off.eq((v[:s] < tie1) & (v >> s)[0]), z2.eq(z1),
                             t.eq(q + z2 - off),
                             y.eq(Mux(t < self.lo, self.lo, Mux(t > self.hi, self.hi, t)))]
            outs.append(y)
        return outs

    @classmethod
    def estimate(cls, *, family="ecp5", **kwargs) -> Cost:
        """Cost of ``Requantize(**kwargs)`` without elaboration: the constructor's arguments,
        checked by it. Calibrated against Yosys ``synth_ecp5`` (YoWASP 0.70).

        ``lut`` counts LUT4 equivalents: ``yosys_stat()["lut"] + 2 * yosys_stat()["ccu2c"]``
        (LUT4, 6 per distributed-RAM cell, 2 per CCU2C carry cell). ``family="ice40"`` scales
        the ECP5 figures (not calibrated separately).
        """
        if family not in FAMILIES:
            raise ValueError(f"family must be one of {FAMILIES!r}, not {family!r}")
        return unelaborated(cls, **kwargs)._cost(family)

    def _narrow_cost(self, family):
        p, pe, nf, ab = self.plan, self.pe, self.channels // self.pe, self.acc_bits
        mw, bw, gw = self._narrow_widths()
        aw = p.a_bits
        n_clamp = (p.clamp_lo is not None) + (p.clamp_hi is not None)
        pw = aw + mw + p.low_bits if p.dsp else aw + max((e for _, e in p.low_digits), default=0) + 1
        # the sum's bits above shift + gw are unused (Yosys drops them)
        sw = min(max(pw, bw) + 1, max(p.shift) + gw + 1)
        terms = len(p.low_digits) + (1 if any(p.bias) else 0)
        n = self._narrow_items()
        adders = terms // 2 + max(n - 1, 0)
        n_out = (p.g_lo < self.lo) + (p.g_hi > self.hi)
        rom = self._narrow_rom()
        shifts, xw = self._narrow_shifts()
        # LUT4 equivalents fitted to Yosys synth_ecp5 stat (tests/test_rtl_requant_narrow.py):
        # input clamp (compare + select), pair-sum and tree adders, output clamp and shift select
        lane = (n_clamp * (ab + aw) + 0.8 * adders * sw + n_out * (gw + self.out_bits)
                + (aw if p.offset else 0))
        if rom:
            lane += gw * (len(shifts) - 1)
        lut = pe * lane + 20
        ebr = 0
        ff = pe * (ab + aw + (aw + mw if p.dsp else 0) + adders * sw + self.out_bits) + 20
        if rom:
            width = pe * (mw + bw + xw)
            ff += width + pe * xw * (2 + self._narrow_tree_stages())
            if nf <= 64:     # a LUT ROM; two or three words are mostly wires
                lut += 1.4 * width * max(nf, 4) / 16 if nf <= 16 else 1.4 * width * -(-nf // 16)
            else:
                ebr = -(-width // 36) * -(-nf // 512)
        if family == "ice40":
            lut *= 1.1
        return queued(Cost(cycles=1, latency=self.pipeline_stages(), lut=int(round(lut)), ff=int(ff),
                           dsp=pe * int(p.dsp), ebr=ebr),
                      Shape(self.out_bits, self.out_signed), pe, self.pipeline_stages(), family=family)

    def _cost(self, family):
        if self.plan is not None:
            return self._narrow_cost(family)
        pe, nf, ab = self.pe, self.channels // self.pe, self.acc_bits
        mw, zw = self.m_width, self.z_width
        pieces = n_dsp(ab, True, mw, self.m_signed)
        pw = ab + mw
        rw = max(pw - self.max_shift, 1) + 2
        # LUT4 equivalents (a CCU2C carry cell counts 2), fitted to Yosys synth_ecp5 stat:
        # partial-product adders, rounding add (half of it constant), zero-point add and the
        # clamp compares, output mux; round half to even adds bit s of the product to the
        # rounding add, 12 to 20 LUT4 and about 32 FF per lane in the configurations of
        # tests/test_rtl_requant_ties.py
        even = self.ties == "even" and self.max_shift > 0
        lane = (pieces - 1) * pw + pw / 2 + 2 * rw + 2 * self.out_bits + 16 * even
        div = self.divided is not None     # the tie compare of the low bits, the register of the sum
        lane += div * (self.max_shift / 2 + rw)
        lut = pe * lane + pe * ab + 20
        ebr = 0
        if not (self.per_tensor or nf == 1):
            width = pe * (mw + zw)
            if nf <= 64:
                lut += 1.4 * width * -(-nf // 16)
            else:
                ebr = -(-width // 36) * -(-nf // 512)
        ff = pe * (2 * ab + mw + pieces * 36 + (pieces > 1) * pw + rw * 2 + zw * 4
                   + self.out_bits + 32 * even + div * (pw + zw + 1)) + 20
        if family == "ice40":
            lut *= 1.1
        return queued(Cost(cycles=1, latency=self.pipeline_stages(), lut=int(round(lut)), ff=int(ff),
                           dsp=pe * pieces, ebr=ebr),
                      Shape(self.out_bits, self.out_signed), pe, self.pipeline_stages(), family=family)


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

    # the narrow form on a Dense layer's requantizer (uint8 ReLU output, per-tensor scale,
    # 23-bit accumulators): one DSP and a LUT low part per lane
    nlo, nhi = -(1 << 22) + 5, (1 << 22) - 9
    xn = rng.integers(-200, 40000, size=(256, pe))
    xn[::7] = rng.integers(nlo, nhi + 1, size=xn[::7].shape)

    def narrow():
        return Requantize(channels=c, pe=pe, acc_bits=23, multiplier=1959666132, shift=38,
                          out_bits=8, out_signed=False, acc_lo=nlo, acc_hi=nhi)
    return [("requant_c64_pe4_acc24", factory, {"i": x}, {"o": len(x)}),
            ("requant_narrow_c64_pe4_acc23", narrow, {"i": xn}, {"o": len(xn)})]
