"""Parameter validation shared by the simple stream blocks (fifo, fork, width, add)."""
from __future__ import annotations

from amaranth.hdl import Shape, signed
from amaranth.lib import data

from ..arith import acc_bits
from .cost import FAMILIES


def elem_shape(value, what: str = "elem_shape") -> Shape:
    try:
        shape = Shape.cast(value)
    except TypeError:
        raise TypeError(f"{what} must be a shape such as signed(8) or unsigned(4), "
                        f"not {value!r}") from None
    if shape.width < 1:
        raise ValueError(f"{what} must be at least 1 bit wide, not {value!r}")
    return shape


def positive_int(value, what: str, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an integer, not {value!r}")
    if value < minimum:
        raise ValueError(f"{what} must be >= {minimum}, not {value!r}")
    return value


def integer(value, what: str) -> int:
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise TypeError(f"{what} must be an integer, not {value!r}")
    return int(value)


def family(value) -> str:
    if value not in FAMILIES:
        raise ValueError(f"family must be one of {FAMILIES!r}, not {value!r}")
    return value


def lanes_layout(shape: Shape, lanes: int) -> data.ArrayLayout:
    return data.ArrayLayout(shape, lanes)


def offset_shape(shape: Shape, offset: int) -> Shape:
    """The lane shape of ``x - offset`` for ``x`` of ``shape`` (``shape`` itself for no offset)."""
    if not offset:
        return shape
    lo, hi = (-(1 << (shape.width - 1)), (1 << (shape.width - 1)) - 1) if shape.signed else (0, (1 << shape.width) - 1)
    return signed(acc_bits(min(lo - offset, 0), max(hi - offset, 0)))
