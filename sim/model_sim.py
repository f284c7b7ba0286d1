"""Whole-model simulation: an accelerator built from a Pipeline, run under cocotb, compared
bit for bit with the golden integer executor.

Tensors stream in NHWC order, ``lanes`` elements per transfer; a bipolar input (values -1/+1)
is encoded as bits (1 = +1, 0 = -1). Long runs are split into chunks of inferences (each chunk a
simulator run of the cached build) so progress can be shown.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from onnx2hw.dataflow.pipeline import INPUT, OUTPUT, Link, Pipeline
from onnx2hw.golden.integer import execute_integer
from onnx2hw.rtl.accelerator import AcceleratorCore

from ._stream import default_max_cycles
from .cocotb_run import run_cocotb
from .pysim import run_stream

__all__ = ["SimReport", "simulate", "random_inputs", "to_transfers", "from_transfers", "measure_timing"]


@dataclass
class SimReport:
    total: int
    exact: int
    hw: np.ndarray                      # (N, *output shape) integers computed by the hardware
    golden: np.ndarray
    first_mismatch: tuple | None = None  # (inference, flat index, expected, got)
    diverged_stage: str | None = None
    ii: float | None = None             # measured cycles per inference (no backpressure)
    latency: int | None = None          # measured cycles, first input to last output of one inference
    cycles: int = 0                     # simulated cycles of the bit-exactness runs
    seconds: float = 0.0
    notes: list = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.exact == self.total


def random_inputs(graph, count: int, seed: int = 0) -> np.ndarray:
    """(count, *input shape) integers drawn uniformly over the input's whole range (-1/+1 if bipolar)."""
    spec = graph.input_specs[0]
    rng = np.random.default_rng(seed)
    if spec.dtype.bipolar:
        return rng.choice(np.array([-1, 1]), size=(count,) + spec.shape)
    return rng.integers(spec.dtype.lo, spec.dtype.hi + 1, size=(count,) + spec.shape)


def to_transfers(x: np.ndarray, lanes: int, bipolar: bool = False) -> np.ndarray:
    """(N, *shape) integers -> (N * elements / lanes, lanes) stream transfers (NHWC order)."""
    x = np.asarray(x, dtype=np.int64)
    if bipolar:
        x = (x > 0).astype(np.int64)
    return x.reshape(-1, lanes)


def from_transfers(t: np.ndarray, n: int, shape: tuple[int, ...], bipolar: bool = False) -> np.ndarray:
    """Stream transfers -> (N, *shape) integers (bipolar bits decoded: 1 -> +1, 0 -> -1)."""
    t = np.asarray(t, dtype=np.int64)
    if bipolar:
        t = 2 * t - 1
    return t.reshape((n,) + tuple(shape))


def _run(component, feeds, expect, simulator, pause, seed, waves, count):
    """One simulator run of ``count`` inferences. Time-outs scale with the pipeline: no port
    transfer for 4 x (latency + II) cycles is a deadlock, and the whole run may take 4 x its
    estimate (random stalls on both ends cost at most that) plus the harness's own margin."""
    p = component.pipeline
    idle = max(4096, 4 * (p.latency + p.ii))
    budget = default_max_cycles(feeds, expect) + 4 * (p.latency + count * p.ii)
    return run_cocotb(component, feeds, expect, simulator=simulator, src_pause=pause,
                      sink_pause=pause, seed=seed, waves=waves, idle_limit=idle, max_cycles=budget,
                      expected_cycles=p.latency + count * p.ii)


def measure_timing(pipeline: Pipeline, x: np.ndarray, simulator="verilator", component=None) -> tuple[float, int]:
    """(II, latency) measured without backpressure: II = (cycles(k) - cycles(1)) / (k - 1).
    ``component``: the pipeline's :class:`AcceleratorCore` if already built (converted to Verilog
    once per object)."""
    li, lo = pipeline.input_link, pipeline.output_link
    bipolar = pipeline.graph.input_specs[0].dtype.bipolar
    out_t = lo.elements // lo.src_lanes
    k = min(len(x), 6)
    acc = component if component is not None else AcceleratorCore(pipeline)
    cycles = {}
    for n in sorted({1, k}):
        feeds = {"i": to_transfers(x[:n], li.dst_lanes, bipolar)}
        _, cycles[n] = _run(acc, feeds, {"o": out_t * n}, simulator, "none", 0, False, n)
    ii = (cycles[k] - cycles[1]) / (k - 1) if k > 1 else float(cycles[1])
    return ii, cycles[1]


def _stage_pipeline(p: Pipeline, stage) -> Pipeline:
    """A one-stage pipeline fed and drained directly (for locating a divergence)."""
    in_link = next(l for l in p.links if l.dst == stage.name)
    out_link = next(l for l in p.links if l.src == stage.name)
    links = (Link(in_link.tensor, INPUT, stage.name, 0, 0, stage.in_lanes[0], stage.in_lanes[0],
                  in_link.bits, in_link.signed, in_link.elements, 2),
             Link(stage.output, stage.name, OUTPUT, 0, 0, stage.out_lanes, stage.out_lanes,
                  out_link.bits, out_link.signed, out_link.elements, 2))
    return Pipeline(graph=p.graph, stages=(stage,), links=links, family=p.family, folding={})


def locate_divergence(pipeline: Pipeline, x: np.ndarray, seed=0) -> str | None:
    """The first stage (in order) whose own output differs from the golden tensor when fed the
    golden input tensor, or ``None`` if every single-input stage matches alone.

    Each stage runs alone in Amaranth's simulator (small, no compile step), with random
    backpressure.
    """
    g = pipeline.graph
    env = execute_integer(g, {g.input_specs[0].name: x}, keep_intermediates=True)
    for stage in pipeline.stages:
        if len(stage.inputs) != 1 or sum(link.src == stage.name for link in pipeline.links) != 1:
            continue
        sub = _stage_pipeline(pipeline, stage)
        specs = {t.name: t for t in g.input_specs + tuple(layer.output for layer in g.layers)}
        in_bip = specs[stage.inputs[0]].dtype.bipolar if stage.inputs[0] in specs else False
        out_bip = specs[stage.output].dtype.bipolar if stage.output in specs else False
        feeds = {"i": to_transfers(env[stage.inputs[0]], stage.in_lanes[0], in_bip)}
        want = env[stage.output]
        out, _ = run_stream(AcceleratorCore(sub), feeds, {"o": want.size // stage.out_lanes}, src_pause="random",
                            sink_pause="random", seed=seed, check_comb=False, idle_limit=1 << 20)
        if not np.array_equal(from_transfers(out["o"], 1, want.shape, out_bip).reshape(want.shape), want):
            return stage.name
    return None


def simulate(pipeline: Pipeline, x: np.ndarray, *, simulator="verilator", seed=0, waves=False,
             chunk=50, progress=None, timing=True, component=None) -> SimReport:
    """Run ``x`` ((N, *input shape) integers) through the accelerator with random backpressure
    on input and output, and compare every output element with the golden executor.

    ``progress(done, total)`` is called after each chunk; ``waves`` may be a folder that
    receives one waveform per chunk. ``component``: the pipeline's :class:`AcceleratorCore`
    if already built (converted to Verilog once per object).
    """
    g = pipeline.graph
    in_spec, out_spec = g.input_specs[0], g.output_specs[0]
    golden = execute_integer(g, {in_spec.name: x})[out_spec.name]
    li, lo = pipeline.input_link, pipeline.output_link
    n = len(x)
    acc = component if component is not None else AcceleratorCore(pipeline)
    t0 = time.perf_counter()
    hw_parts, cycles = [], 0
    for start in range(0, n, chunk):
        part = x[start:start + chunk]
        feeds = {"i": to_transfers(part, li.dst_lanes, in_spec.dtype.bipolar)}
        out, c = _run(acc, feeds, {"o": lo.elements // lo.src_lanes * len(part)}, simulator, "random",
                      seed + start, waves, len(part))
        cycles += c
        hw_parts.append(from_transfers(out["o"], len(part), out_spec.shape, out_spec.dtype.bipolar))
        if progress:
            progress(min(start + chunk, n), n)
    seconds = time.perf_counter() - t0
    hw = np.concatenate(hw_parts)
    same = np.all((hw == golden).reshape(n, -1), axis=1)
    report = SimReport(total=n, exact=int(same.sum()), hw=hw, golden=golden, cycles=cycles, seconds=seconds)
    if not report.ok:
        bad = int(np.argmin(same))
        flat = int(np.argmax(hw[bad].ravel() != golden[bad].ravel()))
        report.first_mismatch = (bad, flat, int(golden[bad].ravel()[flat]), int(hw[bad].ravel()[flat]))
        report.diverged_stage = locate_divergence(pipeline, x[bad:bad + 1], seed)
    if timing:
        report.ii, report.latency = measure_timing(pipeline, x, simulator, component=acc)
    return report
