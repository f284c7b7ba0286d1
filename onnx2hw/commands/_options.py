"""Command-line options shared by the verbs that compile a model for a board (sim, synth)."""
from __future__ import annotations

__all__ = ["add_folding_options", "folding_request", "HEADROOM"]


def add_folding_options(parser):
    """Options that decide the folding (shared with ``synth``)."""
    parser.add_argument("--board", default="ulx3s", help="board whose resources bound the folding (default ulx3s)")
    parser.add_argument("--folding", metavar="FILE", help="folding JSON {layer: {pe, simd}} (default: automatic)")
    parser.add_argument("--target-fps", type=float, metavar="N",
                        help="fold for the fewest resources that reach N inferences/s at --clock-mhz")
    parser.add_argument("--clock-mhz", type=float, metavar="F", help="clock for --target-fps (default: the board's)")


def folding_request(args):
    """(board, budget, folding, target_cycles) from the folding options."""
    from boards import get_board

    from ..dataflow.fold import load_folding
    from . import UsageError

    board = get_board(args.board)
    clock = (args.clock_mhz * 1e6) if args.clock_mhz else board.default_clock_hz
    if args.clock_mhz is not None and args.clock_mhz <= 0:
        raise UsageError(f"--clock-mhz must be positive, not {args.clock_mhz!r}")
    target = None
    if args.target_fps is not None:
        if args.target_fps <= 0:
            raise UsageError(f"--target-fps must be positive, not {args.target_fps!r}")
        target = max(1, int(clock / args.target_fps))
    from ..rtl.board_top import LINK_COST

    folding = load_folding(args.folding) if args.folding else None
    return board, board.budget.scaled(HEADROOM).minus(LINK_COST[board.family]), folding, target


#: fraction of a device the automatic folding may fill (room for the host link and routing)
HEADROOM = 0.8
