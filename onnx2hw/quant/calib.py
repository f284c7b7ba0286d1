"""Every verb's input data read and checked (:func:`load_npz`, :func:`check_arrays`: calibration
data, inputs of ``sim``, ``run`` and ``accuracy``), and the activation-range collection of
:mod:`onnx2hw.quant.ptq`."""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Mapping

import numpy as np

from ..golden import execute
from ..golden.host import batches, fixed_batch
from ..ir.errors import ModelError
from ..ir.graph import Graph

__all__ = ["load_npz", "InputSpec", "input_specs", "check_arrays", "check_feeds", "collect_ranges", "fixed_batch",
           "METHODS", "PERCENTILE"]

METHODS = ("minmax", "percentile")
#: percentile of |x| (or of x for non-negative tensors) used by ``method="percentile"``
PERCENTILE = 99.99
#: samples per golden-executor run
CHUNK = 256
#: values kept per tensor for the percentile method (deterministic subsample beyond)
_KEEP = 1 << 21


def load_npz(path: str | os.PathLike, what: str = "calibration") -> dict[str, np.ndarray]:
    """Read an ``.npz`` of ``what`` data (no pickles) into a dict of arrays: the one reader of
    every verb's data files (check the arrays with :func:`check_arrays`)."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise ModelError(f"{what} file {path!r} does not exist")
    try:
        data = np.load(path, allow_pickle=False)
        if not isinstance(data, np.lib.npyio.NpzFile):
            raise ModelError(f"{what} file {path!r} is a single .npy array, not an .npz archive "
                             "keyed by the model's input names")
        with data:
            arrays = {k: data[k] for k in data.files}
    except ModelError:
        raise
    except Exception as exc:  # noqa: BLE001 - any failure to parse the user's file (zipfile raises
        # NotImplementedError for odd compression flags, zlib.error for damaged data): one line
        raise ModelError(f"{what} file {path!r} is not a readable NumPy .npz archive "
                         f"({type(exc).__name__}: {exc})") from None
    for k, v in arrays.items():  # numpy returns a member that is not in .npy format as its raw bytes
        if not isinstance(v, np.ndarray):
            raise ModelError(f"{what} file {path!r}: member {k!r} is not a NumPy array")
    return arrays


@dataclass(frozen=True)
class InputSpec:
    """What the array fed to one input must be: ``shape`` batch first (``None`` or a name for a
    free dim; ``None`` for no shape at all), and ``codes``, the integer type ``(name, lo, hi)`` of
    an input that takes integer codes (``None``: a float input)."""

    name: str
    shape: tuple | None
    codes: tuple[str, int, int] | None = None


#: integer model input types (ONNX elem_type -> numpy dtype): the feeds are the integer codes
_INT_INPUTS = {2: "uint8", 3: "int8", 4: "uint16", 5: "int16"}


def input_specs(graph: Graph) -> list[InputSpec]:
    """The :class:`InputSpec` of each input of ``graph``."""
    specs = []
    for vi in graph.inputs:
        t = _INT_INPUTS.get(vi.elem_type)   # a model that takes integer codes (TFLite int8)
        codes = None if t is None else (t, int(np.iinfo(t).min), int(np.iinfo(t).max))
        specs.append(InputSpec(vi.name, None if vi.shape is None else tuple(vi.shape), codes))
    return specs


def check_feeds(feeds: Mapping[str, np.ndarray], graph: Graph, what: str = "calibration") -> dict[str, np.ndarray]:
    """:func:`check_arrays` against the inputs of ``graph``: one array per input, no other keys."""
    return check_arrays(feeds, input_specs(graph), what)


def check_arrays(feeds: Mapping[str, np.ndarray], inputs: list[InputSpec], what: str = "input", *,
                 others: bool = False, float_hint: str = "") -> dict[str, np.ndarray]:
    """The one checker of every verb's input data: ``what`` arrays (calibration, input) matched
    to ``inputs`` by name, rank, fixed dims, dtype and values; keys that name no input are refused
    unless ``others``. ``float_hint`` is added to the error for integers given to a float input.

    Returns float32 arrays for float inputs (any real floating dtype is converted: float64 and
    float16 are safe here, the model computes in float32; integer, boolean and complex arrays are
    refused) and, for inputs of integer codes, integer arrays whose values lie in the type's
    range. The leading (batch) dim must agree across inputs and be >= 1.
    """
    names = [spec.name for spec in inputs]
    missing = [n for n in names if n not in feeds]
    extra = [k for k in feeds if k not in names]
    if missing or (extra and not others):
        parts = []
        if missing:
            parts.append(f"missing input(s) {', '.join(map(repr, missing))}")
        if extra:
            parts.append(f"unknown key(s) {', '.join(map(repr, extra))}")
        raise ModelError(f"{what} data does not match the model inputs ({'; '.join(parts)}; "
                         f"model inputs: {', '.join(map(repr, names))})")
    out, batch = {}, None
    for spec in inputs:
        a = np.asarray(feeds[spec.name])
        _check_dtype(a, spec, what, float_hint)
        _check_shape(a, spec, what)
        if batch is not None and a.shape[0] != batch:
            raise ModelError(f"{what} arrays disagree on the number of samples "
                             f"({spec.name!r} has {a.shape[0]}, others {batch})")
        batch = a.shape[0]
        if spec.codes is not None:
            t, lo, hi = spec.codes
            if a.size and (a.min() < lo or a.max() > hi):
                raise ModelError(f"{what} array {spec.name!r} has values outside {t} [{lo}, {hi}]")
            out[spec.name] = np.ascontiguousarray(a, dtype=_holding(lo, hi))
            continue
        if not np.all(np.isfinite(a)):
            raise ModelError(f"{what} array {spec.name!r} contains NaN or infinite values")
        out[spec.name] = np.ascontiguousarray(a, dtype=np.float32)
    return out


def _check_dtype(a: np.ndarray, spec: InputSpec, what: str, float_hint: str) -> None:
    if spec.codes is not None:
        if a.dtype.kind not in "iu":
            raise ModelError(f"{what} array {spec.name!r} has dtype {a.dtype.name!r}; the input takes "
                             f"{spec.codes[0]} integer codes")
    elif a.dtype.kind != "f":
        raise ModelError(f"{what} array {spec.name!r} has dtype {a.dtype.name!r}; the model input is float32"
                         + (float_hint if a.dtype.kind in "iu" else ""))


def _check_shape(a: np.ndarray, spec: InputSpec, what: str) -> None:
    shape = spec.shape
    if shape is not None:
        if a.ndim != len(shape):
            raise ModelError(f"{what} array {spec.name!r} has shape {a.shape!r}; the input has rank "
                             f"{len(shape)} ({_fmt(shape)})")
        for i, (got, want) in enumerate(zip(a.shape, shape)):
            if i > 0 and isinstance(want, int) and want > 0 and got != want:
                raise ModelError(f"{what} array {spec.name!r} has shape {a.shape!r}; the input is "
                                 f"{_fmt(shape)} (dim {i} must be {want})")
    if a.ndim == 0 or a.shape[0] == 0:
        raise ModelError(f"{what} array {spec.name!r} holds no samples (shape {a.shape!r})")


def _holding(lo: int, hi: int) -> type:
    """The narrowest NumPy integer type holding ``[lo, hi]``."""
    return next(t for t in (np.uint8, np.int8, np.uint16, np.int16, np.int32, np.int64)
                if np.iinfo(t).min <= lo and hi <= np.iinfo(t).max)


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
