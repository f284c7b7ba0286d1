"""QONNX ``Quant(x, scale, zeropt, bitwidth)`` (fake quantization, float in and out).

``q = round(clamp(x / scale + zeropt, min_int, max_int)); y = (q - zeropt) * scale``
(clamp *before* rounding, as QONNX does), with ``min_int``/``max_int`` from
``signed``/``narrow``/``bitwidth`` and ``rounding_mode`` as in
:func:`._quant_util.qonnx_round` (ROUND is half to even). A signed 1-bit Quant is
bipolar (``+1`` where ``x / scale + zeropt >= 0``, else ``-1``), as in QONNX. Arithmetic
follows NumPy promotion of the input types, like QONNX's own executor; the result
is float32. ``scale``/``zeropt``/``bitwidth`` broadcast against ``x``.
"""
from __future__ import annotations

import numpy as np

from ._quant_util import qonnx_bounds, qonnx_round

__all__ = ["run"]


def run(node, x, scale, zeropt, bitwidth):
    signed = bool(node.attr("signed", 1))
    narrow = bool(node.attr("narrow", 0))
    mode = node.attr("rounding_mode", "ROUND")
    y = x / scale + zeropt
    lo, hi = qonnx_bounds(signed, narrow, bitwidth)
    if signed and np.all(np.asarray(bitwidth) == 1):
        q = np.where(y >= 0.0, 1.0, -1.0).astype(y.dtype)
    else:
        q = qonnx_round(np.clip(y, lo.astype(y.dtype), hi.astype(y.dtype)), mode, node)
    return np.asarray((q - zeropt) * scale, dtype=np.float32)
