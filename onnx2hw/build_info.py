"""``BUILD_DIR/accelerator.json``: what the host needs to talk to a built accelerator.

::

    {"pipeline": Pipeline.describe(),
     "quant": {"input": {...}, "output": {...},       # host-side float <-> int
               # a model with several inputs or outputs: "inputs": [{...}, ...], "outputs": [{...}, ...]
               # instead, in the order the link carries them (see quant_records)
               "tail": null | {"onnx": base64 ModelProto, "outputs": [names]}},  # the host tail
     "link": {"in_bytes", "out_bytes", "max_batch", "buffer_bytes"},   # derived, informative
     "board": name, "clock_hz": ..., "baud": ...,
     "source": {"model": path, "calib": path | null,    # to rebuild the design for simulation
                "host": [nodes moved to the host]},
     "selftest": {"samples": N, "source": "where the inputs came from",   # synth --selftest only
                  "inputs": base64,      # the self-test memory: N inputs in link coding, stream order
                  "outputs": base64,     # the golden executor's outputs for them, in link coding
                  "output_crc32": CRC-32 of "outputs" (what each replayed pass must give)},
     "build": {"complete": true, "bitstream": "NAME.bit",  # written by a finished synth only:
               "sha256": {file: hex, ...}}}              # the bitstream and design files

A build directory is published only when complete: :func:`begin_build` puts the marker file
:data:`INCOMPLETE` into it before anything else is written, the build writes every file
atomically, ``accelerator.json`` is written last with the SHA-256 of the bitstream and of the
design files, and :func:`finish_build` removes the marker. :func:`read_build_info` (so ``onnx2hw
run``, :class:`onnx2hw.driver.Accelerator` and :func:`onnx2hw.open_build`) refuses a directory
that still has the marker (synth was interrupted, or is running) or whose files do not match
their recorded hashes (a missing bitstream, or one of another design). A description without the
``build`` record (written by :func:`write_build_info` alone, for simulation) has no files to check.
"""
from __future__ import annotations

import base64
import binascii
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .files import fsync_dir, sha256_file, write_json, write_text
from .flow import link_format_of
from .golden.integer import execute_integer
from .ir import Graph, load
from .ir.errors import ModelError
from .ir.save import to_model
from .layers import PRE_OPS, InputQuant, IntType, OutputDequant
from .protocol import LinkFormat, crc32, link_format
from .sim.model_sim import input_feeds

__all__ = ["FILENAME", "INCOMPLETE", "build_info", "write_build_info", "read_build_info", "begin_build",
           "finish_build", "check_build_files", "host_converters", "host_tail", "quant_records", "selftest_record",
           "SelfTestData", "selftest_data"]

FILENAME = "accelerator.json"
#: marker file of a build directory that synth has not finished
INCOMPLETE = ".onnx2hw-incomplete"
VERSION = 1


def _list(v):
    a = np.asarray(v)
    return a.tolist() if a.ndim else a.item()


@dataclass(frozen=True)
class SelfTestData:
    """The self-test memory of a build: ``samples`` inputs in link coding (``inputs``, as the
    on-chip memory holds them) and the golden executor's outputs for them (``outputs``, link
    coding, CRC-32 ``output_crc32``); ``source`` says where the inputs came from."""

    samples: int
    source: str
    inputs: bytes
    outputs: bytes

    @property
    def output_crc32(self) -> int:
        return crc32(self.outputs)


def selftest_record(pipeline, x, *, source: str) -> SelfTestData:
    """The self-test memory for integer inputs ``x`` ((N, *input shape), NHWC, as the host's
    quantizer makes them; a dict by tensor name for several inputs) of ``pipeline``, with the
    outputs the golden executor computes for them."""
    g = pipeline.graph
    feeds = input_feeds(g, x)
    if any(np.ndim(v) < 1 or len(v) < 1 for v in feeds.values()):
        raise ValueError("a self-test needs at least one input")
    n = len(next(iter(feeds.values())))
    fmt = link_format_of(pipeline)
    y = execute_integer(g, feeds)
    return SelfTestData(n, str(source),
                        fmt.encode_tensors([feeds[s.name] for s in g.input_specs],
                                           [s.dtype.bipolar for s in g.input_specs]),
                        fmt.encode_output_tensors([y[s.name] for s in g.output_specs],
                                                  [s.dtype.bipolar for s in g.output_specs]))


def selftest_data(info: dict) -> SelfTestData | None:
    """The self-test memory recorded in a build description (``None`` for a build without one);
    ``ValueError`` if the record does not fit the description's link layout."""
    rec = info.get("selftest")
    if rec is None:
        return None
    fmt: LinkFormat = link_format(info["pipeline"])
    n = rec["samples"]
    if not (isinstance(n, int) and not isinstance(n, bool) and n >= 1):
        raise ValueError(f"self-test samples {n!r} is not a positive int")
    data = SelfTestData(n, str(rec.get("source", "")), base64.b64decode(rec["inputs"], validate=True),
                        base64.b64decode(rec["outputs"], validate=True))
    if len(data.inputs) != n * fmt.in_bytes or len(data.outputs) != n * fmt.out_bytes:
        raise ValueError(f"self-test memory of {len(data.inputs)} input and {len(data.outputs)} output bytes "
                         f"does not hold {n} inferences")
    if rec.get("output_crc32") != data.output_crc32:
        raise ValueError("self-test output CRC does not match its outputs")
    return data


def build_info(pipeline, board, clock_hz, baud, *, model=None, calib=None, host=(), selftest=None) -> dict:
    """The JSON-ready build description of a compiled :class:`~onnx2hw.dataflow.Pipeline` (its
    integer graph included); ``board``: a name or a :class:`boards.Board`; ``selftest``: the
    :class:`SelfTestData` of a self-test build."""
    g, p = pipeline.graph, pipeline
    describe = p.describe()
    fmt = link_format_of(p)
    ins = [_input_record(q, spec) for q, spec in zip(g.inputs, g.input_specs)]
    outs = [_output_record(d, spec) for d, spec in zip(g.outputs, g.output_specs)]
    quant = {"input": ins[0]} if len(ins) == 1 else {"inputs": ins}
    quant.update({"output": outs[0]} if len(outs) == 1 else {"outputs": outs})
    quant["tail"] = None if g.tail is None else {
        "onnx": base64.b64encode(to_model(g.tail).SerializeToString()).decode("ascii"),
        "outputs": list(g.tail.output_names)}
    info = {
        "version": VERSION,
        "pipeline": describe,
        "quant": quant,
        "link": {"in_bytes": fmt.in_bytes, "out_bytes": fmt.out_bytes, "max_batch": fmt.max_batch,
                 "buffer_bytes": fmt.buffer_bytes},
        "board": str(getattr(board, "name", board)),
        "clock_hz": float(clock_hz),
        "baud": float(baud),
        "source": {"model": None if model is None else str(Path(model).resolve()),
                   "calib": None if calib is None else str(Path(calib).resolve()),
                   "host": list(host)},
    }
    if selftest is not None:       # only in a self-test build's description
        info["selftest"] = {"samples": selftest.samples, "source": selftest.source,
                            "inputs": base64.b64encode(selftest.inputs).decode("ascii"),
                            "outputs": base64.b64encode(selftest.outputs).decode("ascii"),
                            "output_crc32": selftest.output_crc32}
    return info


def _input_record(q: InputQuant, spec) -> dict:
    """The host quantizer of one model input (:func:`host_converters` reads it back)."""
    return {"name": q.name, "tensor": spec.name, "scale": float(q.scale),
            "zero_point": int(q.zero_point), "bits": spec.dtype.bits,
            "signed": bool(spec.dtype.signed), "bipolar": bool(spec.dtype.bipolar),
            "nchw_to_nhwc": bool(q.nchw_to_nhwc), "shape": list(spec.shape),
            "pre": [[op, c] for op, c in q.pre],
            "model_shape": None if q.model_shape is None else list(q.model_shape),
            "narrow": bool(q.narrow), "integer_input": bool(q.integer_input)}


def _output_record(d: OutputDequant, spec) -> dict:
    """The host dequantizer of one hardware output (:func:`host_converters` reads it back)."""
    return {"name": d.name, "tensor": spec.name, "scale": _list(d.scale),
            "bipolar": bool(spec.dtype.bipolar),
            "zero_point": _list(d.zero_point), "nhwc_to_nchw": bool(d.nhwc_to_nchw),
            "onnx_dtype": int(d.onnx_dtype), "integer_output": bool(d.integer_output),
            "shape": None if d.shape is None else [int(s) for s in d.shape],
            "spec_shape": list(spec.shape), "bias": _list(d.bias)}


def quant_records(quant: dict, side: str) -> list[dict]:
    """The records of a build description's ``quant`` for ``side`` ``"input"`` or
    ``"output"``, in link order: the one record of a one-input (one-output) model, or its list."""
    many = quant.get(side + "s")
    if many is not None:
        if not isinstance(many, list) or not many:
            raise ValueError(f"{side}s must be a non-empty list, not {many!r}")
        return many
    return [quant[side]]


def write_build_info(build_dir, pipeline, board, clock_hz, baud, *, model=None, calib=None, host=(),
                     files=(), bitstream=None, selftest=None) -> Path:
    """Write ``BUILD_DIR/accelerator.json`` (atomically); returns its path.

    ``model``/``calib`` (the files ``pipeline`` was compiled from) let the simulated transport rebuild
    the same design later; the folding is taken from the pipeline itself. ``files`` (names in
    ``build_dir``, ``bitstream`` among them) are hashed into the ``build`` record that marks a
    finished build; without them no record is written.
    """
    d = Path(build_dir)
    d.mkdir(parents=True, exist_ok=True)
    info = build_info(pipeline, board, clock_hz, baud, model=model, calib=calib, host=host, selftest=selftest)
    if files or bitstream:
        names = list(dict.fromkeys([*([bitstream] if bitstream else []), *files]))
        info["build"] = {"complete": True, "bitstream": bitstream,
                         "sha256": {n: sha256_file(d / n) for n in names}}
    return write_json(d / FILENAME, info)


def begin_build(build_dir) -> Path:
    """Mark ``build_dir`` (created if needed) as being built; returns the marker's path. Until
    :func:`finish_build`, :func:`read_build_info` refuses the directory."""
    d = Path(build_dir)
    d.mkdir(parents=True, exist_ok=True)
    return write_text(d / INCOMPLETE, f"onnx2hw synth started at {time.strftime('%Y-%m-%d %H:%M:%S')} "
                                      f"(process {os.getpid()}); this build is incomplete until it finishes\n")


def finish_build(build_dir) -> None:
    """Publish ``build_dir``: remove the marker :func:`begin_build` put there."""
    d = Path(build_dir)
    (d / INCOMPLETE).unlink(missing_ok=True)
    fsync_dir(d)


def _incomplete(build_dir, why: str) -> ModelError:
    return ModelError(f"{str(build_dir)} is incomplete: {why}; run synth again")


def check_build_files(build_dir, info: dict) -> None:
    """``ModelError`` unless the files of ``info``'s ``build`` record are in ``build_dir`` with
    the recorded contents (nothing to check without a record)."""
    record = info.get("build")
    if record is None:
        return
    try:
        hashes = dict(record["sha256"])
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in hashes.items()):
            raise TypeError("file names and hashes must be strings")
    except (KeyError, TypeError, ValueError) as e:
        raise ModelError(f"{str(Path(build_dir) / FILENAME)!r}: bad build record ({e!r})") from None
    d = Path(build_dir)
    for name, want in hashes.items():
        f = d / name
        if Path(name).is_absolute() or ".." in Path(name).parts:
            raise ModelError(f"{str(d / FILENAME)!r}: bad file name {name!r} in the build record")
        try:
            got = sha256_file(f)
        except FileNotFoundError:
            raise _incomplete(build_dir, f"{name} is missing") from None
        except OSError as e:
            raise ModelError(f"cannot read {str(f)!r}: {e.strerror or e}") from None
        if got != want:
            what = "the bitstream " if name == record.get("bitstream") else ""
            raise ModelError(f"{str(build_dir)}: {what}{name} does not belong to this build (its SHA-256 differs "
                             f"from the one in {FILENAME}); run synth again")


def read_build_info(build_dir) -> dict:
    """Read and check ``BUILD_DIR/accelerator.json`` (``ModelError`` naming what is wrong)."""
    path = Path(build_dir)
    if path.is_dir():
        path = path / FILENAME
    if (path.parent / INCOMPLETE).exists():
        raise _incomplete(path.parent, "synth was interrupted (or is still running)")
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
        _check_quant(info["quant"])
        host_converters(info["quant"])
        host_tail(info["quant"])
        selftest_data(info)
    except (ValueError, KeyError, TypeError, binascii.Error) as e:
        raise ModelError(f"{str(path)!r}: bad build description ({e})") from None
    for key in ("clock_hz", "baud"):
        if not isinstance(info[key], (int, float)) or info[key] <= 0:
            raise ModelError(f"{str(path)!r}: {key} must be a positive number, not {info[key]!r}")
    check_build_files(path.parent, info)
    return info


def _check_quant(quant) -> None:
    """The host converters' parameters: positive finite scales, integer zero points and widths."""
    for side in ("input", "output"):
        for q in quant_records(quant, side):
            scale = np.asarray(q["scale"], dtype=np.float64)
            if scale.size == 0 or not np.all(np.isfinite(scale)) or np.any(scale <= 0):
                raise ValueError(f"{side} scale {q['scale']!r} is not positive and finite")
            zp = np.asarray(q["zero_point"])
            if zp.dtype.kind not in "iu":
                raise ValueError(f"{side} zero point {q['zero_point']!r} is not an integer")
    for qi in quant_records(quant, "input"):
        if not (isinstance(qi["bits"], int) and 1 <= qi["bits"] <= 16):
            raise ValueError(f"input bits {qi['bits']!r} is not 1..16")
        for step in qi.get("pre", []):
            if not (isinstance(step, list) and len(step) == 2 and step[0] in PRE_OPS
                    and isinstance(step[1], (int, float)) and np.isfinite(step[1]) and (step[0] != "div" or step[1])):
                raise ValueError(f"input scaling step {step!r} is not [op, finite number]")
        shape = qi.get("shape")
        if not (isinstance(shape, list) and shape and all(isinstance(d, int) and d >= 1 for d in shape)):
            raise ValueError(f"input shape {shape!r} is not a list of positive integers")


def host_converters(quant: dict) -> tuple[list[InputQuant], list[OutputDequant]]:
    """The host's input quantizers and output dequantizers of a build description's ``quant``
    record, in link order (the same converters the golden flow uses)."""
    iqs, ods = [], []
    for qi in quant_records(quant, "input"):
        dtype = IntType(1, False, bipolar=True) if qi["bipolar"] else IntType(qi["bits"], qi["signed"])
        iqs.append(InputQuant(qi["name"], qi["scale"], qi["zero_point"], dtype, qi["nchw_to_nhwc"],
                              tuple(tuple(step) for step in qi.get("pre", [])),
                              None if not qi.get("model_shape") else tuple(qi["model_shape"]),
                              bool(qi.get("narrow", False)), integer_input=bool(qi.get("integer_input", False))))
    for qo in quant_records(quant, "output"):
        ods.append(OutputDequant(qo["name"], np.asarray(qo["scale"]), np.asarray(qo["zero_point"]), qo["nhwc_to_nchw"],
                                 qo["onnx_dtype"], qo["integer_output"],
                                 None if qo["shape"] is None else tuple(qo["shape"]),
                                 np.asarray(qo.get("bias", 0.0), np.float64)))
    return iqs, ods


def host_tail(quant: dict) -> Graph | None:
    """The host tail of a build description's ``quant`` record (``None`` when the hardware
    computes the model's outputs); ``ValueError`` when it is not a graph reading hardware outputs."""
    t = quant.get("tail")
    if t is None:
        return None
    try:
        graph = load(base64.b64decode(t["onnx"], validate=True))
    except ModelError as e:
        raise ValueError(f"host tail: {e}") from None
    names = [q["name"] for q in quant_records(quant, "output")]
    if not graph.input_names or not set(graph.input_names) <= set(names):
        raise ValueError(f"host tail reads {list(graph.input_names)!r}, not the hardware's outputs {names!r}")
    return graph
