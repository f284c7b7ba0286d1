"""QONNX/FINN ``MultiThreshold(v, thresholds)``: ``y = out_scale * count(v >= T[c, :]) + out_bias``.

As QONNX's executor defines it: the channel axis ``c`` comes from ``data_layout`` (default by
rank: 2 -> ``NC``, 3 -> ``NWC``, 4 -> ``NCHW``; other ranks: axis 1); ``thresholds`` is
``(C, steps)`` or ``(1, steps)`` (one row for every channel), rows need not be sorted (each
threshold counts on its own). ``out_scale`` (default 1.0) and ``out_bias`` (default 0.0) are
float attributes; the result is float32.
"""
from __future__ import annotations

import numpy as np

from ...ir.errors import ModelError

__all__ = ["run"]

_LAYOUT_BY_RANK = {2: "NC", 3: "NWC", 4: "NCHW"}


def run(node, v, thresholds):
    v = np.asarray(v)
    t = np.asarray(thresholds)
    layout = node.attr("data_layout", "") or _LAYOUT_BY_RANK.get(v.ndim)
    if isinstance(layout, bytes):
        layout = layout.decode()
    cdim = layout.index("C") if layout and "C" in layout else 1
    if v.ndim < 2 or cdim >= v.ndim:
        raise ModelError(f"node {node.name!r} (MultiThreshold): input of rank {v.ndim} has no channel axis "
                         f"{cdim} (data_layout {layout!r})")
    if t.ndim != 2 or t.shape[0] not in (1, v.shape[cdim]):
        raise ModelError(f"node {node.name!r} (MultiThreshold): thresholds of shape {t.shape!r} do not match "
                         f"{v.shape[cdim]} channels")
    vm = np.moveaxis(v, cdim, -1)[..., None]
    count = np.count_nonzero(vm >= t, axis=-1).astype(v.dtype)
    y = float(node.attr("out_scale", 1.0)) * np.moveaxis(count, -1, cdim) + float(node.attr("out_bias", 0.0))
    return np.asarray(y, dtype=np.float32)
