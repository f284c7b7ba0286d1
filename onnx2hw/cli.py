"""``onnx2hw`` command line. Every error is one ``error:`` line on stderr, exit 2."""
from __future__ import annotations

import argparse
import sys

__all__ = ["main"]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="onnx2hw")
    parser.add_subparsers(dest="verb", required=True)
    parser.parse_args(argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
