"""ZeroInsert: fill elements between pixels, under random valid/ready stalls, against a NumPy
formula (``y[r*sh, q*sw] = x[r, q]``, every other element ``fill``)."""
from __future__ import annotations

import numpy as np
import pytest
from amaranth.hdl import signed, unsigned

from onnx2hw.rtl.cost import Cost
from onnx2hw.rtl.zero_insert import ZeroInsert, bench_config
from onnx2hw.sim.pysim import run_stream


def inserted(x, stride, fill):
    """Images ``x`` (N, H, W, C) with ``sh - 1`` fill rows and ``sw - 1`` fill columns between
    their rows and columns."""
    n, h, w, c = x.shape
    sh, sw = stride
    y = np.full((n, (h - 1) * sh + 1, (w - 1) * sw + 1, c), fill, dtype=np.int64)
    y[:, ::sh, ::sw] = x
    return y


CASES = [   # (H, W, C, stride, simd, bits, signed, fill)
    (3, 4, 2, (2, 2), 1, 8, True, -5),
    (4, 3, 6, (3, 2), 3, 4, False, 7),
    (1, 7, 4, (1, 3), 2, 8, False, 128),    # 1-D signal
    (5, 1, 2, (2, 1), 2, 3, True, 0),
    (2, 2, 3, (1, 1), 3, 8, True, 1),       # stride 1: a copy
    (1, 1, 2, (4, 4), 1, 2, False, 3),      # one pixel: nothing to insert
    (3, 3, 8, (4, 2), 8, 1, False, 1),
]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("pause", ["none", "3of4", "random"])
def test_zero_insert_matches_formula(case, pause):
    h, w, c, stride, simd, bits, sgn, fill = case
    shape = signed(bits) if sgn else unsigned(bits)
    lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if sgn else (0, (1 << bits) - 1)
    dut = ZeroInsert(h, w, c, stride, elem_shape=shape, simd=simd, fill=fill)
    x = np.random.default_rng(4).integers(lo, hi + 1, size=(3, h, w, c))
    want = inserted(x, stride, fill).reshape(-1, simd)
    assert want.shape[0] == 3 * dut.out_transfers
    out, cycles = run_stream(dut, {"i": x.reshape(-1, simd)}, {"o": want.shape[0]},
                             src_pause=pause, sink_pause=pause, seed=7)
    assert np.array_equal(out["o"], want)
    if pause == "none":   # one output transfer per cycle after the 1-cycle latency
        est = ZeroInsert.estimate(h, w, c, stride, elem_shape=shape, simd=simd, fill=fill)
        assert cycles <= 3 * est.cycles + est.latency + 2, (cycles, est)


def test_zero_insert_estimate():
    est = ZeroInsert.estimate(8, 8, 16, 2, elem_shape=signed(8), simd=8)
    assert isinstance(est, Cost) and est.cycles == 15 * 15 * 2 and est.dsp == 0 and est.ebr == 0
    assert est.lut > 64 and est.ff > 64
    with pytest.raises(ValueError, match="family"):
        ZeroInsert.estimate(8, 8, 16, 2, elem_shape=signed(8), family="xilinx")


@pytest.mark.parametrize("kwargs,exc,text", [
    (dict(height=0), ValueError, "height"),
    (dict(channels=6, simd=4), ValueError, "simd 4"),
    (dict(stride=(2, 0)), ValueError, "stride"),
    (dict(stride="2"), TypeError, "stride"),
    (dict(fill=300), ValueError, "300"),
    (dict(fill=1.5), TypeError, "1.5"),
    (dict(elem_shape="u8"), TypeError, "elem_shape"),
])
def test_zero_insert_rejects_bad_parameters(kwargs, exc, text):
    args = dict(height=4, width=4, channels=4, stride=2, elem_shape=unsigned(8))
    args.update(kwargs)
    with pytest.raises(exc, match=text):
        ZeroInsert(**args)


def test_zero_insert_bench_config_runs():
    for name, factory, feeds, expect in bench_config():
        dut = factory()
        out, _ = run_stream(dut, feeds, expect)
        x = feeds["i"].reshape(1, dut.height, dut.width, dut.channels)
        assert np.array_equal(out["o"], inserted(x, dut.stride, dut.fill).reshape(-1, dut.simd)), name


@pytest.mark.sim
def test_zero_insert_verilator():
    from onnx2hw.sim.cocotb_run import run_cocotb

    def factory():
        return ZeroInsert(3, 5, 4, (2, 3), elem_shape=signed(6), simd=2, fill=-9)
    x = np.random.default_rng(8).integers(-32, 32, size=(4, 3, 5, 4))
    want = inserted(x, (2, 3), -9).reshape(-1, 2)
    out, _ = run_cocotb(factory, {"i": x.reshape(-1, 2)}, {"o": want.shape[0]},
                        src_pause="random", sink_pause="random", seed=3)
    assert np.array_equal(out["o"], want)


@pytest.mark.synth
@pytest.mark.parametrize("kwargs", [
    dict(height=16, width=16, channels=16, stride=2, elem_shape=signed(8), simd=8, fill=-3),
    dict(height=1, width=32, channels=4, stride=(1, 3), elem_shape=unsigned(4), simd=1, fill=3),
])
def test_zero_insert_synth_matches_estimate(kwargs):
    """synth_ecp5 succeeds; LUT and FF within 30 % of the model, no DSP or block RAM."""
    from onnx2hw.rtl.synth_check import yosys_stat
    stat = yosys_stat(ZeroInsert(**kwargs))
    est = ZeroInsert.estimate(**kwargs)
    assert stat["dsp"] == est.dsp == 0 and stat["ebr"] == est.ebr == 0
    assert abs(est.lut - stat["lut"]) <= 0.3 * stat["lut"], (stat, est)
    assert abs(est.ff - stat["ff"]) <= 0.3 * stat["ff"], (stat, est)
