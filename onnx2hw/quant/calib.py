"""Calibration data checks and activation-range collection (private to :mod:`onnx2hw.quant.ptq`)."""
from __future__ import annotations

import os
import time
from typing import Mapping

import numpy as np

from ..golden import execute
from ..golden.host import batches, fixed_batch
from ..ir.errors import ModelError
from ..ir.graph import Graph

__all__ = ["load_npz", "check_feeds", "collect_ranges", "fixed_batch", "METHODS", "PERCENTILE"]

METHODS = ("minmax", "percentile")
#: percentile of |x| (or of x for non-negative tensors) used by ``method="percentile"``
PERCENTILE = 99.99
#: samples per golden-executor run
CHUNK = 256
#: values kept per tensor for the percentile method (deterministic subsample beyond)
_KEEP = 1 << 21


def load_npz(path: str | os.PathLike, what: str = "calibration") -> dict[str, np.ndarray]:
    """Read an ``.npz`` of ``what`` data (no pickles) into a dict."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise ModelError(f"{what} file {path!r} does not exist")
    try:
        data = np.load(path, allow_pickle=False)
        if not isinstance(data, np.lib.npyio.NpzFile):
            raise ModelError(f"{what} file {path!r} is a single .npy array, not an .npz archive "
                             "keyed by the model's input names")
        with data:
            return {k: data[k] for k in data.files}
    except ModelError:
        raise
    except Exception as exc:  # noqa: BLE001 - any failure to parse the user's file (zipfile raises
        # NotImplementedError for odd compression flags, zlib.error for damaged data): one line
        raise ModelError(f"{what} file {path!r} is not a readable NumPy .npz archive "
                         f"({type(exc).__name__}: {exc})") from None


#: integer model input types (ONNX elem_type -> numpy dtype): the feeds are the integer codes
_INT_INPUTS = {2: "uint8", 3: "int8", 4: "uint16", 5: "int16"}


def check_feeds(feeds: Mapping[str, np.ndarray], graph: Graph, what: str = "calibration") -> dict[str, np.ndarray]:
    """Match ``what`` arrays (calibration, input) to the model inputs by name, rank, fixed dims,
    dtype and finite values.

    Returns float32 arrays (any real floating dtype is converted: float64 and float16 are safe
    here, the model computes in float32); integer, boolean and complex arrays are refused. The
    leading (batch) dim must agree across inputs and be >= 1.
    """
    names = graph.input_names
    missing = [n for n in names if n not in feeds]
    extra = [k for k in feeds if k not in names]
    if missing or extra:
        parts = []
        if missing:
            parts.append(f"missing input(s) {', '.join(map(repr, missing))}")
        if extra:
            parts.append(f"unknown key(s) {', '.join(map(repr, extra))}")
        raise ModelError(f"{what} data does not match the model inputs ({'; '.join(parts)}; "
                         f"model inputs: {', '.join(map(repr, names))})")
    out, batch = {}, None
    for vi in graph.inputs:
        a = np.asarray(feeds[vi.name])
        integer = _INT_INPUTS.get(vi.elem_type)  # a model that takes integer codes (TFLite int8)
        if integer is not None:
            if a.dtype.kind not in "iu":
                raise ModelError(f"{what} array {vi.name!r} has dtype {a.dtype.name!r}; the model input is {integer}")
        elif a.dtype.kind != "f":
            raise ModelError(f"{what} array {vi.name!r} has dtype {a.dtype.name!r}; "
                             "the model input is float32")
        shape = vi.shape
        if shape is not None:
            if a.ndim != len(shape):
                raise ModelError(f"{what} array {vi.name!r} has shape {a.shape!r}; the model input "
                                 f"has rank {len(shape)} ({_fmt(shape)})")
            for i, (got, want) in enumerate(zip(a.shape, shape)):
                if i > 0 and isinstance(want, int) and want > 0 and got != want:
                    raise ModelError(f"{what} array {vi.name!r} has shape {a.shape!r}; the model "
                                     f"input is {_fmt(shape)} (dim {i} must be {want})")
        if a.ndim == 0 or a.shape[0] == 0:
            raise ModelError(f"{what} array {vi.name!r} holds no samples (shape {a.shape!r})")
        if batch is not None and a.shape[0] != batch:
            raise ModelError(f"{what} arrays disagree on the number of samples "
                             f"({vi.name!r} has {a.shape[0]}, others {batch})")
        batch = a.shape[0]
        if integer is not None:
            info = np.iinfo(integer)
            if a.size and (a.min() < info.min or a.max() > info.max):
                raise ModelError(f"{what} array {vi.name!r} has values outside {integer} [{info.min}, {info.max}]")
            out[vi.name] = np.ascontiguousarray(a, dtype=integer)
            continue
        if not np.all(np.isfinite(a)):
            raise ModelError(f"{what} array {vi.name!r} contains NaN or infinite values")
        out[vi.name] = np.ascontiguousarray(a, dtype=np.float32)
    return out


def _fmt(shape) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


class _Progress:
    """A rich progress bar that appears only once calibration looks slower than ``after`` seconds."""

    def __init__(self, total: int, enabled: bool, after: float = 2.0):
        self.total, self.enabled, self.after = total, enabled, after
        self.start = time.perf_counter()
        self.bar = self.task = None

    def update(self, done: int):
        if not self.enabled or done >= self.total:
            return
        elapsed = time.perf_counter() - self.start
        if self.bar is None and elapsed * self.total / max(done, 1) > self.after:
            from rich.console import Console
            from rich.progress import Progress

            self.bar = Progress(console=Console(stderr=True), transient=True)
            self.bar.start()
            self.task = self.bar.add_task("calibrating", total=self.total)
        if self.bar is not None:
            self.bar.update(self.task, completed=done)

    def close(self):
        if self.bar is not None:
            self.bar.stop()


def collect_ranges(graph: Graph, feeds: Mapping[str, np.ndarray], tensors, method: str = "minmax",
                   progress: bool = True, stats: dict | None = None) -> dict[str, tuple[float, float]]:
    """Calibrated ``(lo, hi)`` of each name in ``tensors`` over the float ``graph`` run on ``feeds``.

    ``minmax`` takes the observed extremes. ``percentile`` takes the :data:`PERCENTILE`-th
    percentile of ``x`` for tensors that never go negative, else of ``|x|`` (symmetric).
    Runs :func:`onnx2hw.golden.execute` in chunks of :data:`CHUNK` samples, or one batch at a
    time for a model that fixes its batch size (see :func:`fixed_batch`).

    ``stats`` (optional) maps tensor names to ``"gram"`` (2-D tensors: ``X.T @ X / n``) or
    ``"mean"`` (mean over every axis but axis 1); the results replace the keys' values in place.
    """
    if method not in METHODS:
        raise ValueError(f"calibration method must be one of {METHODS!r}, not {method!r}")
    tensors = list(dict.fromkeys(tensors))
    n = next(iter(feeds.values())).shape[0]
    lo = {t: np.inf for t in tensors}
    hi = {t: -np.inf for t in tensors}
    kept: dict[str, list[np.ndarray]] = {t: [] for t in tensors}
    rng = np.random.default_rng(0)
    per_chunk = max(1, _KEEP * CHUNK // n)
    bar = _Progress(n, progress)
    stats = {} if stats is None else stats
    acc = {t: [0.0, 0] for t in stats}
    fixed = fixed_batch(graph)
    step = fixed or CHUNK
    try:
        done = 0
        for chunk, real in batches(feeds, step, fill=bool(fixed)):  # a fixed batch: filled, real part used
            env = execute(graph, chunk, keep_intermediates=True)
            if fixed and real < fixed:
                env = {k: (np.asarray(v)[:real] if np.ndim(v) and np.shape(v)[0] == fixed else v)
                       for k, v in env.items()}
            for t in tensors:
                v = np.asarray(env[t], dtype=np.float64)
                if not np.all(np.isfinite(v)):
                    raise ModelError(f"calibration: tensor {t!r} has NaN or infinite values "
                                     "for the calibration data")
                lo[t] = min(lo[t], float(v.min()))
                hi[t] = max(hi[t], float(v.max()))
                if method == "percentile":
                    flat = v.ravel()
                    if flat.size > per_chunk:
                        flat = rng.choice(flat, per_chunk, replace=False)
                    kept[t].append(flat)
            for t, kind in stats.items():
                v = np.asarray(env[t], dtype=np.float64)
                if kind == "gram":
                    v = v.reshape(-1, v.shape[-1])
                    acc[t][0] = acc[t][0] + v.T @ v
                    acc[t][1] += v.shape[0]
                else:
                    axes = tuple(i for i in range(v.ndim) if i != 1)
                    acc[t][0] = acc[t][0] + v.sum(axis=axes)
                    acc[t][1] += v.size // v.shape[1]
            done += real
            bar.update(done)
    finally:
        bar.close()
    for t in list(stats):
        stats[t] = acc[t][0] / max(acc[t][1], 1)
    ranges = {}
    for t in tensors:
        a, b = lo[t], hi[t]
        if method == "percentile":
            v = np.concatenate(kept[t])
            if a >= 0:
                b = float(np.percentile(v, PERCENTILE)) or b  # a mostly-zero tensor keeps its max
            else:
                m = float(np.percentile(np.abs(v), PERCENTILE)) or max(-a, b)
                a, b = -m, m
        ranges[t] = (a, b)
    return ranges
