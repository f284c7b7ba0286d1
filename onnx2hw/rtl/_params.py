"""Parameter checks shared by the multiply-accumulate blocks (MatrixVectorUnit, DepthwiseUnit):
``TypeError``/``ValueError`` naming the bad value, as amaranth's own blocks do."""
from __future__ import annotations

import numpy as np

from .. import arith

__all__ = ["MUL_STYLES", "auto_style", "int_array", "check_bits", "check_weight_range", "bias_vector", "acc_width"]

#: how products are built: "dsp" (``*``, one MULT18X18D each on ECP5), "lut" (shift-and-add), or
#: "auto" (DSP when both factors are wide enough to pay for one)
MUL_STYLES = ("auto", "dsp", "lut")


def auto_style(in_bits: int, weight_bits: int) -> str:
    """The product style ``mul_style="auto"`` picks: a DSP when both factors are at least 3 bits
    and one at least 5 (narrower products are cheap in LUTs), else LUT logic."""
    return "dsp" if min(in_bits, weight_bits) >= 3 and max(in_bits, weight_bits) >= 5 else "lut"


def int_array(name: str, a, ndim: int) -> np.ndarray:
    """``a`` as an int64 array of ``ndim`` dimensions."""
    arr = np.asarray(a)
    if arr.dtype.kind not in "iub":
        raise TypeError(f"{name} must be an integer array, not dtype {arr.dtype!r}")
    if arr.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-D, not shape {arr.shape!r}")
    return arr.astype(np.int64)


def check_bits(name: str, bits) -> None:
    if not isinstance(bits, int) or isinstance(bits, bool) or not 1 <= bits <= 32:
        raise ValueError(f"{name} must be an int in 1..32, not {bits!r}")


def check_weight_range(w: np.ndarray, bits: int, signed: bool) -> None:
    """Every weight fits ``bits`` (signed or not)."""
    lo, hi = arith.int_range(bits, signed)
    if w.min() < lo or w.max() > hi:
        bad = w.min() if w.min() < lo else w.max()
        raise ValueError(f"weight {int(bad)!r} outside the {bits}-bit "
                         f"{'signed' if signed else 'unsigned'} range [{lo}, {hi}]")


def bias_vector(bias, n: int) -> np.ndarray:
    """The int64 bias of ``n`` rows (zeros when ``bias`` is None)."""
    if bias is None:
        return np.zeros(n, dtype=np.int64)
    b = int_array("bias", bias, 1)
    if b.shape != (n,):
        raise ValueError(f"bias must have shape ({n},), not {b.shape!r}")
    return b


def acc_width(w: np.ndarray, b: np.ndarray, xlo: int, xhi: int, acc_bits) -> int:
    """``acc_bits``, checked to hold every row's ``b + w @ x`` for inputs in ``[xlo, xhi]``
    (the exact bound when ``acc_bits`` is None)."""
    lo_rows = b + np.minimum(w * xlo, w * xhi).sum(axis=1)
    hi_rows = b + np.maximum(w * xlo, w * xhi).sum(axis=1)
    need = arith.acc_bits(int(lo_rows.min()), int(hi_rows.max()))
    if acc_bits is None:
        return need
    if not isinstance(acc_bits, int) or isinstance(acc_bits, bool) or acc_bits < need:
        raise ValueError(f"acc_bits must be an int >= {need} (the exact bound for these "
                         f"weights), not {acc_bits!r}")
    return acc_bits
