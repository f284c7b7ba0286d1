"""The board a design is compiled for: board, resource budget, clock, host link and folding
request, checked once for the Python API (:func:`onnx2hw.compile`) and the CLI verbs alike.

Errors are ``ValueError``/``ModelError`` with one line naming the bad value; ``labels`` names
the options as the caller spells them (``clock_mhz`` in Python, ``--clock-mhz`` on the command
line), so the CLI prints exactly what the API raises.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from .boards import Board, get_board
from .dataflow.fold import MULS, Budget, fold_entry, load_folding
from .rtl.board_top import LINK_COST

__all__ = ["Target", "resolve_target", "HEADROOM", "API_LABELS"]

#: fraction of a device the automatic folding may fill (room for the host link and routing)
HEADROOM = 0.8

#: option -> how the Python API names it in error messages
API_LABELS = {"clock_mhz": "clock_mhz", "target_fps": "target_fps", "baud": "baud",
              "target_cycles": "target_cycles"}


@dataclass(frozen=True)
class Target:
    """A checked board target: the folding decision's inputs."""

    board: Board
    budget: Budget           # the board's, scaled by HEADROOM, less the host link's share
    folding: Mapping | None  # {layer: (pe, simd)} if given
    target_cycles: int | None
    clock_hz: float
    baud: float
    #: where ``folding`` came from (a file name, or "the folding argument")
    folding_source: str | None = None
    #: fold for the highest throughput that fits the budget (``target_fps="max"``)
    fastest: bool = False


def _positive(name: str, value) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a positive finite number, not {value!r}")


def _folding(folding) -> tuple[dict | None, str | None]:
    """``folding`` as {layer: (pe, simd) or (pe, simd, mul)}: a JSON file path, or a mapping of
    layer name to ``(pe, simd)``, ``(pe, simd, mul)`` or ``{"pe": P, "simd": S}`` with an optional
    ``"mul"`` ("dsp" or "lut": the layer's products in DSPs or LUTs)."""
    if folding is None:
        return None, None
    if isinstance(folding, (str, Path)):
        return load_folding(folding), str(folding)
    if not isinstance(folding, Mapping):
        raise TypeError(f"folding must be a file path or a mapping of layer name to (pe, simd), not {folding!r}")
    out = {}
    for layer, v in folding.items():
        try:
            if isinstance(v, Mapping):
                if not set(v) <= {"pe", "simd", "mul"}:
                    raise KeyError
                pe, simd, mul = v["pe"], v["simd"], v.get("mul")
            else:
                pe, simd, mul = fold_entry(v)
            if isinstance(pe, bool) or isinstance(simd, bool) or mul not in (None, *MULS):
                raise TypeError
            out[str(layer)] = (int(pe), int(simd)) if mul is None else (int(pe), int(simd), mul)
        except (TypeError, ValueError, KeyError):
            raise ValueError(f"folding of layer {layer!r} must be (pe, simd), (pe, simd, mul) or "
                             f"{{'pe': P, 'simd': S, 'mul': 'dsp'|'lut'}} (mul optional), not {v!r}") from None
    return out, "the folding argument"


def resolve_target(board="ulx3s", *, clock_mhz=None, baud=None, folding=None, target_cycles=None,
                   target_fps=None, labels: Mapping[str, str] = API_LABELS) -> Target:
    """Check the board options and derive the budget, clock, baud rate and folding request.

    ``board``: a name (see ``onnx2hw boards``) or a :class:`~onnx2hw.boards.Board`;
    ``clock_mhz``/``baud`` default to the board's; ``target_fps`` (inferences/s at the clock)
    or ``target_cycles`` (initiation interval) asks for the fewest resources reaching that rate,
    ``target_fps="max"`` for the highest rate whose folding fits the board;
    ``folding`` fixes the folding (a JSON file or a mapping, see :func:`_folding`).
    """
    b = board if isinstance(board, Board) else get_board(board)
    fastest = isinstance(target_fps, str) and target_fps == "max"
    if fastest and target_cycles is not None:
        raise ValueError(f"pass {labels.get('target_fps', 'target_fps')} or "
                         f"{labels.get('target_cycles', 'target_cycles')}, not both")
    target_fps = None if fastest else target_fps
    for key, value in (("clock_mhz", clock_mhz), ("target_fps", target_fps), ("baud", baud),
                       ("target_cycles", target_cycles)):
        _positive(labels.get(key, key), value)
    if target_fps is not None and target_cycles is not None:
        raise ValueError(f"pass {labels.get('target_fps', 'target_fps')} or "
                         f"{labels.get('target_cycles', 'target_cycles')}, not both")
    if target_cycles is not None and int(target_cycles) != target_cycles:
        raise ValueError(f"{labels.get('target_cycles', 'target_cycles')} must be a whole number of cycles, "
                         f"not {target_cycles!r}")
    clock = (clock_mhz * 1e6) if clock_mhz else b.default_clock_hz
    link_baud = baud or b.default_baud
    try:
        b.check_link(clock, link_baud)
    except ValueError as exc:
        raise ValueError(f"{labels.get('baud', 'baud')}: {exc}") from None
    try:
        b.pll(clock)
    except ValueError as exc:
        raise ValueError(f"{labels.get('clock_mhz', 'clock_mhz')}: {exc}") from None
    target = (int(target_cycles) if target_cycles is not None
              else None if target_fps is None else max(1, int(clock / target_fps)))
    fold, source = _folding(folding)
    return Target(b, b.budget.scaled(HEADROOM).minus(LINK_COST[b.family]), fold, target, float(clock),
                  float(link_baud), source, fastest)

