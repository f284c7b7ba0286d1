"""What ``compile`` will answer for a model, found without building hardware: :func:`predict`.

The verdict is the outcome of compile's own steps up to the folding: :func:`onnx2hw.flow.
integer_graph_of` (canonicalization, host/hardware partition, op check, quantization import or
post-training quantization, integer graph), then :func:`onnx2hw.flow.fold_for_board` for the
board (resource estimates; no RTL is elaborated). inspect and compile run the same code, so they
cannot disagree.

**Calibration.** A model that asks for calibration data (a float model) and gets none is
quantized with synthetic data (:func:`synthetic_calibration`), and the verdict assumes
``--calib`` is given. Which layers the integer graph has and the host/hardware partition do
not depend on the calibration values; the scales do, and so can the activation types (a tensor
never negative in the data is quantized unsigned), their accumulator widths and the resources:
near a board's limit only the real data settles whether it fits.

**Refusal.** The first error compile raises, with the node it names: a node of the model or of
its canonical form written ``'name'`` or ``name (Op)`` in the message (the first one named), else
the node that writes (or first reads) a tensor it names. Its ways out are checked, not guessed:
``--host NODE`` when the model maps with that node and what follows it on the host, ``--board
NAME`` for each board whose budget holds a folding the board in use does not, ``--calib`` when
the refusal asks for calibration data that could not be made up.
"""
from __future__ import annotations

import dataclasses
import shlex
from dataclasses import dataclass

import numpy as np

from .boards import BOARDS
from .canon import canonicalize
from .flow import fold_for_board, integer_graph_of
from .ir.graph import Graph, Node
from .layers import IntegerGraph
from .quant.calib import input_specs
from .summary import PathView, path_view
from .target import Target, resolve_target

__all__ = ["Verdict", "Refusal", "predict", "synthetic_calibration", "named_node", "SYNTHETIC_SAMPLES",
           "CALIB_WAY_OUT"]

#: samples of synthetic calibration data for a model whose batch is not fixed
SYNTHETIC_SAMPLES = 8
#: the way out a refusal asking for calibration data gets
CALIB_WAY_OUT = "--calib CALIB.npz"


@dataclass(frozen=True)
class Refusal:
    """compile's first refusal: the node it names (``None`` when the message names none), its
    one-line message, the step that raised it (``"model"``: the front half; ``"board"``: the
    folding for the board) and the options checked to make the model map."""

    node: str | None
    op: str | None
    message: str
    stage: str
    way_out: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        return {"node": self.node, "op": self.op, "message": self.message, "stage": self.stage,
                "way_out": list(self.way_out)}


@dataclass(frozen=True)
class Verdict:
    """What compile answers for one model, board, ``--host`` and calibration (see the module
    docstring). ``view`` is the hardware path's view of the model (canonical graph, host nodes,
    the refused node); ``calibration`` is ``"given"``, ``"synthetic"`` or ``"none"``."""

    refusal: Refusal | None
    view: PathView
    integer_layers: tuple[tuple[str, str], ...]   # (layer name, kind) of the integer graph
    calibration: str
    board: str

    @property
    def maps(self) -> bool:
        return self.refusal is None

    @property
    def hardware_nodes(self) -> tuple[str, ...]:
        """Nodes of the canonical graph the hardware runs."""
        host = set(self.view.host_nodes)
        return tuple(n.name for n in self.view.canonical.nodes if n.name not in host)

    def to_dict(self) -> dict:
        return {"verdict": "maps" if self.maps else "refused",
                "refusal": None if self.refusal is None else self.refusal.to_dict(),
                "board": self.board, "calibration": self.calibration,
                "hardware_nodes": list(self.hardware_nodes), "host_nodes": list(self.view.host_nodes),
                "integer_layers": [{"name": n, "kind": k} for n, k in self.integer_layers]}


@dataclass(frozen=True)
class _Outcome:
    integer: IntegerGraph | None
    error: ValueError | None = None
    stage: str | None = None


def _attempt(graph: Graph, calib, host: tuple[str, ...], target: Target) -> _Outcome:
    """compile's steps up to the folding for ``target`` (as :func:`onnx2hw.design.compile_for_target`)."""
    try:
        ig = integer_graph_of(graph, calib, host)
    except ValueError as exc:
        return _Outcome(None, exc, "model")
    try:
        _fold(ig, target)
    except ValueError as exc:
        return _Outcome(ig, exc, "board")
    return _Outcome(ig)


def _fold(ig: IntegerGraph, target: Target) -> None:
    """The folding compile chooses for ``target`` (``ValueError`` when there is none)."""
    fold_for_board(ig, family=target.board.family, budget=target.budget, clock_hz=target.clock_hz,
                   baud=target.baud, folding=target.folding, target_cycles=target.target_cycles,
                   fastest=target.fastest)


def _calibrated_attempt(graph: Graph, calib, host: tuple[str, ...], target: Target):
    """(outcome, calibration data used, ``"given"``/``"synthetic"``/``"none"``): :func:`_attempt`,
    again with synthetic data when none was given and the refusal asks for it."""
    if calib is not None:
        return _attempt(graph, calib, host, target), calib, "given"
    outcome = _attempt(graph, None, host, target)
    if outcome.error is not None and _asks_for_calibration(outcome.error):
        synthetic = synthetic_calibration(graph)
        if synthetic is not None:
            return _attempt(graph, synthetic, host, target), synthetic, "synthetic"
    return outcome, None, "none"


def synthetic_calibration(graph: Graph, seed: int = 0) -> dict[str, np.ndarray] | None:
    """Random calibration inputs for ``graph`` (standard normal floats, uniform integer codes;
    the fixed batch, else :data:`SYNTHETIC_SAMPLES`), or ``None`` when an input has a free dim
    other than the batch."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for spec in input_specs(graph):
        if not spec.shape or any(not isinstance(d, int) or d < 1 for d in spec.shape[1:]):
            return None
        batch = spec.shape[0] if isinstance(spec.shape[0], int) and spec.shape[0] > 0 else SYNTHETIC_SAMPLES
        shape = (batch, *spec.shape[1:])
        if spec.codes is None:
            feeds[spec.name] = rng.standard_normal(shape).astype(np.float32)
        else:
            dtype, lo, hi = spec.codes
            feeds[spec.name] = rng.integers(lo, hi + 1, size=shape).astype(dtype)
    return feeds


def _asks_for_calibration(error: ValueError) -> bool:
    return "--calib" in str(error)


def named_node(message: str, graphs) -> Node | None:
    """The node ``message`` names first: ``'name'`` or ``name (Op)`` of a node of ``graphs``,
    else the node that writes, or first reads, a tensor it names ``'tensor'``."""
    best = None   # (position, -length of the match, node)
    for g in graphs:
        for n in g.nodes:
            for text in (repr(n.name), f"{n.name} ({n.op_type})", f"{n.name} ({n.domain}::{n.op_type})"):
                i = message.find(text)
                if i >= 0 and (best is None or (i, -len(text)) < best[:2]):
                    best = (i, -len(text), n)
    if best is not None:
        return best[2]
    for g in graphs:
        for tensor, node in _tensor_nodes(g).items():
            i = message.find(repr(tensor))
            if i >= 0 and (best is None or (i, -len(tensor)) < best[:2]):
                best = (i, -len(tensor), node)
    return None if best is None else best[2]


def _tensor_nodes(graph: Graph) -> dict[str, Node]:
    """Tensor name -> the node that writes it, or the first node that reads it."""
    out: dict[str, Node] = {}
    for n in graph.nodes:
        for t in n.inputs:
            if t and t not in graph.initializers:
                out.setdefault(t, n)
    out.update(graph.producer_of())
    return out


def _boards_that_fit(ig: IntegerGraph, target: Target) -> list[str]:
    """``--board NAME`` for each other board whose default target folds ``ig``."""
    ways = []
    for name, board in BOARDS.items():
        if board.name == target.board.name:
            continue
        try:
            _fold(ig, resolve_target(board))
        except ValueError:
            continue
        ways.append(f"--board {name}")
    return ways


def _way_out(graph: Graph, node: Node | None, outcome: _Outcome, calib, calibration: str,
             host: tuple[str, ...], target: Target) -> tuple[str, ...]:
    """The options checked to make the model map (see the module docstring); ``calib`` and
    ``calibration`` as the verdict used them."""
    ways = []
    if outcome.stage == "model" and calibration == "none" and _asks_for_calibration(outcome.error):
        ways.append(CALIB_WAY_OUT)
    if node is not None and node.name not in host:
        moved, _, used = _calibrated_attempt(graph, None if calibration == "synthetic" else calib,
                                             (*host, node.name), target)
        if moved.error is None:
            ways.append(f"--host {shlex.quote(node.name)}" + (f" {CALIB_WAY_OUT}" if used == "synthetic" else ""))
    if outcome.stage == "board" and outcome.integer is not None:
        ways.extend(_boards_that_fit(outcome.integer, target))
    return tuple(ways)


def _view(graph: Graph, host: tuple[str, ...], ig: IntegerGraph | None) -> PathView:
    """The partition compile made (from its integer graph's host tail), or, when it stopped
    before, the partition of the canonical graph where there is one."""
    try:
        canonical = canonicalize(graph)
    except ValueError:   # compile stops there too: the refusal says why
        return PathView(graph)
    if ig is None:
        return path_view(graph, host)
    tail = ig.tail
    if tail is None:
        return PathView(canonical)
    return PathView(canonical, tuple(n.name for n in tail.nodes), tuple(tail.input_names))


def predict(graph: Graph, calib=None, host=(), board="ulx3s") -> Verdict:
    """The verdict of ``onnx2hw.compile(graph, board, calib=calib, host=host)`` (see the module
    docstring). ``calib``: an ``.npz`` path or a mapping of input name to float array, batch
    first. A bad ``board`` raises ``ValueError``; everything about the model is in the verdict."""
    target = resolve_target(board)
    host = tuple(host)
    outcome, calib, calibration = _calibrated_attempt(graph, calib, host, target)
    view = _view(graph, host, outcome.integer)
    layers = () if outcome.integer is None else tuple((layer.name, type(layer).__name__)
                                                      for layer in outcome.integer.layers)
    name = target.board.name
    if outcome.error is None:
        return Verdict(None, view, layers, calibration, name)
    message = " ".join(str(outcome.error).split())
    node = named_node(message, (view.canonical, graph))
    refusal = Refusal(None if node is None else node.name, None if node is None else node.op_type, message,
                      outcome.stage, _way_out(graph, node, outcome, calib, calibration, host, target))
    if node is not None:
        view = dataclasses.replace(view, refused=(node.name, message))
    return Verdict(refusal, view, layers, calibration, name)
