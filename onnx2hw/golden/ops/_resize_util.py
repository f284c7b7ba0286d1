"""Nearest-neighbour index maps shared by Resize and Upsample (ONNX Resize semantics)."""
from __future__ import annotations

import math

import numpy as np

__all__ = ["COORD_MODES", "NEAREST_MODES", "source_coords", "nearest_index", "resize_nearest"]

COORD_MODES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
               "tf_half_pixel_for_nn", "tf_crop_and_resize")
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil", "simple")


def source_coords(mode: str, n_in: int, n_out: int, scale: float, roi=(0.0, 1.0)) -> np.ndarray:
    """Source coordinate ``x_original`` of every output index along one axis (float64, ONNX spec)."""
    y = np.arange(n_out, dtype=np.float64)
    length_resized = n_in * scale
    if mode == "asymmetric":
        return y / scale
    if mode == "half_pixel":
        return (y + 0.5) / scale - 0.5
    if mode == "pytorch_half_pixel":
        return (y + 0.5) / scale - 0.5 if length_resized > 1 else np.zeros(n_out)
    if mode == "tf_half_pixel_for_nn":
        return (y + 0.5) / scale
    if mode == "align_corners":
        return np.zeros(n_out) if length_resized == 1 else y * (n_in - 1) / (length_resized - 1)
    if mode == "half_pixel_symmetric":
        adjustment = n_out / length_resized
        offset = n_in / 2 * (1 - adjustment)
        return offset + (y + 0.5) / scale - 0.5
    if mode == "tf_crop_and_resize":
        start, end = float(roi[0]), float(roi[1])
        if length_resized > 1:
            return start * (n_in - 1) + y * (end - start) * (n_in - 1) / (length_resized - 1)
        return np.full(n_out, 0.5 * (start + end) * (n_in - 1))
    raise ValueError(f"coordinate_transformation_mode {mode!r}")


def nearest_index(x: np.ndarray, mode: str, scale: float) -> np.ndarray:
    """Integer source index of the coordinates ``x`` by ``nearest_mode`` (``simple``: the
    floor when upsampling, the ceiling when downsampling, as Upsample and Resize-10 do)."""
    fl = np.floor(x)
    frac = x - fl
    if mode == "simple":
        mode = "floor" if scale >= 1 else "ceil"
    if mode == "floor":
        r = fl
    elif mode == "ceil":
        r = np.ceil(x)
    elif mode == "round_prefer_floor":
        r = np.where(frac > 0.5, fl + 1, fl)
    elif mode == "round_prefer_ceil":
        r = np.where(frac >= 0.5, fl + 1, fl)
    else:
        raise ValueError(f"nearest_mode {mode!r}")
    return r.astype(np.int64)


def resize_nearest(x: np.ndarray, out_shape, scales, coord_mode: str, nearest_mode: str, roi=None,
                   extrapolation_value: float = 0.0) -> np.ndarray:
    """``x`` resized to ``out_shape`` by nearest neighbour along every axis."""
    out = x
    r = x.ndim
    extrapolated = np.zeros(tuple(out_shape), bool) if coord_mode == "tf_crop_and_resize" else None
    for axis in range(r):
        n_in, n_out, s = x.shape[axis], int(out_shape[axis]), float(scales[axis])
        if n_in == n_out and math.isclose(s, 1.0) and coord_mode != "tf_crop_and_resize":
            continue
        axis_roi = (0.0, 1.0) if roi is None else (roi[axis], roi[axis + r])
        xo = source_coords(coord_mode, n_in, n_out, s, axis_roi)
        idx = nearest_index(xo, nearest_mode, s)
        if extrapolated is not None:
            bad = (xo < 0) | (xo > n_in - 1)
            shape = [1] * r
            shape[axis] = n_out
            extrapolated |= bad.reshape(shape)
        out = np.take(out, np.clip(idx, 0, n_in - 1), axis=axis)
    if extrapolated is not None and extrapolated.any():
        out = np.where(extrapolated, np.asarray(extrapolation_value, out.dtype), out)
    return out
