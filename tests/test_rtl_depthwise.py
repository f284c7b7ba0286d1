"""DepthwiseUnit: per-channel dot products against an int64 NumPy formula, alone and behind a
depthwise SlidingWindow (a whole depthwise convolution), under backpressure; parameters checked;
its cost model against Yosys."""
import numpy as np
import pytest
from amaranth.hdl import Module, signed, unsigned
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from onnx2hw.rtl.depthwise import DepthwiseUnit, bench_config
from onnx2hw.rtl.synth_check import yosys_stat
from onnx2hw.rtl.window import SlidingWindow
from onnx2hw.sim.pysim import run_stream


def _range(bits, sgn):
    return (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if sgn else (0, (1 << bits) - 1)


def _expected(x, w, b, mult):
    """``x`` (pixels, C, taps), ``w`` (C*M, taps): y (pixels, C*M) by the definition, int64."""
    xo = np.repeat(x.astype(np.int64), mult, axis=1)           # output channel o reads input o // M
    return (xo * w.astype(np.int64)[None]).sum(axis=2) + b


# (channels, taps, multiplier, pe, in (bits, signed), weight (bits, signed), bias)
CASES = [
    (8, 9, 1, 4, (8, False), (8, True), True),      # DSP products
    (6, 4, 1, 3, (4, True), (3, True), True),       # LUT products
    (4, 9, 1, 1, (8, True), (1, False), False),     # 0/1 weights (average pool as depthwise)
    (4, 1, 1, 4, (8, True), (8, True), True),       # 1x1 kernel, one word
    (3, 3, 2, 1, (2, False), (4, True), True),      # channel multiplier 2
    (4, 25, 3, 2, (8, False), (6, True), True),     # multiplier 3, 5x5 taps
    (64, 9, 1, 1, (8, False), (8, True), True),     # 576 weight words: block RAM, registered
    (72, 1, 1, 1, (8, True), (8, True), True),      # 72 weight and bias words: both registered
]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("pause", ["random", "3of4"])
@pytest.mark.parametrize("style", ["auto", "lut"])
def test_depthwise_unit_matches_formula(case, pause, style):
    c, k, mult, pe, (ib, isg), (wb, wsg), has_bias = case
    rng = np.random.default_rng(c * 100 + k * 10 + mult)
    w = rng.integers(*_range(wb, wsg), endpoint=True, size=(c * mult, k))
    b = rng.integers(-5000, 5000, size=c * mult) if has_bias else np.zeros(c * mult, np.int64)
    pixels = max(3, 1200 // (c * k))
    x = rng.integers(*_range(ib, isg), endpoint=True, size=(pixels, c, k))
    dut = DepthwiseUnit(w, b if has_bias else None, in_bits=ib, in_signed=isg, weight_bits=wb,
                        weight_signed=wsg, pe=pe, multiplier=mult, mul_style=style)
    assert style == "auto" or dut.style == "lut"
    # stream order: per pixel, channel group, tap; lanes = pe channels of the group
    feed = x.reshape(pixels, c // pe, pe, k).transpose(0, 1, 3, 2).reshape(-1, pe)
    out, _ = run_stream(dut, {"i": feed}, {"o": pixels * c // pe}, src_pause=pause, sink_pause=pause, seed=3)
    np.testing.assert_array_equal(out["o"].reshape(pixels, c * mult), _expected(x, w, b, mult))


class _DepthwiseConv(wiring.Component):
    """A depthwise SlidingWindow joined to a DepthwiseUnit (what Conv lowers a depthwise layer to)."""

    def __init__(self, window, unit):
        self.window, self.unit = window, unit
        super().__init__({"i": In(stream.Signature(window.i.payload.shape())),
                          "o": Out(stream.Signature(unit.o.payload.shape()))})

    def elaborate(self, platform):
        m = Module()
        m.submodules.window, m.submodules.unit = self.window, self.unit
        wiring.connect(m, wiring.flipped(self.i), self.window.i)
        wiring.connect(m, self.window.o, self.unit.i)
        wiring.connect(m, self.unit.o, wiring.flipped(self.o))
        return m


def _conv_nhwc(x, w, b, stride, pads, pad_value, mult):
    """Depthwise convolution of NHWC ``x`` with ``w`` (C*M, kh, kw), written from the definition."""
    n, h, wd, c = x.shape
    _, kh, kw = w.shape
    t, l, bo, r = pads
    xp = np.full((n, h + t + bo, wd + l + r, c), pad_value, np.int64)
    xp[:, t:t + h, l:l + wd] = x
    oh, ow = (h + t + bo - kh) // stride[0] + 1, (wd + l + r - kw) // stride[1] + 1
    y = np.zeros((n, oh, ow, c * mult), np.int64)
    for o in range(c * mult):
        for i in range(oh):
            for j in range(ow):
                patch = xp[:, i * stride[0]:i * stride[0] + kh, j * stride[1]:j * stride[1] + kw, o // mult]
                y[:, i, j, o] = (patch * w[o]).sum(axis=(1, 2)) + b[o]
    return y


@pytest.mark.parametrize("h, w, c, mult, kernel, stride, pads, pe, pause", [
    (6, 5, 4, 1, (3, 3), (1, 1), (1, 1, 1, 1), 2, "random"),
    (7, 7, 3, 1, (3, 3), (2, 2), (1, 0, 1, 0), 3, "3of4"),
    (1, 12, 4, 2, (1, 5), (1, 1), (0, 2, 0, 2), 4, "random"),   # a Conv1D as an H=1 image
    (5, 4, 2, 1, (2, 2), (2, 2), (0, 0, 0, 0), 1, "random"),
])
def test_window_and_depthwise_unit_compute_the_convolution(h, w, c, mult, kernel, stride, pads, pe, pause):
    rng = np.random.default_rng(h * w + c)
    zp = int(rng.integers(0, 256))
    wt = rng.integers(-128, 128, size=(c * mult,) + kernel)
    b = rng.integers(-3000, 3000, size=c * mult)
    n = 3
    x = rng.integers(0, 256, size=(n, h, w, c))
    win = SlidingWindow(h, w, c, kernel, stride=stride, pads=pads, elem_shape=unsigned(8), simd=pe,
                        pad_value=zp, depthwise=True)
    unit = DepthwiseUnit(wt.reshape(c * mult, -1), b, in_bits=8, in_signed=False, weight_bits=8,
                         weight_signed=True, pe=pe, multiplier=mult)
    want = _conv_nhwc(x, wt, b, stride, pads, zp, mult)
    out, _ = run_stream(_DepthwiseConv(win, unit), {"i": x.reshape(-1, pe)}, {"o": want.size // (pe * mult)},
                        src_pause=pause, sink_pause=pause, seed=7)
    np.testing.assert_array_equal(out["o"].reshape(want.shape), want)


def test_depthwise_unit_throughput_and_latency_match_estimate():
    name, factory, feeds, expect = bench_config()[0]
    dut = factory()
    out, cycles = run_stream(dut, feeds, expect)
    est = DepthwiseUnit.estimate(dut.weights, dut.bias, in_bits=8, in_signed=False, weight_bits=8,
                                 weight_signed=True, pe=dut.pe)
    pixels = expect["o"] // dut.out_transfers
    assert est.cycles == dut.in_transfers
    assert abs(cycles - (pixels * est.cycles + est.latency)) <= 8, (cycles, est)
    # latency: feed exactly one channel group of one pixel
    one = feeds["i"][:dut.taps]
    _, c1 = run_stream(factory(), {"i": one}, {"o": 1})
    assert c1 == est.latency + 1 or c1 == est.latency, (c1, est.latency)


@pytest.mark.parametrize("kw, err, msg", [
    (dict(weights=np.zeros((4, 9), np.int64), pe=3), ValueError, "pe must be a positive divisor of 4"),
    (dict(weights=np.zeros((6, 9), np.int64), multiplier=4), ValueError, "multiplier"),
    (dict(weights=np.full((4, 9), 200)), ValueError, "200"),
    (dict(weights=np.zeros((4, 9), np.float32)), TypeError, "integer"),
    (dict(weights=np.zeros(9, np.int64)), ValueError, "channels, taps"),
    (dict(bias=np.zeros(3, np.int64)), ValueError, "bias"),
    (dict(acc_bits=4), ValueError, "acc_bits"),
    (dict(in_bits=0), ValueError, "in_bits"),
    (dict(mul_style="fast"), ValueError, "mul_style"),
])
def test_depthwise_unit_rejects_bad_parameters(kw, err, msg):
    args = dict(weights=np.ones((4, 9), np.int64), bias=None, in_bits=8, in_signed=False, weight_bits=8,
                weight_signed=True, pe=2)
    args.update(kw)
    with pytest.raises(err, match=msg):
        DepthwiseUnit(args.pop("weights"), args.pop("bias"), **args)


@pytest.mark.synth
@pytest.mark.parametrize("c, k, pe, ib, wb, wsg, mult, style", [
    (16, 9, 4, 8, 8, True, 1, "auto"), (8, 9, 8, 4, 4, True, 1, "auto"), (32, 9, 2, 8, 1, False, 1, "auto"),
    (64, 9, 8, 8, 8, True, 1, "auto"), (8, 25, 4, 4, 4, True, 2, "auto"),
    (16, 9, 4, 8, 8, True, 1, "lut"), (64, 9, 8, 8, 8, True, 1, "lut")])
def test_depthwise_estimate_matches_yosys(c, k, pe, ib, wb, wsg, mult, style):
    rng = np.random.default_rng(5)
    w = rng.integers(*_range(wb, wsg), endpoint=True, size=(c * mult, k))
    b = rng.integers(-1000, 1000, size=c * mult)
    args = dict(in_bits=ib, in_signed=False, weight_bits=wb, weight_signed=wsg, pe=pe, multiplier=mult,
                mul_style=style)
    st = yosys_stat(DepthwiseUnit(w, b, **args), "ecp5")
    est = DepthwiseUnit.estimate(w, b, **args, family="ecp5")
    lut = st["lut"] + 2 * st["ccu2c"]     # LUT4 equivalents, as the other blocks' models
    assert est.dsp == st["dsp"], (est, st)
    assert est.ebr == st["ebr"], (est, st)
    assert abs(est.lut - lut) <= max(30, 0.3 * lut), (est, lut)
    assert abs(est.ff - st["ff"]) <= max(20, 0.15 * st["ff"]), (est, st)
