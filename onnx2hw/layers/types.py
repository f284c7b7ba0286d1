"""Integer element types, tensor specs and activations: the vocabulary of every layer kind.

See :mod:`onnx2hw.layers.graph` for the integer semantics these values carry.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Union

import numpy as np
from amaranth.hdl import Shape, unsigned

from .. import arith

__all__ = ["IntType", "TensorSpec", "Requant", "Thresholds", "Act", "apply_act", "act_range",
           "readonly", "int_type_for", "accumulator_bounds", "acc_bits_for", "elem_shape", "window_out"]


def readonly(a, dtype=np.int64) -> np.ndarray:
    arr = np.array(a, dtype=dtype)
    arr.setflags(write=False)
    return arr


@dataclass(frozen=True)
class IntType:
    """An integer element type: ``bits`` (1..32: 17..32 only for raw accumulator outputs), ``signed``; ``bipolar`` = 1-bit {-1, +1}."""

    bits: int
    signed: bool
    bipolar: bool = False

    def __post_init__(self):
        if not isinstance(self.bits, (int, np.integer)) or not 1 <= self.bits <= 32:
            raise ValueError(f"IntType bits must be 1..32, not {self.bits!r}")
        if self.bipolar and (self.bits != 1 or self.signed):
            raise ValueError(f"a bipolar IntType is 1-bit unsigned-coded, not bits={self.bits!r} signed={self.signed!r}")

    @property
    def lo(self) -> int:
        return -1 if self.bipolar else arith.int_range(self.bits, self.signed)[0]

    @property
    def hi(self) -> int:
        return 1 if self.bipolar else arith.int_range(self.bits, self.signed)[1]

    def __str__(self) -> str:
        return "bipolar" if self.bipolar else f"{'int' if self.signed else 'uint'}{self.bits}"


def int_type_for(lo: int, hi: int) -> IntType:
    """Smallest :class:`IntType` holding ``[lo, hi]`` (unsigned when ``lo >= 0``)."""
    lo, hi = int(lo), int(hi)
    if lo >= 0:
        bits = max(1, int(hi).bit_length())
        return IntType(bits, False)
    return IntType(arith.acc_bits(lo, hi), True)


@dataclass(frozen=True)
class TensorSpec:
    """A run-time integer tensor: ``shape`` excludes the batch, channels last."""

    name: str
    shape: tuple[int, ...]
    dtype: IntType

    def __post_init__(self):
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))
        if any(d < 1 for d in self.shape):
            raise ValueError(f"tensor {self.name!r}: bad shape {self.shape!r}")


@dataclass(frozen=True)
class Requant:
    """``arith.requantize`` parameters; ``multiplier``/``shift`` are ``(C,)`` or ``(1,)``;
    ``ties`` the rounding of an exact tie (``arith.TIES``); ``divisor`` (per tensor) divides
    the ratio ``multiplier / 2**shift`` exactly (a rational ratio, see :mod:`onnx2hw.arith`)."""

    multiplier: np.ndarray
    shift: np.ndarray
    zero_point: int
    lo: int
    hi: int
    ties: str = "up"
    divisor: int = 1

    def __post_init__(self):
        m = readonly(np.atleast_1d(self.multiplier))
        s = readonly(np.atleast_1d(self.shift))
        if m.ndim != 1 or s.shape != m.shape and s.shape != (1,) and m.shape != (1,):
            raise ValueError(f"Requant multiplier {m.shape!r} and shift {s.shape!r} must be (C,) or (1,)")
        if np.any(np.abs(m) >= (1 << 32)):
            raise ValueError(f"Requant multiplier must be below 2**32 in magnitude, not {int(np.max(np.abs(m)))!r}")
        if np.any(s < 0) or np.any(s > 62):
            raise ValueError(f"Requant shift must be in 0..62, not {s.tolist()!r}")
        if self.lo > self.hi:
            raise ValueError(f"Requant lo {self.lo!r} > hi {self.hi!r}")
        if self.ties not in arith.TIES:
            raise ValueError(f"Requant ties must be one of {arith.TIES!r}, not {self.ties!r}")
        if int(self.divisor) < 1 or int(self.divisor) != 1 and m.shape != (1,):
            raise ValueError(f"Requant divisor {self.divisor!r} must be positive, and 1 unless per tensor")
        object.__setattr__(self, "divisor", int(self.divisor))
        object.__setattr__(self, "multiplier", m)
        object.__setattr__(self, "shift", s)
        object.__setattr__(self, "zero_point", int(self.zero_point))
        object.__setattr__(self, "lo", int(self.lo))
        object.__setattr__(self, "hi", int(self.hi))

    @property
    def channels(self) -> int:
        return max(self.multiplier.shape[0], self.shift.shape[0])

    def __call__(self, acc) -> np.ndarray:
        return arith.requantize(acc, self.multiplier, self.shift, self.zero_point, self.lo, self.hi, self.ties,
                                self.divisor)


@dataclass(frozen=True)
class Thresholds:
    """``arith.multithreshold`` parameters: ``table`` is ``(C or 1, steps)`` with ``steps <= 2**bits - 1``
    (fewer for a narrow-range output), rows non-decreasing; outputs run from ``lo`` to ``lo + steps``.

    ``bipolar``: one threshold per row and a bipolar output, ``+1`` where ``acc >= T`` else ``-1``
    (``lo`` is then -1; on the stream the comparison bit is the bipolar code, 1 = +1).
    """

    table: np.ndarray
    lo: int
    bipolar: bool = False

    def __post_init__(self):
        t = readonly(self.table)
        if t.ndim != 2 or t.shape[1] < 1:
            raise ValueError(f"threshold table must be (channels, steps), not shape {t.shape!r}")
        if np.any(np.diff(t, axis=1) < 0):
            raise ValueError("threshold table rows must be non-decreasing")
        if self.bipolar and (t.shape[1] != 1 or int(self.lo) != -1):
            raise ValueError(f"a bipolar threshold has one step and lo -1, not {t.shape[1]} steps and lo {self.lo!r}")
        object.__setattr__(self, "table", t)
        object.__setattr__(self, "lo", int(self.lo))
        object.__setattr__(self, "bipolar", bool(self.bipolar))

    @property
    def channels(self) -> int:
        return self.table.shape[0]

    def __call__(self, acc) -> np.ndarray:
        if self.bipolar:
            return 2 * arith.multithreshold(acc, self.table, 0) - 1
        return arith.multithreshold(acc, self.table, self.lo)


Act = Union[Requant, Thresholds, None]


def apply_act(acc: np.ndarray, act: Act) -> np.ndarray:
    """Map an accumulator (channels last) through ``act``."""
    return np.asarray(acc, dtype=np.int64) if act is None else act(acc)


def act_range(act: Act, acc_lo: int, acc_hi: int) -> tuple[int, int]:
    if act is None:
        return acc_lo, acc_hi
    if isinstance(act, Requant):
        return act.lo, act.hi
    if act.bipolar:
        return -1, 1
    return act.lo, act.lo + act.table.shape[1]


def accumulator_bounds(weights: np.ndarray, bias: np.ndarray, in_lo: int, in_hi: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact per-output-channel ``(min, max)`` of ``sum(w * x) + bias`` for ``x`` in ``[in_lo, in_hi]``.

    ``weights`` is ``(C, ...)`` (one row per output channel). Python integers are used so the
    bounds never overflow.
    """
    w = np.asarray(weights, dtype=np.int64).reshape(len(weights), -1).astype(object)
    b = np.asarray(bias, dtype=np.int64).astype(object)
    pos = np.where(w > 0, w, 0).sum(axis=1)
    neg = np.where(w < 0, w, 0).sum(axis=1)
    hi = pos * int(in_hi) + neg * int(in_lo) + b
    lo = pos * int(in_lo) + neg * int(in_hi) + b
    return lo, hi


def acc_bits_for(weights, bias, in_type: IntType) -> int:
    """Accumulator width of ``sum(w * x) + bias`` over the input type's whole range."""
    lo, hi = accumulator_bounds(weights, bias, in_type.lo, in_type.hi)
    return arith.acc_bits(int(min(lo)), int(max(hi)))


def elem_shape(t: IntType) -> Shape:
    """Stream element shape of an integer type (bipolar: 1 bit, 1 = +1, 0 = -1)."""
    if t.bipolar:
        return unsigned(1)
    return Shape(t.bits, t.signed)


def window_out(size: int, k: int, stride: int, pad0: int, pad1: int) -> int:
    """Output length of a window of ``k`` sliding by ``stride`` over ``size`` padded by ``pad0``/``pad1``."""
    return (size + pad0 + pad1 - k) // stride + 1
