"""Gemm: ``alpha * A' @ B' + beta * C`` (A', B' optionally transposed; C optional,
unidirectionally broadcast to (M, N)). Floats are computed in float64 and rounded once to their
dtype (``_util.SUM_DTYPE``)."""
from __future__ import annotations

import numpy as np

from ...ir.errors import ModelError
from ._util import SUM_DTYPE

__all__ = ["run"]


def run(node, a, b, c=None):
    if a.ndim != 2 or b.ndim != 2:
        raise ModelError(f"node {node.name!r}: Gemm needs 2-D A and B, got {a.shape!r} and {b.shape!r}")
    dtype = a.dtype
    alpha = float(node.attr("alpha", 1.0))
    beta = float(node.attr("beta", 1.0))
    if node.attr("transA", 0):
        a = a.T
    if node.attr("transB", 0):
        b = b.T
    if a.shape[1] != b.shape[0]:
        raise ModelError(f"node {node.name!r}: Gemm inner dims differ: A' {a.shape!r}, B' {b.shape!r}")
    cd = dtype if dtype.kind in "iu" else SUM_DTYPE
    y = np.matmul(a.astype(cd, copy=False), b.astype(cd, copy=False))
    if alpha != 1.0:
        y = y * np.asarray(alpha, dtype=cd if cd.kind == "f" else np.float64)
    if c is not None and beta != 0.0:
        c = np.asarray(c).astype(cd, copy=False)
        try:
            shape = np.broadcast_shapes(c.shape, y.shape)
        except ValueError:
            shape = None
        if shape != y.shape:
            raise ModelError(f"node {node.name!r}: C of shape {c.shape!r} does not broadcast to {y.shape!r}")
        y = y + (c if beta == 1.0 else c * np.asarray(beta, dtype=cd if cd.kind == "f" else np.float64))
    return y.astype(dtype, copy=False)
