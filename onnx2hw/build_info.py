"""``BUILD_DIR/accelerator.json``: what the host needs to talk to a built accelerator.

::

    {"pipeline": Pipeline.describe(),
     "quant": {"input": {...}, "output": {...}},      # host-side float <-> int
     "link": {"in_bytes", "out_bytes", "max_batch", "buffer_bytes"},   # derived, informative
     "board": name, "clock_hz": ..., "baud": ...,
     "source": {"model": path, "calib": path | null}}   # to rebuild the design for simulation
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from .flow import link_format_of
from .ir.errors import ModelError
from .protocol import link_format

__all__ = ["FILENAME", "build_info", "write_build_info", "read_build_info"]

FILENAME = "accelerator.json"
VERSION = 1


def _list(v):
    a = np.asarray(v)
    return a.tolist() if a.ndim else a.item()


def build_info(pipeline, board, clock_hz, baud, *, model=None, calib=None) -> dict:
    """The JSON-ready build description of a compiled :class:`~onnx2hw.dataflow.Pipeline` (its
    integer graph included); ``board``: a name or a :class:`boards.Board`."""
    g, p = pipeline.graph, pipeline
    q, spec = g.inputs[0], g.input_specs[0]
    d, ospec = g.outputs[0], g.output_specs[0]
    describe = p.describe()
    fmt = link_format_of(p)
    return {
        "version": VERSION,
        "pipeline": describe,
        "quant": {
            "input": {"name": q.name, "tensor": spec.name, "scale": float(q.scale),
                      "zero_point": int(q.zero_point), "bits": spec.dtype.bits,
                      "signed": bool(spec.dtype.signed), "bipolar": bool(spec.dtype.bipolar),
                      "nchw_to_nhwc": bool(q.nchw_to_nhwc), "shape": list(spec.shape)},
            "output": {"name": d.name, "tensor": ospec.name, "scale": _list(d.scale),
                       "zero_point": _list(d.zero_point), "nhwc_to_nchw": bool(d.nhwc_to_nchw),
                       "onnx_dtype": int(d.onnx_dtype), "integer_output": bool(d.integer_output),
                       "shape": None if d.shape is None else [int(s) for s in d.shape],
                       "spec_shape": list(ospec.shape)},
        },
        "link": {"in_bytes": fmt.in_bytes, "out_bytes": fmt.out_bytes, "max_batch": fmt.max_batch,
                 "buffer_bytes": fmt.buffer_bytes},
        "board": str(getattr(board, "name", board)),
        "clock_hz": float(clock_hz),
        "baud": float(baud),
        "source": {"model": None if model is None else str(Path(model).resolve()),
                   "calib": None if calib is None else str(Path(calib).resolve())},
    }


def write_build_info(build_dir, pipeline, board, clock_hz, baud, *, model=None, calib=None) -> Path:
    """Write ``BUILD_DIR/accelerator.json``; returns its path.

    ``model``/``calib`` (the files ``pipeline`` was compiled from) let the simulated transport rebuild
    the same design later; the folding is taken from the pipeline itself.
    """
    path = Path(build_dir) / FILENAME
    path.parent.mkdir(parents=True, exist_ok=True)
    info = build_info(pipeline, board, clock_hz, baud, model=model, calib=calib)
    path.write_text(json.dumps(info, indent=1) + "\n")
    return path


def read_build_info(build_dir) -> dict:
    """Read and check ``BUILD_DIR/accelerator.json`` (``ModelError`` naming what is wrong)."""
    path = Path(build_dir)
    if path.is_dir():
        path = path / FILENAME
    try:
        info = json.loads(path.read_text())
    except FileNotFoundError:
        raise ModelError(f"{str(build_dir)!r} is not a build directory: no {FILENAME} "
                         f"(run `onnx2hw synth` first)") from None
    except (OSError, json.JSONDecodeError) as e:
        raise ModelError(f"cannot read {str(path)!r}: {e}") from None
    if not isinstance(info, dict):
        raise ModelError(f"{str(path)!r}: not a build description")
    for key in ("pipeline", "quant", "clock_hz", "baud"):
        if key not in info:
            raise ModelError(f"{str(path)!r}: missing {key!r}")
    try:
        link_format(info["pipeline"])
        for side in ("input", "output"):
            info["quant"][side]["scale"]
    except (ValueError, KeyError, TypeError) as e:
        raise ModelError(f"{str(path)!r}: bad build description ({e})") from None
    for key in ("clock_hz", "baud"):
        if not isinstance(info[key], (int, float)) or info[key] <= 0:
            raise ModelError(f"{str(path)!r}: {key} must be a positive number, not {info[key]!r}")
    return info
