"""``onnx2hw`` command line.

Each verb lives in ``onnx2hw/commands/<verb>.py`` with ``HELP``, ``configure(parser)`` and
``run(args) -> int``. Every user error is one ``error:`` line on stderr and exit status 2;
never a traceback for bad input.
"""
from __future__ import annotations

import argparse
import importlib
import sys

from .commands import UsageError
from .ir.errors import ModelError

__all__ = ["main", "VERBS", "UsageError"]

#: verb -> module in onnx2hw.commands (order = order in --help)
VERBS = ("inspect", "quantize", "sim", "synth", "run", "boards")


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


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    try:
        return int(args._run(args) or 0)
    except (ModelError, UsageError, ValueError, TypeError) as exc:
        return _error(str(exc))
    except OSError as exc:
        return _error(f"{exc.filename or ''}: {exc.strerror or exc}".lstrip(": "))
    except KeyboardInterrupt:
        return _error("interrupted")


if __name__ == "__main__":
    sys.exit(main())
