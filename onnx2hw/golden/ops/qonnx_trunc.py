"""QONNX ``Trunc``: drop low bits of a quantized value (float in and out).

The version is taken from the number of inputs, since QONNX models do not import
the domain's opset version consistently:

* 5 inputs ``(x, scale, zeropt, in_bitwidth, out_bitwidth)`` — version 1:
  ``q = rnd(round(x / scale + zeropt) / 2^(in_bitwidth - out_bitwidth))``,
  ``y = (q - zeropt) * scale``; no clamp.
* 6 inputs ``(x, scale, zeropt, in_bitwidth, out_scale, out_bitwidth)`` (version 2
  doc) or 7 inputs ``(..., out_scale, out_zeropt, out_bitwidth)`` (QONNX's executor,
  which ignores ``out_zeropt``): ``t = 2^round(log2(out_scale / scale))``,
  ``q = rnd(clamp(round(x / scale + zeropt) / t, min_int, max_int))`` with the
  bounds of ``signed``/``narrow``/``out_bitwidth``, ``y = (q - zeropt / t) * out_scale``.

``round`` is half to even; ``rnd`` is ``rounding_mode`` (default FLOOR).
"""
from __future__ import annotations

import numpy as np

from ...ir.errors import ModelError
from ._quant_util import qonnx_bounds, qonnx_round

__all__ = ["run"]


def run(node, x, scale, zeropt, in_bitwidth, *rest):
    mode = node.attr("rounding_mode", "FLOOR")
    y = np.round(x / scale + zeropt)
    if len(rest) == 1:  # version 1
        (out_bitwidth,) = rest
        t = 2.0 ** (np.asarray(in_bitwidth, dtype=np.float64) - np.asarray(out_bitwidth, dtype=np.float64))
        q = qonnx_round(y / t.astype(y.dtype), mode, node)
        return np.asarray((q - zeropt) * scale, dtype=np.float32)
    if len(rest) == 2:
        out_scale, out_bitwidth = rest
    elif len(rest) == 3:
        out_scale, _out_zeropt, out_bitwidth = rest
    else:
        raise ModelError(f"node {node.name!r}: Trunc takes 5, 6 or 7 inputs, not {4 + len(rest)}")
    signed = bool(node.attr("signed", 1))
    narrow = bool(node.attr("narrow", 0))
    t = 2.0 ** np.round(np.log2(out_scale / scale))
    y = y / t
    lo, hi = qonnx_bounds(signed, narrow, out_bitwidth)
    q = qonnx_round(np.clip(y, lo.astype(y.dtype), hi.astype(y.dtype)), mode, node)
    return np.asarray((q - zeropt / t) * out_scale, dtype=np.float32)
