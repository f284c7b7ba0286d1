"""DequantizeLinear: ``y = (x - x_zero_point) * x_scale``.

Per tensor, per axis (``axis``) or blocked (``block_size``, opset 21); ``x`` of any
integer type (int2/int4 as ml_dtypes arrays), int32, float8 or float4. Computed in
float32 (``x - zp`` is exact there for inputs of up to 24 bits) and returned in the
``output_dtype`` attribute's type (opset 23), else the scale's type.
"""
from __future__ import annotations

import numpy as np
from onnx import helper

from ...ir.errors import ModelError
from ._quant_util import axis_param, is_int

__all__ = ["run"]


def run(node, x, x_scale, x_zero_point=None):
    axis = int(node.attr("axis", 1))
    block_size = int(node.attr("block_size", 0))
    output_dtype = int(node.attr("output_dtype", 0))
    scale = np.asarray(x_scale)
    out = np.dtype(helper.tensor_dtype_to_np_dtype(output_dtype)) if output_dtype else scale.dtype
    cd = np.float64 if out == np.float64 else np.float32
    if x.ndim == 0 and (scale.size > 1):
        raise ModelError(f"node {node.name!r}: scalar input with per-axis scale of shape {scale.shape!r}")
    s = axis_param(scale, x.shape, axis, block_size, what="x_scale").astype(cd)
    if is_int(x.dtype):
        xi = x.astype(np.int64)
        if x_zero_point is not None:
            zp = axis_param(x_zero_point, x.shape, axis, block_size, what="x_zero_point")
            xi = xi - zp.astype(np.int64)
        dx = xi.astype(cd)
    else:  # float8 / float4: the zero point must be zero
        dx = x.astype(cd)
    return (dx * s).astype(out, copy=False)
