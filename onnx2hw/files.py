"""Atomic outputs: every file onnx2hw writes for the user appears whole or not at all.

A file is written to a temporary file beside its destination (same directory, so the same file
system), flushed and ``fsync``-ed, then renamed over the destination with :func:`os.replace`.
On any failure before the rename (an exception, a full disk, a file-size limit,
``KeyboardInterrupt``, a signal turned into an exception) the temporary file is removed and the
destination is as it was: the user's earlier file, or nothing.

A destination that exists but is not a regular file (``/dev/null``, a FIFO) is written in
place, as there is nothing to replace; a symbolic link is followed (its target is replaced). A
destination that is a directory is refused with :class:`ValueError` (one ``error:`` line in the
CLI).

This module is at the bottom of the package layers (see ``pyproject.toml``): it imports nothing
of onnx2hw.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import stat
import tempfile
from pathlib import Path

import numpy as np

__all__ = ["check_output_file", "atomic_write", "write_text", "write_bytes", "write_json", "save_npz",
           "copy_file", "sha256_file", "fsync_dir", "TEMP_SUFFIX"]

#: name ending of the temporary files (``.NAME.XXXXXXXX.tmp`` beside the destination)
TEMP_SUFFIX = ".tmp"


def check_output_file(path, option: str = "output") -> Path:
    """``path`` as a :class:`~pathlib.Path` if a file may be written there; ``ValueError`` if it
    names a directory or a folder that does not exist (``option``: how the error names it, e.g. ``-o``)."""
    p = Path(path)
    if str(path) == "" or p.is_dir():
        raise ValueError(f"{option} {str(path)!r} is a directory; give the name of a file to write")
    if not p.parent.is_dir():
        raise ValueError(f"{option} {str(path)!r}: its folder {str(p.parent)!r} does not exist")
    return p


def fsync_dir(directory) -> None:
    """Make a rename in ``directory`` durable (best effort: not every file system allows it)."""
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _new_file_mode(dest: Path) -> int:
    """Permissions for the new file: those of the file it replaces, else 0o666 less the umask."""
    with contextlib.suppress(OSError):
        return stat.S_IMODE(dest.stat().st_mode)
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


@contextlib.contextmanager
def atomic_write(path, mode: str = "wb", *, encoding: str | None = None, option: str = "output"):
    """Context manager yielding a file object open for writing; the data replaces ``path`` only
    when the ``with`` block ends without an exception.

    ``mode`` is ``"wb"`` or ``"w"`` (text, ``encoding`` default UTF-8). ``option`` names the path
    in the error for a directory.
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"mode must be 'w' or 'wb', not {mode!r}")
    dest = check_output_file(path, option)
    if dest.is_symlink():
        dest = Path(os.path.realpath(dest))
    text = {"encoding": encoding or "utf-8"} if mode == "w" else {}
    if dest.exists() and not dest.is_file():   # a device or FIFO: nothing to replace
        with open(dest, mode, **text) as f:
            yield f
        return
    directory = dest.parent
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=TEMP_SUFFIX, dir=directory)
    except OSError as exc:   # no such folder, not writable: name the destination
        why = "its folder does not exist" if not directory.exists() else (exc.strerror or str(exc))
        raise OSError(exc.errno, f"cannot write here: {why}", str(dest)) from None
    try:
        with os.fdopen(fd, mode, **text) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, _new_file_mode(dest))
        os.replace(tmp, dest)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError) and exc.errno is not None:   # name the destination, not the temporary
            kept = "left as it was" if dest.exists() else "not written"
            raise OSError(exc.errno, f"{exc.strerror or exc} ({str(dest)!r} {kept})", str(dest)) from exc
        raise
    fsync_dir(directory)


def write_bytes(path, data: bytes, *, option: str = "output") -> Path:
    """Write ``data`` to ``path`` atomically; returns the path."""
    with atomic_write(path, "wb", option=option) as f:
        f.write(data)
    return Path(path)


def write_text(path, text: str, *, option: str = "output") -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically; returns the path."""
    with atomic_write(path, "w", option=option) as f:
        f.write(text)
    return Path(path)


def write_json(path, value, *, indent: int | None = 1, option: str = "output") -> Path:
    """Write ``value`` as JSON (and a final newline) to ``path`` atomically; returns the path."""
    return write_text(path, json.dumps(value, indent=indent) + "\n", option=option)


def save_npz(path, arrays: dict, *, option: str = "output") -> Path:
    """:func:`numpy.savez` of ``arrays`` (name -> array) to exactly ``path`` (no ``.npz`` is
    appended), atomically; returns the path."""
    with atomic_write(path, "wb", option=option) as f:
        np.savez(f, **arrays)
    return Path(path)


def copy_file(src, dest) -> Path:
    """Copy the contents of ``src`` to ``dest`` atomically; returns ``dest``."""
    with open(src, "rb") as source, atomic_write(dest, "wb") as f:
        shutil.copyfileobj(source, f, 1 << 20)
    return Path(dest)


def sha256_file(path) -> str:
    """The SHA-256 of a file's contents, in hex."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
