"""The distributed engine of a sweep: Dask distributed (:class:`Engine`).

With no address it starts a ``LocalCluster`` of worker processes on this machine (one thread
each: a task is one child process, Yosys and nextpnr use a core each); with an address
(``tcp://host:8786``) it connects to a running scheduler, whose workers need only ``pip install
onnx2hw`` and a view of the output directory (a shared file system).

Robustness: each task returns its own failure (a one-line error, a time-out) instead of raising,
so a failing point never stops the sweep. A worker that dies while running a task (killed, out
of memory) makes the scheduler run the task again on another worker, at most ``retries`` times
(``distributed.scheduler.allowed-failures`` of the local cluster; an existing cluster keeps its
own setting), then the task is reported failed. Results are handed over as they arrive
(:meth:`Engine.run`); on Ctrl-C the sweep's stop event ends the running tasks' children, the
pending tasks are cancelled and the local cluster is closed.
"""
from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import dask
from distributed import Client, Event, LocalCluster, as_completed

from .tasks import POLL_S, run_task

__all__ = ["Engine", "Task", "DEFAULT_RETRIES"]

#: times a task is run again after its worker died under it
DEFAULT_RETRIES = 1


@dataclass(frozen=True)
class Task:
    """One unit of work: ``kind`` and ``spec`` for :func:`onnx2hw.explore.tasks.run_task`;
    ``ref``: what the caller knows it by (handed back with the result)."""

    kind: str
    spec: dict
    ref: object = field(default=None, compare=False)
    log: str | None = None


class Engine:
    """A Dask client on a new local cluster (``address`` None: ``workers`` processes, default one
    per core) or on the scheduler at ``address``. A context manager: leaving the outermost
    ``with`` block closes what it started (inner blocks use the engine as it is)."""

    def __init__(self, address: str | None = None, *, workers: int | None = None, retries: int = DEFAULT_RETRIES,
                 timeout: float | None = None, connect_timeout: float = 15.0):
        if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
            raise ValueError(f"workers must be at least 1, not {workers!r}")
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise ValueError(f"retries must be 0 or more, not {retries!r}")
        self.address, self.workers, self.retries, self.timeout = address, workers, retries, timeout
        self.connect_timeout = connect_timeout
        self.cluster = None
        self.client = None
        self._depth = 0   # nested `with` blocks: only the outermost starts and closes
        self.stop_name = f"onnx2hw-explore-stop-{uuid.uuid4().hex}"

    # ------------------------------------------------------------------ lifetime
    def __enter__(self) -> "Engine":
        self._depth += 1
        if self.client is not None:
            return self
        try:
            if self.address is None:
                n = self.workers or os.cpu_count() or 1
                # worker processes that may start children of their own
                with dask.config.set({"distributed.scheduler.allowed-failures": self.retries,
                                      "distributed.worker.daemon": False}), _sigint_ignored():
                    self.cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True,
                                                dashboard_address=None, silence_logs=logging.ERROR)
                self.client = Client(self.cluster)
            else:
                try:
                    self.client = Client(self.address, timeout=self.connect_timeout)
                except (OSError, TimeoutError) as exc:
                    raise ValueError(f"--cluster {self.address!r}: cannot reach a Dask scheduler there "
                                     f"({' '.join(str(exc).split())})") from None
        except BaseException:
            self._depth = 0
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self._depth -= 1
        if self._depth <= 0:
            self._depth = 0
            self.close()

    def close(self) -> None:
        with contextlib.suppress(Exception):
            if self.client is not None:
                self.client.close(timeout=10)
        with contextlib.suppress(Exception):
            if self.cluster is not None:
                self.cluster.close(timeout=20)
        self.client = self.cluster = None

    @property
    def description(self) -> str:
        n = len(self.client.scheduler_info(n_workers=-1).get("workers", {})) if self.client else 0
        where = "a local Dask cluster" if self.address is None else f"the Dask cluster at {self.address}"
        return f"{where} of {n} worker{'s' if n != 1 else ''}"

    # ------------------------------------------------------------------ running
    def slots(self) -> int:
        """Tasks the cluster runs at once now (its workers' threads; at least 1)."""
        workers = self.client.scheduler_info(n_workers=-1).get("workers", {})
        return max(1, sum(w.get("nthreads", 1) for w in workers.values()))

    def run(self, tasks: Sequence[Task], on_result: Callable[[Task, dict], None], *, fn: Callable = run_task) -> None:
        """Run ``tasks`` across the workers; ``on_result(task, result)`` is called in this thread
        as each finishes (a task whose workers kept dying gives ``{"status": "failed", "error":
        ...}``). Ctrl-C (``KeyboardInterrupt``) stops the running tasks, cancels the rest and
        goes on up. ``fn(kind, spec, timeout=, stop=, log=) -> dict`` runs a task on a worker
        (default :func:`~onnx2hw.explore.tasks.run_task`).

        Tasks are handed to the scheduler no faster than the workers' threads take them: none
        waits queued on a worker, so a worker that dies takes only the task it was running with
        it (the scheduler counts a death against every task a worker holds)."""
        if not tasks:
            return
        pending = list(enumerate(tasks))
        futures: dict = {}
        done = as_completed(with_results=True, raise_errors=False)

        def submit() -> None:
            i, t = pending.pop(0)
            f = self.client.submit(fn, t.kind, t.spec, timeout=self.timeout, stop=self.stop_name, log=t.log,
                                   key=f"onnx2hw-{t.kind}-{i}-{uuid.uuid4().hex[:8]}", pure=False)
            futures[f] = t
            done.add(f)

        try:
            running = 0
            while pending and running < self.slots():
                submit()
                running += 1
            for f, value in done:
                running -= 1
                task = futures.pop(f)
                if f.status == "error":
                    value = value[1] if isinstance(value, tuple) else value
                if isinstance(value, BaseException):
                    value = {"status": "failed", "error": _engine_error(value, self.retries), "seconds": None,
                             "worker": None}
                f.release()   # a result in hand: a later worker death must not run it again
                on_result(task, value)
                while pending and running < self.slots():
                    submit()
                    running += 1
        except BaseException:
            self._stop(list(futures))
            raise

    def _stop(self, futures) -> None:
        """Set the sweep's stop event (each running task ends its child within a second or so,
        on any cluster) and cancel every task not finished."""
        with contextlib.suppress(Exception):
            Event(self.stop_name, client=self.client).set()
        with contextlib.suppress(Exception):
            self.client.cancel(futures)
        if self.cluster is not None:   # a local cluster: give the tasks their moment before it closes
            time.sleep(2 * POLL_S)


@contextlib.contextmanager
def _sigint_ignored():
    """SIGINT ignored while the local workers start: they inherit that, so a terminal's Ctrl-C
    reaches this process alone, which then stops the tasks and closes the cluster in order."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)


def _engine_error(exc: BaseException, retries: int) -> str:
    name = type(exc).__name__
    if name == "KilledWorker":
        return f"the worker running it died ({retries + 1} time{'s' if retries else ''}; not tried again)"
    if name == "CancelledError":
        return "cancelled"
    return f"{name}: {' '.join(str(exc).split())}"
