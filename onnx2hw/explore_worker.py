"""The child process of one task (see :mod:`onnx2hw.explore.tasks`):
``python -m onnx2hw.explore_worker KIND SPEC.json``.

Kinds: ``build`` (compile one point and build it into its directory, as ``onnx2hw synth``
does), ``verify`` (simulate a slice of inputs bit for bit, as ``onnx2hw sim`` does) and
``accuracy`` (``onnx2hw accuracy`` itself). The result goes to the spec's ``result`` file as JSON:
``{"status": "ok", ...}`` or ``{"status": "failed", "error": ONE_LINE}``.

SIGTERM and SIGINT end the task as an exception (the tools are ended with their process groups,
the build directory stays marked incomplete); the kernel sends SIGTERM when the worker that
started this process dies.
"""
from __future__ import annotations

import ctypes
import json
import os
import signal
import sys
import time
import traceback
from pathlib import Path


from .children import Interrupted, SignalsRaise
from .cli import main as cli_main   # `onnx2hw accuracy` itself runs in this child process
from .design import MismatchError, compile as compile_design
from .files import write_json
from .flow import load_graph, load_npz

#: prctl option: a signal for this process when its parent dies (Linux)
PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """SIGTERM when the worker that started this process dies (Linux; elsewhere a no-op)."""
    if not sys.platform.startswith("linux"):
        return
    parent = os.getppid()
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:   # the worker died before the request
        raise Interrupted(signal.SIGTERM)


def _build(spec: dict) -> dict:
    out = Path(spec["out_dir"])
    t0 = time.perf_counter()
    design = compile_design(spec["model"], board=spec["board"], calib=spec["calib"], clock_mhz=spec["clock_mhz"],
                     target_cycles=spec["target_cycles"], host=tuple(spec["host"]))
    print(f"compiled: II {design.pipeline.ii} cycles, folding {dict(design.pipeline.folding)}", flush=True)
    design.build(out, seed=spec["seed"], pnr_tries=1, progress=lambda title: print(f"{title} ...", flush=True))
    # the point's record, last: its presence with this key says the build finished
    write_json(out / "explore.json", {"key": spec["key"], "params": spec["params"], "model": spec["model"],
                                      "calib": spec["calib"], "seconds": round(time.perf_counter() - t0, 2)})
    (out / "explore-failed.json").unlink(missing_ok=True)   # an earlier attempt's failure
    return {}


def _verify(spec: dict) -> dict:
    graph = load_graph(spec["model"])
    design = compile_design(graph, board=spec["board"], calib=spec["calib"], clock_mhz=spec["clock_mhz"],
                     folding=spec["folding"], target_fps=spec["target_fps"], host=tuple(spec["host"]))
    if spec.get("inputs"):
        feeds = load_npz(spec["inputs"], graph)
        a, b = spec["start"], spec["stop"]
        x = design.quantize({k: v[a:b] for k, v in feeds.items()})
    else:
        x = design.random_inputs(spec["count"], seed=spec["seed"])
    t0 = time.perf_counter()
    report = design.simulate_raw(x, simulator=spec["simulator"], seed=spec["seed"], timing=True)
    out = {"inferences": report.total, "exact": report.exact, "ii": report.ii, "latency": report.latency,
           "cycles": report.cycles, "sim_seconds": round(time.perf_counter() - t0, 2),
           "estimated_ii": design.pipeline.ii, "first_mismatch": None, "diverged_stage": None}
    if not report.ok:
        i, idx, want, got = report.first_mismatch
        out["first_mismatch"] = {"inference": int(i), "element": str(idx), "expected": str(want), "got": str(got),
                                 "message": str(MismatchError(report, "the design"))}
        out["diverged_stage"] = report.diverged_stage
    return out


def _accuracy(spec: dict) -> dict:
    argv = ["accuracy", spec["model"], "--data", spec["data"], "--board", spec["board"], "--json", spec["json"]]
    argv += ["--calib", spec["calib"]] if spec.get("calib") else []
    for h in spec.get("host", ()):
        argv += ["--host", h]
    rc = cli_main(argv)
    if rc != 0:
        raise ValueError(f"onnx2hw accuracy ended with exit status {rc}")
    return json.loads(Path(spec["json"]).read_text())


KINDS = {"build": _build, "verify": _verify, "accuracy": _accuracy}


def main(argv=None) -> int:
    kind, spec_path = (argv or sys.argv[1:])[:2]
    spec = json.loads(Path(spec_path).read_text())
    with SignalsRaise((signal.SIGINT, signal.SIGTERM)) as signals:
        try:
            try:
                _die_with_parent()
                result = {"status": "ok", **KINDS[kind](spec)}
            finally:
                signals.disarm()   # from here a signal is only recorded, and reported below
            if signals.received is not None:   # its exception was lost, or it came at the end
                raise Interrupted(signals.received)
        except KeyboardInterrupt as exc:
            signum = getattr(exc, "signum", signal.SIGINT)
            print(f"interrupted by {signal.Signals(signum).name}", file=sys.stderr)
            return 128 + signum
        except (ValueError, TypeError, OSError, AssertionError, RuntimeError) as exc:
            traceback.print_exc()
            text = str(exc) if not isinstance(exc, OSError) else f"{exc.filename or ''}: {exc.strerror or exc}".lstrip(": ")
            result = {"status": "failed", "error": " ".join(text.split()) or type(exc).__name__}
        except Exception as exc:  # noqa: BLE001 - a task's bug is its one-line failure, not the sweep's end
            traceback.print_exc()
            result = {"status": "failed", "error": f"internal error: {type(exc).__name__}: {' '.join(str(exc).split())}"}
    write_json(spec["result"], result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
