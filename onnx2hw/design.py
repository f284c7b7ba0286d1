"""The Python API's compiled design: :func:`compile` (model -> :class:`Design`), and what a
design offers: bit-exact simulation against the golden executor, verification on random
inputs, and the bitstream build (:meth:`Design.build` -> :class:`~onnx2hw.build.BuildResult`).

::

    design = onnx2hw.compile("examples/digits_mlp.onnx", calib="examples/digits_calib.npz")
    y = design.simulate({"input": x})          # float outputs by name, checked bit for bit
    result = design.build("build/mlp")         # bitstream + report
"""
from __future__ import annotations

import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import numpy as np

from .boards import Board
from .build import PNR_TRIES, BuildResult, build_design
from .build_info import build_info
from .dataflow.pipeline import Pipeline
from .flow import fold_for_board, integer_graph_of, link_format_of, link_rate, load_graph
from .ir import Graph
from .protocol import LinkFormat
from .quant.calib import check_feeds
from .golden.host import model_outputs
from .golden.integer import execute_integer
from .layers import IntegerGraph, quantize_inputs
from .rtl.accelerator import AcceleratorCore
from .sim.model_sim import SimReport, input_feeds, random_inputs, simulate
from .sim.toolchain import simulator_available
from .target import API_LABELS, Target, resolve_target

__all__ = ["Design", "compile", "compile_for_target", "MismatchError", "design_name"]


class MismatchError(AssertionError):
    """The simulated hardware departed from the golden executor; ``report`` says where
    (:class:`onnx2hw.sim.model_sim.SimReport`: first mismatching inference and element, first
    diverging stage)."""

    def __init__(self, report: SimReport, what: str = "the simulated design"):
        self.report = report
        i, idx, want, got = report.first_mismatch
        where = f" (first diverging stage: {report.diverged_stage})" if report.diverged_stage else ""
        when = (f", collected at cycle {report.mismatch_at[1]} of the simulator run from inference "
                f"{report.mismatch_at[0]}" if report.mismatch_at is not None else "")
        super().__init__(f"{what} is not bit-exact: inference {i}, output element {idx}: expected {want}, "
                         f"got {got}{when}{where}")


def design_name(model, graph: Graph | None = None) -> str:
    """The name of a build's files: the model file's stem, else the graph's name (identifier characters)."""
    if isinstance(model, (str, Path)):
        stem = Path(model).stem
    else:
        stem = getattr(graph, "model_name", "") or getattr(graph, "name", "")
    return re.sub(r"[^A-Za-z0-9_]", "_", stem or "") or "model"


@dataclass(frozen=True)
class Design:
    """A model compiled for a board: what :func:`compile` returns.

    Attributes
    ----------
    graph : Graph
        The model as loaded (float, QDQ, QOperator or QONNX).
    integer : IntegerGraph
        The exact integer graph the hardware computes (plus host-side input quantization and
        output dequantization).
    pipeline : Pipeline
        The folded streaming pipeline.
    board : Board
    clock_hz, baud : float
        System clock and host-link baud rate.
    link_fold_rate : float or None
        Inferences/s of the host link when the folding was chosen to match it (no explicit
        folding or target), else ``None``.
    name : str
        Name of the build's files (from the model file name).
    folding_source : str or None
        Where an explicit folding came from.
    source_model, source_calib : str or None
        The files the design came from (recorded in ``accelerator.json`` so that ``onnx2hw run
        --port sim`` can rebuild it); ``None`` for in-memory models or calibration arrays.
    host : tuple of str
        Nodes the user moved to the host (``--host``), recorded for rebuilding the design.
    fastest : bool
        Folded for the highest rate that fits the board (``target_fps="max"``).
    compile_seconds : float
        Wall time of :func:`compile` (reported in ``report.json``).
    """

    graph: Graph
    integer: IntegerGraph
    pipeline: Pipeline
    board: Board
    clock_hz: float
    baud: float
    link_fold_rate: float | None = None
    name: str = "model"
    folding_source: str | None = None
    source_model: str | None = None
    source_calib: str | None = None
    host: tuple[str, ...] = ()
    fastest: bool = False
    compile_seconds: float = field(default=0.0, compare=False)

    # ------------------------------------------------------------------ derived values
    @cached_property
    def accelerator(self) -> AcceleratorCore:
        """The pipeline's hardware (Amaranth component), built once per design and shared by
        simulation, the Verilog export and the board build."""
        return AcceleratorCore(self.pipeline)

    @property
    def link(self) -> LinkFormat:
        """The byte layout of one inference on the host link."""
        return link_format_of(self.pipeline)

    @property
    def link_bytes(self) -> int:
        """Bytes per inference on the busier direction of the host link."""
        return link_rate(self.pipeline, self.baud)[0]

    @property
    def link_bound_per_s(self) -> float:
        """Inferences/s the UART carries at ``baud`` (10 bits per byte, frame headers not counted)."""
        return link_rate(self.pipeline, self.baud)[1]

    @property
    def compute_bound_per_s(self) -> float:
        """Inferences/s of the pipeline at ``clock_hz`` (one per initiation interval)."""
        return self.clock_hz / self.pipeline.ii

    @property
    def inferences_per_s(self) -> float:
        return min(self.link_bound_per_s, self.compute_bound_per_s)

    def host_info(self) -> dict:
        """The build description ``accelerator.json`` holds (JSON-ready; see
        :mod:`onnx2hw.build_info`)."""
        return build_info(self.pipeline, self.board, self.clock_hz, self.baud, model=self.source_model,
                          calib=self.source_calib, host=self.host)

    # ------------------------------------------------------------------ host-side tensors
    def quantize(self, inputs) -> np.ndarray | dict[str, np.ndarray]:
        """Float model inputs (a mapping by input name, or one array for a one-input model,
        batch first) -> the integer tensor the hardware takes ((N, *shape), NHWC); for a model
        with several inputs, a dict of them by the integer graph's tensor names
        (``integer.input_specs``)."""
        if not isinstance(inputs, Mapping):
            names = self.graph.input_names
            if len(names) != 1:
                raise ValueError(f"the model has inputs {', '.join(map(repr, names))}: pass a dict by name")
            inputs = {names[0]: inputs}
        feeds = check_feeds(inputs, self.graph, "input")
        q = quantize_inputs(self.integer, feeds)
        return q[self.integer.input_specs[0].name] if len(q) == 1 else q

    def dequantize(self, y) -> dict[str, np.ndarray]:
        """The hardware's integer outputs ((N, *shape); for several outputs a dict by the
        integer graph's tensor names, as :class:`~onnx2hw.sim.model_sim.SimReport` holds them)
        -> the model's outputs by name, as the ONNX model returns them (dequantized, then
        through the host tail)."""
        specs = self.integer.output_specs
        if isinstance(y, Mapping):
            results = {s.name: y[s.name] for s in specs}
        elif len(specs) == 1:
            results = {specs[0].name: y}
        else:
            raise ValueError(f"the hardware has outputs {', '.join(repr(s.name) for s in specs)}: pass a dict by name")
        return model_outputs(self.integer, results)

    def golden(self, inputs) -> dict[str, np.ndarray]:
        """The model's outputs by name for float ``inputs`` (as :meth:`simulate` takes them)
        computed by the golden executor: the exact integer graph on the host's quantized
        inputs, dequantized, then the host tail. What :meth:`simulate` must equal, bit for bit."""
        feeds = input_feeds(self.integer, self.quantize(inputs))
        return model_outputs(self.integer, execute_integer(self.integer, feeds))

    def random_inputs(self, count: int, seed: int = 0) -> np.ndarray | dict[str, np.ndarray]:
        """``count`` random integer inputs over the input's whole range (for :meth:`simulate_raw`;
        a dict by tensor name for several inputs)."""
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ValueError(f"count must be at least 1, not {count!r}")
        return random_inputs(self.integer, count, seed=seed)

    # ------------------------------------------------------------------ simulation
    def simulate_raw(self, x, *, simulator: str = "verilator", seed: int = 0, waves=False,
                     progress=None, timing: bool = True) -> SimReport:
        """Simulate the integer inputs ``x`` ((N, *shape), NHWC; a dict by tensor name for
        several inputs, as :meth:`quantize` gives them) with random backpressure and compare
        every element with the golden integer executor; the report also holds the measured II
        and latency (``timing``). Does not raise on a mismatch (see ``report.ok``)."""
        reason = simulator_available(simulator)
        if reason:
            raise RuntimeError(f"cannot run {simulator}: {reason}")
        x = x if isinstance(x, Mapping) else np.asarray(x)
        return simulate(self.pipeline, x, simulator=simulator, seed=seed, waves=waves,
                        progress=progress, timing=timing, component=self.accelerator)

    def simulate(self, inputs, *, simulator: str = "verilator", seed: int = 0) -> dict[str, np.ndarray]:
        """Run ``inputs`` (float, as the ONNX model takes them: a dict by input name or one array,
        batch first) through the simulated hardware and return the model's outputs by name (as
        the ONNX model returns them). Raises :class:`MismatchError` unless every element is
        bit-exact against the golden executor."""
        report = self.simulate_raw(self.quantize(inputs), simulator=simulator, seed=seed, timing=False)
        if not report.ok:
            raise MismatchError(report)
        return self.dequantize(report.hw)

    def verify(self, count: int = 20, *, seed: int = 0, simulator: str = "verilator", progress=None) -> SimReport:
        """Simulate ``count`` random inferences (what ``synth --verify N`` does); raises
        :class:`MismatchError` unless they are bit-exact. Returns the report."""
        report = self.simulate_raw(self.random_inputs(count, seed), simulator=simulator, seed=seed,
                                   progress=progress, timing=False)
        if not report.ok:
            raise MismatchError(report, "the design")
        return report

    # ------------------------------------------------------------------ bitstream
    def build(self, out_dir, *, progress=None, times: Mapping[str, float] | None = None, selftest=None,
              simulated=None, seed: int | None = None, pnr_tries: int = PNR_TRIES, verify_netlist: int = 0,
              verified_rtl=None) -> BuildResult:
        """Build the bitstream into ``out_dir`` (Yosys, nextpnr, pack through YoWASP) with the
        accelerator's Verilog, ``folding.json``, ``accelerator.json`` and the reports.

        ``progress(title)`` is called before each step; ``times`` (step -> seconds) are added
        to the report's build times. A missed clock is not an error: see
        ``BuildResult.timing_met``. Tool failures raise :class:`onnx2hw.synth.SynthError`.
        ``selftest`` (:func:`onnx2hw.build_info.selftest_record`) builds a self-test into the
        board top; ``simulated`` adds simulated II and latency to the report (see
        :func:`onnx2hw.build.build_design`). ``seed``: nextpnr's placer seed (default: nextpnr's own);
        ``pnr_tries``: place-and-route runs at most while the clock is missed (the seeds after it).
        ``verify_netlist``: simulate that many random inferences through the synthesized netlist
        before place and route (ECP5; :class:`onnx2hw.sim.netlist.NetlistSimError` unless
        bit-exact); ``verified_rtl``: the RTL simulation's record for the report.
        """
        return build_design(self, out_dir, progress=progress, times=times, selftest=selftest, simulated=simulated,
                            seed=seed, pnr_tries=pnr_tries, verify_netlist=verify_netlist, verified_rtl=verified_rtl)


def compile(model, board="ulx3s", calib=None, clock_mhz=None, baud=None, folding=None,  # noqa: A001
            target_cycles=None, *, target_fps=None, host=()) -> Design:
    """Compile an ONNX model for a board.

    Parameters
    ----------
    model : path, bytes, onnx.ModelProto or Graph
        A quantized model (QDQ, QOperator, QONNX), or a float model with ``calib``.
    board : str or Board
        See ``onnx2hw boards`` (default ``ulx3s``, the ULX3S-85F).
    calib : path or dict of arrays, optional
        Calibration inputs keyed by input name (batch first) to quantize a float model.
    clock_mhz, baud : float, optional
        System clock and host-link baud rate (default: the board's).
    folding : path or dict, optional
        A fixed folding ``{layer: (pe, simd)}`` or ``(pe, simd, mul)`` with ``mul`` "dsp" or "lut"
        (the layer's products in DSPs or LUTs), or a ``folding.json`` file.
    target_cycles, target_fps : optional
        Fold for the fewest resources reaching this initiation interval (cycles) or rate
        (inferences/s at the clock); ``target_fps="max"``: the highest rate whose folding fits
        the board. Without any of these the pipeline is folded for the rate the host link
        carries.
    host : sequence of str, optional
        Names of nodes to run on the host (with everything computed from them), besides the
        float tail the partition puts there itself (Softmax heads, a float last affine, ...).

    Raises
    ------
    ModelError, ValueError
        One line naming what is wrong: a broken or unsupported model, a bad option, a design
        that does not fit the board.
    """
    t0 = time.perf_counter()
    target = resolve_target(board, clock_mhz=clock_mhz, baud=baud, folding=folding, target_cycles=target_cycles,
                            target_fps=target_fps, labels=API_LABELS)
    return compile_for_target(model, target, calib=calib, host=host, started=t0)


def compile_for_target(model, target: Target, *, calib=None, host=(), started: float | None = None) -> Design:
    """:func:`compile` for a checked :class:`~onnx2hw.target.Target` (the CLI resolves its
    options into one first, so that errors name them as it spells them)."""
    t0 = time.perf_counter() if started is None else started
    graph = load_graph(model)
    ig = integer_graph_of(graph, calib, host)
    pipeline, rate = fold_for_board(ig, family=target.board.family, budget=target.budget,
                                    clock_hz=target.clock_hz, baud=target.baud, folding=target.folding,
                                    target_cycles=target.target_cycles, fastest=target.fastest)
    path = isinstance(model, (str, Path))
    return Design(graph=graph, integer=ig, pipeline=pipeline, board=target.board, clock_hz=target.clock_hz,
                  baud=target.baud, link_fold_rate=rate, name=design_name(model, graph),
                  folding_source=target.folding_source, source_model=str(model) if path else None,
                  source_calib=str(calib) if isinstance(calib, (str, Path)) else None, host=tuple(host),
                  fastest=target.fastest,
                  compile_seconds=time.perf_counter() - t0)
