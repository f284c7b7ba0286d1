"""SlidingWindow: window streams against an independent NumPy im2col, under backpressure."""
from __future__ import annotations

import math

import numpy as np
import pytest
from amaranth.hdl import signed, unsigned

from onnx2hw.rtl.cost import Cost
from onnx2hw.rtl.window import SlidingWindow, bench_config
from onnx2hw.sim.pysim import run_stream


def im2col_stream(x, kernel, stride, pads, pad_value, simd, depthwise, dilation=(1, 1)):
    """Expected output transfers for images ``x`` (N, H, W, C), computed by plain slicing:
    window ``(oh, ow)`` is ``x_pad[oh*sh + i*dh, ow*sw + j*dw]`` for ``i < kh``, ``j < kw``."""
    n, h, w, c = x.shape
    kh, kw = kernel
    sh, sw = stride
    dh, dw = dilation
    top, left, bottom, right = pads
    xp = np.full((n, h + top + bottom, w + left + right, c), pad_value, dtype=np.int64)
    xp[:, top:top + h, left:left + w] = x
    oh_n = (h + top + bottom - ((kh - 1) * dh + 1)) // sh + 1
    ow_n = (w + left + right - ((kw - 1) * dw + 1)) // sw + 1
    rows = []
    for img in range(n):
        for oh in range(oh_n):
            for ow in range(ow_n):
                win = xp[img, oh * sh:oh * sh + (kh - 1) * dh + 1:dh, ow * sw:ow * sw + (kw - 1) * dw + 1:dw, :]
                if depthwise:   # (c-fold, kh, kw, lanes)
                    win = win.reshape(kh, kw, c // simd, simd).transpose(2, 0, 1, 3)
                rows.append(win.reshape(-1, simd))
    return np.concatenate(rows)


def elem_range(bits, is_signed):
    return (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if is_signed else (0, (1 << bits) - 1)


# (H, W, C, kernel, stride, pads, extra kwargs)
GEOMS = {
    "odd_s2_asym": (5, 7, 3, (3, 3), (2, 2), (1, 0, 0, 1), {}),
    "3x3_s1_p1": (4, 6, 4, (3, 3), (1, 1), (1, 1, 1, 1), {}),
    "2x3_dw_asym": (5, 7, 4, (2, 3), (2, 1), (0, 2, 1, 0), {"depthwise": True}),
    "1d": (1, 9, 2, (1, 3), (1, 1), (0, 1, 0, 1), {}),
    "pool_2x2_dw": (6, 6, 2, (2, 2), (2, 2), (0, 0, 0, 0), {"depthwise": True}),
    "pointwise": (3, 5, 6, (1, 1), (1, 1), (0, 0, 0, 0), {}),
    "min_rows": (4, 5, 2, (3, 3), (1, 1), (0, 0, 0, 0), {"buffer_rows": 3}),
    "5x5_s3_p2": (7, 5, 6, (5, 5), (3, 3), (2, 2, 2, 2), {}),
    "stride_gt_k": (7, 8, 2, (2, 2), (3, 3), (1, 1, 0, 0), {}),
    "1x1_s2": (5, 5, 2, (1, 1), (2, 2), (0, 0, 0, 0), {}),
}

# (geometry, bits, signed, simd choice, pause) — spread so every axis value is covered.
CASES = []
_axes = [(b, s) for b in (1, 2, 4, 8) for s in (False, True)]
for k, name in enumerate(GEOMS):
    for j, pause in enumerate(("3of4", "random")):
        bits, sgn = _axes[(2 * k + j) % len(_axes)]
        simd = ("1", "2", "C")[(k + j) % 3]
        CASES.append((name, bits, sgn, simd, pause))
CASES.append(("odd_s2_asym", 8, True, "C", "none"))
CASES.append(("3x3_s1_p1", 1, False, "2", "none"))


def _simd(choice, c):
    if choice == "C":
        return c
    s = int(choice)
    return s if c % s == 0 else 1


def _run(name, bits, sgn, simd_choice, pause, min_transfers=2000, seed=0):
    h, w, c, kernel, stride, pads, extra = GEOMS[name]
    simd = _simd(simd_choice, c)
    shape = signed(bits) if sgn else unsigned(bits)
    lo, hi = elem_range(bits, sgn)
    rng = np.random.default_rng(seed)
    pad_value = int(rng.integers(lo, hi + 1))
    dut = SlidingWindow(h, w, c, kernel, stride=stride, pads=pads, elem_shape=shape, simd=simd,
                        pad_value=pad_value, **extra)
    n = max(2, math.ceil(min_transfers / dut.out_transfers))
    x = rng.integers(lo, hi + 1, size=(n, h, w, c))
    want = im2col_stream(x, kernel, stride, pads, pad_value, simd, extra.get("depthwise", False))
    assert want.shape[0] == n * dut.out_transfers
    out, cycles = run_stream(dut, {"i": x.reshape(-1, simd)}, {"o": want.shape[0]},
                             src_pause=pause, sink_pause=pause, seed=seed)
    return dut, n, want, out["o"], cycles


@pytest.mark.parametrize("name,bits,sgn,simd,pause", CASES)
def test_window_matches_im2col(name, bits, sgn, simd, pause):
    dut, n, want, got, _ = _run(name, bits, sgn, simd, pause)
    bad = np.nonzero((got != want).any(axis=1))[0]
    assert bad.size == 0, f"{bad.size} wrong transfers, first at {bad[0]}: {got[bad[0]]} != {want[bad[0]]}"


# Corner geometries: windows wholly inside the padding, 1-pixel images, minimum line buffer.
EDGE_CASES = [   # (H, W, C, kernel, stride, pads, simd, depthwise, buffer_rows)
    (1, 1, 4, (3, 4), (2, 2), (3, 2, 3, 3), 1, True, 4),
    (6, 3, 2, (2, 4), (1, 2), (3, 2, 1, 3), 1, False, 3),
    (5, 1, 2, (1, 4), (3, 2), (1, 2, 2, 2), 2, True, 5),
    (4, 5, 2, (2, 3), (3, 1), (3, 0, 2, 3), 2, True, 2),
    (5, 5, 2, (1, 2), (2, 3), (1, 1, 0, 1), 2, False, 1),
    (2, 1, 2, (3, 3), (1, 3), (2, 3, 2, 2), 2, False, 4),
]


@pytest.mark.parametrize("case", EDGE_CASES)
@pytest.mark.parametrize("pause", ["3of4", "random"])
def test_window_corner_geometries(case, pause):
    h, w, c, kernel, stride, pads, simd, dw, rows = case
    dut = SlidingWindow(h, w, c, kernel, stride=stride, pads=pads, simd=simd, depthwise=dw,
                        buffer_rows=rows, elem_shape=unsigned(4), pad_value=15)
    x = np.random.default_rng(3).integers(0, 15, size=(4, h, w, c))
    want = im2col_stream(x, kernel, stride, pads, 15, simd, dw)
    out, _ = run_stream(dut, {"i": x.reshape(-1, simd)}, {"o": want.shape[0]},
                        src_pause=pause, sink_pause=pause, seed=9)
    assert np.array_equal(out["o"], want)


@pytest.mark.parametrize("pause", ["3of4", "random"])
@pytest.mark.parametrize("c,simd,slices", [(16, 8, 1), (32, 16, 2)])
def test_window_in_block_ram_with_landing_register(pause, c, simd, slices):
    """A line buffer big enough for block RAM (120 words of 64 bits; of 128 bits: two slices of
    two blocks, each with its own address and enable copies) reads through the landing register
    beside the RAM: one more cycle of latency, the same windows under backpressure."""
    from onnx2hw.rtl._linebuf import ebr_slices, lands as _lands

    h, w = 12, 12
    assert _lands(5 * w * c // simd, 8 * simd, "ecp5")
    assert len(ebr_slices(5 * w * c // simd, 8 * simd)) == slices
    dut = SlidingWindow(h, w, c, 3, pads=1, simd=simd, elem_shape=signed(8), pad_value=-3)
    assert dut.estimate(h, w, c, 3, pads=1, simd=simd, elem_shape=signed(8)).latency == (w + 2) * 2 + 7
    x = np.random.default_rng(5).integers(-128, 128, size=(2, h, w, c))
    want = im2col_stream(x, (3, 3), (1, 1), (1, 1, 1, 1), -3, simd, False)
    out, _ = run_stream(dut, {"i": x.reshape(-1, simd)}, {"o": want.shape[0]},
                        src_pause=pause, sink_pause=pause, seed=4)
    assert np.array_equal(out["o"], want)


@pytest.mark.parametrize("pause", ["3of4", "random"])
def test_window_in_distributed_ram_banks(pause):
    """A 256-bit line buffer in distributed RAM (a 25x5x32 depthwise layer, 32 lanes) is four
    64-bit banks, each with its own address and enable copies: the same windows under
    backpressure."""
    from onnx2hw.rtl._linebuf import lands as _lands
    from onnx2hw.rtl.window import _buffer_slices

    h, w, c, simd = 25, 5, 32, 32
    assert not _lands(4 * w * c // simd, 8 * simd, "ecp5")
    assert len(_buffer_slices(4 * w * c // simd, 8 * simd, "ecp5")[0]) == 4
    dut = SlidingWindow(h, w, c, 3, pads=1, simd=simd, elem_shape=signed(8), depthwise=True, pad_value=5)
    x = np.random.default_rng(6).integers(-128, 128, size=(2, h, w, c))
    want = im2col_stream(x, (3, 3), (1, 1), (1, 1, 1, 1), 5, simd, True)
    out, _ = run_stream(dut, {"i": x.reshape(-1, simd)}, {"o": want.shape[0]},
                        src_pause=pause, sink_pause=pause, seed=8)
    assert np.array_equal(out["o"], want)


@pytest.mark.parametrize("name", ["3x3_s1_p1", "pool_2x2_dw", "odd_s2_asym", "pointwise"])
def test_window_throughput_matches_estimate(name):
    """No backpressure: measured cycles per image agree with the cost model (within 15 %)."""
    dut, n, want, got, cycles = _run(name, 8, False, "1", "none", min_transfers=1500)
    assert np.array_equal(got, want)
    h, w, c, kernel, stride, pads, extra = GEOMS[name]
    est = SlidingWindow.estimate(h, w, c, kernel, stride=stride, pads=pads, **extra)
    per_image = cycles / n
    assert per_image >= max(dut.in_transfers, dut.out_transfers)
    assert abs(per_image - est.cycles) <= 0.15 * est.cycles, (per_image, est)


@pytest.mark.parametrize("h,w,c,k,pads,stride", [
    (6, 6, 2, 3, 1, 1), (6, 6, 2, 3, 0, 1), (5, 7, 3, 3, (1, 0, 0, 1), 2), (4, 4, 1, 2, 0, 2),
    (1, 9, 2, (1, 3), (0, 1, 0, 1), 1),
    (3, 40, 1, 3, 1, 1)])   # 200 words: block RAM, read through the landing register
def test_window_latency_matches_estimate(h, w, c, k, pads, stride):
    """Feed exactly the inputs the first window needs: it must come out, after `latency` cycles."""
    dut = SlidingWindow(h, w, c, k, pads=pads, stride=stride)
    g = dut.geom
    need = (max(0, g.kh - 1 - g.pads[0]) * g.width + max(0, g.kw - 1 - g.pads[1]) + 1) * g.fold
    x = (np.arange(need) % 256).reshape(-1, 1)
    per_window = g.kh * g.kw * g.fold
    out, cycles = run_stream(dut, {"i": x}, {"o": per_window})
    xi = np.zeros((1, h, w, c), dtype=np.int64).reshape(-1)
    xi[:need] = x[:, 0]
    want = im2col_stream(xi.reshape(1, h, w, c), (g.kh, g.kw), (g.sh, g.sw), g.pads, 0, 1,
                         False)[:per_window]
    assert np.array_equal(out["o"], want)
    est = SlidingWindow.estimate(h, w, c, k, pads=pads, stride=stride)
    assert cycles - (per_window - 1) == est.latency


# Dilated windows: (H, W, C, kernel, stride, pads, dilation, simd, depthwise, buffer_rows)
DILATED = {
    "2d_d2_p2": (7, 8, 4, (3, 3), (1, 1), (2, 2, 2, 2), (2, 2), 2, False, None),
    "2d_d2x3_s2_asym": (9, 10, 2, (3, 2), (2, 1), (1, 0, 2, 3), (2, 3), 1, False, None),
    "dw_d3_s2": (8, 9, 6, (3, 3), (2, 2), (3, 3, 3, 3), (3, 3), 3, True, None),
    "1d_d4": (1, 20, 3, (1, 3), (1, 1), (0, 8, 0, 0), (1, 4), 3, False, None),
    "1d_dw_d2_s3": (1, 17, 4, (1, 4), (1, 3), (0, 3, 0, 2), (1, 2), 2, True, None),
    "min_rows_d2": (7, 5, 2, (2, 3), (1, 1), (1, 1, 0, 1), (3, 1), 2, False, 4),
    "pad_only_rows": (2, 3, 2, (3, 3), (1, 2), (3, 2, 3, 1), (2, 2), 1, True, None),
}


@pytest.mark.parametrize("name", list(DILATED))
@pytest.mark.parametrize("pause", ["3of4", "random"])
def test_window_dilated_matches_im2col(name, pause):
    """Dilated taps ``x_pad[oh*sh + i*dh, ow*sw + j*dw]`` in both orders, with padding, stride,
    ``simd`` lanes and the smallest line buffer, under random stalls."""
    h, w, c, kernel, stride, pads, dil, simd, dw, rows = DILATED[name]
    rng = np.random.default_rng(11)
    dut = SlidingWindow(h, w, c, kernel, stride=stride, pads=pads, dilation=dil, simd=simd,
                        depthwise=dw, buffer_rows=rows, elem_shape=signed(5), pad_value=-7)
    n = max(2, math.ceil(1500 / dut.out_transfers))
    x = rng.integers(-16, 16, size=(n, h, w, c))
    want = im2col_stream(x, kernel, stride, pads, -7, simd, dw, dil)
    assert want.shape[0] == n * dut.out_transfers
    out, _ = run_stream(dut, {"i": x.reshape(-1, simd)}, {"o": want.shape[0]},
                        src_pause=pause, sink_pause=pause, seed=2)
    assert np.array_equal(out["o"], want)


@pytest.mark.parametrize("name", ["2d_d2_p2", "1d_d4"])
def test_window_dilated_throughput_and_latency_match_estimate(name):
    """No backpressure: cycles per image within 15 % of the model; the first window comes out
    ``latency`` cycles after the first input (the model counts up to the last pixel the dilated
    window needs)."""
    h, w, c, kernel, stride, pads, dil, simd, dw, rows = DILATED[name]
    kwargs = dict(stride=stride, pads=pads, dilation=dil, simd=simd, depthwise=dw)
    dut = SlidingWindow(h, w, c, kernel, **kwargs)
    x = np.random.default_rng(1).integers(0, 256, size=(6, h, w, c))
    want = im2col_stream(x, kernel, stride, pads, 0, simd, dw, dil)
    out, cycles = run_stream(dut, {"i": x.reshape(-1, simd)}, {"o": want.shape[0]})
    assert np.array_equal(out["o"], want)
    est = SlidingWindow.estimate(h, w, c, kernel, **kwargs)
    assert abs(cycles / 6 - est.cycles) <= 0.15 * est.cycles, (cycles / 6, est)
    g = dut.geom
    eh, ew = (g.kh - 1) * g.dh + 1, (g.kw - 1) * g.dw + 1
    need = (min(max(0, eh - 1 - g.pads[0]), h - 1) * w + min(max(0, ew - 1 - g.pads[1]), w - 1) + 1) * g.fold
    per_window = g.kh * g.kw * g.fold
    out, cycles = run_stream(dut, {"i": x.reshape(-1, simd)[:need]}, {"o": per_window})
    assert np.array_equal(out["o"], want[:per_window])
    assert cycles - (per_window - 1) == est.latency


def test_window_estimate_fields():
    est = SlidingWindow.estimate(8, 8, 8, 3, pads=1, simd=4)
    assert isinstance(est, Cost) and est.dsp == 0 and est.lut > 0 and est.ff > 0
    assert est.cycles >= 8 * 8 * 9 * 2
    with pytest.raises(ValueError, match="family"):
        SlidingWindow.estimate(8, 8, 8, 3, family="xilinx")


@pytest.mark.parametrize("kwargs,exc,text", [
    (dict(height=0), ValueError, "height"),
    (dict(channels=6, simd=4), ValueError, "simd 4"),
    (dict(kernel=(3, 0)), ValueError, "kernel"),
    (dict(kernel="3"), TypeError, "kernel"),
    (dict(dilation=0), ValueError, "dilation"),
    (dict(dilation=(1, 2), kernel=3), ValueError, r"extent \(3, 5\).*larger than the padded image"),
    (dict(height=6, width=6, dilation=2, buffer_rows=4), ValueError, "extent in rows 5"),
    (dict(pads=(1, -1, 0, 0)), ValueError, "pads"),
    (dict(pads=(1, 2, 3)), TypeError, "pads"),
    (dict(pad_value=300), ValueError, "300"),
    (dict(pad_value=1.5), TypeError, "1.5"),
    (dict(buffer_rows=2), ValueError, "buffer_rows"),
    (dict(kernel=9), ValueError, "larger than the padded image"),
    (dict(elem_shape="u8"), TypeError, "elem_shape"),
])
def test_window_rejects_bad_parameters(kwargs, exc, text):
    args = dict(height=4, width=4, channels=4, kernel=3)
    args.update(kwargs)
    with pytest.raises(exc, match=text):
        SlidingWindow(args.pop("height"), args.pop("width"), args.pop("channels"),
                      args.pop("kernel"), **args)


def test_window_bench_config_runs():
    for name, factory, feeds, expect in bench_config():
        dut = factory()
        out, cycles = run_stream(dut, feeds, expect)
        assert out["o"].shape == (expect["o"], dut.geom.simd), name
        g = dut.geom
        x = feeds["i"].reshape(-1, g.height, g.width, g.channels)
        want = im2col_stream(x, (g.kh, g.kw), (g.sh, g.sw), g.pads, dut.pad_value, g.simd,
                             dut.depthwise)
        assert np.array_equal(out["o"], want), name


# ------------------------------------------------------------------ cocotb + Verilator
@pytest.mark.sim
@pytest.mark.parametrize("name,bits,sgn,simd,pause", [
    ("odd_s2_asym", 4, True, "1", "random"),
    ("2x3_dw_asym", 8, False, "2", "3of4"),
    ("3x3_s1_p1", 2, False, "C", "random"),
])
def test_window_verilator(name, bits, sgn, simd, pause):
    from onnx2hw.sim.cocotb_run import run_cocotb
    h, w, c, kernel, stride, pads, extra = GEOMS[name]
    simd_n = _simd(simd, c)
    shape = signed(bits) if sgn else unsigned(bits)
    lo, hi = elem_range(bits, sgn)
    rng = np.random.default_rng(5)

    def factory():
        return SlidingWindow(h, w, c, kernel, stride=stride, pads=pads, elem_shape=shape,
                             simd=simd_n, pad_value=lo, **extra)
    dut = factory()
    n = max(2, math.ceil(3000 / dut.out_transfers))
    x = rng.integers(lo, hi + 1, size=(n, h, w, c))
    want = im2col_stream(x, kernel, stride, pads, lo, simd_n, extra.get("depthwise", False))
    out, _ = run_cocotb(factory, {"i": x.reshape(-1, simd_n)}, {"o": want.shape[0]},
                        src_pause=pause, sink_pause=pause, seed=3)
    assert np.array_equal(out["o"], want)


# ------------------------------------------------------------------ synthesis (Yosys)
SYNTH_CASES = [   # (H, W, C, kernel, kwargs) — line buffer in LUTRAM and in block RAM, 1-D
    (5, 7, 3, 3, dict(stride=2, pads=(1, 0, 0, 1), elem_shape=signed(4))),
    (12, 12, 32, 3, dict(pads=1, simd=8)),
    (12, 12, 32, 3, dict(pads=1, simd=16)),
    (1, 32, 4, (1, 5), dict(pads=(0, 2, 0, 2), elem_shape=unsigned(4), depthwise=True)),
    (12, 12, 16, 3, dict(dilation=2, pads=2, simd=8)),
]


@pytest.mark.synth
@pytest.mark.parametrize("h,w,c,k,kwargs", SYNTH_CASES)
def test_window_synth_matches_estimate(h, w, c, k, kwargs):
    """synth_ecp5 succeeds; LUT (LUT4 + 6 per DPR16X4 cell), FF and EBR within 30 % of the model."""
    from onnx2hw.rtl.synth_check import yosys_stat
    stat = yosys_stat(SlidingWindow(h, w, c, k, **kwargs))
    est = SlidingWindow.estimate(h, w, c, k, **kwargs)
    lut = stat["lut"]   # LUT4 + 6 per TRELLIS_DPR16X4 (synth_check convention)
    assert stat["dsp"] == 0 and est.dsp == 0
    assert stat["ebr"] == est.ebr, (stat, est)
    assert abs(est.lut - lut) <= 0.3 * lut, (stat, est)
    assert abs(est.ff - stat["ff"]) <= 0.3 * stat["ff"], (stat, est)
