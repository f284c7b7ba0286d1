"""ConcatUnit: channel concatenation with per-input requantization, bit-exact against the int64
formula (arith.requantize of x - z, the spec's rounding) under random backpressure; copies an input
already on the output grid; parameters checked."""
import numpy as np
import pytest
from amaranth.hdl import signed, unsigned

from onnx2hw.rtl.concat import ConcatUnit
from onnx2hw.rtl.synth_check import yosys_stat
from onnx2hw.sim.pysim import run_stream


def _rng_of(shape):
    return (-(1 << (shape.width - 1)), (1 << (shape.width - 1)) - 1) if shape.signed else (0, (1 << shape.width) - 1)


def _want(xs, zeros, mults, shifts, zp, lo, hi):
    """int64 formula written here: clamp(zp + (((x - z) * m + 2**(s-1)) >> s), lo, hi), per input."""
    outs = []
    for x, z, mm, s in zip(xs, zeros, mults, shifts):
        acc = (x.astype(np.int64) - z) * mm
        half = (1 << (s - 1)) if s else 0
        outs.append(np.clip(zp + ((acc + half) >> s), lo, hi))
    return np.concatenate(outs, axis=-1)


CASES = [
    # in shapes, channels, out shape, lanes, zeros, mults, shifts, zp, lo, hi
    ((unsigned(8), unsigned(8)), (4, 6), unsigned(8), 2, (0, 0), (1, 1), (0, 0), 0, 0, 255),  # pure interleave
    ((unsigned(8), signed(8)), (3, 2), signed(8), 1, (3, -5), (1518500250, 981467136), (31, 30), -2, -128, 127),
    ((signed(4), unsigned(8), signed(8)), (2, 4, 2), unsigned(8), 2, (1, 7, 0), (11, 1, 5), (3, 0, 1), 9, 0, 200),
]


@pytest.mark.parametrize("case", CASES, ids=["interleave", "requant2", "three"])
@pytest.mark.parametrize("pause", ["random", "3of4"])
def test_concat_matches_formula(case, pause):
    in_shapes, channels, out_shape, lanes, zeros, mults, shifts, zp, lo, hi = case
    rng = np.random.default_rng(sum(channels) + lanes)
    pixels = 40
    xs = [rng.integers(*_rng_of(s), size=(pixels, c), endpoint=True) for s, c in zip(in_shapes, channels)]
    dut = ConcatUnit(in_shapes, channels, out_shape, lanes, pixels=pixels, zeros=zeros, mults=mults, shifts=shifts,
                     zero_point=zp, lo=lo, hi=hi)
    feeds = {f"i{k}": x.reshape(-1, lanes) for k, x in enumerate(xs)}
    want = _want(xs, zeros, mults, shifts, zp, lo, hi)
    out, _ = run_stream(dut, feeds, {"o": want.size // lanes}, src_pause=pause, sink_pause=pause, seed=3)
    np.testing.assert_array_equal(out["o"].reshape(want.shape), want)


def test_estimate_counts_dsps_and_cycles():
    c = ConcatUnit.estimate((unsigned(8), signed(8)), (4, 4), signed(8), 2, pixels=10, zeros=(0, 0),
                            mults=(1, 3), shifts=(0, 2), zero_point=0)
    assert c.dsp == 2 and c.cycles == 40 and c.latency == 3   # the x3 term is a product; x1 a shift
    p = ConcatUnit.estimate((unsigned(8), unsigned(8)), (4, 4), unsigned(8), 4, pixels=10, zeros=(0, 0),
                            mults=(1, 1), shifts=(0, 0))
    assert p.dsp == 0 and p.cycles == 20


@pytest.mark.parametrize("kw, err, msg", [
    (dict(in_shapes=(unsigned(8),), channels=(4,), zeros=(0,), mults=(1,), shifts=(0,)), ValueError, "two or more"),
    (dict(channels=(4, 3)), ValueError, "must divide"),
    (dict(mults=(1,)), ValueError, "one entry per input"),
    (dict(shifts=(0, 63)), ValueError, "0..62"),
    (dict(lo=-1), ValueError, "clamp range"),
    (dict(out_shape="u8"), TypeError, "out_shape"),
])
def test_concat_rejects_bad_parameters(kw, err, msg):
    args = dict(in_shapes=(unsigned(8), unsigned(8)), channels=(4, 4), out_shape=unsigned(8), lanes=2,
                zeros=(0, 0), mults=(1, 1), shifts=(0, 0))
    args.update(kw)
    with pytest.raises(err, match=msg):
        ConcatUnit(**args)


@pytest.mark.synth
@pytest.mark.parametrize("kw", [
    dict(in_shapes=(unsigned(8), unsigned(8)), channels=(4, 4), out_shape=unsigned(8), lanes=2, pixels=16,
         zeros=(0, 0), mults=(1, 1), shifts=(0, 0)),
    dict(in_shapes=(unsigned(8), signed(8)), channels=(4, 6), out_shape=signed(8), lanes=2, pixels=16,
         zeros=(3, -5), mults=(1518500250, 981467136), shifts=(31, 30), zero_point=-2),
    dict(in_shapes=(unsigned(8), unsigned(8)), channels=(6, 4), out_shape=unsigned(8), lanes=1, pixels=64,
         zeros=(0, 0), mults=(1, 1518500250), shifts=(0, 31))], ids=["interleave", "two_products", "one_product"])
def test_concat_estimate_matches_yosys(kw):
    st = yosys_stat(ConcatUnit(**kw), "ecp5")
    est = ConcatUnit.estimate(**kw, family="ecp5")
    assert est.dsp == st["dsp"] and est.ebr == st["ebr"] == 0, (est, st)
    assert abs(est.lut - st["lut"]) <= max(8, 0.4 * st["lut"]), (est, st)
