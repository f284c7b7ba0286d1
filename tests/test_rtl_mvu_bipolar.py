"""MatrixVectorUnit with 1-bit (+-1) weights: XNOR-popcount (bipolar inputs) and select/invert
(integer inputs, ``weight_bipolar``), bit-exact against an int64 NumPy ``W @ x + b`` under random
backpressure; the weights cost one ROM bit each."""
import zlib

import numpy as np
import pytest

from onnx2hw import arith
from onnx2hw.rtl.mvu import MatrixVectorUnit
from onnx2hw.sim.pysim import run_stream

pytestmark = pytest.mark.filterwarnings("ignore:.*created but never used")


def _case(n, k, ib, isg, *, bipolar, bias, vectors, seed, extreme=False):
    rng = np.random.default_rng(seed)
    w = rng.choice([-1, 1], size=(n, k))
    b = rng.integers(-50, 50, size=n) if bias else None
    if bipolar:
        bits = rng.integers(0, 2, size=(vectors, k))
        if extreme:
            bits[0] = (w[0] > 0)          # row 0 reaches +K, row 0 of the next vector -K
            bits[1] = (w[0] < 0)
        return w, b, bits, 2 * bits - 1
    lo, hi = arith.int_range(ib, isg)
    x = rng.integers(lo, hi + 1, size=(vectors, k))
    if extreme:
        w[0] = -1                         # all -1 weights with the input at each end
        x[0], x[1] = lo, hi
        x[2] = np.where(w[1] > 0, hi, lo)
    return w, b, x, x


def _run(n, k, pe, simd, ib, isg, *, bipolar=False, bias=True, vectors=40, src="random", sink="random",
         seed=0, extreme=False):
    w, b, feed, x = _case(n, k, ib, isg, bipolar=bipolar, bias=bias, vectors=vectors, seed=seed,
                          extreme=extreme)
    dut = MatrixVectorUnit(w, b, in_bits=ib, in_signed=isg, weight_bits=1, weight_signed=False,
                           bipolar=bipolar, weight_bipolar=True, pe=pe, simd=simd)
    out, cycles = run_stream(dut, {"i": feed.reshape(-1, simd)}, {"o": vectors * n // pe},
                             src_pause=src, sink_pause=sink, seed=seed)
    want = x.astype(np.int64) @ w.astype(np.int64).T + (0 if b is None else b.astype(np.int64))
    np.testing.assert_array_equal(out["o"].reshape(vectors, n), want)
    return dut, cycles


# (N, K, PE, SIMD, in_bits, in_signed, bipolar inputs, bias)
CONFIGS = [
    (6, 12, 2, 4, 8, True, False, True),
    (6, 12, 1, 1, 8, False, False, True),
    (6, 12, 6, 12, 2, True, False, False),
    (6, 12, 3, 2, 4, False, False, True),
    (4, 16, 2, 8, 1, True, False, True),     # signed 1-bit {-1, 0} inputs
    (4, 16, 4, 4, 1, False, False, False),   # unsigned 1-bit {0, 1} inputs
    (5, 7, 5, 7, 3, True, False, True),      # odd shape
    (6, 12, 2, 4, 1, False, True, True),     # bipolar x bipolar: XNOR-popcount
    (6, 12, 1, 12, 1, False, True, False),
    (5, 7, 1, 1, 1, False, True, True),
]


def _id(c):
    n, k, pe, simd, ib, isg, bip, bias = c
    x = "bipolar" if bip else f"x{ib}{'s' if isg else 'u'}"
    return f"{x}-{n}x{k}-pe{pe}-simd{simd}{'-bias' if bias else ''}"


@pytest.mark.parametrize("pauses", [("random", "random"), ("3of4", "random"), ("random", "3of4")],
                         ids=lambda p: f"{p[0]}-{p[1]}")
@pytest.mark.parametrize("cfg", CONFIGS, ids=_id)
def test_bipolar_weights_match_numpy_under_backpressure(cfg, pauses):
    n, k, pe, simd, ib, isg, bip, bias = cfg
    dut, _ = _run(n, k, pe, simd, ib, isg, bipolar=bip, bias=bias, src=pauses[0], sink=pauses[1],
                  seed=zlib.crc32(("-".join(pauses) + _id(cfg)).encode()) % 1000)
    assert dut.style == ("xnor" if bip else "sign")


@pytest.mark.parametrize("wb,ws,pe,simd,pauses", [(4, True, 2, 4, ("random", "random")), (8, True, 3, 1, ("3of4", "random")),
                                                   (3, False, 1, 12, ("random", "3of4")), (1, True, 6, 2, ("random", "random"))])
def test_bipolar_inputs_with_integer_weights(wb, ws, pe, simd, pauses):
    """Bipolar inputs (bits, 1 = +1) times integer weights: ``w`` or ``-w`` per lane."""
    rng = np.random.default_rng(wb * 10 + pe)
    lo, hi = arith.int_range(wb, ws)
    n, k, vectors = 6, 12, 40
    w = rng.integers(lo, hi + 1, size=(n, k))
    w[0] = lo                                          # a row at its extreme
    b = rng.integers(-30, 30, size=n)
    bits = rng.integers(0, 2, size=(vectors, k))
    bits[0] = 0
    dut = MatrixVectorUnit(w, b, in_bits=1, in_signed=False, weight_bits=wb, weight_signed=ws,
                           input_bipolar=True, pe=pe, simd=simd)
    assert dut.style == "negate"
    out, _ = run_stream(dut, {"i": bits.reshape(-1, simd)}, {"o": vectors * n // pe},
                        src_pause=pauses[0], sink_pause=pauses[1], seed=wb)
    np.testing.assert_array_equal(out["o"].reshape(vectors, n), (2 * bits - 1) @ w.T + b)


@pytest.mark.parametrize("ib,isg,bip", [(8, True, False), (8, False, False), (4, True, False), (1, False, True)])
def test_bipolar_weights_extreme_rows_fit_the_exact_accumulator(ib, isg, bip):
    """Rows at their accumulator bounds come out exact although the hardware sums ``~x`` and the
    bias carries the row's -1 count (the accumulator wraps on the way)."""
    dut, _ = _run(4, 12, 2, 3, ib, isg, bipolar=bip, bias=False, vectors=12, extreme=True, seed=11)
    w, _, _, _ = _case(4, 12, ib, isg, bipolar=bip, bias=False, vectors=12, seed=11, extreme=True)
    lo, hi = (-1, 1) if bip else arith.int_range(ib, isg)
    rows_lo = np.minimum(w * lo, w * hi).sum(1)
    rows_hi = np.maximum(w * lo, w * hi).sum(1)
    assert dut.acc_bits == arith.acc_bits(int(rows_lo.min()), int(rows_hi.max()))


def test_bipolar_weights_cost_one_rom_bit_each():
    rng = np.random.default_rng(2)
    w = rng.choice([-1, 1], size=(256, 1152))
    one = MatrixVectorUnit.estimate(w, in_bits=2, in_signed=True, weight_bits=1, weight_signed=False,
                                    weight_bipolar=True, pe=4, simd=8)
    two = MatrixVectorUnit.estimate(w, in_bits=2, in_signed=True, weight_bits=2, weight_signed=True,
                                    pe=4, simd=8)
    # 256*1152 weights, 32 bits a word, 9216 words: 1 bit each fits 18 EBR (36x512), 2 bits 36;
    # plus the input buffer of 144 words of 8 x 2 bits, one EBR (as Yosys maps it)
    assert (one.ebr, two.ebr) == (18 + 1, 36 + 1)
    assert one.dsp == 0 and one.lut < two.lut


def test_bipolar_weight_parameters_are_checked():
    w = np.array([[1, -1], [-1, 1]])
    with pytest.raises(ValueError, match="bipolar weights are stored as 1 bit, not weight_bits=2"):
        MatrixVectorUnit(w, in_bits=8, in_signed=True, weight_bits=2, weight_signed=True, weight_bipolar=True)
    with pytest.raises(ValueError, match=r"bipolar weights must be -1 or \+1, not 0"):
        MatrixVectorUnit(np.array([[1, 0]]), in_bits=8, in_signed=True, weight_bits=1, weight_signed=False,
                         weight_bipolar=True)
    d = MatrixVectorUnit(w, in_bits=8, in_signed=False, weight_bits=1, weight_signed=False, weight_bipolar=True)
    assert d.style == "sign" and d.acc_bits == arith.acc_bits(-255, 255) and not d.weight_signed


@pytest.mark.sim
@pytest.mark.parametrize("cfg,pauses", [
    ((6, 12, 2, 4, 4, True, False, True), ("random", "random")),
    ((6, 12, 3, 4, 8, False, False, False), ("3of4", "random")),
], ids=lambda v: _id(v) if isinstance(v[0], int) else f"{v[0]}-{v[1]}")
def test_bipolar_weights_verilator(cfg, pauses):
    from onnx2hw.sim.cocotb_run import run_cocotb
    n, k, pe, simd, ib, isg, bip, bias = cfg
    vectors = 60
    w, b, feed, x = _case(n, k, ib, isg, bipolar=bip, bias=bias, vectors=vectors, seed=7)
    dut = MatrixVectorUnit(w, b, in_bits=ib, in_signed=isg, weight_bits=1, weight_signed=False,
                           weight_bipolar=True, pe=pe, simd=simd)
    out, _ = run_cocotb(dut, {"i": feed.reshape(-1, simd)}, {"o": vectors * n // pe},
                        src_pause=pauses[0], sink_pause=pauses[1], seed=7)
    want = x @ w.T + (0 if b is None else b)
    np.testing.assert_array_equal(out["o"].reshape(vectors, n), want)


@pytest.mark.synth
@pytest.mark.parametrize("n,k,pe,simd,ib,isg,mode", [
    (64, 64, 4, 16, 4, True, "weights"),     # 1-bit weights, 4-bit inputs: select/invert
    (16, 16, 4, 4, 2, True, "weights"),
    (64, 64, 2, 8, 8, False, "weights"),     # weights in block RAM
    (16, 16, 4, 4, 4, True, "inputs"),       # bipolar inputs, 4-bit weights: select/negate
])
def test_bipolar_weights_synth_estimate(n, k, pe, simd, ib, isg, mode, summary):
    """No DSP, one ROM bit per weight; LUT4 equivalents within 30 % of Yosys synth_ecp5."""
    from onnx2hw.rtl.synth_check import yosys_stat
    rng = np.random.default_rng(5)
    if mode == "weights":
        w = rng.choice([-1, 1], size=(n, k))
        kw = dict(in_bits=ib, in_signed=isg, weight_bits=1, weight_signed=False, weight_bipolar=True)
    else:
        w = rng.integers(-8, 8, size=(n, k))
        kw = dict(in_bits=1, in_signed=False, weight_bits=ib, weight_signed=True, input_bipolar=True)
    b = rng.integers(-100, 100, size=n)
    stat = yosys_stat(MatrixVectorUnit(w, b, pe=pe, simd=simd, **kw))
    est = MatrixVectorUnit.estimate(w, b, pe=pe, simd=simd, **kw)
    got = stat["lut"] + 2 * stat["ccu2c"]
    summary(f"mvu-bip-{mode}-{n}x{k}p{pe}s{simd}x{ib}",
            f"MVU {mode} bipolar {n}x{k} PE{pe} SIMD{simd} {ib}b: LUT4eq {got} (est {est.lut}), "
            f"FF {stat['ff']} (est {est.ff}), EBR {stat['ebr']} (est {est.ebr})")
    assert stat["dsp"] == 0 == est.dsp
    assert abs(est.lut - got) <= 0.3 * got, (est, stat)
    assert abs(est.ebr - stat["ebr"]) <= 1, (est, stat)
