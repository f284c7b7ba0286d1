"""BatchNormalization: ``y = scale * (x - mean) / sqrt(var + epsilon) + B`` over channel axis 1.

Opset >= 14 with ``training_mode=1`` normalizes with the batch statistics
(population variance) and also returns the updated running mean/variance
(``running = input * momentum + batch * (1 - momentum)``). The legacy training
outputs of opsets 6-13 (saved mean/variance) are not supported.
"""
from __future__ import annotations

import numpy as np

from ...ir.errors import UnsupportedError

__all__ = ["run"]


def _param(p, x):
    p = np.asarray(p)
    if p.ndim == 1:  # per channel
        return p.reshape((-1,) + (1,) * (x.ndim - 2))
    return p  # opset < 9 spatial=0: shape (C, D1, ...)


def _normalize(x, scale, b, mean, var, eps, cd):
    xs = x.astype(cd, copy=False)
    inv = 1.0 / np.sqrt(_param(var, x).astype(cd) + cd(eps))
    y = (xs - _param(mean, x).astype(cd)) * (_param(scale, x).astype(cd) * inv) + _param(b, x).astype(cd)
    return y.astype(x.dtype, copy=False)


def run(node, x, scale, b, mean, var):
    eps = float(node.attr("epsilon", 1e-5))
    cd = np.float64 if x.dtype == np.float64 else np.float32
    extra = [o for o in node.outputs[1:] if o]
    if node.since_version >= 14 and node.attr("training_mode", 0):
        axes = (0,) + tuple(range(2, x.ndim))
        xs = x.astype(cd, copy=False)
        bmean = xs.mean(axis=axes)
        bvar = xs.var(axis=axes)
        momentum = cd(node.attr("momentum", 0.9))
        y = _normalize(x, scale, b, bmean, bvar, eps, cd)
        run_mean = (np.asarray(mean, dtype=cd) * momentum + bmean * (1 - momentum)).astype(np.asarray(mean).dtype)
        run_var = (np.asarray(var, dtype=cd) * momentum + bvar * (1 - momentum)).astype(np.asarray(var).dtype)
        return y, run_mean, run_var
    if extra:
        raise UnsupportedError(f"node {node.name!r}: BatchNormalization training outputs {extra!r} "
                               f"are only supported in opset >= 14 with training_mode=1")
    return _normalize(x, scale, b, mean, var, eps, cd)
