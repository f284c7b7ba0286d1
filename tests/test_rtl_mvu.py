"""MatrixVectorUnit: bit-exact against NumPy ``W @ x + b`` (int64) under random backpressure."""
import zlib

import numpy as np
import pytest

from onnx2hw import arith
from onnx2hw.rtl.cost import Cost
from onnx2hw.rtl.mvu import MatrixVectorUnit, bench_config
from onnx2hw.sim.pysim import run_stream
from onnx2hw.rtl._arith_pipe import OutputQueue, ebr_tiling, rom_latency

QL = OutputQueue.LATENCY   # the output queue after the pipeline

pytestmark = pytest.mark.filterwarnings("ignore:.*created but never used")


def _case(n, k, wb, ws, ib, isg, *, bipolar=False, bias=True, vectors=8, seed=0, extreme=False):
    """Random weights/bias/inputs; returns (weights, bias, stream inputs, integer inputs)."""
    rng = np.random.default_rng(seed)
    if bipolar:
        w = rng.choice([-1, 1], size=(n, k))
        bits = rng.integers(0, 2, size=(vectors, k))
        return w, (rng.integers(-20, 20, size=n) if bias else None), bits, 2 * bits - 1
    wlo, whi = arith.int_range(wb, ws)
    xlo, xhi = arith.int_range(ib, isg)
    if extreme:   # every weight and input at a range end: accumulators reach their bounds
        w = rng.choice([wlo, whi], size=(n, k))
        w[0] = wlo
        x = rng.choice([xlo, xhi], size=(vectors, k))
        x[0] = xlo
        x[1] = xhi
    else:
        w = rng.integers(wlo, whi + 1, size=(n, k))
        x = rng.integers(xlo, xhi + 1, size=(vectors, k))
    b = rng.integers(-(1 << (wb + 2)), 1 << (wb + 2), size=n) if bias else None
    return w, b, x, x


def _run(n, k, pe, simd, wb, ws, ib, isg, *, bipolar=False, bias=True, vectors=8, src="none",
         sink="none", seed=0, extreme=False, mul_style="auto"):
    w, b, feed, x = _case(n, k, wb, ws, ib, isg, bipolar=bipolar, bias=bias, vectors=vectors,
                          seed=seed, extreme=extreme)
    dut = MatrixVectorUnit(w, b, in_bits=ib, in_signed=isg, weight_bits=wb, weight_signed=ws,
                           bipolar=bipolar, pe=pe, simd=simd, mul_style=mul_style)
    out, cycles = run_stream(dut, {"i": feed.reshape(-1, simd)}, {"o": vectors * n // pe},
                             src_pause=src, sink_pause=sink, seed=seed)
    want = x.astype(np.int64) @ w.astype(np.int64).T + (0 if b is None else b.astype(np.int64))
    np.testing.assert_array_equal(out["o"].reshape(vectors, n), want)
    return dut, cycles


# (N, K, PE, SIMD, wbits, wsigned, ibits, isigned, bipolar, bias)
CONFIGS = [
    (6, 12, 2, 4, 8, True, 8, True, False, True),      # DSP products
    (6, 12, 1, 1, 8, True, 8, False, False, True),
    (6, 12, 6, 12, 8, False, 8, True, False, False),
    (8, 8, 4, 4, 8, True, 4, True, False, True),       # 8x4: DSP
    (6, 12, 2, 12, 4, True, 4, False, False, True),    # LUT products
    (6, 12, 3, 4, 4, False, 4, True, False, True),
    (6, 12, 1, 2, 2, True, 2, True, False, False),
    (6, 12, 6, 1, 2, False, 2, False, False, True),
    (4, 16, 2, 4, 2, True, 8, True, False, True),      # 2x8: LUT shift-and-add
    (6, 12, 2, 4, 1, False, 4, True, False, True),     # 1-bit {0, 1} weights: AND gating
    (6, 12, 3, 2, 4, True, 1, True, False, False),     # 1-bit signed {-1, 0} inputs
    (6, 12, 2, 4, 1, False, 1, False, True, True),     # bipolar XNOR-popcount
    (6, 12, 6, 12, 1, False, 1, False, True, False),
    (6, 12, 1, 1, 1, False, 1, False, True, True),
    (5, 7, 5, 1, 3, True, 5, False, False, True),      # odd shape, 3x5 DSP
    (5, 7, 1, 7, 4, True, 3, True, False, True),       # odd shape, LUT
    (20, 8, 20, 2, 8, True, 8, True, False, True),     # 3 copies of the input registers: DSP
    (18, 6, 18, 2, 2, True, 4, False, False, True),    # 3 copies: LUT
    (20, 495, 1, 9, 8, True, 8, True, False, True),    # 1,100 words x 72 bits: 3 block RAM rows
    (4, 200, 1, 2, 8, True, 8, False, False, True),    # 400 words x 16 bits: 1 block RAM row
    (130, 4, 1, 4, 8, True, 8, True, False, True),     # 130 weight and bias words: both registered
    (8, 48, 2, 12, 8, True, 8, True, False, True),     # 4 x 96-bit input buffer: 2 LUT-RAM banks
]


def _id(c):
    n, k, pe, simd, wb, ws, ib, isg, bip, bias = c
    if bip:
        return f"bipolar-{n}x{k}-pe{pe}-simd{simd}"
    return (f"w{wb}{'s' if ws else 'u'}-x{ib}{'s' if isg else 'u'}-{n}x{k}-pe{pe}-simd{simd}"
            f"{'-bias' if bias else ''}")


@pytest.mark.parametrize("pauses", [("random", "random"), ("3of4", "random"), ("random", "3of4")],
                         ids=lambda p: f"{p[0]}-{p[1]}")
@pytest.mark.parametrize("cfg", CONFIGS, ids=_id)
def test_mvu_matches_numpy_under_backpressure(cfg, pauses):
    n, k, pe, simd, wb, ws, ib, isg, bip, bias = cfg
    beats = (n // pe) * (k // simd)
    # ~1500 input+output transfers per run (several thousand per configuration over the pauses)
    vectors = max(4, 1500 // (k // simd + n // pe))
    vectors = min(vectors, max(4, 6000 // beats))
    _run(n, k, pe, simd, wb, ws, ib, isg, bipolar=bip, bias=bias, vectors=vectors,
         src=pauses[0], sink=pauses[1], seed=zlib.crc32("-".join(pauses).encode()) % 1000)


@pytest.mark.parametrize("wb,ws,ib,isg", [(8, True, 8, True), (8, False, 8, False),
                                          (4, True, 4, True), (2, True, 2, False),
                                          (16, True, 16, True)])
def test_mvu_extreme_values_fit_default_accumulator(wb, ws, ib, isg):
    dut, _ = _run(6, 12, 2, 4, wb, ws, ib, isg, extreme=True, vectors=40, src="random",
                  sink="random", seed=3)
    # the default width is the exact bound: one bit less could not hold the extreme rows
    w, b, _, _ = _case(6, 12, wb, ws, ib, isg, extreme=True, vectors=40, seed=3)
    xlo, xhi = arith.int_range(ib, isg)
    lo = (b + np.minimum(w * xlo, w * xhi).sum(1)).min()
    hi = (b + np.maximum(w * xlo, w * xhi).sum(1)).max()
    assert dut.acc_bits == arith.acc_bits(int(lo), int(hi))


@pytest.mark.parametrize("n,k,pe,simd", [(8, 16, 2, 4), (8, 16, 2, 16), (8, 16, 8, 16), (8, 16, 4, 8),
                                         (20, 360, 2, 4)])   # (block RAM weights: 900 words)
def test_mvu_full_throughput_and_latency_match_estimate(n, k, pe, simd):
    # (one output per cycle when simd = K: the output queue's credits must not throttle it)
    vectors = 30
    dut, cycles = _run(n, k, pe, simd, 8, True, 8, True, vectors=vectors)
    w, b, _, _ = _case(n, k, 8, True, 8, True, vectors=vectors)
    est = MatrixVectorUnit.estimate(w, b, in_bits=8, in_signed=True, weight_bits=8,
                                    weight_signed=True, pe=pe, simd=simd)
    assert est.cycles == (n // pe) * (k // simd)
    # no bubble between vectors: the last beat issues at cycle vectors*II - 1 and reaches the
    # output register pipeline_stages() later, out of the output queue QL after that
    assert est.latency == k // simd - 1 + (dut.pipeline_stages() + QL)
    assert cycles == vectors * est.cycles + (dut.pipeline_stages() + QL)


def test_mvu_forced_lut_style_for_8bit():
    dut, _ = _run(4, 8, 2, 2, 8, True, 8, True, vectors=30, src="random", sink="random",
                  mul_style="lut")
    assert dut.style == "lut"


# LUT products where "auto" would take a DSP (the folder's choice), and narrow ones: (N, K, PE,
# SIMD, wbits, wsigned, ibits, isigned); 8-bit factors have a register inside each product
LUT_CONFIGS = [
    (8, 16, 2, 4, 8, True, 8, True),
    (8, 16, 4, 2, 8, True, 8, False),      # u8 activations x s8 weights (the MLPerf layers)
    (6, 12, 3, 4, 8, False, 8, False),
    (6, 12, 2, 6, 4, True, 8, False),      # 4x8: 2 levels, no inner register
    (4, 10, 4, 10, 8, True, 8, True),      # one weight word: constant factors
    (5, 7, 1, 7, 5, True, 3, True),        # 3x5
    (4, 8, 2, 4, 16, True, 16, True),      # 16x16: 4 levels
]


@pytest.mark.parametrize("pauses", [("random", "random"), ("3of4", "random"), ("random", "3of4")],
                         ids=lambda p: f"{p[0]}-{p[1]}")
@pytest.mark.parametrize("cfg", LUT_CONFIGS, ids=lambda c: _id((*c, False, True)))
def test_mvu_lut_products_match_numpy_under_backpressure(cfg, pauses):
    n, k, pe, simd, wb, ws, ib, isg = cfg
    dut, _ = _run(n, k, pe, simd, wb, ws, ib, isg, vectors=max(4, 1200 // (k // simd + n // pe)),
                  src=pauses[0], sink=pauses[1], seed=zlib.crc32("-".join(pauses).encode()) % 1000,
                  mul_style="lut", extreme=pauses[0] == "3of4")
    assert dut.style == "lut"


# Two products per DSP (rows 2g and 2g+1 share the input x): (N, K, PE, SIMD, wbits, wsigned,
# ibits, isigned)
PAIRED_CONFIGS = [
    (8, 12, 4, 3, 4, True, 4, True),
    (6, 12, 2, 4, 4, True, 8, False),      # u8 activations x s4 weights
    (6, 12, 3, 4, 2, False, 4, False),     # unsigned x unsigned, odd PE: the last row alone
    (8, 8, 8, 8, 4, True, 4, True),        # one weight word
    (10, 6, 5, 2, 3, True, 5, True),
    (17, 6, 17, 2, 4, True, 4, True),      # 3 copies of the input registers, the last row alone
]


@pytest.mark.parametrize("pauses", [("random", "random"), ("3of4", "random")], ids=lambda p: f"{p[0]}-{p[1]}")
@pytest.mark.parametrize("extreme", [False, True])
@pytest.mark.parametrize("cfg", PAIRED_CONFIGS, ids=lambda c: _id((*c, False, True)))
def test_mvu_paired_dsp_products_match_numpy_under_backpressure(cfg, extreme, pauses):
    n, k, pe, simd, wb, ws, ib, isg = cfg
    dut, _ = _run(n, k, pe, simd, wb, ws, ib, isg, vectors=max(4, 1200 // (k // simd + n // pe)),
                  src=pauses[0], sink=pauses[1], seed=zlib.crc32("-".join(pauses).encode()) % 1000,
                  mul_style="dsp", extreme=extreme)
    assert dut.pair_field is not None
    w, b, _, _ = _case(n, k, wb, ws, ib, isg)
    est = MatrixVectorUnit.estimate(w, b, in_bits=ib, in_signed=isg, weight_bits=wb, weight_signed=ws,
                                    pe=pe, simd=simd, mul_style="dsp")
    assert est.dsp == -(-pe // 2) * simd


def test_mvu_pairs_only_what_fits():
    w = np.ones((4, 4), dtype=np.int64)
    kw = dict(in_signed=True, weight_signed=True, pe=2, simd=2, mul_style="dsp")
    assert MatrixVectorUnit(w, in_bits=8, weight_bits=4, **kw).pair_field == 12
    assert MatrixVectorUnit(w, in_bits=8, weight_bits=8, **kw).pair_field is None     # 8x8: one each
    assert MatrixVectorUnit(w, in_bits=4, weight_bits=4, **dict(kw, pe=1)).pair_field is None
    assert MatrixVectorUnit(w, in_bits=4, weight_bits=4, **dict(kw, mul_style="lut")).pair_field is None


def test_mvu_lut_latency_matches_estimate():
    n, k, pe, simd, vectors = 8, 16, 2, 4, 30
    dut, cycles = _run(n, k, pe, simd, 8, True, 8, True, vectors=vectors, mul_style="lut")
    w, b, _, _ = _case(n, k, 8, True, 8, True, vectors=vectors)
    est = MatrixVectorUnit.estimate(w, b, in_bits=8, in_signed=True, weight_bits=8,
                                    weight_signed=True, pe=pe, simd=simd, mul_style="lut")
    assert est.dsp == 0 and est.latency == k // simd - 1 + (dut.pipeline_stages() + QL)
    assert cycles == vectors * est.cycles + (dut.pipeline_stages() + QL)


def test_mvu_ports_and_styles():
    w = np.ones((4, 6), dtype=np.int64)
    d = MatrixVectorUnit(w, in_bits=8, in_signed=False, weight_bits=8, weight_signed=True,
                         pe=2, simd=3)
    assert d.style == "dsp" and d.i.payload.shape().length == 3 and d.o.payload.shape().length == 2
    assert d.acc_bits == arith.acc_bits(0, 6 * 255)
    d = MatrixVectorUnit(w, in_bits=2, in_signed=True, weight_bits=2, weight_signed=True)
    assert d.style == "lut"
    d = MatrixVectorUnit(w, in_bits=1, in_signed=False, weight_bits=1, weight_signed=False,
                         bipolar=True)
    assert d.style == "xnor" and d.acc_bits == arith.acc_bits(-6, 6)


@pytest.mark.parametrize("kwargs,exc,match", [
    (dict(pe=3), ValueError, "pe must be a positive divisor of 4, not 3"),
    (dict(simd=4), ValueError, "simd must be a positive divisor of 6, not 4"),
    (dict(weight_bits=2), ValueError, "weight 1 outside"),
    (dict(acc_bits=4), ValueError, "acc_bits must be an int >="),
    (dict(mul_style="fast"), ValueError, "mul_style must be one of"),
    (dict(in_bits=0), ValueError, "in_bits must be an int in 1..32, not 0"),
    (dict(bias=np.zeros(3, dtype=int)), ValueError, r"bias must have shape \(4,\)"),
    (dict(bipolar=True), ValueError, "bipolar mode needs 1-bit"),
])
def test_mvu_rejects_bad_parameters(kwargs, exc, match):
    w = np.full((4, 6), 1, dtype=np.int64)
    w[0, 0] = 100
    base = dict(in_bits=8, in_signed=True, weight_bits=8, weight_signed=True)
    if kwargs.get("weight_bits") == 2:
        w[0, 0] = 1
        w[1, 1] = 5
        match = "weight 5 outside"
    base.update(kwargs)
    bias = base.pop("bias", None)
    with pytest.raises(exc, match=match):
        MatrixVectorUnit(w, bias, **base)


def test_mvu_rejects_float_weights_and_non_bipolar_values():
    with pytest.raises(TypeError, match="weights must be an integer array"):
        MatrixVectorUnit(np.ones((2, 2)), in_bits=8, in_signed=True, weight_bits=8,
                         weight_signed=True)
    with pytest.raises(ValueError, match="bipolar weights must be -1 or \\+1, not 0"):
        MatrixVectorUnit(np.array([[1, 0]]), in_bits=1, in_signed=False, weight_bits=1,
                         weight_signed=False, bipolar=True)


def test_mvu_estimate_counts_dsp_and_cycles():
    w = np.ones((64, 64), dtype=np.int64)
    kw = dict(in_bits=8, in_signed=True, weight_bits=8, weight_signed=True, pe=4, simd=4)
    c = MatrixVectorUnit.estimate(w, **kw)
    assert isinstance(c, Cost) and c.dsp == 16 and c.cycles == 16 * 16
    c2 = MatrixVectorUnit.estimate(w, **dict(kw, weight_bits=2, in_bits=2), family="ice40")
    assert c2.dsp == 0 and c2.lut > 0
    with pytest.raises(ValueError, match="family must be one of"):
        MatrixVectorUnit.estimate(w, **kw, family="xilinx")


def test_mvu_bench_config_runs():
    name, factory, feeds, expect = bench_config()[0]
    dut = factory()
    out, _ = run_stream(dut, feeds, expect)
    x = feeds["i"].reshape(-1, dut.in_features)
    want = x @ dut.weights.T + dut.bias
    np.testing.assert_array_equal(out["o"].reshape(-1, dut.out_features), want)


# -- HDL simulation (cocotb + Verilator) ---------------------------------------------------

@pytest.mark.sim
@pytest.mark.parametrize("cfg,pauses", [
    ((6, 12, 2, 4, 8, True, 8, True, False, True), ("random", "random")),
    ((6, 12, 3, 4, 1, False, 1, False, True, True), ("3of4", "random")),
], ids=lambda v: _id(v) if isinstance(v[0], int) else f"{v[0]}-{v[1]}")
def test_mvu_verilator(cfg, pauses):
    from onnx2hw.sim.cocotb_run import run_cocotb
    n, k, pe, simd, wb, ws, ib, isg, bip, bias = cfg
    vectors = 120
    w, b, feed, x = _case(n, k, wb, ws, ib, isg, bipolar=bip, bias=bias, vectors=vectors, seed=7)
    dut = MatrixVectorUnit(w, b, in_bits=ib, in_signed=isg, weight_bits=wb, weight_signed=ws,
                           bipolar=bip, pe=pe, simd=simd)
    out, _ = run_cocotb(dut, {"i": feed.reshape(-1, simd)}, {"o": vectors * n // pe},
                        src_pause=pauses[0], sink_pause=pauses[1], seed=7)
    want = x @ w.T + (0 if b is None else b)
    np.testing.assert_array_equal(out["o"].reshape(vectors, n), want)


# -- synthesis (Yosys synth_ecp5 through YoWASP) -------------------------------------------

def _lut_equiv(stat):
    """LUT4 equivalents: LUT4 (+6 per distributed-RAM cell) plus 2 per CCU2C carry cell."""
    return stat["lut"] + 2 * stat["ccu2c"]


def _within(est, got, rel=0.30, slack=0):
    return abs(est - got) <= rel * got + slack


@pytest.mark.synth
@pytest.mark.parametrize("n,k,pe,simd,wb,ib,bip", [
    (16, 16, 4, 4, 8, 8, False),    # 16 multipliers -> 16 MULT18X18D
    (12, 12, 1, 4, 8, 8, False),    # 4 -> 4
    (16, 16, 4, 4, 2, 2, False),    # LUT products, no DSP
    (64, 64, 2, 8, 4, 4, False),    # weights in block RAM
    (64, 64, 4, 16, 1, 1, True),    # XNOR-popcount, weights as logic
])
def test_mvu_synth_dsp_count_and_estimate(n, k, pe, simd, wb, ib, bip, summary):
    from onnx2hw.rtl.synth_check import yosys_stat
    rng = np.random.default_rng(5)
    if bip:
        w = rng.choice([-1, 1], size=(n, k))
    else:
        w = rng.integers(-(1 << (wb - 1)), 1 << (wb - 1), size=(n, k))
    kw = dict(in_bits=ib, in_signed=not bip, weight_bits=wb, weight_signed=not bip,
              bipolar=bip, pe=pe, simd=simd)
    b = rng.integers(-100, 100, size=n)
    stat = yosys_stat(MatrixVectorUnit(w, b, **kw))
    est = MatrixVectorUnit.estimate(w, b, **kw)
    assert stat["dsp"] == (pe * simd if wb >= 5 else 0) == est.dsp
    got = _lut_equiv(stat)
    summary(f"mvu{n}x{k}p{pe}s{simd}w{wb}",
            f"MVU {n}x{k} PE{pe} SIMD{simd} {wb}b: LUT4eq {got} (est {est.lut}), FF {stat['ff']} "
            f"(est {est.ff}), DSP {stat['dsp']}, EBR {stat['ebr']} (est {est.ebr})")
    assert _within(est.lut, got), (est, stat)
    assert _within(est.ebr, stat["ebr"], slack=1), (est, stat)


def _yosys_and_estimate(n, k, pe, simd, wb, ib, isg, style):
    """(yosys_stat, estimate, LUT4 equivalents) of a random signed-weight MVU in ``style``."""
    from onnx2hw.rtl.synth_check import yosys_stat
    rng = np.random.default_rng(5)
    w = rng.integers(-(1 << (wb - 1)), 1 << (wb - 1), size=(n, k))
    b = rng.integers(-100, 100, size=n)
    kw = dict(in_bits=ib, in_signed=isg, weight_bits=wb, weight_signed=True, pe=pe, simd=simd,
              mul_style=style)
    stat = yosys_stat(MatrixVectorUnit(w, b, **kw))
    return stat, MatrixVectorUnit.estimate(w, b, **kw), _lut_equiv(stat)


@pytest.mark.synth
@pytest.mark.parametrize("n,k,pe,simd,wb,ib,isg", [
    (16, 16, 4, 4, 8, 8, True), (64, 64, 4, 4, 8, 8, False), (12, 12, 1, 4, 8, 8, True),
    (16, 16, 4, 4, 4, 4, True), (16, 32, 2, 16, 4, 8, False)])
def test_mvu_lut_style_estimate_matches_yosys(n, k, pe, simd, wb, ib, isg, summary):
    stat, est, got = _yosys_and_estimate(n, k, pe, simd, wb, ib, isg, "lut")
    summary(f"mvulut{n}x{k}p{pe}s{simd}w{wb}x{ib}",
            f"MVU LUT products {n}x{k} PE{pe} SIMD{simd} {wb}x{ib}b: LUT4eq {got} (est {est.lut}), "
            f"FF {stat['ff']} (est {est.ff}), EBR {stat['ebr']} (est {est.ebr})")
    assert stat["dsp"] == est.dsp == 0
    assert _within(est.lut, got, rel=0.2), (est, stat)
    assert _within(est.ff, stat["ff"], rel=0.2), (est, stat)
    assert est.ebr == stat["ebr"]


@pytest.mark.synth
@pytest.mark.parametrize("n,k,pe,simd,wb,ib,isg", [(16, 16, 4, 4, 4, 4, True), (12, 12, 3, 4, 4, 8, False)])
def test_mvu_paired_products_use_half_the_dsps(n, k, pe, simd, wb, ib, isg, summary):
    stat, est, got = _yosys_and_estimate(n, k, pe, simd, wb, ib, isg, "dsp")
    summary(f"mvupair{n}x{k}p{pe}s{simd}w{wb}x{ib}",
            f"MVU paired DSP products {n}x{k} PE{pe} SIMD{simd} {wb}x{ib}b: DSP {stat['dsp']}, LUT4eq {got} "
            f"(est {est.lut}), FF {stat['ff']} (est {est.ff})")
    assert stat["dsp"] == est.dsp == -(-pe // 2) * simd
    assert _within(est.lut, got), (est, stat)
    assert _within(est.ff, stat["ff"]), (est, stat)


@pytest.mark.parametrize("n, k, groups, pe, simd, bipolar", [
    (6, 8, 3, 1, 2, False), (6, 8, 3, 2, 8, False), (12, 4, 2, 3, 1, False), (8, 6, 4, 2, 3, True)])
@pytest.mark.parametrize("pause", ["random", "3of4"])
def test_mvu_groups_read_one_vector_each(n, k, groups, pe, simd, bipolar, pause):
    """``groups``: row group g of N/G rows is computed from the g-th input vector of each
    output vector (a grouped convolution), against the int64 formula."""
    vectors = 5
    w, b, feed, x = _case(n, k, 4, True, 4, False, bipolar=bipolar, vectors=vectors * groups, seed=k + groups)
    dut = MatrixVectorUnit(w, b, in_bits=1 if bipolar else 4, in_signed=False, weight_bits=1 if bipolar else 4,
                           weight_signed=not bipolar, bipolar=bipolar, pe=pe, simd=simd, groups=groups)
    out, _ = run_stream(dut, {"i": feed.reshape(-1, simd)}, {"o": vectors * n // pe},
                        src_pause=pause, sink_pause=pause, seed=3)
    xg = x.reshape(vectors, groups, k).astype(np.int64)
    wg = w.reshape(groups, n // groups, k).astype(np.int64)
    want = np.einsum("vgk,gnk->vgn", xg, wg).reshape(vectors, n) + b
    np.testing.assert_array_equal(out["o"].reshape(vectors, n), want)


def test_mvu_groups_rejects_bad_parameters():
    w = np.ones((6, 4), np.int64)
    with pytest.raises(ValueError, match="groups must be a positive divisor of 6"):
        MatrixVectorUnit(w, in_bits=4, in_signed=False, weight_bits=4, weight_signed=True, groups=4)
    with pytest.raises(ValueError, match="pe must be a positive divisor of 2"):
        MatrixVectorUnit(w, in_bits=4, in_signed=False, weight_bits=4, weight_signed=True, groups=3, pe=3)


def test_block_ram_tiling_and_rows():
    # fewest blocks, the deeper shape on a tie: rows of 512 words only when they save blocks
    assert ebr_tiling(1100, 72) == (6, 512)
    assert ebr_tiling(900, 64) == (4, 1024)
    assert ebr_tiling(2048, 8) == (1, 2048)
    assert rom_latency(64, ebr_register=True) == 1 and rom_latency(65, ebr_register=True) == 4
    assert rom_latency(65) == 1 and rom_latency(65, ebr_register=True, replicated=True) == 5


def test_block_rom_with_address_replicas_reads_every_word():
    """A 1100 x 100 ROM with ``ebr_register`` and ``addr_next``: three block rows of 512 words,
    each split into slices of two 36-bit blocks with their own address copy; reading a
    stepping, holding and jumping address gives ``words[addr]`` five cycles later."""
    from amaranth.hdl import Module, Mux, Signal
    from amaranth.sim import Simulator

    from onnx2hw.rtl._arith_pipe import rom

    rng = np.random.default_rng(3)
    words = [int(w) for w in rng.integers(0, 1 << 62, size=1100, dtype=np.int64)]
    words = [(w << 38) | (w & ((1 << 38) - 1)) for w in words]          # 100 bits
    m = Module()
    step, jump, to = Signal(), Signal(), Signal(range(1100))
    addr = Signal(range(1100))
    addr_next = Mux(jump, to, Mux(step, Mux(addr == 1099, 0, addr + 1), addr))
    m.d.sync += addr.eq(addr_next)
    q = rom(m, words, 100, addr, 1, "w", addr_next=addr_next, ebr_register=True)
    assert sum(1 for n in m._named_submodules if str(n).startswith("w")) == 3 * 2
    sim = Simulator(m)
    sim.add_clock(1e-6)
    got, want = [], []

    async def bench(ctx):
        seen = []
        plan = [("step", None)] * 600 + [("hold", None)] * 5 + [("jump", 1099), ("step", None),
                                                                  ("jump", 511), ("step", None)] * 3
        plan += [("jump", int(a)) for a in rng.integers(0, 1100, size=60)]
        for op, a in plan:
            ctx.set(step, op == "step")
            ctx.set(jump, op == "jump")
            if a is not None:
                ctx.set(to, a)
            seen.append(ctx.get(addr))
            if len(seen) > 5:
                want.append(words[seen[-6]])
                got.append(ctx.get(q))
            await ctx.tick()

    sim.add_testbench(bench)
    sim.run()
    assert len(got) > 600 and got == want
