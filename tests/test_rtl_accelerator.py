"""Whole pipelines elaborated into one AcceleratorCore: bit-exact against the golden integer
executor under random backpressure (Amaranth simulator for breadth, cocotb for a model)."""
import numpy as np
import pytest

import _int_models as models
from onnx2hw.dataflow.compile import compile_pipeline
from onnx2hw.dataflow.fold import Budget
from onnx2hw.golden.integer import execute_integer
from onnx2hw.rtl.accelerator import AcceleratorCore
from onnx2hw.sim.model_sim import from_transfers, to_transfers
from onnx2hw.sim.pysim import run_stream

SMALL = Budget(6000, 12, 20, "small")
BIG = Budget(83640, 156, 208, "LFE5U-85F")


def _random_inputs(g, n, seed):
    spec = g.input_specs[0]
    return np.random.default_rng(seed).integers(spec.dtype.lo, spec.dtype.hi + 1, (n,) + spec.shape)


def _check(pipeline, n=3, seed=0, pause="random"):
    g = pipeline.graph
    x = _random_inputs(g, n, seed)
    want = execute_integer(g, {g.input_specs[0].name: x})[g.output_specs[0].name]
    li, lo = pipeline.input_link, pipeline.output_link
    out, cycles = run_stream(AcceleratorCore(pipeline), {"i": to_transfers(x, li.dst_lanes)},
                             {"o": lo.elements // lo.src_lanes * n}, src_pause=pause, sink_pause=pause,
                             seed=seed, check_comb=False, idle_limit=20000)
    got = from_transfers(out["o"], n, g.output_specs[0].shape)
    np.testing.assert_array_equal(got, want)
    return cycles


@pytest.mark.parametrize("budget", [SMALL, BIG], ids=["small", "big"])
@pytest.mark.parametrize("pause", ["random", "3of4"])
def test_mlp_pipeline_bit_exact(budget, pause):
    _check(compile_pipeline(models.mlp(seed=1), budget=budget), pause=pause)


@pytest.mark.parametrize("act", ["thresholds", None])
def test_mlp_thresholds_and_raw_output(act):
    from onnx2hw.layers import IntType
    g = models.mlp(seed=2, sizes=(12, 8, 6), w_type=IntType(2, True), act=act)
    _check(compile_pipeline(g, budget=SMALL))


@pytest.mark.slow
def test_cnn_pipeline_bit_exact():
    _check(compile_pipeline(models.cnn(seed=3), budget=BIG), n=2)


@pytest.mark.slow
def test_residual_pipeline_bit_exact():
    _check(compile_pipeline(models.residual(seed=4), budget=SMALL), n=2)


def test_throughput_matches_estimate():
    """No backpressure: cycles for k inferences grow by about the estimated II each."""
    p = compile_pipeline(models.mlp(seed=5), budget=SMALL)
    c1 = _check(p, n=1, pause="none")
    c4 = _check(p, n=4, pause="none")
    measured = (c4 - c1) / 3
    assert abs(measured - p.ii) <= 0.1 * p.ii + 2, (measured, p.ii)
