"""``onnx2hw`` command line.

Each verb lives in ``onnx2hw/commands/<verb>.py`` with ``HELP``, ``configure(parser)`` and
``run(args) -> int``. Every user error is one ``error:`` line on stderr and exit status 2;
never a traceback for bad input.

Ctrl-C (SIGINT) and SIGTERM end a verb as an exception (:class:`onnx2hw.children.Interrupted`),
so the cleanups run: the external tools are ended with their process groups, temporary files
are removed, a build directory stays marked incomplete. One line says what was interrupted and
the exit status is 128 + the signal (130, 143) -- also when the exception was lost (a signal
landing in a finalizer) and the verb went on: a received signal always ends the command so
(:class:`onnx2hw.children.SignalsRaise`). The handlers are installed before the verbs are
loaded, so a Ctrl-C while they load is handled too.
"""
from __future__ import annotations

import os
import signal
import sys


def _interrupted_while_starting(signum, frame):
    """Until :func:`main` installs its handlers: nothing to clean up yet, one line and 128 + signal."""
    print(f"error: interrupted by {signal.Signals(signum).name} while starting", file=sys.stderr)
    os._exit(128 + signum)


if __name__ == "__main__" or os.path.basename(sys.argv[0]) == "onnx2hw":   # the program, not an import
    for _signum in (signal.SIGINT, signal.SIGTERM):    # before the imports below, which take a while
        signal.signal(_signum, _interrupted_while_starting)

import argparse  # noqa: E402
import importlib  # noqa: E402
import warnings  # noqa: E402

from amaranth.hdl import UnusedElaboratable  # noqa: E402

from .children import Interrupted, SignalsRaise, activities_of  # noqa: E402
from .commands import UsageError  # noqa: E402
from .files import check_output_file  # noqa: E402
from .ir.errors import ModelError  # noqa: E402

__all__ = ["main", "VERBS", "UsageError"]

#: verb -> module in onnx2hw.commands (order = order in --help)
VERBS = ("inspect", "quantize", "sim", "synth", "run", "accuracy", "explore", "boards")
#: verbs whose ``--output``/``-o`` names a file (checked before any work is done)
FILE_OUTPUT_VERBS = ("quantize", "sim", "run")
#: signals that end a verb with cleanups
SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="onnx2hw", description="ONNX to FPGA streaming dataflow compiler")
    sub = parser.add_subparsers(dest="verb", required=True, metavar="VERB")
    for verb in VERBS:
        module = importlib.import_module(f"onnx2hw.commands.{verb}")
        p = sub.add_parser(verb, help=module.HELP, description=module.HELP)
        module.configure(p)
        p.set_defaults(_run=module.run)
    return parser


def _error(message) -> tuple[int, str]:
    first = " ".join(str(message).split())  # one line
    return 2, f"error: {first}"


def _interrupted(exc: KeyboardInterrupt) -> tuple[int, str]:
    # elaboration cut short leaves blocks never elaborated: their warnings at exit are not news
    warnings.filterwarnings("ignore", category=UnusedElaboratable)
    signum = getattr(exc, "signum", signal.SIGINT)
    acts = activities_of(exc)
    during = f" during {', '.join(reversed(acts))}" if acts else ""
    return 128 + signum, f"error: interrupted by {signal.Signals(signum).name}{during}"


def _run(argv) -> tuple[int, str | None]:
    """Run the verb: its exit status and error line (``None``: none); an interrupt goes on."""
    args = _parser().parse_args(argv)
    try:
        if args.verb in FILE_OUTPUT_VERBS and getattr(args, "output", None) is not None:
            check_output_file(args.output, "--output")
        return int(args._run(args) or 0), None
    except (ModelError, UsageError, ValueError, TypeError) as exc:
        return _error(str(exc))
    except OSError as exc:
        return _error(f"{exc.filename or ''}: {exc.strerror or exc}".lstrip(": "))


def main(argv=None) -> int:
    with SignalsRaise(SIGNALS) as signals:
        try:
            try:
                status, line = _run(argv)
            finally:
                signals.disarm()   # from here a signal is only recorded, and reported below
        except KeyboardInterrupt as exc:
            status, line = _interrupted(exc)
        else:
            if signals.received is not None:   # its exception was lost, or it came at the end
                status, line = _interrupted(Interrupted(signals.received))
    if line:
        print(line, file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
