"""Command-line options shared by the verbs that compile a model for a board (sim, synth).

Both verbs decide the folding the same way, so ``sim --board B`` simulates exactly the design
``synth --board B`` builds.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["add_folding_options", "folding_request", "prepare_for_args", "folding_note", "require_simulator",
           "FoldingRequest", "HEADROOM"]

#: fraction of a device the automatic folding may fill (room for the host link and routing)
HEADROOM = 0.8


def add_folding_options(parser):
    """Options that decide the folding (shared with ``synth``)."""
    parser.add_argument("--board", default="ulx3s", help="board whose resources bound the folding (default ulx3s)")
    parser.add_argument("--folding", metavar="FILE", help="folding JSON {layer: {pe, simd}} (default: automatic)")
    parser.add_argument("--target-fps", type=float, metavar="N",
                        help="fold for the fewest resources that reach N inferences/s at --clock-mhz "
                             "(default: the rate the host link carries)")
    parser.add_argument("--clock-mhz", type=float, metavar="F", help="system clock (default: the board's)")
    parser.add_argument("--baud", type=float, help="UART baud rate of the host link (default: the board's)")


@dataclass(frozen=True)
class FoldingRequest:
    board: object          # boards.Board
    budget: object         # dataflow.fold.Budget, less the host link's share
    folding: dict | None   # from --folding
    target_cycles: int | None
    clock_hz: float
    baud: float
    folding_file: str | None = None


def _positive(name: str, value):
    from . import UsageError

    if value is not None and not (math.isfinite(value) and value > 0):
        raise UsageError(f"{name} must be a positive finite number, not {value!r}")


def folding_request(args) -> FoldingRequest:
    """The board, budget, folding and link from the folding options, checked."""
    from onnx2hw.boards import get_board

    from ..dataflow.fold import load_folding
    from ..rtl.board_top import LINK_COST
    from . import UsageError

    board = get_board(args.board)
    for name, value in (("--clock-mhz", args.clock_mhz), ("--target-fps", args.target_fps), ("--baud", args.baud)):
        _positive(name, value)
    clock = (args.clock_mhz * 1e6) if args.clock_mhz else board.default_clock_hz
    baud = args.baud or board.default_baud
    try:
        board.check_link(clock, baud)
        board.pll(clock)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    target = None if args.target_fps is None else max(1, int(clock / args.target_fps))
    folding = load_folding(args.folding) if args.folding else None
    return FoldingRequest(board, board.budget.scaled(HEADROOM).minus(LINK_COST[board.family]), folding, target,
                          clock, baud, args.folding)


def prepare_for_args(args, req: FoldingRequest):
    """The design both ``sim`` and ``synth`` compile for these options."""
    from ..flow import prepare_for_board

    return prepare_for_board(args.model, calib=args.calib, family=req.board.family, budget=req.budget,
                             clock_hz=req.clock_hz, baud=req.baud, folding=req.folding,
                             target_cycles=req.target_cycles)


def folding_note(prepared, req: FoldingRequest) -> str:
    """One line saying how the folding was chosen."""
    from ..flow import link_rate

    p = prepared.pipeline
    if prepared.link_fold_rate is not None:
        per, rate = link_rate(p, req.baud)
        return (f"folding for the link: {per} bytes per inference at {req.baud:,.0f} baud = {rate:,.0f} "
                f"inferences/s; II {p.ii:,} cycles at {req.clock_hz / 1e6:g} MHz (pass --target-fps to go faster)")
    if req.folding is not None:
        return f"folding from {req.folding_file}"
    return f"folding for --target-fps: II {p.ii:,} cycles at {req.clock_hz / 1e6:g} MHz"


def require_simulator(simulator: str, why: str) -> None:
    """One ``error:`` line (``why``: what needs it) unless ``simulator`` can run here."""
    from onnx2hw.sim.cocotb_run import simulator_available

    from . import UsageError

    reason = simulator_available(simulator)
    if reason:
        raise UsageError(f"{why} needs {simulator}: {reason}")
