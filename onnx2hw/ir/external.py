"""Safe reading of external tensor data (``data_location = EXTERNAL``).

onnx's own loader is deliberately not used (CVE-2022-25882, CVE-2024-27318).
Before any byte is read, every location is checked with ``lstat`` only: it
must be a relative POSIX path without ``..`` components or backslashes, no
component below the model folder may be a symlink, the target must be a
regular file, and ``offset``/``length`` must lie inside it and match the
tensor's shape and element type. Only then is the file opened (with
``O_NOFOLLOW``); a ``checksum`` is the SHA-1 of the whole file named by
``location`` (ONNX ``ExternalData.md``).
"""
from __future__ import annotations

import hashlib
import os
import re
import stat
from typing import Iterator

import onnx
from onnx import AttributeProto, TensorProto

from .dtypes import raw_nbytes
from .errors import ModelError

__all__ = ["has_external_data", "inline_external_data", "iter_tensors"]

_KNOWN_KEYS = {"location", "offset", "length", "checksum"}
_DECIMAL = re.compile(r"[0-9]{1,19}\Z")
_SHA1 = re.compile(r"[0-9a-fA-F]{40}\Z")


def _graph_tensors(g: onnx.GraphProto, where: str) -> Iterator[tuple[TensorProto, str]]:
    for t in g.initializer:
        yield t, f"{where}initializer {t.name!r}"
    for s in g.sparse_initializer:
        yield s.values, f"{where}sparse initializer {s.values.name!r} (values)"
        yield s.indices, f"{where}sparse initializer {s.values.name!r} (indices)"
    yield from _node_tensors(g.node, where)


def _node_tensors(nodes, where: str) -> Iterator[tuple[TensorProto, str]]:
    for i, n in enumerate(nodes):
        label = f"{where}node {n.name or '#' + str(i)!r} attribute "
        for a in n.attribute:
            if a.HasField("t"):
                yield a.t, label + repr(a.name)
            for t in a.tensors:
                yield t, label + repr(a.name)
            sparse = ([a.sparse_tensor] if a.HasField("sparse_tensor") else []) + list(a.sparse_tensors)
            for s in sparse:
                yield s.values, label + repr(a.name) + " (values)"
                yield s.indices, label + repr(a.name) + " (indices)"
            graphs = ([a.g] if a.HasField("g") else []) + list(a.graphs)
            for g in graphs:
                yield from _graph_tensors(g, f"{label}{a.name!r} sub-graph: ")


def iter_tensors(model: onnx.ModelProto) -> Iterator[tuple[TensorProto, str]]:
    """Every ``TensorProto`` of the main graph, its sub-graphs and model-local functions.

    ``training_info`` is not visited (the loader ignores it).
    """
    yield from _graph_tensors(model.graph, "")
    for f in model.functions:
        yield from _node_tensors(f.node, f"function {f.name!r} ")


def has_external_data(model: onnx.ModelProto) -> bool:
    return any(t.data_location == TensorProto.EXTERNAL for t, _ in iter_tensors(model))


class _Files:
    """Checked access to files below one folder; caches ``lstat`` and SHA-1 per file."""

    def __init__(self, base_dir: str):
        self.base = os.path.realpath(base_dir)
        if not os.path.isdir(self.base):
            raise ModelError(f"external data folder {base_dir!r} is not a directory")
        self._sha1: dict[str, str] = {}

    def check(self, location: str, where: str) -> tuple[str, int]:
        """Validate ``location`` without reading it; return (path, size)."""
        if not location:
            raise ModelError(f"{where}: external data has an empty 'location'")
        if "\0" in location:
            raise ModelError(f"{where}: external data location {location!r} contains a NUL byte")
        if "\\" in location:
            raise ModelError(f"{where}: external data location {location!r} is not a POSIX relative path (backslash)")
        if location.startswith("/") or os.path.isabs(location) or re.match(r"[A-Za-z]:", location):
            raise ModelError(f"{where}: external data location {location!r} is an absolute path")
        parts = [p for p in location.split("/") if p not in ("", ".")]
        if ".." in parts:
            raise ModelError(f"{where}: external data location {location!r} leaves the model folder ('..')")
        if not parts:
            raise ModelError(f"{where}: external data location {location!r} names no file")
        path = self.base
        for k, part in enumerate(parts):
            path = os.path.join(path, part)
            try:
                st = os.lstat(path)
            except OSError as exc:
                raise ModelError(f"{where}: external data file {location!r} not found in {self.base!r} "
                                 f"({exc.strerror})") from None
            if stat.S_ISLNK(st.st_mode):
                raise ModelError(f"{where}: external data location {location!r} goes through a symlink "
                                 f"({'/'.join(parts[:k + 1])!r})")
            last = k == len(parts) - 1
            if not last and not stat.S_ISDIR(st.st_mode):
                raise ModelError(f"{where}: external data location {location!r}: "
                                 f"{'/'.join(parts[:k + 1])!r} is not a directory")
            if last and not stat.S_ISREG(st.st_mode):
                raise ModelError(f"{where}: external data location {location!r} is not a regular file")
        real = os.path.realpath(path)
        if os.path.commonpath([real, self.base]) != self.base:
            raise ModelError(f"{where}: external data location {location!r} resolves outside the model folder")
        return path, st.st_size

    def _open(self, path: str, where: str) -> int:
        flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        try:
            fd = os.open(path, flags)
        except OSError as exc:
            raise ModelError(f"{where}: cannot open external data file {path!r} ({exc.strerror})") from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise ModelError(f"{where}: external data file {path!r} is not a regular file")
        return fd

    def sha1(self, path: str, where: str) -> str:
        if path not in self._sha1:
            digest = hashlib.sha1()
            fd = self._open(path, where)
            try:
                while chunk := os.read(fd, 1 << 20):
                    digest.update(chunk)
            finally:
                os.close(fd)
            self._sha1[path] = digest.hexdigest()
        return self._sha1[path]

    def read(self, path: str, offset: int, length: int, where: str) -> bytes:
        fd = self._open(path, where)
        try:
            chunks, done = [], 0
            while done < length:
                chunk = os.pread(fd, length - done, offset + done)
                if not chunk:
                    break
                chunks.append(chunk)
                done += len(chunk)
        finally:
            os.close(fd)
        data = b"".join(chunks)
        if len(data) != length:
            raise ModelError(f"{where}: external data file {path!r} ended after {len(data)} of {length} bytes")
        return data


def _entries(t: TensorProto, where: str) -> dict[str, str]:
    info: dict[str, str] = {}
    for e in t.external_data:
        if e.key in info:
            raise ModelError(f"{where}: external_data key {e.key!r} given twice")
        if e.key not in _KNOWN_KEYS:
            raise ModelError(f"{where}: unknown external_data key {e.key!r} "
                             f"(expected {', '.join(sorted(_KNOWN_KEYS))})")
        info[e.key] = e.value
    if "location" not in info:
        raise ModelError(f"{where}: external data without a 'location'")
    for key in ("offset", "length"):
        if key in info and not _DECIMAL.match(info[key]):
            raise ModelError(f"{where}: external data {key} {info[key]!r} is not a non-negative integer")
    if "checksum" in info and not _SHA1.match(info["checksum"]):
        raise ModelError(f"{where}: external data checksum {info['checksum']!r} is not a SHA-1 hex digest")
    return info


def inline_external_data(model: onnx.ModelProto, base_dir: str | None) -> int:
    """Replace every external tensor of ``model`` (modified in place) by ``raw_data``.

    All locations are validated first, for every tensor, before any file is
    read. Returns the number of tensors inlined.
    """
    external = [(t, w) for t, w in iter_tensors(model) if t.data_location == TensorProto.EXTERNAL]
    if not external:
        return 0
    if base_dir is None:
        raise ModelError(f"{external[0][1]} uses external data; a model given in memory needs base_dir=")
    files = _Files(base_dir)
    plan = []
    for t, where in external:
        for field in ("raw_data",):
            if t.HasField(field):
                raise ModelError(f"{where}: external tensor must not also hold raw_data")
        for field in ("float_data", "int32_data", "string_data", "int64_data", "double_data", "uint64_data"):
            if len(getattr(t, field)):
                raise ModelError(f"{where}: external tensor must not also hold {field}")
        info = _entries(t, where)
        path, size = files.check(info["location"], where)
        offset = int(info.get("offset", "0"))
        if offset > size:
            raise ModelError(f"{where}: external data offset {offset} is beyond the end of "
                             f"{info['location']!r} ({size} bytes)")
        length = int(info["length"]) if "length" in info else size - offset
        if offset + length > size:
            raise ModelError(f"{where}: external data range {offset}..{offset + length} is outside "
                             f"{info['location']!r} ({size} bytes)")
        want = raw_nbytes(t, where)
        if length != want:
            raise ModelError(f"{where}: external data length {length} does not match shape {list(t.dims)} "
                             f"({want} bytes)")
        plan.append((t, where, info, path, offset, length))
    for t, where, info, path, offset, length in plan:
        if "checksum" in info and files.sha1(path, where) != info["checksum"].lower():
            raise ModelError(f"{where}: SHA-1 of {info['location']!r} does not match its checksum "
                             f"{info['checksum']!r}")
    for t, where, info, path, offset, length in plan:
        data = files.read(path, offset, length, where)
        t.ClearField("external_data")
        t.data_location = TensorProto.DEFAULT
        t.raw_data = data
    return len(plan)
