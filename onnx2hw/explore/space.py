"""The design space of a sweep: what a ``space.toml`` names, checked (:func:`load_space`,
:func:`parse_space`).

::

    # every key is optional; the product of the lists is swept
    foldings = 3                 # points spread along the cost model's Pareto front of foldings
    # target_cycles = [64, 512]  # or exactly these initiation intervals (cycles per inference)
    bits = ["w8a8", "w4a8"]      # float model with --calib only: PTQ weight/activation bits
    clock_mhz = [25, 50]         # system clocks (default: the board's)
    seeds = [1, 2]               # nextpnr placer seeds (default: nextpnr's own)

Errors are ``ValueError`` with one line naming the file, the key and the bad value.
"""
from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass
from pathlib import Path

from ..quant.ptq import ACT_BITS, WEIGHT_BITS

__all__ = ["Space", "parse_space", "load_space", "BITS", "parse_bits", "DEFAULT_FOLDINGS", "MAX_SEED"]

#: bit widths PTQ offers (``w<weight bits>a<activation bits>``)
BITS = tuple(f"w{w}a{a}" for w in WEIGHT_BITS for a in ACT_BITS)
#: foldings taken from the Pareto front when the space does not say
DEFAULT_FOLDINGS = 2
#: nextpnr's seed is a 32-bit signed integer
MAX_SEED = 2 ** 31 - 1
KEYS = ("foldings", "target_cycles", "bits", "clock_mhz", "seeds")


@dataclass(frozen=True)
class Space:
    """A checked design space.

    ``foldings``: how many foldings to take from the cost model's Pareto front (``None`` when
    ``target_cycles`` names them); ``target_cycles``: explicit initiation intervals; ``bits``:
    PTQ bit widths (empty: the model as given, or w8a8 for a float model); ``clock_mhz``:
    clocks (``(None,)``: the board's); ``seeds``: nextpnr seeds (``(None,)``: nextpnr's default).
    """

    foldings: int | None = DEFAULT_FOLDINGS
    target_cycles: tuple[int, ...] = ()
    bits: tuple[str, ...] = ()
    clock_mhz: tuple[float | None, ...] = (None,)
    seeds: tuple[int | None, ...] = (None,)


def parse_bits(text) -> tuple[int, int]:
    """``"w4a8"`` -> (4, 8); ``ValueError`` for anything PTQ does not offer."""
    if not isinstance(text, str) or text not in BITS:
        raise ValueError(f"must be one of {', '.join(BITS)}, not {text!r}")
    w, a = text[1:].split("a")
    return int(w), int(a)


def _whole(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _list(data: dict, key: str, where: str) -> list | None:
    if key not in data:
        return None
    v = data[key]
    if not isinstance(v, list) or not v:
        raise ValueError(f"{where}: {key} must be a non-empty list, not {v!r}")
    if len(set(map(repr, v))) != len(v):
        raise ValueError(f"{where}: {key} names a value twice: {v!r}")
    return v


def parse_space(data: dict, where: str = "space") -> Space:
    """The :class:`Space` of a parsed TOML table (``where`` names it in errors)."""
    if not isinstance(data, dict):
        raise ValueError(f"{where}: must be a table of keys, not {data!r}")
    unknown = sorted(set(data) - set(KEYS))
    if unknown:
        raise ValueError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(KEYS)})")
    if "foldings" in data and "target_cycles" in data:
        raise ValueError(f"{where}: give foldings or target_cycles, not both")
    foldings: int | None = DEFAULT_FOLDINGS
    if "foldings" in data:
        foldings = data["foldings"]
        if not _whole(foldings) or foldings < 1:
            raise ValueError(f"{where}: foldings must be a whole number of at least 1, not {foldings!r}")
    cycles = _list(data, "target_cycles", where)
    if cycles is not None:
        for c in cycles:
            if not _whole(c) or c < 1:
                raise ValueError(f"{where}: target_cycles must be whole numbers of cycles of at least 1, not {c!r}")
        foldings = None
    bits = _list(data, "bits", where) or []
    for b in bits:
        try:
            parse_bits(b)
        except ValueError as exc:
            raise ValueError(f"{where}: bits {exc}") from None
    clocks = _list(data, "clock_mhz", where) or [None]
    for c in clocks:
        if c is not None and (isinstance(c, bool) or not isinstance(c, (int, float)) or not math.isfinite(c) or c <= 0):
            raise ValueError(f"{where}: clock_mhz must be positive numbers of MHz, not {c!r}")
    seeds = _list(data, "seeds", where) or [None]
    for s in seeds:
        if s is not None and (not _whole(s) or not 0 <= s <= MAX_SEED):
            raise ValueError(f"{where}: seeds must be whole numbers from 0 to {MAX_SEED}, not {s!r}")
    return Space(foldings=foldings, target_cycles=tuple(cycles or ()), bits=tuple(bits),
                 clock_mhz=tuple(None if c is None else float(c) for c in clocks), seeds=tuple(seeds))


def load_space(path) -> Space:
    """The :class:`Space` a TOML file names (one-line ``ValueError`` for a missing or bad file)."""
    p = Path(path)
    if not p.exists():
        raise ValueError(f"--space file {str(path)!r} does not exist")
    if p.is_dir():
        raise ValueError(f"--space {str(path)!r} is a directory, not a TOML file")
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise ValueError(f"--space file {str(path)!r} is not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"--space file {str(path)!r} is not valid TOML: {exc}") from None
    return parse_space(data, f"--space {str(path)!r}")
