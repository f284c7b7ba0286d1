"""Whole-model simulation: an accelerator built from a Pipeline, run on an HDL simulator (Verilator
through the native harness of :mod:`onnx2hw.sim.native_run`, Icarus through cocotb), compared bit
for bit with the golden integer executor.

Tensors stream in NHWC order, ``lanes`` elements per transfer; a bipolar input (values -1/+1)
is encoded as bits (1 = +1, 0 = -1). A model's several inputs (outputs) stream one after the
other per inference on the accelerator's one input (output) port (:func:`onnx2hw.protocol.join_tensors`).
Integer inputs and outputs are one array for a model with one input (output), else a dict by
tensor name (the integer graph's ``input_specs`` / ``output_specs``). Long runs are split into
chunks of inferences (each chunk a simulator run of the cached build) so progress can be shown.
On Verilator each chunk's outputs are also compared with the golden ones as they are collected,
which gives the clock cycle of the first mismatching transfer.
"""
from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from onnx2hw.dataflow.pipeline import INPUT, OUTPUT, Link, Pipeline
from onnx2hw.golden.integer import execute_integer
from onnx2hw.protocol import join_tensors, split_tensors
from onnx2hw.rtl.accelerator import AcceleratorCore

from ._stream import default_max_cycles
from .cocotb_run import run_cocotb
from .native_run import record_runs, run_native
from .pysim import run_stream

__all__ = ["SimReport", "simulate", "random_inputs", "to_transfers", "from_transfers", "measure_timing",
           "input_feeds", "output_values"]


@dataclass
class SimReport:
    total: int
    exact: int
    #: (N, *output shape) integers computed by the hardware (a dict by tensor name for several outputs)
    hw: np.ndarray | dict
    golden: np.ndarray | dict
    #: (inference, element, expected, got); the element is a flat index, or ``"name[index]"``
    #: for a model with several outputs
    first_mismatch: tuple | None = None
    #: (first inference of the simulator run holding the first mismatch, clock cycle of that run
    #: in which its first wrong transfer was collected); Verilator only
    mismatch_at: tuple | None = None
    diverged_stage: str | None = None
    ii: float | None = None             # measured cycles per inference (no backpressure)
    latency: int | None = None          # measured cycles, first input to last output of one inference
    cycles: int = 0                     # simulated cycles of the bit-exactness runs
    seconds: float = 0.0
    #: wall and processor seconds of the bit-exactness runs inside the native simulator
    #: executables (the simulation alone: no build, conversion or golden executor); 0 for cocotb
    sim_seconds: float = 0.0
    sim_cpu_seconds: float = 0.0
    notes: list = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.exact == self.total


def random_inputs(graph, count: int, seed: int = 0) -> np.ndarray | dict:
    """(count, *input shape) integers drawn uniformly over the input's whole range (-1/+1 if
    bipolar); a dict by tensor name for a graph with several inputs."""
    rng = np.random.default_rng(seed)
    out = {}
    for spec in graph.input_specs:
        if spec.dtype.bipolar:
            out[spec.name] = rng.choice(np.array([-1, 1]), size=(count,) + spec.shape)
        else:
            out[spec.name] = rng.integers(spec.dtype.lo, spec.dtype.hi + 1, size=(count,) + spec.shape)
    return out.popitem()[1] if len(out) == 1 else out


def input_feeds(graph, x) -> dict[str, np.ndarray]:
    """Integer inputs (one array, or a dict by tensor name) -> feeds of ``execute_integer``."""
    names = [s.name for s in graph.input_specs]
    if isinstance(x, Mapping):
        if sorted(x) != sorted(names):
            raise ValueError(f"integer inputs {sorted(x)!r} are not the model's {names!r}")
        return {n: np.asarray(x[n]) for n in names}
    if len(names) != 1:
        raise ValueError(f"the model has inputs {', '.join(map(repr, names))}: pass a dict by tensor name")
    return {names[0]: np.asarray(x)}


def output_values(graph, results: Mapping[str, np.ndarray]) -> np.ndarray | dict:
    """Integer outputs by tensor name -> one array for a one-output graph, else the dict."""
    names = [s.name for s in graph.output_specs]
    return results[names[0]] if len(names) == 1 else {n: results[n] for n in names}


def _count(feeds: Mapping[str, np.ndarray]) -> int:
    return len(next(iter(feeds.values())))


def _stream(pipeline: Pipeline, feeds: Mapping[str, np.ndarray], start: int = 0, stop: int | None = None):
    """The input port's transfers for inferences ``start:stop`` of ``feeds`` (every input, one
    after the other per inference)."""
    g = pipeline.graph
    parts = pipeline.input_parts
    arrays = [feeds[p.name][start:stop] for p in parts]
    values = join_tensors(arrays, parts, [s.dtype.bipolar for s in g.input_specs], check=False)
    return values.reshape(-1, pipeline.input_link.dst_lanes)


def _transfers_out(pipeline: Pipeline) -> int:
    """Output transfers per inference."""
    lo = pipeline.output_link
    return lo.elements // lo.src_lanes


def _outputs(pipeline: Pipeline, transfers, n: int) -> dict[str, np.ndarray]:
    """The output port's transfers of ``n`` inferences -> integer outputs by tensor name."""
    g = pipeline.graph
    parts = split_tensors(np.asarray(transfers).reshape(n, -1), pipeline.output_parts,
                          [s.dtype.bipolar for s in g.output_specs])
    return {s.name: t for s, t in zip(g.output_specs, parts)}


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


def _golden_stream(pipeline: Pipeline, golden: Mapping[str, np.ndarray], start: int, stop: int) -> np.ndarray:
    """The output port's transfers the golden outputs of inferences ``start:stop`` make."""
    g = pipeline.graph
    values = join_tensors([golden[s.name][start:stop] for s in g.output_specs], pipeline.output_parts,
                          [s.dtype.bipolar for s in g.output_specs], check=False)
    return values.reshape(-1, pipeline.output_link.src_lanes)


def _run(component, feeds, expect, simulator, pause, seed, waves, count, golden=None, mismatches=None, total=None,
         verilog=None):
    """One simulator run of ``count`` inferences. Time-outs scale with the pipeline: no port
    transfer for 4 x (latency + II) cycles is a deadlock, and the whole run may take 4 x its
    estimate (random stalls on both ends cost at most that) plus the harness's own margin.
    ``golden``/``mismatches``: see :func:`onnx2hw.sim.native_run.run_native` (Verilator only);
    ``total``: inferences simulated in all (the build is compiled for their cycles); ``verilog``:
    simulated in place of the component's (Verilator only)."""
    p = component.pipeline
    idle = max(4096, 4 * (p.latency + p.ii))
    budget = default_max_cycles(feeds, expect) + 4 * (p.latency + count * p.ii)
    common = dict(src_pause=pause, sink_pause=pause, seed=seed, waves=waves, idle_limit=idle, max_cycles=budget,
                  expected_cycles=p.latency + count * p.ii)
    if simulator == "verilator":
        return run_native(component, feeds, expect, golden=golden, mismatches=mismatches,
                          total_cycles=p.latency + (total or count) * p.ii, verilog=verilog, **common)
    return run_cocotb(component, feeds, expect, simulator=simulator, **common)


def measure_timing(pipeline: Pipeline, x: np.ndarray, simulator="verilator", component=None,
                   total=None) -> tuple[float, int]:
    """(II, latency) measured without backpressure: II = (cycles(k) - cycles(1)) / (k - 1).
    ``component``: the pipeline's :class:`AcceleratorCore` if already built (converted to Verilog
    once per object); ``total``: inferences of the simulation these runs are part of (they use
    its build)."""
    feeds = input_feeds(pipeline.graph, x)
    out_t = _transfers_out(pipeline)
    k = min(_count(feeds), 6)
    acc = component if component is not None else AcceleratorCore(pipeline)
    cycles = {}
    for n in sorted({1, k}):
        _, cycles[n] = _run(acc, {"i": _stream(pipeline, feeds, 0, n)}, {"o": out_t * n}, simulator, "none", 0,
                            False, n, total=total)
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
    env = execute_integer(g, input_feeds(g, x), keep_intermediates=True)
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
             chunk=50, progress=None, timing=True, component=None, verilog=None) -> SimReport:
    """Run ``x`` ((N, *input shape) integers; a dict by tensor name for several inputs) through
    the accelerator with random backpressure on input and output, and compare every output
    element with the golden executor.

    ``progress(done, total)`` is called after each chunk; ``waves`` may be a folder that
    receives one waveform per chunk. ``component``: the pipeline's :class:`AcceleratorCore`
    if already built (converted to Verilog once per object). ``verilog``: Verilog simulated in
    its place (Verilator only; see :func:`onnx2hw.sim.native_run.run_native`), e.g. the
    synthesized netlist (:mod:`onnx2hw.sim.netlist`).
    """
    if verilog is not None and (simulator != "verilator" or timing):
        raise ValueError("other Verilog is simulated by Verilator only, without the timing runs")
    g = pipeline.graph
    feeds = input_feeds(g, x)
    golden = execute_integer(g, feeds)
    n = _count(feeds)
    acc = component if component is not None else AcceleratorCore(pipeline)
    t0 = time.perf_counter()
    hw_parts, cycles, first_cycle = [], 0, None
    with record_runs() as runs:
        for start in range(0, n, chunk):
            count = min(chunk, n - start)
            mismatches = {}
            out, c = _run(acc, {"i": _stream(pipeline, feeds, start, start + count)},
                          {"o": _transfers_out(pipeline) * count}, simulator, "random", seed + start, waves, count,
                          golden={"o": _golden_stream(pipeline, golden, start, start + count)}, mismatches=mismatches,
                          total=n, verilog=verilog)
            if first_cycle is None and "o" in mismatches:
                first_cycle = (start, mismatches["o"][1])
            cycles += c
            hw_parts.append(_outputs(pipeline, out["o"], count))
            if progress:
                progress(min(start + chunk, n), n)
    seconds = time.perf_counter() - t0
    hw = {s.name: np.concatenate([h[s.name] for h in hw_parts]) for s in g.output_specs}
    report = SimReport(total=n, exact=0, hw=output_values(g, hw), golden=output_values(g, golden), cycles=cycles,
                       seconds=seconds, sim_seconds=sum(r[1] for r in runs), sim_cpu_seconds=sum(r[2] for r in runs))
    names = [s.name for s in g.output_specs]
    flat_hw = np.concatenate([hw[k].reshape(n, -1) for k in names], axis=1)
    flat_golden = np.concatenate([np.asarray(golden[k]).reshape(n, -1) for k in names], axis=1)
    same = np.all(flat_hw == flat_golden, axis=1)
    report.exact = int(same.sum())
    if not report.ok:
        bad = int(np.argmin(same))
        flat = int(np.argmax(flat_hw[bad] != flat_golden[bad]))
        report.first_mismatch = (bad, _element(g, flat), int(flat_golden[bad, flat]), int(flat_hw[bad, flat]))
        report.mismatch_at = first_cycle
        if verilog is None:   # the stages are located in the RTL, which another Verilog need not follow
            report.diverged_stage = locate_divergence(pipeline, {k: v[bad:bad + 1] for k, v in feeds.items()}, seed)
    if timing:
        report.ii, report.latency = measure_timing(pipeline, feeds, simulator, component=acc, total=n)
    return report


def _element(graph, flat: int):
    """Element ``flat`` of the outputs one after the other: the index itself for one output,
    else ``"name[index]"``."""
    if len(graph.output_specs) == 1:
        return flat
    for spec in graph.output_specs:
        size = int(np.prod(spec.shape))
        if flat < size:
            return f"{spec.name}[{flat}]"
        flat -= size
    raise IndexError(flat)
