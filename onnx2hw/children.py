"""Child processes that end with onnx2hw, and signals that end onnx2hw.

Every external tool (Yosys, nextpnr, the packers, make and the compilers of a Verilator build)
is started in a process group of its own by :func:`run_child`. When the call is left by an
exception -- ``KeyboardInterrupt`` from Ctrl-C, :class:`Interrupted` from a signal, a time-out --
the whole group is sent SIGTERM, then SIGKILL after a grace period, and waited for: no tool
keeps running (and writing into a build directory) after onnx2hw has stopped. A group of its
own also means a terminal's Ctrl-C reaches onnx2hw only, which then ends the tools itself.

:func:`activity` names what is being done (``with activity("place and route (nextpnr-ecp5)")``);
an interrupt leaving such blocks carries their names (:func:`activities_of`), so the CLI can say
in one line what was interrupted.

Signals (:class:`SignalsRaise`, the CLI's): SIGINT and SIGTERM raise :class:`Interrupted` so
that the cleanups run, and are recorded. A raise can be lost -- a signal that lands in a
finalizer (``__del__``, a weakref callback, the garbage collector) becomes an "Exception
ignored" that Python drops -- so the recorded signal is raised again at the next safe point
(:func:`check_interrupt`: entering or leaving an :func:`activity`, starting a child) and ends
the command in any case. A signal raises again as long as no interrupt is being handled; while
one is (an ``except``, ``finally`` or ``__exit__`` runs for it), or inside :func:`shielded`,
further signals are only recorded, so they cannot cut a cleanup short.
"""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading

__all__ = ["Interrupted", "run_child", "end_group", "activity", "activities_of", "GRACE_S",
           "SignalsRaise", "check_interrupt", "shielded"]

#: seconds a process group has to end after SIGTERM before it is killed
GRACE_S = 3.0


class Interrupted(KeyboardInterrupt):
    """A termination signal (SIGTERM, or SIGINT from the CLI's handler) turned into an exception,
    so that cleanups run as for Ctrl-C. ``signum`` is the signal."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = int(signum)


class _State:
    """The main thread's signal state while :class:`SignalsRaise` is active."""
    armed = False               # a signal raises (else it is only recorded)
    received: int | None = None  # the last signal received
    shield = 0                  # depth of shielded() blocks


_STATE = _State()


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _handling_interrupt() -> bool:
    """True while an ``except``/``finally``/``__exit__`` runs for an interrupt (directly, or for
    an exception raised while handling one)."""
    exc, seen = sys.exc_info()[1], set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, KeyboardInterrupt):
            return True
        seen.add(id(exc))
        exc = exc.__context__
    return False


def _may_raise() -> bool:
    return _STATE.armed and not _STATE.shield and _main_thread() and not _handling_interrupt()


def _on_signal(signum, frame) -> None:
    _STATE.received = int(signum)
    if _may_raise():
        raise Interrupted(signum)


def check_interrupt() -> None:
    """Raise :class:`Interrupted` for a signal received earlier whose raise was lost (a safe
    point; a no-op when none was received, while an interrupt is being handled, inside
    :func:`shielded`, and outside the main thread)."""
    if _STATE.received is not None and _may_raise():
        raise Interrupted(_STATE.received)


@contextlib.contextmanager
def shielded():
    """Within the block a signal is only recorded (the next safe point raises it): for work that
    must finish once started, such as ending a process group. A no-op outside the main thread."""
    if not _main_thread():
        yield
        return
    _STATE.shield += 1
    try:
        yield
    finally:
        _STATE.shield -= 1


class SignalsRaise:
    """``with SignalsRaise(signums) as signals:`` -- within the block each of ``signums`` raises
    :class:`Interrupted` (see the module docstring); ``signals.received`` is the last signal
    received (``None``: none). :meth:`disarm` turns raising off for the end of the block, where
    the caller reports the outcome. The handlers are installed in the main thread only (elsewhere
    the block changes nothing); a raise that Python drops as "Exception ignored" is not printed,
    the recorded signal stands for it."""

    def __init__(self, signums):
        self.signums = tuple(signums)
        self._saved = None

    @property
    def received(self) -> int | None:
        return _STATE.received if self._saved is not None else None

    def disarm(self) -> None:
        if self._saved is not None:
            _STATE.armed = False

    def __enter__(self) -> SignalsRaise:
        if _main_thread():
            saved = (_STATE.armed, _STATE.received, sys.unraisablehook)
            _STATE.received = None
            handlers = {s: signal.signal(s, _on_signal) for s in self.signums}
            self._saved = (handlers, *saved)
            sys.unraisablehook = _quiet_interrupts(sys.unraisablehook)
            _STATE.armed = True
        return self

    def __exit__(self, *exc) -> None:
        if self._saved is None:
            return
        handlers, _STATE.armed, received, sys.unraisablehook = self._saved
        for s, h in handlers.items():
            signal.signal(s, h)
        _STATE.received = received
        self._saved = None


def _quiet_interrupts(hook):
    """``sys.unraisablehook`` that drops a lost :class:`Interrupted` silently (its signal is
    recorded and raised again) and passes everything else to ``hook``."""
    def quiet(unraisable):
        if not isinstance(unraisable.exc_value, Interrupted):
            hook(unraisable)
    return quiet


def end_group(proc: subprocess.Popen, grace: float = GRACE_S) -> None:
    """End ``proc`` and every process of its group (SIGTERM, then SIGKILL after ``grace`` s);
    a signal meanwhile waits until this is done (:func:`shielded`)."""
    with shielded():
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
    ...). A signal received before is raised first (:func:`check_interrupt`); on any exception
    while waiting (``KeyboardInterrupt``, :class:`Interrupted`, or
    :class:`subprocess.TimeoutExpired` after ``timeout`` s) the group is ended before the
    exception goes on.
    """
    popen.setdefault("stdin", subprocess.DEVNULL)   # a background group must not read the terminal
    check_interrupt()
    with shielded():   # a started group is always watched
        proc = subprocess.Popen(argv, process_group=0, **popen)
    try:
        check_interrupt()
        return proc.wait(timeout=timeout)
    except BaseException:
        end_group(proc)
        raise


@contextlib.contextmanager
def activity(what: str):
    """Name what the block does; an interrupt leaving it records ``what``
    (see :func:`activities_of`). Entering and leaving are safe points (:func:`check_interrupt`);
    an interrupt raised on leaving does not name the block, which had finished."""
    check_interrupt()
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
    check_interrupt()


def activities_of(exc: BaseException) -> list[str]:
    """What was being done when ``exc`` interrupted it, outermost first."""
    return list(getattr(exc, "onnx2hw_activities", ()))
