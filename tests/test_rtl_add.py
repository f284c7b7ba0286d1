"""AddUnit: bit-exact against onnx2hw.arith over widths, signedness, lanes, stalls."""
import numpy as np
import pytest
from amaranth.hdl import signed, unsigned

from onnx2hw.arith import add_requantized
from onnx2hw.rtl._dsp import PRODUCT_LATENCY
from onnx2hw.rtl.add import AddUnit
from onnx2hw.sim.cocotb_run import run_cocotb
from _sim_fixtures import require_simulator
from onnx2hw.sim.pysim import run_stream

pytestmark = pytest.mark.filterwarnings("ignore:.*created but never used")


def _range(shape):
    return ((-(1 << (shape.width - 1)), (1 << (shape.width - 1)) - 1) if shape.signed
            else (0, (1 << shape.width) - 1))


def _rand(shape, lanes, n, seed):
    lo, hi = _range(shape)
    return np.random.default_rng(seed).integers(lo, hi + 1, size=(n, lanes))


def _check(a_shape, b_shape, out_shape, lanes, n=300, src="random", sink="random", seed=0,
           runner=run_stream, **q):
    a = _rand(a_shape, lanes, n, seed)
    b = _rand(b_shape, lanes, n, seed + 1)
    lo, hi = q.pop("lo", None), q.pop("hi", None)
    olo, ohi = _range(out_shape)
    want = add_requantized(a, b, lo=olo if lo is None else lo, hi=ohi if hi is None else hi,
                           **q)
    dut = AddUnit(a_shape, b_shape, out_shape, lanes, lo=lo, hi=hi, **q)
    out, cycles = runner(dut, {"a": a, "b": b}, {"o": n}, src_pause=src, sink_pause=sink,
                         seed=seed)
    np.testing.assert_array_equal(out["o"], want)
    return cycles


Q8 = dict(a_zero=-3, a_mult=23170, b_zero=5, b_mult=-9000, shift=15, zero_point=7)


@pytest.mark.parametrize("bits", [1, 2, 4, 8])
@pytest.mark.parametrize("a_signed,b_signed,o_signed", [(True, True, True), (False, True, False),
                                                        (False, False, True)])
@pytest.mark.parametrize("lanes", [1, 3])
def test_add_matches_numpy(bits, a_signed, b_signed, o_signed, lanes):
    sh = lambda s: signed(bits) if s else unsigned(bits)  # noqa: E731
    q = dict(a_zero=1 if bits > 1 else 0, a_mult=3 + bits * 1000, b_zero=0,
             b_mult=bits * 777 + 1, shift=10, zero_point=-1 if o_signed else 2)
    _check(sh(a_signed), sh(b_signed), signed(8) if o_signed else unsigned(8), lanes,
           seed=bits + 10 * lanes, **q)


@pytest.mark.parametrize("q", [
    dict(a_zero=0, a_mult=1, b_zero=0, b_mult=1, shift=0, zero_point=0),       # plain add
    dict(a_zero=0, a_mult=4, b_zero=0, b_mult=0, shift=2, zero_point=0),       # shift terms
    dict(a_zero=-128, a_mult=(1 << 20) - 3, b_zero=127, b_mult=-(1 << 19), shift=22,
         zero_point=-5),
    dict(Q8, lo=-20, hi=90),                                                   # narrow clamp
    dict(a_zero=0, a_mult=1, b_zero=0, b_mult=-1, shift=1, zero_point=0),      # ties: half up
])
def test_add_parameter_cases(q):
    _check(signed(8), signed(8), signed(8), 2, n=400, **q)


def test_add_rounds_half_up():
    a = np.array([[1], [3], [-1], [-3]])
    b = np.zeros_like(a)
    q = dict(a_zero=0, a_mult=1, b_zero=0, b_mult=1, shift=1, zero_point=0, lo=-8, hi=7)
    out, _ = run_stream(AddUnit(signed(4), signed(4), signed(4), 1, **q), {"a": a, "b": b},
                        {"o": 4})
    # independent: round(x / 2) with ties toward +inf
    np.testing.assert_array_equal(out["o"][:, 0], [1, 2, 0, -1])


def test_add_throughput_and_latency():
    cycles = _check(signed(8), signed(8), signed(8), 4, n=500, src="none", sink="none", **Q8)
    stages = AddUnit.stages(signed(8), Q8["a_mult"], signed(8), Q8["b_mult"])
    assert stages == 3 + PRODUCT_LATENCY   # DSP terms: PRODUCT_LATENCY registers in place of one
    assert cycles == 500 + stages + 2    # the pipeline, then the output queue
    assert AddUnit.estimate(signed(8), signed(8), signed(8), 4, **Q8).latency == stages + 2


@pytest.mark.parametrize("src,sink", [("3of4", "random"), ("random", "3of4")])
def test_add_long_stalled_stream(src, sink):
    _check(signed(8), signed(8), signed(8), 2, n=2500, src=src, sink=sink, seed=3, **Q8)


@pytest.mark.parametrize("kw,err,match", [
    (dict(shift=63), ValueError, "shift must be in 0..62, not 63"),
    (dict(a_mult=1 << 31), ValueError, "a_mult"),
    (dict(lo=10, hi=5), ValueError, r"clamp range \[10, 5\]"),
    (dict(hi=300), ValueError, r"clamp range \[-128, 300\]"),
    (dict(b_zero=1.5), TypeError, "b_zero must be an integer, not 1.5"),
    (dict(lanes=0), ValueError, "lanes must be >= 1, not 0"),
])
def test_add_rejects_bad_parameters(kw, err, match):
    with pytest.raises(err, match=match):
        AddUnit(signed(8), signed(8), signed(8), **kw)
    with pytest.raises(err, match=match):
        AddUnit.estimate(signed(8), signed(8), signed(8), **kw)


def test_numpy_definition_rejects_bad_values():
    with pytest.raises(TypeError, match="shift must be an integer scalar"):
        add_requantized([1], [2], a_zero=0, a_mult=1, b_zero=0, b_mult=1, shift=1.0,
                        zero_point=0, lo=0, hi=1)
    with pytest.raises(ValueError, match="empty clamp range"):
        add_requantized([1], [2], a_zero=0, a_mult=1, b_zero=0, b_mult=1, shift=1,
                        zero_point=0, lo=3, hi=1)


@pytest.mark.sim
def test_add_cocotb():
    require_simulator()
    _check(signed(8), unsigned(4), signed(8), 4, n=3000, seed=8, runner=run_cocotb, **Q8)


@pytest.mark.synth
@pytest.mark.parametrize("a_shape,b_shape,lanes,q", [
    (signed(8), signed(8), 4, Q8),
    (signed(4), unsigned(4), 8, dict(a_zero=1, a_mult=300, b_zero=3, b_mult=-200, shift=9,
                                      zero_point=0)),
    (unsigned(2), signed(8), 2, dict(a_zero=0, a_mult=5000, b_zero=0, b_mult=16, shift=12,
                                      zero_point=3)),
])
@pytest.mark.parametrize("family", ["ecp5", "ice40"])
def test_add_estimate_matches_yosys(a_shape, b_shape, lanes, q, family):
    from onnx2hw.rtl.synth_check import yosys_stat
    st = yosys_stat(AddUnit(a_shape, b_shape, signed(8), lanes, **q), family)
    est = AddUnit.estimate(a_shape, b_shape, signed(8), lanes, **q, family=family)
    assert est.dsp == st["dsp"], (est, st)
    assert est.ebr == st["ebr"]     # (iCE40: the output queue in a RAM40)
    assert abs(est.lut - st["lut"]) <= max(8, 0.3 * st["lut"]), (est, st)
