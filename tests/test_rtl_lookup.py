"""LookupUnit: every lane reads its table, bit-exact under backpressure; parameters checked;
its cost model against Yosys."""
import numpy as np
import pytest
from amaranth.hdl import signed, unsigned

from onnx2hw.rtl.lookup import LookupUnit
from onnx2hw.rtl.synth_check import yosys_stat
from onnx2hw.sim.pysim import run_stream


def _lo_hi(shape):
    return (-(1 << (shape.width - 1)), (1 << (shape.width - 1)) - 1) if shape.signed else (0, (1 << shape.width) - 1)


def _table(rng, in_shape, out_shape):
    lo, hi = _lo_hi(out_shape)
    return rng.integers(lo, hi + 1, 1 << in_shape.width)


@pytest.mark.parametrize("in_shape, out_shape, lanes", [
    (unsigned(8), signed(8), 4), (signed(8), unsigned(8), 1), (signed(4), signed(6), 3), (unsigned(1), unsigned(3), 2)])
@pytest.mark.parametrize("pause", ["random", "3of4"])
def test_lookup_reads_the_table(in_shape, out_shape, lanes, pause):
    rng = np.random.default_rng(in_shape.width * 7 + lanes)
    table = _table(rng, in_shape, out_shape)
    lo, hi = _lo_hi(in_shape)
    x = rng.integers(lo, hi + 1, (1500, lanes))
    out, _ = run_stream(LookupUnit(in_shape, out_shape, table, lanes), {"i": x}, {"o": len(x)},
                        src_pause=pause, sink_pause=pause, seed=5)
    np.testing.assert_array_equal(out["o"], table[x - lo])


@pytest.mark.parametrize("kw, err, msg", [
    (dict(in_shape=unsigned(9), table=[0] * 512), ValueError, "at most 8 bits"),
    (dict(table=[0] * 255), ValueError, "256 entries"),
    (dict(table=[0] * 255 + [300]), ValueError, "300"),
    (dict(lanes=0), ValueError, "lanes"),
    (dict(out_shape="u8"), TypeError, "out_shape"),
])
def test_lookup_rejects_bad_parameters(kw, err, msg):
    args = dict(in_shape=unsigned(8), out_shape=unsigned(8), table=list(range(256)), lanes=2)
    args.update(kw)
    with pytest.raises(err, match=msg):
        LookupUnit(**args)


@pytest.mark.synth
@pytest.mark.parametrize("in_shape, lanes", [(unsigned(4), 4), (signed(8), 4), (unsigned(8), 1)])
def test_lookup_estimate_matches_yosys(in_shape, lanes):
    table = _table(np.random.default_rng(1), in_shape, signed(8))
    st = yosys_stat(LookupUnit(in_shape, signed(8), table, lanes), "ecp5")
    est = LookupUnit.estimate(in_shape, signed(8), table, lanes, family="ecp5")
    assert est.dsp == st["dsp"] == 0
    assert est.ebr == st["ebr"], (est, st)
    assert abs(est.lut - st["lut"]) <= max(8, 0.4 * st["lut"]), (est, st)


@pytest.mark.parametrize("channels, lanes", [(6, 2), (4, 4), (3, 1)])
@pytest.mark.parametrize("pause", ["random", "3of4"])
def test_per_channel_tables(channels, lanes, pause):
    """Channel c of a pixel (lane j of the f-th transfer: c = f * lanes + j) reads table c."""
    rng = np.random.default_rng(channels * 10 + lanes)
    in_shape, out_shape = signed(4), unsigned(6)
    tables = rng.integers(0, 64, (channels, 16))
    x = rng.integers(-8, 8, (50, channels))
    dut = LookupUnit(in_shape, out_shape, tables.reshape(-1), lanes, channels=channels)
    out, _ = run_stream(dut, {"i": x.reshape(-1, lanes)}, {"o": x.size // lanes}, src_pause=pause, sink_pause=pause,
                        seed=2)
    want = tables[np.arange(channels)[None, :], x + 8]
    np.testing.assert_array_equal(out["o"].reshape(x.shape), want)
