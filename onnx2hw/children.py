"""Child processes that end with onnx2hw, and what was running when it was interrupted.

Every external tool (Yosys, nextpnr, the packers, make and the compilers of a Verilator build)
is started in a process group of its own by :func:`run_child`. When the call is left by an
exception -- ``KeyboardInterrupt`` from Ctrl-C, :class:`Interrupted` from the CLI's SIGTERM
handler, a time-out -- the whole group is sent SIGTERM, then SIGKILL after a grace period, and
waited for: no tool keeps running (and writing into a build directory) after onnx2hw has
stopped. A group of its own also means a terminal's Ctrl-C reaches onnx2hw only, which then
ends the tools itself.

:func:`activity` names what is being done (``with activity("place and route (nextpnr-ecp5)")``);
an interrupt leaving such blocks carries their names (:func:`activities_of`), so the CLI can say
in one line what was interrupted.
"""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess

__all__ = ["Interrupted", "run_child", "end_group", "activity", "activities_of", "GRACE_S"]

#: seconds a process group has to end after SIGTERM before it is killed
GRACE_S = 3.0


class Interrupted(KeyboardInterrupt):
    """A termination signal (SIGTERM, or SIGINT from the CLI's handler) turned into an exception,
    so that cleanups run as for Ctrl-C. ``signum`` is the signal."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = int(signum)


def end_group(proc: subprocess.Popen, grace: float = GRACE_S) -> None:
    """End ``proc`` and every process of its group (SIGTERM, then SIGKILL after ``grace`` s)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        pass
    # the leader may be gone while others of its group (compilers under make) are not
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def run_child(argv, *, timeout: float | None = None, **popen) -> int:
    """Run ``argv`` in a new process group until it exits; its exit status.

    ``popen``: keyword arguments of :class:`subprocess.Popen` (``cwd``, ``env``, ``stdout``,
    ...). On any exception while waiting (``KeyboardInterrupt``, :class:`Interrupted`, or
    :class:`subprocess.TimeoutExpired` after ``timeout`` s) the group is ended before the
    exception goes on.
    """
    popen.setdefault("stdin", subprocess.DEVNULL)   # a background group must not read the terminal
    proc = subprocess.Popen(argv, process_group=0, **popen)
    try:
        return proc.wait(timeout=timeout)
    except BaseException:
        end_group(proc)
        raise


@contextlib.contextmanager
def activity(what: str):
    """Name what the block does; an interrupt leaving it records ``what``
    (see :func:`activities_of`)."""
    try:
        yield
    except KeyboardInterrupt as exc:
        acts = getattr(exc, "onnx2hw_activities", None)
        if acts is None:
            acts = []
            with contextlib.suppress(AttributeError):
                exc.onnx2hw_activities = acts
        acts.insert(0, what)
        raise


def activities_of(exc: BaseException) -> list[str]:
    """What was being done when ``exc`` interrupted it, outermost first."""
    return list(getattr(exc, "onnx2hw_activities", ()))
