"""QONNX ``BipolarQuant(x, scale)``: ``y = (+1 if x >= 0 else -1) * scale`` as float32."""
from __future__ import annotations

import numpy as np

__all__ = ["run"]


def run(node, x, scale):
    return np.asarray(np.where(x >= 0.0, 1.0, -1.0).astype(x.dtype) * scale, dtype=np.float32)
