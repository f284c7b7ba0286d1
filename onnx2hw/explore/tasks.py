"""What a worker runs: one child process per task (:func:`run_task`), so that a task has a time
limit, can be stopped, and takes no tool with it into the worker's memory.

The child (``python -m onnx2hw.explore_worker KIND SPEC.json``, :mod:`onnx2hw.explore_worker`) runs
in a process group of its own and asks the kernel for SIGTERM when the worker dies; on SIGTERM it
ends its own tools (Yosys, nextpnr, Verilator) as ``onnx2hw synth`` does on Ctrl-C. A task is
ended (its child's group sent SIGTERM, then SIGKILL) when its time is up or when the sweep's stop
event is set (Ctrl-C in ``onnx2hw explore``), which reaches workers of a remote cluster too.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from distributed import Event

from ..children import end_group

__all__ = ["run_task", "GRACE_S", "POLL_S"]

#: seconds a child has to end its tools after SIGTERM before its group is killed
GRACE_S = 10.0
#: seconds between looks at the stop event and the clock
POLL_S = 1.0


def _stopped(name: str | None) -> bool:
    if not name:
        return False
    try:
        return Event(name).is_set()
    except Exception:  # noqa: BLE001 - no scheduler to ask: not stopped by it
        return False


def _last_line(log: Path) -> str:
    try:
        lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return lines[-1] if lines else ""


def run_task(kind: str, spec: dict, *, timeout: float | None = None, stop: str | None = None,
             log: str | None = None) -> dict:
    """Run task ``kind`` (``build``, ``verify`` or ``accuracy``) of ``spec`` in a child process;
    its result dictionary, with ``status`` ``ok``, ``failed`` (and a one-line ``error``) or
    ``stopped``, ``seconds`` and ``worker`` (host name). ``timeout``: seconds before the child is
    ended (the task then fails, "timed out"); ``stop``: the name of a ``distributed.Event`` that
    ends the task when set; ``log``: file for the child's output (default: a temporary one)."""
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="onnx2hw-explore-") as tmp:
        spec_path, result_path = Path(tmp) / "spec.json", Path(tmp) / "result.json"
        spec_path.write_text(json.dumps({**spec, "result": str(result_path)}))
        log_path = Path(log) if log else Path(tmp) / "task.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        argv = [sys.executable, "-m", "onnx2hw.explore_worker", kind, str(spec_path)]
        status, error = None, None
        with open(log_path, "w") as out:
            proc = subprocess.Popen(argv, process_group=0, stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
            try:
                while True:
                    try:
                        rc = proc.wait(timeout=POLL_S)
                        break
                    except subprocess.TimeoutExpired:
                        pass
                    if timeout is not None and time.monotonic() - t0 > timeout:
                        end_group(proc, GRACE_S)
                        status, error = "failed", f"timed out after {timeout:g} s"
                        break
                    if _stopped(stop):
                        end_group(proc, GRACE_S)
                        status, error = "stopped", "stopped by the sweep (interrupted)"
                        break
            except BaseException:
                end_group(proc, GRACE_S)
                raise
        result = {}
        if status is None:
            try:
                result = json.loads(result_path.read_text())
                status = result.pop("status")
                error = result.pop("error", None)
            except (OSError, ValueError, KeyError):
                why = _last_line(log_path) or "no output"
                status, error = "failed", f"the task's process ended with exit status {rc} ({why})"
    return {**result, "status": status, "error": error, "seconds": round(time.monotonic() - t0, 2),
            "worker": socket.gethostname()}
