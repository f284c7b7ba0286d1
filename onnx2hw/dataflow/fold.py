"""Folding: choose (PE, SIMD) per layer so the pipeline is balanced within a resource budget."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path


from ..files import write_text
from ..ir.errors import ModelError
from ..layers import IntegerGraph
from ._stages import build_stage

__all__ = ["Budget", "Folding", "auto_fold", "load_folding", "save_folding", "layer_cycles"]

#: layer name -> (pe, simd)
Folding = dict[str, tuple[int, int]]


@dataclass(frozen=True)
class Budget:
    """Resources the pipeline may use (already scaled by any headroom margin)."""

    lut: int
    dsp: int
    ebr: int
    name: str = ""

    def scaled(self, fraction: float) -> "Budget":
        return Budget(int(self.lut * fraction), int(self.dsp * fraction), int(self.ebr * fraction), self.name)

    def minus(self, cost) -> "Budget":
        """What is left after ``cost`` (a :class:`~onnx2hw.rtl.cost.Cost`) is reserved."""
        return Budget(max(0, self.lut - cost.lut), max(0, self.dsp - cost.dsp), max(0, self.ebr - cost.ebr),
                      self.name)


def layer_cycles(layer, ins, pe: int, simd: int) -> int:
    """Analytic cycles per inference of a layer at (pe, simd) — the folding objective (its kind's ``cycles``)."""
    return layer.cycles(ins, pe, simd)


def _total(stages) -> tuple[int, int, int]:
    return (sum(s.cost.lut for s in stages), sum(s.cost.dsp for s in stages), sum(s.cost.ebr for s in stages))


def _fits(total, budget: Budget) -> bool:
    return total[0] <= budget.lut and total[1] <= budget.dsp and total[2] <= budget.ebr


def auto_fold(ig: IntegerGraph, family: str, budget: Budget | None, target_cycles: int | None = None) -> Folding:
    """Smallest folding (fewest resources) whose slowest stage meets ``target_cycles``; without a
    target, the smallest achievable slowest-stage cycles whose estimate fits ``budget``.

    Raises ``ModelError`` naming the resource and the largest layer when nothing fits.
    """
    specs = ig.specs()
    layers = [(layer, [specs[n] for n in layer.inputs]) for layer in ig.layers]
    options = {layer.name: [(layer_cycles(layer, ins, p, s), p, s) for p, s in layer.fold_options(ins)]
               for layer, ins in layers}
    cache: dict = {}

    def stage(layer, ins, p, s):
        key = (layer.name, p, s)
        if key not in cache:
            cache[key] = build_stage(layer.name, layer, ins, p, s, family)
        return cache[key]

    def choose(target):
        fold, stages = {}, []
        for layer, ins in layers:
            ok = [o for o in options[layer.name] if o[0] <= target]
            if not ok:
                return None, None
            _, p, s = min(ok, key=lambda o: (o[1] * o[2], o[0]))
            fold[layer.name] = (p, s)
            stages.append(stage(layer, ins, p, s))
        return fold, stages

    if target_cycles is not None:
        fold, stages = choose(target_cycles)
        if fold is None:
            best = max(min(c for c, _, _ in opts) for opts in options.values())
            raise ModelError(f"no folding reaches {target_cycles} cycles per inference; the best possible is {best}")
        if budget is not None:
            _check_budget(stages, budget, f"to reach {target_cycles} cycles per inference")
        return fold
    candidates = sorted({c for opts in options.values() for c, _, _ in opts})
    floor = max(min(c for c, _, _ in opts) for opts in options.values())
    candidates = [c for c in candidates if c >= floor]
    fold, stages = choose(candidates[-1])
    if budget is not None:
        _check_budget(stages, budget, "at its smallest folding")  # even the slowest does not fit
    lo, hi = 0, len(candidates) - 1
    while lo < hi:  # smallest target whose cheapest folding fits (resources fall as cycles rise)
        mid = (lo + hi) // 2
        _, st = choose(candidates[mid])
        if budget is None or _fits(_total(st), budget):
            hi = mid
        else:
            lo = mid + 1
    return choose(candidates[lo])[0]


def _check_budget(stages, budget: Budget, why: str) -> None:
    total = _total(stages)
    for i, (what, avail) in enumerate((("LUT", budget.lut), ("DSP", budget.dsp), ("EBR", budget.ebr))):
        if total[i] > avail:
            worst = max(stages, key=lambda s: (s.cost.lut, s.cost.dsp, s.cost.ebr)[i])
            used = (worst.cost.lut, worst.cost.dsp, worst.cost.ebr)[i]
            raise ModelError(
                f"does not fit {budget.name or 'the budget'}: needs {total[i]} {what} but {avail} are available "
                f"(largest layer {worst.layer!r} needs {used} {what} {why})")


def load_folding(path) -> Folding:
    """Read a folding file: JSON ``{"layer name": {"pe": P, "simd": S}, ...}`` with positive integers."""
    try:
        raw = json.loads(Path(path).read_text(), parse_constant=_no_constant)
    except OSError as exc:
        raise ModelError(f"{path}: cannot read the folding file ({exc.strerror or exc})") from None
    except ValueError as exc:  # bad JSON, bad UTF-8, NaN/Infinity
        raise ModelError(f"{path}: not a folding file ({exc})") from None
    if not isinstance(raw, dict):
        raise ModelError(f"{path}: not a folding file (a JSON object of layer name -> {{pe, simd}} expected)")
    out: Folding = {}
    for name, v in raw.items():
        if not isinstance(v, dict) or set(v) != {"pe", "simd"}:
            raise ModelError(f"{path}: layer {name!r} must map to {{\"pe\": P, \"simd\": S}}, not {v!r}")
        pe, simd = v["pe"], v["simd"]
        for what, n in (("pe", pe), ("simd", simd)):
            if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                raise ModelError(f"{path}: layer {name!r}: {what} must be a positive integer, not {n!r}")
        out[name] = (pe, simd)
    return out


def _no_constant(name: str):
    raise ValueError(f"{name} is not a number")


def save_folding(folding: Folding, path) -> None:
    """Write a folding file (atomically: the old file stays whole if the write fails)."""
    write_text(path, json.dumps({k: {"pe": p, "simd": s} for k, (p, s) in folding.items()}, indent=2) + "\n")
