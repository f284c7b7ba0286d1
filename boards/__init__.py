"""FPGA boards: a thin layer over ``amaranth_boards`` platforms (budget, clock/PLL, host link).

``BOARDS`` maps a board name to its :class:`Board`; ``ulx3s`` is the ULX3S-85F.
"""
from __future__ import annotations

from onnx2hw.ir.errors import ModelError

from ._board import Board
from .ecp5 import ORANGECRAB, ULX3S
from .ice40 import ICEBREAKER

__all__ = ["Board", "BOARDS", "ALIASES", "get_board", "board_names"]

BOARDS: dict[str, Board] = {**ULX3S, ICEBREAKER.name: ICEBREAKER, ORANGECRAB.name: ORANGECRAB}
ALIASES = {"ulx3s": "ulx3s-85f"}


def board_names() -> list[str]:
    """Every accepted board name (aliases included), in listing order."""
    return ["ulx3s", *BOARDS]


def get_board(name: str) -> Board:
    """The board called ``name`` (case-insensitive); ``ModelError`` listing the choices otherwise."""
    key = str(name).lower()
    key = ALIASES.get(key, key)
    if key not in BOARDS:
        raise ModelError(f"unknown board {name!r}; choose one of {', '.join(board_names())}")
    return BOARDS[key]
