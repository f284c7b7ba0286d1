"""``onnx2hw accuracy MODEL --data LABELLED.npz``: top-1 (and top-5) accuracy of the integer model
the hardware computes (:meth:`onnx2hw.Design.golden`: the exact integer graph on the host's
quantized inputs, dequantized, then the host tail), beside the ONNX model run by onnxruntime.

The ``.npz`` holds the inputs (keyed by the model input's name, or ``input`` / ``x`` for a
one-input model; batch first, as the ONNX model takes them) and integer class labels
(``labels``, ``label`` or ``y``, shape ``(N,)``). The scores are the model's first output, one vector of
class scores per sample. Ties rank by class index, as ``argmax`` does: a label is in the top k
when fewer than k classes score higher than it or score the same with a lower index.
"""
from __future__ import annotations

import time

import numpy as np
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ..children import activity
from ..files import check_output_file, write_json
from ..flow import load_graph
from ..golden.host import batches, fixed_batch
from ..ir import Graph, ModelError
from ..quant.calib import check_feeds, load_npz
from ..quant.convert import flavour
from ..target import resolve_target
from . import UsageError
from ._options import CLI_LABELS, add_host_option, design_of, host_note

HELP = "top-1/top-5 accuracy of the integer model (golden, bit-exact with the hardware) on a labelled .npz"

#: keys the inputs of a one-input model and the labels may have in the ``.npz``
INPUT_KEYS = ("input", "x")
LABEL_KEYS = ("labels", "label", "y")
#: samples per golden / onnxruntime run (progress is updated after each)
CHUNK = 256
#: top-k reported besides top-1 when the model has at least ``TOP_K_CLASSES`` classes
TOP_K = 5
TOP_K_CLASSES = 10


def configure(parser):
    parser.add_argument("model", help="ONNX model (quantized, or float with --calib)")
    parser.add_argument("--data", required=True, metavar="LABELLED.npz",
                        help="inputs (keyed by the model's input name, or 'input'/'x') and integer labels "
                             "('labels'/'label'/'y'), batch first")
    parser.add_argument("--calib", metavar="C.npz",
                        help="calibration data to quantize a float model")
    parser.add_argument("--board", default="ulx3s", help="board the design is compiled for (default ulx3s)")
    add_host_option(parser)
    parser.add_argument("--limit", type=int, metavar="N", help="use only the first N samples")
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON to FILE")


# ---------------------------------------------------------------------------------------- data

def _pick(arrays: dict, keys, path: str, what: str):
    for k in keys:
        if k in arrays:
            return k
    raise UsageError(f"--data {path!r} has no {what} (looked for {', '.join(map(repr, keys))}; "
                     f"has {', '.join(map(repr, sorted(arrays))) or 'nothing'})")


def load_labelled(path: str, graph: Graph, limit: int | None) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The model's input arrays (checked against its inputs) and the int64 labels of ``path``."""
    arrays = load_npz(path, "--data")
    names = graph.input_names
    if len(names) == 1:
        key = _pick(arrays, (names[0],) + tuple(k for k in INPUT_KEYS if k != names[0]), path,
                    f"inputs for the model input {names[0]!r}")
        feeds = {names[0]: arrays[key]}
    else:
        missing = [n for n in names if n not in arrays]
        if missing:
            raise UsageError(f"--data {path!r} has no array for the model input(s) {', '.join(map(repr, missing))}")
        feeds = {n: arrays[n] for n in names}
    lkey = _pick(arrays, LABEL_KEYS, path, "labels")
    labels = arrays[lkey]
    if labels.dtype.kind not in "iu":
        raise UsageError(f"--data {path!r}: labels {lkey!r} must be integer class indices, not {labels.dtype.name}")
    if labels.ndim == 2 and labels.shape[1] == 1:
        labels = labels[:, 0]
    if labels.ndim != 1:
        raise UsageError(f"--data {path!r}: labels {lkey!r} must have shape (N,), not {labels.shape!r}")
    if limit is not None:
        feeds = {k: v[:limit] for k, v in feeds.items()}
        labels = labels[:limit]
    feeds = check_feeds(feeds, graph, "--data")   # rank, fixed dims, dtype, finite values, samples
    n = len(next(iter(feeds.values())))
    if len(labels) != n:
        raise UsageError(f"--data {path!r}: {len(labels)} labels for {n} input samples")
    return feeds, labels.astype(np.int64)


# -------------------------------------------------------------------------------------- scoring

def class_scores(y: np.ndarray, name: str, n: int) -> np.ndarray:
    """``(N, classes)`` scores of the output ``name``: one vector per sample (unit dims dropped)."""
    y = np.asarray(y)
    if y.ndim < 1 or y.shape[0] != n:
        raise ModelError(f"output {name!r} has shape {y.shape!r}, not one row of class scores per sample")
    per = [d for d in y.shape[1:] if d != 1]
    if len(per) != 1 or per[0] < 2:
        raise ModelError(f"output {name!r} has shape {y.shape!r} per batch; accuracy needs a vector of "
                         "at least 2 class scores per sample")
    return y.reshape(n, per[0])


def label_ranks(scores: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Rank of each label among its row's scores (0 = top-1): classes scoring higher, plus those
    scoring the same with a lower index (``argmax`` order)."""
    s = np.asarray(scores, dtype=np.float64)
    mine = s[np.arange(len(s)), labels][:, None]
    before = np.arange(s.shape[1])[None, :] < labels[:, None]
    return np.sum((s > mine) | ((s == mine) & before), axis=1)


def _figures(ranks: np.ndarray, classes: int, seconds: float) -> dict:
    n = len(ranks)
    fig = {"samples": n, "top1": float(np.mean(ranks < 1)), "correct1": int(np.sum(ranks < 1)),
           "seconds": round(seconds, 3), "samples_per_s": round(n / seconds, 1) if seconds > 0 else None}
    if classes >= TOP_K_CLASSES:
        fig.update({f"top{TOP_K}": float(np.mean(ranks < TOP_K)), f"correct{TOP_K}": int(np.sum(ranks < TOP_K))})
    return fig


def _line(what: str, fig: dict) -> str:
    n = fig["samples"]
    parts = [f"top-1 {100 * fig['top1']:.2f}% ({fig['correct1']}/{n})"]
    if f"top{TOP_K}" in fig:
        parts.append(f"top-{TOP_K} {100 * fig[f'top{TOP_K}']:.2f}% ({fig[f'correct{TOP_K}']}/{n})")
    rate = f"{fig['samples_per_s']:,.0f} samples/s" if fig["samples_per_s"] else "-"
    return f"{what}: {', '.join(parts)}; {fig['seconds']:.1f} s ({rate})"


# ------------------------------------------------------------------------------------- running

#: seconds between the plain progress lines printed when stderr is not a terminal
PLAIN_EVERY = 15.0


def _progress(con: Console, title: str):
    return Progress(TextColumn(title), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[rate]}"),
                    TimeElapsedColumn(), console=con, transient=True, disable=not con.is_terminal)


def _run_chunks(con: Console, title: str, n: int, step, first=None):
    """``step(start, stop)`` over ``n`` samples in chunks of :data:`CHUNK` with progress in
    samples/s (a bar on a terminal, else a line every :data:`PLAIN_EVERY` seconds);
    ``first(result)`` checks the first chunk's result before the rest run."""
    out = []
    t0 = last = time.perf_counter()
    with _progress(con, title) as bar:
        task = bar.add_task(title, total=n, rate="")
        for start in range(0, n, CHUNK):
            out.append(step(start, min(n, start + CHUNK)))
            if first is not None and start == 0:
                first(out[0])
            done, now = min(n, start + CHUNK), time.perf_counter()
            rate = f"{done / (now - t0):,.0f} samples/s"
            bar.update(task, completed=done, rate=rate)
            if not con.is_terminal and now - last >= PLAIN_EVERY and done < n:
                con.print(f"{title}: {done:,}/{n:,} samples, {rate}")
                last = now
    return out, time.perf_counter() - t0


def _ort_session(model: str, graph: Graph):
    """An onnxruntime session of the ONNX model as given, or the reason it cannot run it.

    Float models run with onnxruntime's optimizations; quantized ones without them
    (``ORT_DISABLE_ALL``: DequantizeLinear -> float op -> QuantizeLinear, as the spec computes,
    rather than its inexact fused integer kernels)."""
    try:
        import onnxruntime as ort
    except Exception as exc:  # noqa: BLE001 - a broken install is a reason, not a crash
        return None, f"onnxruntime is not usable here ({type(exc).__name__}: {exc})"
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    if flavour(graph) != "float":
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    try:
        return ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"]), None
    except Exception as exc:  # noqa: BLE001 - custom domains, unsupported opsets, ...
        return None, " ".join(str(exc).split())[:300]


def _float_scores(session, graph: Graph, feeds, output: str, n: int, con: Console):
    fixed = fixed_batch(graph)

    def step(start, stop):
        part = {k: v[start:stop] for k, v in feeds.items()}
        if fixed and fixed != stop - start:
            rows = [session.run([output], c)[0][:real] for c, real in batches(part, fixed, fill=True)]
            return np.concatenate(rows)
        return session.run([output], part)[0]

    return _run_chunks(con, "float model (onnxruntime)", n, step)


def static_classes(graph: Graph, output: str) -> int | None:
    """The number of class scores the model's output declares per sample, when its shape says
    (every dim after the batch a number), else ``None``."""
    vi = next(v for v in graph.outputs if v.name == output)
    if vi.shape is None or len(vi.shape) < 2 or not all(isinstance(d, int) and d > 0 for d in vi.shape[1:]):
        return None
    per = [d for d in vi.shape[1:] if d != 1]
    if len(per) != 1 or per[0] < 2:
        raise ModelError(f"output {output!r} has shape {list(vi.shape)!r}; accuracy needs a vector of at least "
                         "2 class scores per sample")
    return per[0]


def check_labels(labels: np.ndarray, classes: int, path: str) -> None:
    bad = (labels < 0) | (labels >= classes)
    if np.any(bad):
        i = int(np.argmax(bad))
        raise UsageError(f"--data {path!r}: label {int(labels[i])} of sample {i} is outside the "
                         f"model's {classes} classes [0, {classes - 1}]")


def run(args) -> int:
    con = Console(stderr=True, highlight=False)
    if args.limit is not None and args.limit < 1:
        raise UsageError(f"--limit must be at least 1, not {args.limit!r}")
    if args.json is not None:
        check_output_file(args.json, "--json")
    target = resolve_target(args.board, labels=CLI_LABELS)
    graph = load_graph(args.model)
    feeds, labels = load_labelled(args.data, graph, args.limit)   # checked before the compile
    n = len(labels)
    output = graph.output_names[0]
    classes = static_classes(graph, output)
    if classes is not None:
        check_labels(labels, classes, args.data)
    design = design_of(args, target, graph)
    if host_note(design):
        con.print(host_note(design))
    if len(graph.output_names) > 1:
        con.print(f"scoring the model's first output {output!r} (of {', '.join(map(repr, graph.output_names))})")

    def check(first):   # a model whose output shape is not declared: from the first results
        check_labels(labels, class_scores(first, output, len(first)).shape[1], args.data)

    def golden(start, stop):
        return design.golden({k: v[start:stop] for k, v in feeds.items()})[output]

    with activity("the integer model"):
        parts, secs = _run_chunks(con, "integer model (golden)", n, golden, first=check)
    scores = class_scores(np.concatenate(parts), output, n)
    classes = scores.shape[1]
    ranks = label_ranks(scores, labels)
    result = {"model": str(args.model), "data": str(args.data), "samples": n, "classes": classes,
              "output": output, "integer": _figures(ranks, classes, secs)}
    print(f"{n} samples, {classes} classes (output {output!r})")
    print(_line("integer model (golden, bit-exact with the hardware)", result["integer"]))

    session, reason = _ort_session(str(args.model), graph)
    if session is not None:
        try:
            with activity("onnxruntime"):
                parts, fsecs = _float_scores(session, graph, feeds, output, n, con)
            fscores = class_scores(np.concatenate(parts), output, n)
        except ModelError:
            raise
        except Exception as exc:  # noqa: BLE001 - onnxruntime's run errors are a reason, not a crash
            session, reason = None, " ".join(str(exc).split())[:300]
    if session is not None:
        result["float"] = _figures(label_ranks(fscores, labels), classes, fsecs)
        agree = float(np.mean(np.argmax(fscores, axis=1) == np.argmax(scores, axis=1)))
        result["float"]["top1_agreement"] = agree
        what = ("float model (onnxruntime)" if flavour(graph) == "float"
                else "ONNX model as given (onnxruntime, optimizations off)")
        print(_line(what, result["float"]))
        print(f"top-1 predictions of the two agree on {100 * agree:.2f}% of samples")
    else:
        result["float"] = {"error": reason}
        print(f"float model: onnxruntime cannot run it ({reason})")
    if args.json:
        write_json(args.json, result, option="--json")
        print(f"wrote {args.json}")
    return 0
