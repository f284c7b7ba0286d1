"""SpatialCrop: the pixels of a window of rows and columns of a channels-last image, bit-exact
against NumPy slicing written here under random and 3-in-4 backpressure; the zero-point offset,
full-rate cycles, cost and parameter checks."""
import numpy as np
import pytest
from amaranth.hdl import signed, unsigned

from onnx2hw.rtl.crop import SpatialCrop, bench_config
from onnx2hw.sim.pysim import run_stream

pytestmark = pytest.mark.filterwarnings("ignore::amaranth.hdl._ir.UnusedElaboratable")

CASES = [
    # name, elem shape, (H, W, C), rows, cols, lanes
    ("last_step_of_signal", signed(8), (1, 30, 8), (0, 1), (29, 30), 2),
    ("first_step_one_lane", unsigned(8), (1, 7, 3), (0, 1), (0, 1), 1),
    ("centre_crop", signed(8), (6, 5, 4), (1, 4), (1, 3), 2),
    ("one_row", unsigned(4), (4, 3, 6), (2, 3), (0, 3), 3),
    ("one_column_all_lanes", signed(8), (3, 4, 4), (0, 3), (3, 4), 4),
    ("whole_image", unsigned(3), (2, 3, 2), (0, 2), (0, 3), 1),
]


def _range(shape):
    return (-(1 << (shape.width - 1)), (1 << (shape.width - 1)) - 1) if shape.signed else (0, (1 << shape.width) - 1)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("pause", ["random", "3of4"])
def test_crop_matches_numpy(case, pause):
    _, shape, (h, w, c), rows, cols, lanes = case
    images = 3
    x = np.random.default_rng(h * w + c).integers(*_range(shape), size=(images, h, w, c), endpoint=True)
    want = x[:, rows[0]:rows[1], cols[0]:cols[1], :]           # y[r, c, :] = x[r0 + r, c0 + c, :]
    dut = SpatialCrop(shape, h, w, c, rows, cols, lanes)
    assert dut.out_transfers * images * lanes == want.size
    out, _ = run_stream(dut, {"i": x.reshape(-1, lanes)}, {"o": want.size // lanes}, src_pause=pause,
                        sink_pause=pause, seed=7)
    np.testing.assert_array_equal(out["o"].reshape(want.shape), want)


def test_offset_is_subtracted():
    """``offset`` (a zero point before a requantizer): y = x[window] - offset on a signed lane wide
    enough for it (NumPy formula)."""
    x = np.random.default_rng(3).integers(0, 256, size=(2, 3, 5, 4))
    dut = SpatialCrop(unsigned(8), 3, 5, 4, (1, 3), (2, 4), 2, offset=200)
    assert dut.out_shape.signed and dut.out_shape.width == 9
    want = x[:, 1:3, 2:4, :] - 200
    out, _ = run_stream(dut, {"i": x.reshape(-1, 2)}, {"o": want.size // 2}, src_pause="random",
                        sink_pause="random", seed=2)
    np.testing.assert_array_equal(out["o"].reshape(want.shape), want)


def test_full_rate_cycles():
    """Without stalls an image takes one cycle per input word (the dropped ones too)."""
    x = np.random.default_rng(1).integers(-128, 128, size=(2, 6, 6, 8))
    dut = SpatialCrop(signed(8), 6, 6, 8, (1, 5), (2, 6), 4)
    out, cycles = run_stream(dut, {"i": x.reshape(-1, 4)}, {"o": 2 * 4 * 4 * 2})
    np.testing.assert_array_equal(out["o"].reshape(2, 4, 4, 8), x[:, 1:5, 2:6])
    est = SpatialCrop.estimate(signed(8), 6, 6, 8, (1, 5), (2, 6), 4)
    assert est.cycles == 6 * 6 * 2 and est.latency == 0 and est.ff == 1 + 3 + 3
    assert cycles <= 2 * est.cycles + 8, (cycles, est)


def test_estimate_counts_only_bounded_sides():
    whole = SpatialCrop.estimate(unsigned(8), 4, 4, 2, (0, 4), (0, 4), 2)
    one_side = SpatialCrop.estimate(unsigned(8), 4, 4, 2, (0, 4), (0, 3), 2)
    four = SpatialCrop.estimate(unsigned(8), 4, 4, 2, (1, 3), (1, 3), 2)
    assert whole.lut < one_side.lut < four.lut and whole.ff == one_side.ff == four.ff


@pytest.mark.parametrize("args, error", [
    ((unsigned(8), 4, 4, 3, (0, 4), (0, 4), 2), "lanes 2 must divide channels 3"),
    ((unsigned(8), 4, 4, 2, (2, 2), (0, 4), 1), "rows"),
    ((unsigned(8), 4, 4, 2, (0, 4), (3, 5), 1), "cols"),
    ((unsigned(8), 0, 4, 2, (0, 1), (0, 4), 1), "height"),
])
def test_parameter_checks(args, error):
    with pytest.raises(ValueError, match=error):
        SpatialCrop(*args)


def test_bench_config_runs():
    (name, make, feeds, expect), = bench_config()
    out, _ = run_stream(make(), feeds, expect)
    x = feeds["i"].reshape(32, 32, 16)
    np.testing.assert_array_equal(out["o"].reshape(24, 24, 16), x[4:28, 4:28])
