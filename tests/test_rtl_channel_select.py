"""ChannelSelectUnit: per pixel, the selected channels in order, bit-exact against NumPy indexing
written here under random and 3-in-4 backpressure; the direct form (whole lane words, increasing)
and the buffered form (pixel register banks); cost and parameter checks."""
import numpy as np
import pytest
from amaranth.hdl import signed, unsigned

from onnx2hw.rtl.channel_select import ChannelSelectUnit, bench_config
from onnx2hw.rtl.synth_check import yosys_stat
from onnx2hw.sim.pysim import run_stream

pytestmark = pytest.mark.filterwarnings("ignore::amaranth.hdl._ir.UnusedElaboratable")

_SHUFFLE = tuple(int(v) for v in np.arange(12).reshape(3, 4).T.reshape(-1))   # groups of 3, 12 channels

CASES = [
    # name, elem shape, in channels, indices, in lanes, out lanes, direct
    ("shuffle", signed(8), 12, _SHUFFLE, 1, 1, False),
    ("shuffle_lanes", signed(8), 12, _SHUFFLE, 4, 4, False),
    ("shuffle_in4_out2", unsigned(4), 12, _SHUFFLE, 4, 2, False),
    ("selection_repeats", unsigned(8), 6, (5, 0, 0, 3), 2, 2, False),
    ("unaligned_slice", signed(8), 8, (1, 2, 3, 4), 2, 2, False),
    ("step2", unsigned(8), 8, (0, 2, 4, 6), 1, 1, True),
    ("aligned_split_hi", signed(8), 8, (4, 5, 6, 7), 2, 2, True),
    ("aligned_words", unsigned(8), 12, (0, 1, 6, 7, 8, 9), 2, 2, True),
    ("one_channel", unsigned(3), 5, (3,), 1, 1, True),
]


def _range(shape):
    return (-(1 << (shape.width - 1)), (1 << (shape.width - 1)) - 1) if shape.signed else (0, (1 << shape.width) - 1)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("pause", ["random", "3of4"])
def test_selection_matches_numpy(case, pause):
    _, shape, c, idx, li, lo, direct = case
    pixels = 17
    x = np.random.default_rng(c + li).integers(*_range(shape), size=(pixels, c), endpoint=True)
    want = x[:, list(idx)]                                  # y[p, j] = x[p, idx[j]]
    dut = ChannelSelectUnit(shape, c, idx, li, lo, pixels=pixels)
    assert dut.direct == direct
    out, _ = run_stream(dut, {"i": x.reshape(-1, li)}, {"o": want.size // lo}, src_pause=pause, sink_pause=pause,
                        seed=5)
    np.testing.assert_array_equal(out["o"].reshape(want.shape), want)


@pytest.mark.parametrize("idx, lanes", [((4, 5), 2), ((5, 1, 1), 1)], ids=["direct", "buffered"])
def test_offset_is_subtracted(idx, lanes):
    """``offset`` (a zero point before a requantizer): y = x[idx] - offset on a signed lane wide
    enough for it (NumPy formula)."""
    x = np.random.default_rng(2).integers(0, 256, size=(9, 6))
    dut = ChannelSelectUnit(unsigned(8), 6, idx, lanes, lanes, offset=200)
    assert dut.out_shape.signed and dut.out_shape.width == 9 and dut.direct == (lanes == 2)
    out, _ = run_stream(dut, {"i": x.reshape(-1, lanes)}, {"o": 9 * len(idx) // lanes}, src_pause="random",
                        sink_pause="random", seed=1)
    np.testing.assert_array_equal(out["o"].reshape(9, -1), x[:, list(idx)] - 200)


def test_full_rate_cycles():
    """Without stalls a pixel takes max(input words, output words) cycles in the buffered form
    (the banks overlap) and one cycle per input word in the direct form."""
    pixels = 40
    for idx, li, lo, per_pixel in ((_SHUFFLE, 4, 2, 6), (_SHUFFLE, 2, 4, 6), ((4, 5, 6, 7, 8, 9, 10, 11), 4, 4, 3)):
        x = np.random.default_rng(1).integers(-128, 128, size=(pixels, 12))
        dut = ChannelSelectUnit(signed(8), 12, idx, li, lo, pixels=pixels)
        out, cycles = run_stream(dut, {"i": x.reshape(-1, li)}, {"o": pixels * len(idx) // lo})
        np.testing.assert_array_equal(out["o"].reshape(pixels, -1), x[:, list(idx)])
        est = ChannelSelectUnit.estimate(signed(8), 12, idx, li, lo, pixels=pixels)
        assert est.cycles == pixels * per_pixel
        assert cycles <= est.cycles + 3 * per_pixel + 8, (cycles, est)


def test_estimate_forms():
    d = ChannelSelectUnit.estimate(unsigned(8), 8, (4, 5, 6, 7), 4, 4, pixels=10)
    assert d.ff < 8 and d.latency == 0 and d.cycles == 20
    b = ChannelSelectUnit.estimate(unsigned(8), 8, (7, 6, 5, 4), 4, 4, pixels=10)
    assert b.ff >= 2 * 8 * 8 and b.latency == 2 and b.cycles == 20


def test_bench_config_runs():
    for _name, factory, feeds, expect in bench_config():
        out, _ = run_stream(factory(), feeds, expect)
        x = feeds["i"].reshape(-1, 16)
        perm = list(np.arange(16).reshape(2, 8).T.reshape(-1))
        np.testing.assert_array_equal(out["o"].reshape(-1, 16), x[:, perm])


@pytest.mark.parametrize("kw, err, msg", [
    (dict(indices=()), ValueError, "one or more"),
    (dict(indices=(0, 8)), ValueError, "0..7"),
    (dict(in_lanes=3), ValueError, "in_lanes 3"),
    (dict(out_lanes=3), ValueError, "out_lanes 3"),
    (dict(elem_shape="u8"), TypeError, "elem_shape"),
    (dict(in_channels=0), ValueError, "in_channels"),
    (dict(indices=(1.5, 2)), TypeError, "indices entry"),
    (dict(offset=0.5), TypeError, "offset"),
])
def test_rejects_bad_parameters(kw, err, msg):
    args = dict(elem_shape=unsigned(8), in_channels=8, indices=(1, 0), in_lanes=2, out_lanes=2)
    args.update(kw)
    with pytest.raises(err, match=msg):
        ChannelSelectUnit(**args)


@pytest.mark.synth
@pytest.mark.parametrize("kw", [
    dict(elem_shape=signed(8), in_channels=12, indices=_SHUFFLE, in_lanes=1, out_lanes=1),
    dict(elem_shape=signed(8), in_channels=12, indices=_SHUFFLE, in_lanes=4, out_lanes=4),
    dict(elem_shape=signed(8), in_channels=16, indices=tuple(range(8, 16)), in_lanes=4, out_lanes=4),
], ids=["shuffle", "shuffle_lanes", "direct"])
def test_estimate_matches_yosys(kw):
    st = yosys_stat(ChannelSelectUnit(**kw), "ecp5")
    est = ChannelSelectUnit.estimate(**kw, family="ecp5")
    assert est.dsp == st["dsp"] == 0 and est.ebr == st["ebr"] == 0, (est, st)
    assert abs(est.lut - st["lut"]) <= max(8, 0.5 * st["lut"]), (est, st)
    assert abs(est.ff - st["ff"]) <= max(4, 0.2 * st["ff"]), (est, st)
