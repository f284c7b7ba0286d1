"""Resize with ``mode="nearest"`` (every coordinate_transformation_mode and nearest_mode of the
spec, scales or sizes, ``axes`` and ``keep_aspect_ratio_policy``). Linear and cubic modes are
refused with an error naming the node (the hardware path maps nearest only).

Resize-10 takes ``(X, scales)`` and maps coordinates as Upsample does (asymmetric; the floor
when upsampling). From opset 11 the inputs are ``(X, roi, scales, sizes)``, one of scales or
sizes given; the output length is ``floor(in * scale)`` from scales (as the ONNX reference) or
the size itself, in which case the scale used to map coordinates is ``size / in``.
"""
import numpy as np

from ._resize_util import COORD_MODES, resize_nearest
from ._util import as_array, fail, norm_axes

__all__ = ["run"]


def _str(node, name, default):
    v = node.attr(name, default)
    return v.decode() if isinstance(v, bytes) else str(v)


def run(node, x, roi=None, scales=None, sizes=None):
    x = as_array(x)
    mode = _str(node, "mode", "nearest")
    if mode != "nearest":
        raise fail(node, f"mode {mode!r} is not supported (only nearest)")
    if int(node.attr("antialias", 0) or 0) and mode != "nearest":
        raise fail(node, "antialias is not supported")
    if node.since_version < 11:
        scales, roi = roi, None
        coord, nearest = "asymmetric", "simple"
    else:
        coord = _str(node, "coordinate_transformation_mode", "half_pixel")
        nearest = _str(node, "nearest_mode", "round_prefer_floor")
        if coord not in COORD_MODES:
            raise fail(node, f"coordinate_transformation_mode {coord!r} is not defined")
    r = x.ndim
    axes = node.attr("axes")
    axes = list(range(r)) if axes is None else list(norm_axes(node, axes, r))
    scales = None if scales is None or np.asarray(scales).size == 0 else np.asarray(scales, np.float64).reshape(-1)
    sizes = None if sizes is None or np.asarray(sizes).size == 0 else np.asarray(sizes, np.int64).reshape(-1)
    if (scales is None) == (sizes is None):
        raise fail(node, "exactly one of scales and sizes must be given")
    full_scales = [1.0] * r
    out_shape = list(x.shape)
    if scales is not None:
        if scales.size != len(axes) or np.any(scales <= 0):
            raise fail(node, f"scales {scales.tolist()!r} must be {len(axes)} positive numbers")
        for a, s in zip(axes, scales):
            full_scales[a] = float(s)
            out_shape[a] = int(np.floor(x.shape[a] * float(s)))
    else:
        if sizes.size != len(axes) or np.any(sizes < 1):
            raise fail(node, f"sizes {sizes.tolist()!r} must be {len(axes)} positive integers")
        policy = _str(node, "keep_aspect_ratio_policy", "stretch")
        ratios = [int(n) / x.shape[a] for a, n in zip(axes, sizes)]
        if policy == "stretch":
            for a, n, s in zip(axes, sizes, ratios):
                full_scales[a], out_shape[a] = s, int(n)
        elif policy in ("not_larger", "not_smaller"):
            s = min(ratios) if policy == "not_larger" else max(ratios)
            for a in axes:
                full_scales[a], out_shape[a] = s, int(s * x.shape[a] + 0.5)
        else:
            raise fail(node, f"keep_aspect_ratio_policy {policy!r} is not defined")
    full_roi = None
    if coord == "tf_crop_and_resize":
        if roi is None or np.asarray(roi).size != 2 * len(axes):
            raise fail(node, "tf_crop_and_resize needs a roi of 2 values per resized axis")
        rv = np.asarray(roi, np.float64).reshape(-1)
        full_roi = [0.0] * r + [1.0] * r
        for i, a in enumerate(axes):
            full_roi[a], full_roi[r + a] = rv[i], rv[len(axes) + i]
    try:
        return resize_nearest(x, out_shape, full_scales, coord, nearest, full_roi,
                              float(node.attr("extrapolation_value", 0.0)))
    except ValueError as exc:
        raise fail(node, f"unknown {exc}") from None
