"""``onnx2hw run BUILD_DIR --port PORT --inputs X.npz [-o Y.npz]``: inferences on a built
accelerator over its host link (a board's serial port, or ``--port sim`` to simulate the
board top). ``onnx2hw run BUILD_DIR --port PORT --selftest [--passes R]``: the self-test of a
``synth --selftest`` build (compute throughput and latency measured on the board, outputs
checked against the golden executor)."""
from __future__ import annotations

import sys

import numpy as np

from ..build_info import host_converters, quant_records
from ..driver import Accelerator, LinkError, read_build_info
from ..files import save_npz
from ..quant.calib import InputSpec, check_arrays, load_npz
from . import UsageError

HELP = "run inferences on a built accelerator through its serial link (or --port sim)"


def configure(parser):
    parser.add_argument("build_dir", metavar="BUILD_DIR", help="directory written by `onnx2hw synth`")
    parser.add_argument("--port", required=True, help="serial port (e.g. /dev/ttyUSB0), or 'sim'")
    parser.add_argument("--inputs", metavar="X.npz",
                        help="inputs keyed by the model's input names (batch first); float unless --raw "
                             "(required unless --selftest)")
    parser.add_argument("--selftest", action="store_true",
                        help="run the board's self-test (a `synth --selftest` build): its stored inputs "
                             "replayed at full speed, cycles counted on the board, outputs checked against "
                             "the golden executor")
    parser.add_argument("--passes", type=int, default=64, metavar="R",
                        help="with --selftest: replays of the stored inputs (default 64)")
    parser.add_argument("--output", "-o", metavar="Y.npz",
                        help="write the outputs, keyed by output name (with --raw: the hardware's tensor names)")
    parser.add_argument("--baud", type=float, help="override the build's baud rate")
    parser.add_argument("--raw", action="store_true",
                        help="inputs and outputs are the hardware's integer tensors (NHWC)")
    parser.add_argument("--batch", type=int, help="inferences per frame (default: the board's maximum)")
    parser.add_argument("--retries", type=int, default=8, help="resends of a frame before giving up")
    parser.add_argument("--deadline", type=float, metavar="SECONDS",
                        help="time allowed for the whole run (default: from the baud rate and the "
                             "run's bytes, with a margin for retries)")


def _input_specs(info: dict, raw: bool) -> list[InputSpec]:
    """What ``--inputs`` holds, one entry per model input: the model's input (float, or the
    integer codes of a model that takes them), or with ``--raw`` the accelerator's integer
    input tensor (NHWC), keyed by the model's input name."""
    specs = []
    for q, quantizer in zip(quant_records(info["quant"], "input"), host_converters(info["quant"])[0]):
        t, shape = quantizer.dtype, tuple(q["shape"])
        if raw:
            specs.append(InputSpec(q["name"], ("N", *shape), (str(t), t.lo, t.hi)))
            continue
        if q.get("model_shape"):
            shape = tuple(q["model_shape"])
        elif q["nchw_to_nhwc"]:   # the model's image is NCHW; the hardware's tensor is (H, W, C)
            shape = (shape[2], shape[0], shape[1])
        specs.append(InputSpec(q["name"], ("N", *shape),
                               (str(t), *quantizer.clamp) if quantizer.integer_input else None))
    return specs


def _load_inputs(path: str, info: dict, raw: bool) -> dict[str, np.ndarray]:
    """The checked inputs in ``path`` by model input name (read and checked as every verb's
    data; other keys, such as the labels of a test set, are left alone): each array named
    after its model input (or its hardware tensor); a one-input model also takes the
    archive's only array."""
    specs = _input_specs(info, raw)
    arrays = load_npz(path, "input")
    records = quant_records(info["quant"], "input")
    for spec, q in zip(specs, records):
        if spec.name not in arrays and q["tensor"] in arrays:
            arrays[spec.name] = arrays.pop(q["tensor"])
    if len(specs) == 1 and specs[0].name not in arrays and len(arrays) == 1:
        arrays = {specs[0].name: next(iter(arrays.values()))}
    hint = "; integer tensors for the hardware need --raw" if any(s.codes is None for s in specs) else ""
    return check_arrays(arrays, specs, "raw input" if raw else "input", others=True, float_hint=hint)


def _selftest(args, info) -> int:
    if args.inputs or args.output or args.raw or args.batch is not None:
        raise UsageError("--selftest takes no --inputs, --output, --raw or --batch (the inputs are on the board)")
    if args.passes < 1 or args.passes > 0xFFFFFFFF:
        raise UsageError(f"--passes must be 1..{0xFFFFFFFF}, not {args.passes!r}")
    if "selftest" not in info:
        raise UsageError(f"{args.build_dir!r} has no self-test: build it with `onnx2hw synth MODEL --selftest`")
    try:
        with Accelerator.open(info, args.port, baud=args.baud, retries=args.retries, deadline=args.deadline) as acc:
            r = acc.selftest(args.passes)
    except LinkError as e:
        raise UsageError(str(e)) from None
    c = r.counts
    mhz = r.clock_hz / 1e6
    print(f"self-test: {r.samples} stored inputs ({r.source}) x {r.passes} passes = {c.inferences:,} inferences "
          f"in {c.cycles:,} cycles at {mhz:g} MHz")
    print(f"measured on the board: {r.inferences_per_s:,.1f} inferences/s ({r.cycles_per_inference:,.1f} cycles "
          f"per inference), latency {r.latency_us:,.2f} µs ({c.latency_cycles:,} cycles); link bound "
          f"{acc.link_bound:,.1f}/s; estimated II {info['pipeline'].get('ii_cycles', 0):,} cycles")
    if not r.ok:
        print(f"error: self-test FAILED: {'; '.join(r.problems)}", file=sys.stderr)
        return 1
    print(f"outputs: all {r.passes} passes match the golden executor (CRC-32 {r.expected_crc:#010x})")
    return 0


def run(args) -> int:
    info = read_build_info(args.build_dir)
    if args.selftest:
        return _selftest(args, info)
    if not args.inputs:
        raise UsageError("--inputs X.npz is required (or --selftest)")
    x = _load_inputs(args.inputs, info, args.raw)
    if args.raw:        # by the hardware's tensor names
        x = {q["tensor"]: x[q["name"]] for q in quant_records(info["quant"], "input")}
    x = next(iter(x.values())) if len(x) == 1 else x
    if args.batch is not None and args.batch < 1:
        raise UsageError(f"--batch must be at least 1, not {args.batch!r}")
    if args.retries < 0:
        raise UsageError(f"--retries must be non-negative, not {args.retries!r}")
    if args.baud is not None and not 0 < args.baud < float("inf"):
        raise UsageError(f"--baud must be a positive number, not {args.baud!r}")
    if args.deadline is not None and not 0 < args.deadline < float("inf"):
        raise UsageError(f"--deadline must be a positive number of seconds, not {args.deadline!r}")
    try:
        with Accelerator.open(info, args.port, baud=args.baud, batch=args.batch,
                              retries=args.retries, deadline=args.deadline) as acc:
            y = acc.run(x, raw=args.raw)
            s = acc.stats
    except LinkError as e:
        raise UsageError(str(e)) from None
    if not isinstance(y, dict):
        y = {quant_records(info["quant"], "output")[0]["tensor"] if args.raw else acc.output_names[0]: y}
    bound = acc.link_bound
    print(f"{s.inferences} inferences in {s.seconds:.4g} s ({s.inferences_per_s:,.1f}/s; link bound "
          f"{bound:,.1f}/s); {s.frames} frames, {s.resent} resent, {s.crc_errors} bad CRCs received, "
          f"{sum(s.board_errors.values())} errors reported by the board"
          + (f", {s.stale} stale frames of an earlier session dropped" if s.stale else ""))
    if args.output:
        save_npz(args.output, y)
        print(f"wrote {args.output}")
    else:
        np.set_printoptions(precision=4, suppress=True, threshold=200)
        for name, v in y.items():
            print(f"{name}:\n{v}")
    return 0
