"""``onnx2hw quantize MODEL --calib CALIB.npz -o OUT.onnx``: post-training quantization to QDQ ONNX.

Options are validated here (one ``error:`` line, exit 2, for a bad value); the work is
:func:`onnx2hw.quant.ptq.quantize`.
"""
from __future__ import annotations

import os

from ..children import activity
from ..files import check_output_file, write_bytes
from ..quant import ptq
from . import UsageError
from ._options import add_host_option

HELP = "post-training quantization of a float model to a QDQ ONNX model"


def configure(parser):
    parser.add_argument("model", help="float ONNX model file")
    parser.add_argument("--calib", required=True, metavar="CALIB.npz",
                        help="calibration data: .npz keyed by the model's input names, batch first")
    parser.add_argument("-o", "--output", required=True, metavar="OUT.onnx", help="QDQ model to write")
    parser.add_argument("--weight-bits", type=str, default="8", metavar="8|4", help="weight bit width (default 8)")
    parser.add_argument("--act-bits", type=str, default="8", metavar="8|4", help="activation bit width (default 8)")
    parser.add_argument("--per-channel", action="store_true", help="one weight scale per output channel")
    parser.add_argument("--method", default="minmax", metavar="minmax|percentile",
                        help="activation range calibration (default minmax; percentile = 99.99th)")
    add_host_option(parser)


def _bits(value: str, option: str, allowed) -> int:

    try:
        bits = int(value)
    except ValueError:
        bits = None
    if bits not in allowed:
        raise UsageError(f"{option} must be one of {', '.join(map(str, allowed))}, not {value!r}")
    return bits


def run(args) -> int:

    wbits = _bits(args.weight_bits, "--weight-bits", ptq.WEIGHT_BITS)
    abits = _bits(args.act_bits, "--act-bits", ptq.ACT_BITS)
    if args.method not in ptq.METHODS:
        raise UsageError(f"--method must be one of {', '.join(ptq.METHODS)}, not {args.method!r}")
    if not os.path.isfile(args.model):
        raise UsageError(f"model file {args.model!r} does not exist")
    check_output_file(args.output, "-o")
    if os.path.abspath(args.output) == os.path.abspath(args.model):
        raise UsageError(f"output {args.output!r} would overwrite the input model")
    calib = ptq.load_calibration(args.calib)
    with activity(f"quantizing {args.model} ({args.output} not written)"):
        model = ptq.quantize(args.model, calib, weight_bits=wbits, act_bits=abits,
                             per_channel=args.per_channel, method=args.method, progress=True,
                             host=tuple(args.host))
        # atomic: a failed write leaves an existing file as it was
        write_bytes(args.output, model.SerializeToString(), option="-o")
    layers = sum(1 for n in model.graph.node if n.op_type in ("Conv", "Gemm", "MatMul"))
    opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    n = next(iter(calib.values())).shape[0]
    print(f"wrote {args.output}: {layers} weight layers, int{wbits} weights "
          f"({'per channel' if args.per_channel else 'per tensor'}), {abits}-bit activations, "
          f"{args.method} calibration on {n} samples, opset {opset}")
    return 0
