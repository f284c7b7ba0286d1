"""Command-line options shared by the verbs that compile a model for a board (sim, synth).

Both verbs resolve them with :func:`onnx2hw.target.resolve_target` and compile with
:func:`onnx2hw.design.compile_for_target`, as the Python API does, so ``sim --board B``
simulates exactly the design ``synth --board B`` builds.
"""
from __future__ import annotations

import argparse

from ..design import Design, compile_for_target
from ..sim.toolchain import simulator_available
from ..target import HEADROOM, Target, resolve_target
from . import UsageError

__all__ = ["add_folding_options", "target_of", "design_of", "folding_note", "require_simulator", "HEADROOM",
           "CLI_LABELS"]

#: API option -> the command-line option errors name
CLI_LABELS = {"clock_mhz": "--clock-mhz", "target_fps": "--target-fps", "baud": "--baud"}


def add_host_option(parser):
    """``--host NODE``: move a node (and what is computed from it) to the host's part of the model."""
    parser.add_argument("--host", action="append", default=[], metavar="NODE",
                        help="run this node and everything after it on the host, not in hardware "
                             "(repeatable; Softmax heads and float tails go there by themselves)")


def add_folding_options(parser):
    """Options that decide the folding (shared with ``synth``)."""
    parser.add_argument("--board", default="ulx3s", help="board whose resources bound the folding (default ulx3s)")
    add_host_option(parser)
    parser.add_argument("--folding", metavar="FILE", help="folding JSON {layer: {pe, simd[, mul: dsp|lut]}} (default: automatic)")
    parser.add_argument("--target-fps", type=_fps, metavar="N|max",
                        help="fold for the fewest resources that reach N inferences/s at --clock-mhz, or "
                             "'max': the highest rate whose folding fits the board (default: the rate the "
                             "host link carries)")
    parser.add_argument("--clock-mhz", type=float, metavar="F", help="system clock (default: the board's)")
    parser.add_argument("--baud", type=float, help="UART baud rate of the host link (default: the board's)")


def _fps(text: str):
    """``--target-fps``: a number, or ``max``."""
    if text == "max":
        return text
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number or 'max', not {text!r}") from None


def target_of(args) -> Target:
    """The board target of the folding options, checked (errors name the options)."""
    return resolve_target(args.board, clock_mhz=args.clock_mhz, baud=args.baud, folding=args.folding,
                          target_fps=args.target_fps, labels=CLI_LABELS)


def design_of(args, target: Target, graph=None) -> Design:
    """The design both ``sim`` and ``synth`` compile for these options (``graph``: the model
    already loaded, to check data against it first)."""
    return compile_for_target(args.model if graph is None else graph, target, calib=args.calib,
                              host=tuple(args.host))


def folding_note(design: Design) -> str:
    """One line saying how the folding was chosen."""
    p = design.pipeline
    if design.link_fold_rate is not None:
        return (f"folding for the link: {design.link_bytes} bytes per inference at {design.baud:,.0f} baud = "
                f"{design.link_bound_per_s:,.0f} inferences/s; II {p.ii:,} cycles at {design.clock_hz / 1e6:g} MHz "
                f"(pass --target-fps to go faster)")
    if design.folding_source is not None:
        return f"folding from {design.folding_source}"
    if design.fastest:
        return (f"folding for the highest rate that fits {design.board.title}: II {p.ii:,} cycles = "
                f"{design.compute_bound_per_s:,.0f} inferences/s at {design.clock_hz / 1e6:g} MHz")
    return f"folding for --target-fps: II {p.ii:,} cycles at {design.clock_hz / 1e6:g} MHz"


def host_note(design: Design) -> str | None:
    """One line naming what the host computes after the hardware's output, if anything."""
    tail = design.integer.tail
    if tail is None:
        return None
    return (f"host/hardware split: the hardware ends at {tail.input_names[0]!r}; the host runs "
            + ", ".join(f"{n.name} ({n.op_type})" for n in tail.nodes))


def require_simulator(simulator: str, why: str) -> None:
    """One ``error:`` line (``why``: what needs it) unless ``simulator`` can run here."""
    reason = simulator_available(simulator)
    if reason:
        raise UsageError(f"{why} needs {simulator}: {reason}")
