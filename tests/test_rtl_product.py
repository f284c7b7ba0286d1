"""ProductUnit: bit-exact against an int64 NumPy product written here, lockstep, broadcast
gate and pixel gate, DSP and LUT products, lanes, random valid/ready stalls on every port."""
import numpy as np
import pytest
from amaranth.hdl import signed, unsigned

from onnx2hw.rtl._dsp import PRODUCT_LATENCY
from onnx2hw.rtl.product import ProductUnit
from onnx2hw.sim.cocotb_run import run_cocotb
from onnx2hw.sim.pysim import run_stream
from _sim_fixtures import PAUSE_PAIRS, random_transfers, require_simulator

pytestmark = pytest.mark.filterwarnings("ignore:.*created but never used")


def _lockstep(a_shape, b_shape, lanes, n, *, a_zero=0, b_zero=0, mul_style="auto", src="random", sink="random",
              seed=0, runner=run_stream):
    a = random_transfers(a_shape, lanes, n, seed)
    b = random_transfers(b_shape, lanes, n, seed + 1)
    want = (a - a_zero) * (b - b_zero)          # int64, the definition
    dut = ProductUnit(a_shape, b_shape, lanes, a_zero=a_zero, b_zero=b_zero, mul_style=mul_style)
    out, cycles = runner(dut, {"a": a, "b": b}, {"o": n}, src_pause=src, sink_pause=sink, seed=seed)
    np.testing.assert_array_equal(out["o"], want)
    return cycles


def _gated(a_shape, b_shape, lanes, channels, pixels, images, *, a_zero=0, b_zero=0, mul_style="auto",
           src="random", sink="random", seed=0, runner=run_stream):
    """``images`` images of ``pixels`` x ``channels`` on ``a``, one gate of ``channels`` per image on ``b``."""
    nf = channels // lanes
    a = random_transfers(a_shape, 1, images * pixels * channels, seed).reshape(images, pixels, channels)
    g = random_transfers(b_shape, 1, images * channels, seed + 1).reshape(images, 1, channels)
    want = (a - a_zero) * (g - b_zero)          # int64, gate broadcast over the pixels
    dut = ProductUnit(a_shape, b_shape, lanes, a_zero=a_zero, b_zero=b_zero, gate_channels=channels,
                      pixels=pixels, mul_style=mul_style)
    out, cycles = runner(dut, {"a": a.reshape(-1, lanes), "b": g.reshape(-1, lanes)},
                         {"o": images * pixels * nf}, src_pause=src, sink_pause=sink, seed=seed)
    np.testing.assert_array_equal(out["o"].reshape(want.shape), want)
    return cycles


def _pixel_gated(a_shape, b_shape, lanes, channels, pixels, *, a_zero=0, b_zero=0, mul_style="auto",
                 src="random", sink="random", seed=0, runner=run_stream):
    """``pixels`` pixels of ``channels`` on ``a``, one gate value per pixel on ``b`` (one lane)."""
    a = random_transfers(a_shape, 1, pixels * channels, seed).reshape(pixels, channels)
    g = random_transfers(b_shape, 1, pixels, seed + 1).reshape(pixels, 1)
    want = (a - a_zero) * (g - b_zero)          # int64, the pixel's gate broadcast over its channels
    dut = ProductUnit(a_shape, b_shape, lanes, a_zero=a_zero, b_zero=b_zero, pixel_channels=channels,
                      mul_style=mul_style)
    out, cycles = runner(dut, {"a": a.reshape(-1, lanes), "b": g}, {"o": pixels * channels // lanes},
                         src_pause=src, sink_pause=sink, seed=seed)
    np.testing.assert_array_equal(out["o"].reshape(want.shape), want)
    return cycles


@pytest.mark.parametrize("src,sink", PAUSE_PAIRS)
@pytest.mark.parametrize("lanes,channels", [(1, 1), (1, 5), (2, 6), (3, 3), (4, 8)])
def test_pixel_gate_matches_numpy(src, sink, lanes, channels):
    _pixel_gated(unsigned(8), signed(8), lanes, channels, 40, a_zero=3, b_zero=-5, src=src, sink=sink,
                 seed=lanes + channels)


@pytest.mark.parametrize("style", ["dsp", "lut"])
def test_pixel_gate_styles(style):
    _pixel_gated(signed(8), unsigned(8), 2, 4, 30, a_zero=-2, b_zero=128, mul_style=style, seed=13)


def test_pixel_gate_throughput_and_latency():
    """Free-running: one a transfer a cycle, the gate streaming beside it; the lockstep latency."""
    lanes, channels, pixels = 2, 8, 50
    cycles = _pixel_gated(unsigned(8), unsigned(8), lanes, channels, pixels, src="none", sink="none")
    stages = ProductUnit.stages(unsigned(8), 0, unsigned(8), 0)
    assert cycles == pixels * channels // lanes + stages + 2
    est = ProductUnit.estimate(unsigned(8), unsigned(8), lanes, pixel_channels=channels)
    assert est.cycles == 1 and est.latency == stages + 2
    assert len(ProductUnit(unsigned(8), unsigned(8), lanes, pixel_channels=channels).b.payload) == 1


@pytest.mark.parametrize("src,sink", PAUSE_PAIRS)
@pytest.mark.parametrize("lanes", [1, 3])
def test_lockstep_matches_numpy(src, sink, lanes):
    _lockstep(unsigned(8), signed(8), lanes, 300, a_zero=128, b_zero=-3, src=src, sink=sink, seed=lanes)


@pytest.mark.parametrize("a_shape,b_shape,a_zero,b_zero,style", [
    (signed(8), signed(8), 0, 0, "dsp"), (unsigned(8), unsigned(8), 255, 0, "auto"),
    (signed(4), unsigned(4), -8, 15, "auto"), (unsigned(2), signed(3), 1, 0, "lut"),
    (signed(8), unsigned(8), 5, 200, "lut"), (unsigned(16), signed(16), 40000, -7, "dsp")], ids=str)
def test_lockstep_widths_and_styles(a_shape, b_shape, a_zero, b_zero, style):
    _lockstep(a_shape, b_shape, 2, 250, a_zero=a_zero, b_zero=b_zero, mul_style=style, seed=7)


@pytest.mark.parametrize("src,sink", PAUSE_PAIRS)
@pytest.mark.parametrize("lanes,channels,pixels", [(1, 6, 5), (2, 6, 4), (3, 3, 7), (1, 1, 9), (4, 8, 1)])
def test_gate_broadcast_matches_numpy(src, sink, lanes, channels, pixels):
    _gated(unsigned(8), unsigned(8), lanes, channels, pixels, 3, a_zero=3, b_zero=128, src=src, sink=sink,
           seed=lanes + channels)


@pytest.mark.parametrize("style", ["dsp", "lut"])
def test_gate_broadcast_styles(style):
    _gated(signed(8), unsigned(8), 2, 10, 6, 2, a_zero=-2, b_zero=0, mul_style=style, seed=11)


def test_lockstep_throughput_and_latency():
    n = 400
    cycles = _lockstep(signed(8), signed(8), 4, n, mul_style="dsp", src="none", sink="none")
    stages = ProductUnit.stages(signed(8), 0, signed(8), 0, "dsp")
    assert stages == 2 + PRODUCT_LATENCY
    assert cycles == n + stages + 2          # the pipeline, then the output queue
    assert ProductUnit.estimate(signed(8), signed(8), 4, mul_style="dsp").latency == stages + 2


def test_gate_costs_its_load_per_image():
    """Free-running: each image takes its gate's C/lanes transfers, then one a transfer a cycle."""
    lanes, channels, pixels, images = 2, 8, 10, 3
    cycles = _gated(unsigned(8), unsigned(8), lanes, channels, pixels, images, src="none", sink="none")
    per_image = channels // lanes * (pixels + 1)
    stages = ProductUnit.stages(unsigned(8), 0, unsigned(8), 0, gate=True)
    assert stages == ProductUnit.stages(unsigned(8), 0, unsigned(8), 0) + 1    # the gate's landing register
    assert cycles == images * per_image + stages + 2
    est = ProductUnit.estimate(unsigned(8), unsigned(8), lanes, gate_channels=channels, pixels=pixels)
    assert est.cycles == per_image and est.latency == stages + 2


def test_output_shape_is_the_exact_product_range():
    dut = ProductUnit(unsigned(8), signed(8), a_zero=0, b_zero=0)
    assert dut.out_shape == signed(16)      # 255 * -128 = -32640 ... 255 * 127 = 32385
    dut = ProductUnit(unsigned(8), unsigned(8), a_zero=128, b_zero=128)
    assert dut.out_shape == signed(16)      # -128 * 127 = -16256 ... (-128) * (-128) = 16384
    assert ProductUnit(unsigned(4), unsigned(4)).out_shape == signed(9)    # 0 ... 225


@pytest.mark.parametrize("kw,err,match", [
    (dict(lanes=0), ValueError, "lanes must be >= 1, not 0"),
    (dict(a_zero=300), ValueError, r"a_zero must lie in \[-128, 127\]"),
    (dict(b_zero=1.5), TypeError, "b_zero must be an integer, not 1.5"),
    (dict(lanes=4, gate_channels=6), ValueError, "lanes 4 must divide gate_channels 6"),
    (dict(gate_channels=4, pixels=0), ValueError, "pixels must be >= 1, not 0"),
    (dict(mul_style="fast"), ValueError, "mul_style must be one of"),
    (dict(lanes=4, pixel_channels=6), ValueError, "lanes 4 must divide pixel_channels 6"),
    (dict(pixel_channels=0), ValueError, "pixel_channels must be >= 1, not 0"),
    (dict(pixel_channels=4, gate_channels=4), ValueError, "gate_channels and pixel_channels exclude each other"),
])
def test_rejects_bad_parameters(kw, err, match):
    with pytest.raises(err, match=match):
        ProductUnit(signed(8), signed(8), **kw)
    with pytest.raises(err, match=match):
        ProductUnit.estimate(signed(8), signed(8), **kw)


@pytest.mark.sim
def test_product_cocotb():
    require_simulator()
    _gated(unsigned(8), signed(8), 2, 6, 20, 4, a_zero=7, b_zero=-1, seed=5, runner=run_cocotb)
    _lockstep(signed(8), unsigned(8), 3, 1500, a_zero=-1, b_zero=128, seed=8, runner=run_cocotb)
    _pixel_gated(unsigned(8), signed(8), 2, 6, 200, a_zero=7, b_zero=-1, seed=9, runner=run_cocotb)


@pytest.mark.synth
@pytest.mark.parametrize("kw", [dict(mul_style="dsp"), dict(mul_style="lut"),
                                dict(gate_channels=64, pixels=49), dict(gate_channels=8, pixels=4),
                                dict(gate_channels=576, pixels=4), dict(pixel_channels=8)], ids=str)
def test_estimate_matches_yosys(kw):
    from onnx2hw.rtl.synth_check import yosys_stat
    st = yosys_stat(ProductUnit(unsigned(8), signed(8), 2, a_zero=3, **kw), "ecp5")
    est = ProductUnit.estimate(unsigned(8), signed(8), 2, a_zero=3, **kw)
    assert est.dsp == st["dsp"], (est, st)
    assert est.ebr == st["ebr"], (est, st)
    assert abs(est.lut - st["lut"]) <= max(10, 0.35 * st["lut"]), (est, st)
