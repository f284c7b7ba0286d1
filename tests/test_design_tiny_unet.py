"""End to end: a tiny float U-Net (conv -> pool -> conv -> upsample x2 -> concat with the skip ->
conv; tests/data/tiny_unet.onnx, written by tests/data/make_tiny_unet.py) compiled with
``onnx2hw.compile(model, calib=...)``: the golden float executor against onnx.reference, the
quantized model against onnxruntime's spec session, and the simulated hardware bit-exact on 16
inputs."""
from pathlib import Path

import numpy as np
import onnx
import pytest

import onnx2hw
from _oracle import lsb_apart, reference, run_spec
from _sim_fixtures import require_simulator
from onnx2hw import golden
from onnx2hw.ir import load
from onnx2hw.layers import dequantize_outputs, quantize_inputs
from onnx2hw.quant import quantize

pytestmark = pytest.mark.filterwarnings("ignore::amaranth.hdl._ir.UnusedElaboratable")

MODEL = Path(__file__).parent / "data" / "tiny_unet.onnx"
#: the same topology exported by torch.onnx.export (tests/data/make_torch_unet.py, needs torch)
TORCH_MODEL = Path(__file__).parent / "data" / "torch_unet.onnx"


def _calib():
    return {"x": np.random.default_rng(0).normal(0, 1, (64, 2, 8, 8)).astype(np.float32)}


def _inputs(n=16):
    return np.random.default_rng(5).normal(0, 1, (n, 2, 8, 8)).astype(np.float32)


def test_committed_model_is_what_the_script_writes():
    import importlib.util
    spec = importlib.util.spec_from_file_location("make_tiny_unet", MODEL.with_name("make_tiny_unet.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.tiny_unet().SerializeToString() == onnx.load(str(MODEL)).SerializeToString()


def test_golden_float_matches_onnx_reference():
    x = _inputs()
    got = golden.execute(load(str(MODEL)), {"x": x})["y"]
    np.testing.assert_allclose(got, reference(onnx.load(str(MODEL)), {"x": x})[0], rtol=1e-5, atol=1e-5)


def test_quantized_unet_matches_onnxruntime_and_maps_every_layer():
    q = quantize(str(MODEL), _calib())
    design = onnx2hw.compile(str(MODEL), calib=_calib())
    assert [s.op for s in design.pipeline.stages] == ["conv", "fork", "maxpool", "conv", "resize", "concat", "conv"]
    g = design.integer
    x = _inputs()
    got = dequantize_outputs(g, golden.execute(g, quantize_inputs(g, {"x": x})))["y"]
    lsb = lsb_apart(got, run_spec(q, {"x": x})[0], g.outputs[0].scale)
    assert lsb.max() <= 1 and np.mean(lsb == 0) >= 0.99, (lsb.max(), np.mean(lsb == 0))


@pytest.mark.sim
@pytest.mark.slow
def test_simulated_unet_is_bit_exact_on_16_inputs():
    require_simulator("verilator")
    design = onnx2hw.compile(str(MODEL), calib=_calib())
    x = _inputs(16)
    y = design.simulate({"x": x})  # raises MismatchError unless every element is bit-exact
    g = design.integer
    want = dequantize_outputs(g, golden.execute(g, quantize_inputs(g, {"x": x})))["y"]
    assert y["y"].shape == (16, 3, 8, 8)
    np.testing.assert_array_equal(y["y"], want)


def test_torch_exported_unet_compiles_and_matches_onnxruntime():
    q = quantize(str(TORCH_MODEL), _calib())
    design = onnx2hw.compile(str(TORCH_MODEL), calib=_calib())
    assert [s.op for s in design.pipeline.stages] == ["conv", "fork", "maxpool", "conv", "resize", "concat", "conv"]
    g = design.integer
    x = _inputs()
    got = dequantize_outputs(g, golden.execute(g, quantize_inputs(g, {"x": x})))["y"]
    lsb = lsb_apart(got, run_spec(q, {"x": x})[0], g.outputs[0].scale)
    assert lsb.max() <= 1 and np.mean(lsb == 0) >= 0.99, (lsb.max(), np.mean(lsb == 0))


@pytest.mark.parametrize("name", ["ort_unet_qdq.onnx", "ort_unet_qop.onnx"])
def test_onnxruntime_quantized_unets_compile_and_match(name):
    """onnxruntime's quantize_static of the torch U-Net (tests/data/make_ort_unet.py): QDQ, and QOperator
    with QLinearConcat and a Resize on uint8. The QDQ graph is compared with onnxruntime's spec session,
    the QOperator graph with onnx.reference (onnxruntime's QLinearConv kernels saturate on CPUs
    without VNNI), each within one output step (the float rounding of a requantization scale)."""
    path = str(MODEL.with_name(name))
    design = onnx2hw.compile(path)
    assert [s.op for s in design.pipeline.stages] == ["conv", "fork", "maxpool", "conv", "resize", "concat", "conv"]
    g = design.integer
    x = _inputs()
    got = dequantize_outputs(g, golden.execute(g, quantize_inputs(g, {"x": x})))["y"]
    if "qop" in name:
        # onnx.reference implements DequantizeLinear from opset 19 only; opsets 13..19 changed
        # nothing this graph uses (QuantizeLinear/DequantizeLinear on uint8, Resize's defaults)
        m = onnx.load(path)
        next(o for o in m.opset_import if o.domain in ("", "ai.onnx")).version = 19
        want = reference(m, {"x": x})[0]
    else:
        want = run_spec(path, {"x": x})[0]
    lsb = lsb_apart(got, want, g.outputs[0].scale)
    assert lsb.max() <= 1 and np.mean(lsb == 0) >= 0.99, (lsb.max(), np.mean(lsb == 0))
