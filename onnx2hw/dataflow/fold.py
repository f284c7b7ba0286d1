"""Folding: choose (PE, SIMD) and the product style (DSP or LUT) per layer so the pipeline is
balanced within a resource budget."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path


from ..files import write_text
from ..ir.errors import ModelError
from ..layers import IntegerGraph
from ._stages import build_stage

__all__ = ["Budget", "Folding", "MULS", "auto_fold", "load_folding", "save_folding", "layer_cycles",
           "fold_entry"]

#: layer name -> (pe, simd), or (pe, simd, mul) with ``mul`` "dsp" (products in MULT18X18D
#: blocks) or "lut" (products in LUT/carry logic) for a layer whose kind offers the choice
#: (``mul_options``); without it the blocks choose by operand width
Folding = dict[str, tuple]

#: product styles a folding may name
MULS = ("dsp", "lut")


def fold_entry(value) -> tuple[int, int, str | None]:
    """A folding value as ``(pe, simd, mul)`` (``mul`` None when the value has no style)."""
    value = tuple(value)
    if len(value) == 2:
        return value[0], value[1], None
    if len(value) == 3:
        return value
    raise ValueError(f"a folding is (pe, simd) or (pe, simd, mul), not {value!r}")


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

    For a slowest-stage target every layer takes its fewest multipliers (PE x SIMD) that meet it;
    then, within ``budget``, the product style of each layer that offers one: all in DSPs first,
    and while the DSPs do not fit, the layer whose move to LUT products costs the fewest LUTs per
    DSP freed moves; layers whose DSPs then fit in what is left move back, most LUTs saved first.
    Without a budget every layer keeps its blocks' choice by width (no style is named).

    Raises ``ModelError`` naming the resource and the largest layer when nothing fits.
    """
    specs = ig.specs()
    layers = [(layer, [specs[n] for n in layer.inputs]) for layer in ig.layers]
    options = {layer.name: [(layer_cycles(layer, ins, p, s), p, s) for p, s in layer.fold_options(ins)]
               for layer, ins in layers}
    muls = {layer.name: tuple(layer.mul_options(ins)) if budget is not None else () for layer, ins in layers}
    cache: dict = {}

    def stage(layer, ins, p, s, mul):
        key = (layer.name, p, s, mul)
        if key not in cache:
            cache[key] = build_stage(layer.name, layer, ins, p, s, family, mul)
        return cache[key]

    def choose(target):
        fold, stages = {}, {}
        for layer, ins in layers:
            ok = [o for o in options[layer.name] if o[0] <= target]
            if not ok:
                return None, None
            _, p, s = min(ok, key=lambda o: (o[1] * o[2], o[0]))
            mul = None
            if muls[layer.name]:  # the style with fewer LUTs (DSP unless the products are narrow)
                mul = min(muls[layer.name], key=lambda m: (stage(layer, ins, p, s, m).cost.lut, m))
            fold[layer.name] = (p, s) if mul is None else (p, s, mul)
            stages[layer.name] = stage(layer, ins, p, s, mul)
        if budget is not None:
            _choose_muls(fold, stages, layers, stage, muls, budget)
        return fold, list(stages.values())

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


def _choose_muls(fold, stages, layers, stage, muls, budget: Budget) -> None:
    """Move layers' products from DSP to LUT (in place) until the DSPs fit ``budget``, fewest
    extra LUTs per DSP freed first; then move to DSP the LUT layers whose DSPs fit what is left
    and that save LUTs by it, most LUTs saved first."""
    by_name = {layer.name: (layer, ins) for layer, ins in layers}
    choice = [n for n, m in muls.items() if {"dsp", "lut"} <= set(m)]
    if not choice:
        return

    def alt(name, mul):
        layer, ins = by_name[name]
        p, s = fold[name][:2]
        return stage(layer, ins, p, s, mul)

    options = {}  # name -> (extra LUTs in LUT style, DSPs freed, DSP stage, LUT stage)
    for n in choice:
        d, lut = alt(n, "dsp"), alt(n, "lut")
        if d.cost.dsp > lut.cost.dsp:
            options[n] = (lut.cost.lut - d.cost.lut, d.cost.dsp - lut.cost.dsp, d, lut)
    dsp = sum(st.cost.dsp for st in stages.values())
    for n in sorted(options, key=lambda n: (options[n][0] / options[n][1], n)):
        if dsp <= budget.dsp:
            break
        if fold[n][2] == "dsp":
            stages[n] = options[n][3]
            fold[n] = (*fold[n][:2], "lut")
            dsp -= options[n][1]
    for n in sorted(options, key=lambda n: (-options[n][0], n)):
        extra, freed, d, _ = options[n]
        if fold[n][2] == "lut" and extra > 0 and dsp + freed <= budget.dsp:
            stages[n] = d
            fold[n] = (*fold[n][:2], "dsp")
            dsp += freed


def _check_budget(stages, budget: Budget, why: str) -> None:
    total = _total(stages)
    for i, (what, avail) in enumerate((("LUT", budget.lut), ("DSP", budget.dsp), ("EBR", budget.ebr))):
        if total[i] > avail:
            worst = max(stages, key=lambda s: (s.cost.lut, s.cost.dsp, s.cost.ebr)[i])
            used = (worst.cost.lut, worst.cost.dsp, worst.cost.ebr)[i]
            hint = ("4-bit weights (onnx2hw quantize --weight-bits 4) halve the weight memories, or "
                    if what != "DSP" else "")
            raise ModelError(
                f"does not fit {budget.name or 'the budget'}: needs {total[i]} {what} but {avail} are available, "
                f"{total[i] - avail} too many (largest layer {worst.layer!r} needs {used} {what} {why}); "
                f"{hint}pick a bigger board (onnx2hw boards)")


def load_folding(path) -> Folding:
    """Read a folding file: JSON ``{"layer name": {"pe": P, "simd": S}, ...}`` with positive
    integers, and optionally ``"mul": "dsp"`` or ``"lut"`` (the layer's product style)."""
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
        if not isinstance(v, dict) or not {"pe", "simd"} <= set(v) <= {"pe", "simd", "mul"}:
            raise ModelError(f"{path}: layer {name!r} must map to {{\"pe\": P, \"simd\": S}} (and optionally "
                             f"\"mul\": \"dsp\" or \"lut\"), not {v!r}")
        pe, simd = v["pe"], v["simd"]
        for what, n in (("pe", pe), ("simd", simd)):
            if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                raise ModelError(f"{path}: layer {name!r}: {what} must be a positive integer, not {n!r}")
        if "mul" in v and v["mul"] not in MULS:
            raise ModelError(f"{path}: layer {name!r}: mul must be \"dsp\" or \"lut\", not {v['mul']!r}")
        out[name] = (pe, simd, v["mul"]) if "mul" in v else (pe, simd)
    return out


def _no_constant(name: str):
    raise ValueError(f"{name} is not a number")


def save_folding(folding: Folding, path) -> None:
    """Write a folding file (atomically: the old file stays whole if the write fails)."""
    out = {}
    for k, v in folding.items():
        pe, simd, mul = fold_entry(v)
        out[k] = {"pe": pe, "simd": simd, **({"mul": mul} if mul else {})}
    write_text(path, json.dumps(out, indent=2) + "\n")
