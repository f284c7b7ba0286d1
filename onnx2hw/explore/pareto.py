"""Pareto selection: which rows no other row beats on every objective (:func:`pareto_mask`),
and an even pick along a front (:func:`spread`)."""
from __future__ import annotations

from collections.abc import Mapping, Sequence

__all__ = ["dominates", "pareto_mask", "spread"]


def _value(row: Mapping, key: str, sense: str):
    v = row.get(key)
    return None if v is None else (v if sense == "min" else -v)


def dominates(a: Mapping, b: Mapping, objectives: Sequence[tuple[str, str]]) -> bool:
    """``a`` is at least as good as ``b`` on every objective (``(key, "min"|"max")``) and better
    on one. An objective either row lacks (``None``) is not compared."""
    better = False
    for key, sense in objectives:
        va, vb = _value(a, key, sense), _value(b, key, sense)
        if va is None or vb is None:
            continue
        if va > vb:
            return False
        better = better or va < vb
    return better


def pareto_mask(rows: Sequence[Mapping], objectives: Sequence[tuple[str, str]]) -> list[bool]:
    """For each row: True when no other row dominates it (equal rows are all kept)."""
    for _, sense in objectives:
        if sense not in ("min", "max"):
            raise ValueError(f"an objective is 'min' or 'max', not {sense!r}")
    return [not any(dominates(o, r, objectives) for j, o in enumerate(rows) if j != i) for i, r in enumerate(rows)]


def spread(items: Sequence, n: int) -> list:
    """``n`` items evenly spread over ``items`` (both ends included when ``n >= 2``); all of them
    when there are no more than ``n``."""
    if n < 1:
        raise ValueError(f"n must be at least 1, not {n!r}")
    if len(items) <= n:
        return list(items)
    if n == 1:
        return [items[0]]
    picks = sorted({round(i * (len(items) - 1) / (n - 1)) for i in range(n)})
    return [items[i] for i in picks]
