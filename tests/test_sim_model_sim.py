"""Whole example models in hardware: bit-exact against the golden integer executor.

Breadth in Amaranth's simulator (every example, random backpressure); cocotb + Verilator for
the residual CNN; a deliberately wrong golden reference must be caught and the diverging stage
named.
"""
import dataclasses

import numpy as np
import pytest

from _paths import EXAMPLES
from onnx2hw.dataflow.compile import compile_pipeline
from onnx2hw.flow import integer_graph_of
from onnx2hw.golden.integer import execute_integer
from onnx2hw.ir import load
from onnx2hw.layers import Dense
from onnx2hw.rtl.accelerator import AcceleratorCore
from onnx2hw.sim.model_sim import from_transfers, locate_divergence, simulate, to_transfers
from onnx2hw.sim.pysim import run_stream

EX = EXAMPLES
EXAMPLES = {  # model -> calibration (float models only)
    "digits_mlp_int8.onnx": None, "digits_mlp_w4a8.onnx": None, "digits_cnn_int8.onnx": None,
    "digits_cnn_res_int8.onnx": None, "digits_cnn_w4a8.onnx": None, "jet_mlp.onnx": "jet_calib.npz",
    "digits_mlp_qonnx_w4a4.onnx": None, "digits_mlp_qonnx_w2a2.onnx": None,
}


def _pipeline(model, calib=None, target=6000):
    ig = integer_graph_of(load(f"{EX}/{model}"), f"{EX}/{calib}" if calib else None)
    return compile_pipeline(ig, target_cycles=target)


def _inputs(g, n, seed=0):
    spec = g.input_specs[0]
    return np.random.default_rng(seed).integers(spec.dtype.lo, spec.dtype.hi + 1, (n,) + spec.shape)


def _assert_pysim_bit_exact(p, x, seed):
    """The pipeline ``p`` in Amaranth's simulator under random stalls equals the golden integer
    executor on the two inputs ``x``."""
    g = p.graph
    want = execute_integer(g, {g.input_specs[0].name: x})[g.output_specs[0].name]
    li, lo = p.input_link, p.output_link
    out, _ = run_stream(AcceleratorCore(p), {"i": to_transfers(x, li.dst_lanes)}, {"o": lo.elements // lo.src_lanes * 2},
                        src_pause="random", sink_pause="random", seed=seed, check_comb=False, idle_limit=1 << 20)
    np.testing.assert_array_equal(from_transfers(out["o"], 2, g.output_specs[0].shape), want)


@pytest.mark.slow
@pytest.mark.parametrize("model", list(EXAMPLES))
def test_example_bit_exact_pysim(model):
    p = _pipeline(model, EXAMPLES[model])
    g = p.graph
    x = _inputs(g, 2, seed=len(model))
    _assert_pysim_bit_exact(p, x, seed=1)


@pytest.mark.slow
def test_qoperator_model_bit_exact_pysim(tmp_path):
    """The QOperator import path (onnxruntime's QuantFormat.QOperator output) in hardware."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    calib = np.load(f"{EX}/digits_calib.npz")["input"][:32]

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter({"input": calib[i:i + 1]} for i in range(len(calib)))

        def get_next(self):
            return next(self.it, None)

    out = tmp_path / "mlp_qop.onnx"
    quantize_static(f"{EX}/digits_mlp.onnx", str(out), Reader(), quant_format=QuantFormat.QOperator,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    ig = integer_graph_of(load(out))
    assert ig.source == "qoperator"
    p = compile_pipeline(ig, target_cycles=6000)
    x = _inputs(ig, 2, seed=5)
    _assert_pysim_bit_exact(p, x, seed=2)


@pytest.mark.sim
def test_residual_cnn_cocotb_bit_exact_and_timing():
    p = _pipeline("digits_cnn_res_int8.onnx", target=1200)
    x = _inputs(p.graph, 12, seed=7)
    report = simulate(p, x, chunk=6)
    assert report.ok and report.exact == 12 and report.first_mismatch is None
    assert abs(report.ii - p.ii) <= 0.1 * p.ii, (report.ii, p.ii)
    assert report.latency > 0 and report.cycles >= 12 * p.ii


def test_wrong_golden_is_caught_and_stage_named():
    """The hardware of the real graph against the golden of a graph whose fc1 bias is off."""
    p = _pipeline("digits_mlp_int8.onnx", target=20000)
    g = p.graph
    layers = tuple(dataclasses.replace(l, bias=l.bias + 5000) if l.name == "fc1" else l for l in g.layers)
    wrong = dataclasses.replace(p, graph=dataclasses.replace(g, layers=layers))
    x = _inputs(g, 1, seed=2)
    assert isinstance(layers[1], Dense)
    assert locate_divergence(wrong, x) == "fc1"
    assert locate_divergence(p, x) is None
