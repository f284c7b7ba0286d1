"""``onnx2hw`` command line.

Each verb lives in ``onnx2hw/commands/<verb>.py`` with ``HELP``, ``configure(parser)`` and
``run(args) -> int``. Every user error is one ``error:`` line on stderr and exit status 2;
never a traceback for bad input.

Ctrl-C (SIGINT) and SIGTERM end a verb as an exception (:class:`onnx2hw.children.Interrupted`),
so the cleanups run: the external tools are ended with their process groups, temporary files
are removed, a build directory stays marked incomplete. One line says what was interrupted and
the exit status is 128 + the signal (130, 143).
"""
from __future__ import annotations

import argparse
import importlib
import signal
import sys
import threading

from .children import Interrupted, activities_of
from .commands import UsageError
from .files import check_output_file
from .ir.errors import ModelError

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


def _error(message: str) -> int:
    first = " ".join(str(message).split())  # one line
    print(f"error: {first}", file=sys.stderr)
    return 2


def _on_signal(signum, frame):
    # the first signal starts the cleanups; later ones must not interrupt them
    for s in SIGNALS:
        signal.signal(s, signal.SIG_IGN)
    raise Interrupted(signum)


def _interrupted(exc: KeyboardInterrupt) -> int:
    signum = getattr(exc, "signum", signal.SIGINT)
    acts = activities_of(exc)
    during = f" during {', '.join(reversed(acts))}" if acts else ""
    print(f"error: interrupted by {signal.Signals(signum).name}{during}", file=sys.stderr)
    return 128 + signum


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    handlers = {}
    if threading.current_thread() is threading.main_thread():
        handlers = {s: signal.signal(s, _on_signal) for s in SIGNALS}
    try:
        if args.verb in FILE_OUTPUT_VERBS and getattr(args, "output", None) is not None:
            check_output_file(args.output, "--output")
        return int(args._run(args) or 0)
    except (ModelError, UsageError, ValueError, TypeError) as exc:
        return _error(str(exc))
    except OSError as exc:
        return _error(f"{exc.filename or ''}: {exc.strerror or exc}".lstrip(": "))
    except KeyboardInterrupt as exc:
        return _interrupted(exc)
    finally:
        for s, h in handlers.items():
            signal.signal(s, h)


if __name__ == "__main__":
    sys.exit(main())
