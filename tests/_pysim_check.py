"""One check shared by the layer-kind tests: a compiled pipeline's hardware (AcceleratorCore in
Amaranth's simulator, random stalls on both ends) against the golden integer executor."""
from __future__ import annotations

import numpy as np

from onnx2hw.golden.integer import execute_integer
from onnx2hw.rtl.accelerator import AcceleratorCore
from onnx2hw.sim.model_sim import from_transfers, to_transfers
from onnx2hw.sim.pysim import run_stream


def assert_hardware_is_golden(p, n: int = 3, *, input_seed: int = 3, seed: int = 4) -> None:
    """``n`` random codes over the input type's whole range through pipeline ``p``; every output
    element equal to ``execute_integer`` of ``p.graph``."""
    ig = p.graph
    spec, out_spec = ig.input_specs[0], ig.output_specs[0]
    xq = np.random.default_rng(input_seed).integers(spec.dtype.lo, spec.dtype.hi + 1, (n,) + spec.shape)
    want = execute_integer(ig, {spec.name: xq})[out_spec.name]
    li, lo = p.input_link, p.output_link
    out, _ = run_stream(AcceleratorCore(p), {"i": to_transfers(xq, li.dst_lanes)},
                        {"o": lo.elements // lo.src_lanes * n}, src_pause="random", sink_pause="random", seed=seed,
                        check_comb=False, idle_limit=1 << 20)
    np.testing.assert_array_equal(from_transfers(out["o"], n, out_spec.shape), want)
