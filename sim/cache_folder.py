"""The simulator cache folder: where builds live, how their use is recorded, when they go.

Layout of :func:`cache_root`: ``<key>/`` a design build (:mod:`onnx2hw.sim.build_cache`, done
when ``.built`` exists), ``_runtime/<key>/`` a shared Verilator runtime
(:mod:`onnx2hw.sim.verilator_runtime`, done when ``runtime.json`` exists), ``_native_rt/<key>/``
the native simulator's Verilator runtime (:mod:`onnx2hw.sim.native_run`, done when ``done``
exists), each beside its
``<key>.lock``; ``runs/`` the run directories (removed after a successful run, kept for their
waveforms after a failed one). Every reuse touches ``.used`` in the entry, so
:func:`prune_cache` removes what no environment has used for :data:`STALE_DAYS` days.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import time
from pathlib import Path

from platformdirs import user_cache_path

__all__ = ["cache_root", "cached_build", "mark_used", "prune_cache", "STALE_DAYS", "KEEP_FAILED_RUNS"]

#: a design build or shared runtime not used for this many days is removed (each use renews it)
STALE_DAYS = 14
#: failed runs (kept for their waveforms) beyond the newest this many, and over an hour old, are removed
KEEP_FAILED_RUNS = 10
_KEY = re.compile(r"[0-9a-f]{20}")


def cache_root() -> Path:
    """``$ONNX2HW_SIM_CACHE``, else ``sim`` in the user's cache folder (platformdirs; on Linux
    ``~/.cache/onnx2hw/sim``): builds are keyed by content, so every checkout and install shares them."""
    env = os.environ.get("ONNX2HW_SIM_CACHE")
    if env:
        return Path(env).expanduser().resolve()
    return user_cache_path("onnx2hw") / "sim"


#: cache roots this process has pruned (once each, at its first build there)
_PRUNED: set[Path] = set()


def cached_build(key: str, build) -> Path:
    """The build folder ``<root>/<key>``, made by ``build(folder) -> dict`` (recorded in its
    ``.built`` mark) unless a finished one is there; under the key's lock, so concurrent
    processes build it once. The first build of a process prunes the cache (:func:`prune_cache`)."""
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    if root not in _PRUNED:
        _PRUNED.add(root)
        prune_cache(root)
    folder = root / key
    with open(root / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (folder / ".built").is_file():
            mark_used(folder)
            return folder
        info = build(folder)
        (folder / ".built").write_text(json.dumps(info))
        return folder


def mark_used(folder: Path) -> None:
    """Record a use of a cache entry (the mark :func:`prune_cache` reads)."""
    with contextlib.suppress(OSError):
        (folder / ".used").touch()


def _remove_unlocked(entry: Path, lock: Path) -> bool:
    """Remove ``entry`` unless another process holds ``lock`` (then it is in use: keep it)."""
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return False
    try:
        shutil.rmtree(entry, ignore_errors=True)
        return True
    finally:
        os.close(fd)


def _entries(root: Path) -> list[tuple[Path, Path, Path]]:
    """``(completion mark, entry, lock)`` of every design build and shared runtime under ``root``
    (native builds are design builds: ``<key>/.built``)."""
    found = [(d / ".built", d, root / f"{d.name}.lock") for d in root.iterdir()
             if d.is_dir() and _KEY.fullmatch(d.name)]
    for sub, mark in (("_runtime", "runtime.json"), ("_native_rt", "done")):
        folder = root / sub
        if folder.is_dir():
            found += [(d / mark, d, folder / f"{d.name}.lock") for d in folder.iterdir()
                      if d.is_dir() and _KEY.fullmatch(d.name)]
    return found


def _prune_runs(runs: Path, now: float) -> list[Path]:
    """Remove the failed-run folders beyond the newest :data:`KEEP_FAILED_RUNS` once an hour old."""
    removed = []
    old = sorted((d for d in runs.iterdir() if d.is_dir()), key=lambda d: d.stat().st_mtime, reverse=True)
    for d in old[KEEP_FAILED_RUNS:]:
        if d.stat().st_mtime < now - 3600:
            shutil.rmtree(d, ignore_errors=True)
            removed.append(d)
    return removed


def prune_cache(root: Path | None = None, *, now: float | None = None) -> list[Path]:
    """Remove what the simulator cache no longer needs; returns what was removed.

    Design builds and shared runtimes not used for :data:`STALE_DAYS` days (the newer of their
    completion mark and ``.used``, touched at each reuse: builds of removed environments, of old
    versions of a design), each under its lock and only when no process holds it; failed-run
    folders beyond the newest :data:`KEEP_FAILED_RUNS` once an hour old."""
    root = cache_root() if root is None else Path(root)
    now = time.time() if now is None else now
    removed = []
    if not root.is_dir():
        return removed
    stale = now - STALE_DAYS * 86400
    for stamp, entry, lock in _entries(root):
        marks = [p.stat().st_mtime for p in (stamp, entry / ".used") if p.exists()]
        used = max(marks) if marks else entry.stat().st_mtime   # never completed: as old as the folder
        if used < stale and _remove_unlocked(entry, lock):
            removed.append(entry)
    if (root / "runs").is_dir():
        removed += _prune_runs(root / "runs", now)
    return removed
