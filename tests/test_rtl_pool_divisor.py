"""DivisorRequantize: the requantizer of an average pool whose divisor depends on the output
position, under random valid/ready stalls against the int64 formula written here."""
from __future__ import annotations

import math

import numpy as np
import pytest

from onnx2hw.rtl.cost import Cost
from onnx2hw.rtl.pool_divisor import DivisorRequantize, bench_config
from onnx2hw.sim.pysim import run_stream

pytestmark = pytest.mark.filterwarnings("ignore:.*created but never used")


def _classes(counts):
    """Class index per position from the per-axis counts (distinct counts in ascending order)."""
    values = sorted(set(counts))
    return tuple(values.index(c) for c in counts), values


def _tables(rows, cols, channels, per_channel, rng, ratio=0.8, negative=False):
    """Multiplier and shift per (row count, column count[, channel]): ``ratio / divisor`` on
    about 31 bits, as the importer's ``ratio_to_multiplier_shift`` chooses them."""
    shape = (len(rows), len(cols)) + ((channels,) if per_channel else ())
    div = np.multiply.outer(rows, cols).reshape(len(rows), len(cols), *([1] if per_channel else []))
    r = ratio * (rng.uniform(0.5, 1.5, shape) if per_channel else np.ones(shape)) / div
    shift = 31 - np.frexp(r)[1]
    mult = np.rint(r * 2.0 ** shift).astype(np.int64)
    if negative:
        mult = mult * rng.choice([-1, 1], size=shape)
    return mult, shift.astype(np.int64)


def _formula(acc, pix_class, chan, mult, shift, zp, lo, hi):
    """``clamp(zp + ((acc * M + 2**(s-1)) >> s), lo, hi)`` in Python integers, ``M``/``s`` of each
    element's (row class, column class[, channel])."""
    out = np.empty(acc.shape, np.int64)
    for idx in np.ndindex(*acc.shape):
        r, k = pix_class[idx[0]]
        key = (r, k, chan[idx]) if mult.ndim == 3 else (r, k)
        m, s = int(mult[key]), int(shift[key])
        y = ((int(acc[idx]) * m + (1 << (s - 1) if s else 0)) >> s) + zp
        out[idx] = min(max(y, lo), hi)
    return out


def _stream_classes(row_cls, col_cls, channels, pe, transfers):
    """(row class, column class) of each transfer and the channel of each lane (NHWC order)."""
    nf = channels // pe
    t = np.arange(transfers)
    pix = (t // nf) % (len(row_cls) * len(col_cls))
    cls = list(zip(np.array(row_cls)[pix // len(col_cls)], np.array(col_cls)[pix % len(col_cls)]))
    chan = (t[:, None] % nf) * pe + np.arange(pe)[None, :]
    return cls, chan


# (row counts, column counts, channels, pe, acc bits, out bits, signed, per channel, pause)
CASES = [
    ((2, 3, 3, 3, 2), (2, 3, 3, 3, 2), 4, 2, 12, 8, True, False, "random"),         # 3x3 s1 p1, cip=0
    ((3, 3, 2), (2, 2, 2, 2, 1), 6, 3, 11, 8, False, False, "3of4"),                # 2x2 s2 ceil on 5x9
    ((1,), (2, 3, 3, 3, 3, 2), 8, 8, 10, 8, True, False, "random"),                 # 1-D k3 s1 p1
    ((2, 3, 2), (3, 3, 1), 6, 2, 13, 8, True, True, "random"),                      # per channel
    ((4, 6, 6, 6, 5), (4, 6, 6, 4), 3, 1, 14, 4, True, False, "3of4"),              # 4-bit output
    ((9, 6), (1,), 5, 5, 12, 8, False, True, "none"),                                # one column
]


@pytest.mark.parametrize("rows,cols,channels,pe,ab,ob,osg,per_channel,pause", CASES)
def test_divisor_requantize_matches_formula(rows, cols, channels, pe, ab, ob, osg, per_channel, pause):
    rng = np.random.default_rng(len(rows) * 7 + len(cols))
    row_cls, rv = _classes(rows)
    col_cls, cv = _classes(cols)
    mult, shift = _tables(rv, cv, channels, per_channel, rng, ratio=2.0 ** (ob - ab + 2) * 9)
    lo, hi = (-(1 << (ob - 1)), (1 << (ob - 1)) - 1) if osg else (0, (1 << ob) - 1)
    zp = 3 if osg else 5
    dut = DivisorRequantize(channels=channels, pe=pe, acc_bits=ab, rows=row_cls, cols=col_cls, multiplier=mult,
                            shift=shift, zero_point=zp, out_bits=ob, out_signed=osg)
    images = max(2, math.ceil(1200 / (len(rows) * len(cols) * channels)))
    transfers = images * len(rows) * len(cols) * channels // pe
    x = rng.integers(-(1 << (ab - 1)), 1 << (ab - 1), size=(transfers, pe))
    x[:2] = [[-(1 << (ab - 1))] * pe, [(1 << (ab - 1)) - 1] * pe]
    out, _ = run_stream(dut, {"i": x}, {"o": transfers}, src_pause=pause, sink_pause=pause, seed=5)
    cls, chan = _stream_classes(row_cls, col_cls, channels, pe, transfers)
    np.testing.assert_array_equal(out["o"], _formula(x, cls, chan, mult, shift, zp, lo, hi))


def test_negative_multipliers_and_one_cycle_per_transfer():
    rng = np.random.default_rng(9)
    row_cls, rv = _classes((2, 3, 3, 2))
    mult, shift = _tables(rv, rv, 4, True, rng, ratio=0.05, negative=True)
    dut = DivisorRequantize(channels=4, pe=2, acc_bits=12, rows=row_cls, cols=row_cls, multiplier=mult, shift=shift,
                            zero_point=-2, out_bits=8, out_signed=True)
    x = rng.integers(-2048, 2048, size=(4 * 16 * 2, 2))
    out, cycles = run_stream(dut, {"i": x}, {"o": len(x)})
    cls, chan = _stream_classes(row_cls, row_cls, 4, 2, len(x))
    np.testing.assert_array_equal(out["o"], _formula(x, cls, chan, mult, shift, -2, -128, 127))
    est = DivisorRequantize.estimate(channels=4, pe=2, acc_bits=12, rows=row_cls, cols=row_cls, multiplier=mult,
                                     shift=shift, zero_point=-2, out_bits=8, out_signed=True)
    assert isinstance(est, Cost) and est.cycles == 1 and est.dsp >= 2
    assert cycles <= len(x) + est.latency + 4, (cycles, est)


def test_estimate_adds_the_class_table_to_a_constant_requantizer():
    from onnx2hw.rtl.requant import Requantize
    rows, rv = _classes((2, 3, 3, 3, 2))
    mult, shift = _tables(rv, rv, 8, False, np.random.default_rng(1))
    kw = dict(channels=8, pe=4, acc_bits=12, zero_point=0, out_bits=8, out_signed=True)
    plain = Requantize.estimate(multiplier=int(mult[1, 1]), shift=int(shift[1, 1]), **kw)
    est = DivisorRequantize.estimate(rows=rows, cols=rows, multiplier=mult, shift=shift, **kw)
    assert est.lut > plain.lut and est.ff > plain.ff and est.ebr == 0 and est.latency == plain.latency


@pytest.mark.parametrize("kwargs,exc,text", [
    (dict(rows=()), ValueError, "rows"),
    (dict(cols=(0, -1)), ValueError, "cols"),
    (dict(rows=5), TypeError, "rows"),
    (dict(multiplier=np.ones((3, 2), np.int64)), ValueError, r"\(2, 2\)"),
    (dict(multiplier=np.ones((2, 2))), TypeError, "multiplier"),
    (dict(multiplier=np.full((2, 2), 1 << 32)), ValueError, "2\\*\\*32"),
    (dict(shift=np.full((2, 2), 63)), ValueError, "shift"),
    (dict(zero_point=[1, 2]), ValueError, "zero_point"),
    (dict(pe=3), ValueError, "pe"),
])
def test_divisor_requantize_rejects_bad_parameters(kwargs, exc, text):
    args = dict(channels=4, pe=2, acc_bits=12, rows=(0, 1, 0), cols=(0, 1), multiplier=np.ones((2, 2), np.int64),
                shift=np.full((2, 2), 4), zero_point=0, out_bits=8, out_signed=True)
    args.update(kwargs)
    with pytest.raises(exc, match=text):
        DivisorRequantize(**args)


def test_bench_config_runs():
    for name, factory, feeds, expect in bench_config():
        dut = factory()
        out, _ = run_stream(dut, feeds, expect)
        row_cls, col_cls = dut.rows, dut.cols
        cls, chan = _stream_classes(row_cls, col_cls, dut.channels, dut.pe, len(feeds["i"]))
        want = _formula(feeds["i"], cls, chan, dut.table_multiplier[:, :, 0], dut.table_shift[:, :, 0],
                        int(dut.zero_point[0]), dut.lo, dut.hi)
        np.testing.assert_array_equal(out["o"], want, err_msg=name)


@pytest.mark.sim
def test_divisor_requantize_verilator():
    from onnx2hw.sim.cocotb_run import run_cocotb
    rng = np.random.default_rng(4)
    row_cls, rv = _classes((2, 3, 3, 3, 1))
    col_cls, cv = _classes((3, 3, 2))
    mult, shift = _tables(rv, cv, 6, True, rng, ratio=0.1)

    def factory():
        return DivisorRequantize(channels=6, pe=2, acc_bits=12, rows=row_cls, cols=col_cls, multiplier=mult,
                                 shift=shift, zero_point=4, out_bits=8, out_signed=False)
    transfers = 30 * 15 * 3
    x = rng.integers(-2048, 2048, size=(transfers, 2))
    out, _ = run_cocotb(factory, {"i": x}, {"o": transfers}, src_pause="random", sink_pause="random", seed=3)
    cls, chan = _stream_classes(row_cls, col_cls, 6, 2, transfers)
    np.testing.assert_array_equal(out["o"], _formula(x, cls, chan, mult, shift, 4, 0, 255))


@pytest.mark.synth
def test_divisor_requantize_synth_matches_estimate():
    """synth_ecp5 succeeds; LUT4 equivalents (a CCU2C carry cell counts 2, as for Requantize),
    FF and DSP within 30 % of the model."""
    from onnx2hw.rtl.synth_check import yosys_stat
    rows, rv = _classes((2, 3, 3, 3, 3, 3, 2))
    mult, shift = _tables(rv, rv, 16, False, np.random.default_rng(2))
    kw = dict(channels=16, pe=4, acc_bits=12, rows=rows, cols=rows, multiplier=mult, shift=shift, zero_point=-1,
              out_bits=8, out_signed=True)
    stat = yosys_stat(DivisorRequantize(**kw))
    est = DivisorRequantize.estimate(**kw)
    assert stat["dsp"] == est.dsp and stat["ebr"] == est.ebr, (stat, est)
    lut = stat["lut"] + 2 * stat["ccu2c"]
    assert abs(est.lut - lut) <= 0.3 * lut, (stat, est)
    assert abs(est.ff - stat["ff"]) <= 0.3 * stat["ff"], (stat, est)


def _axis(n, k, s, begin, end, include_pad, ceil):
    """(windows, end padding the hardware adds, divisor per window) of ONNX's AveragePool on an
    axis of ``n``: a ceil-mode last window may not start in the end padding; its divisor counts the
    positions inside the padded axis (``include_pad``) or the input, never a ceil extension."""
    span = n + begin + end - k
    out = (-(-span // s) if ceil else span // s) + 1
    if ceil and (out - 1) * s >= n + begin:
        out -= 1
    lo, hi = (-begin, n + end) if include_pad else (0, n)
    div = [min(i * s - begin + k, hi) - max(i * s - begin, lo) for i in range(out)]
    return out, max(end, (out - 1) * s + k - n - begin), div


# (H, W, C, kernel, stride, pads (t, l, b, r), count_include_pad, ceil_mode, simd, input bits/signed)
STAGES = [
    (7, 6, 4, (3, 3), (1, 1), (1, 1, 1, 1), False, False, 2, (8, True)),      # Keras SAME, stride 1
    (8, 8, 3, (3, 3), (2, 2), (0, 0, 1, 1), False, False, 3, (8, False)),     # Keras SAME, stride 2, even
    (8, 7, 2, (3, 3), (2, 2), (1, 1, 1, 1), True, True, 1, (8, False)),       # PyTorch ceil_mode, counted pads
    (7, 9, 4, (2, 2), (2, 2), (0, 0, 0, 0), False, True, 4, (4, True)),       # ceil_mode partial windows
    (1, 10, 6, (1, 3), (1, 2), (0, 1, 0, 1), True, True, 3, (8, True)),       # 1-D, ceil
]


@pytest.mark.parametrize("h,w,c,kernel,stride,pads,include,ceil,simd,inp", STAGES)
def test_average_pool_stage_with_varying_divisors(h, w, c, kernel, stride, pads, include, ceil, simd, inp):
    """The avgpool layer's stage (AvgPoolUnit padding with the zero point, the ``- area * zp``
    Cast, DivisorRequantize) in an accelerator core under random stalls, against the int64
    formula: the window sum of ``x - zp`` over the image, requantized by the multiplier of the
    output's divisor."""
    from onnx2hw import layers as ig
    from onnx2hw.dataflow import compile_pipeline
    from onnx2hw.rtl.accelerator import AcceleratorCore
    from onnx2hw.sim.model_sim import from_transfers, to_transfers
    from _one_layer import graph_of
    rng = np.random.default_rng(h * w + c)
    bits, sgn = inp
    t_in = ig.IntType(bits, sgn)
    zp = int(rng.integers(t_in.lo, t_in.hi + 1))
    oh, end_h, div_h = _axis(h, kernel[0], stride[0], pads[0], pads[2], include, ceil)
    ow, end_w, div_w = _axis(w, kernel[1], stride[1], pads[1], pads[3], include, ceil)
    hw_pads = (pads[0], pads[1], end_h, end_w)
    area = kernel[0] * kernel[1]
    divisors = sorted({a * b for a in div_h for b in div_w})
    assert len(divisors) > 1
    ratio = {d: 0.6 * 2.0 ** (8 - bits) / d for d in divisors}
    shifts = {d: 31 - int(np.frexp(r)[1]) for d, r in ratio.items()}
    mults = {d: int(np.rint(ratio[d] * 2.0 ** shifts[d])) for d in divisors}
    acts = tuple((d, ig.Requant(np.array([mults[d]]), np.array([shifts[d]]), -4, -128, 127)) for d in divisors)
    layer = ig.AvgPool("ap", ("x",), ig.TensorSpec("y", (oh, ow, c), ig.IntType(8, True)), kernel, stride, hw_pads,
                       acts[-1][1], -area * zp, zp, counts=(tuple(div_h), tuple(div_w)), count_acts=acts)
    graph = graph_of(ig.TensorSpec("x", (h, w, c), t_in), [layer])
    p = compile_pipeline(graph, folding={"ap": (simd, simd)})
    assert [b.kind for b in p.stages[0].blocks][-1] == "DivisorRequantize"
    n = 3
    x = rng.integers(t_in.lo, t_in.hi + 1, (n, h, w, c))
    li, lo = p.input_link, p.output_link
    out, _ = run_stream(AcceleratorCore(p), {"i": to_transfers(x, li.dst_lanes)}, {"o": lo.elements // lo.src_lanes * n},
                        src_pause="random", sink_pause="random", seed=2, check_comb=False, idle_limit=1 << 20)
    got = from_transfers(out["o"], n, (oh, ow, c))
    want = np.empty((n, oh, ow, c), np.int64)
    for i in range(oh):
        for j in range(ow):
            r0, c0 = i * stride[0] - pads[0], j * stride[1] - pads[1]
            win = x[:, max(r0, 0):max(min(r0 + kernel[0], h), 0), max(c0, 0):max(min(c0 + kernel[1], w), 0)]
            s = (win.astype(np.int64) - zp).sum(axis=(1, 2))
            d = div_h[i] * div_w[j]
            y = ((s * mults[d] + (1 << (shifts[d] - 1))) >> shifts[d]) - 4
            want[:, i, j] = np.clip(y, -128, 127)
    np.testing.assert_array_equal(got, want)
