"""Dataflow benchmark: every example model compiled for ULX3S-85F and simulated in Verilator.

Per model: bit-exact inferences (random inputs, random backpressure), measured II vs the
estimate, efficiency = (MACs per inference / multipliers) / measured II, total FIFO depth, and
Verilator cycles per second (build excluded).
"""
from __future__ import annotations

import time

import numpy as np

MODELS = {  # example -> calibration for float models
    "digits_mlp_int8.onnx": None, "digits_mlp_w4a8.onnx": None, "digits_cnn_int8.onnx": None,
    "digits_cnn_res_int8.onnx": None, "digits_cnn_w4a8.onnx": None, "jet_mlp.onnx": "jet_calib.npz",
    "digits_mlp_qonnx_w4a4.onnx": None, "digits_mlp_qonnx_w2a2.onnx": None,
}
INFERENCES = 200


def bench_dataflow(board="ulx3s", inferences=INFERENCES) -> list[dict]:
    from onnx2hw.boards import get_board
    from onnx2hw.commands._options import HEADROOM
    from onnx2hw.dataflow import compile_pipeline
    from onnx2hw.flow import integer_graph_of, load_graph
    from onnx2hw.sim.model_sim import measure_timing, simulate

    b = get_board(board)
    rows = []
    print(f"board {b.title}, budget {HEADROOM:.0%} of the device, {inferences} inferences per model")
    print(f"{'model':30} {'bit-exact':>10} {'II est':>7} {'II meas':>8} {'err':>6} {'eff':>5} "
          f"{'mults':>6} {'FIFO':>6} {'cyc/s':>8}")
    for model, calib in MODELS.items():
        ig = integer_graph_of(load_graph(f"examples/{model}"), f"examples/{calib}" if calib else None)
        p = compile_pipeline(ig, family=b.family, budget=b.budget.scaled(HEADROOM))
        spec = p.graph.input_specs[0]
        x = np.random.default_rng(0).integers(spec.dtype.lo, spec.dtype.hi + 1, (inferences,) + spec.shape)
        ii, _ = measure_timing(p, x)  # also builds the simulator
        t0 = time.perf_counter()
        report = simulate(p, x, chunk=inferences, timing=False)
        rate = report.cycles / (time.perf_counter() - t0)
        eff = p.macs / max(p.multipliers, 1) / ii
        fifo = sum(l.fifo_depth for l in p.links)
        rows.append(dict(model=model, exact=report.exact, total=report.total, ii_est=p.ii, ii=ii,
                         efficiency=eff, multipliers=p.multipliers, fifo=fifo, cycles_per_s=rate))
        print(f"{model:30} {report.exact:>4}/{report.total:<5} {p.ii:>7} {ii:>8.1f} "
              f"{(ii - p.ii) / p.ii:>6.1%} {eff:>5.2f} {p.multipliers:>6} {fifo:>6} {rate:>8,.0f}", flush=True)
    return rows
