"""``(x - zero) * mult`` for a constant ``zero`` and integer ``mult``: the term AddUnit and
ConcatUnit requantize their inputs through, built as a wire shift (``mult`` 0 or a power of
two), a table (inputs of at most 4 bits) or a DSP product."""
from __future__ import annotations

from amaranth.hdl import Const, Signal, Value, signed

from ..arith import acc_bits, int_range
from ._arith_pipe import delay
from ._dsp import PRODUCT_LATENCY, registered_product

__all__ = ["shape_range", "term_kind", "term_range", "term_shape", "term", "input_register",
           "term_of_register", "registered_term", "offset_shape"]


def shape_range(shape) -> tuple[int, int]:
    """The values of an Amaranth integer shape."""
    return int_range(shape.width, shape.signed)


def term_kind(shape, mult) -> str:
    """``"shift"``, ``"table"`` or ``"dsp"`` (what :func:`term` builds; the cost models use it)."""
    if mult == 0 or (mult > 0 and mult & (mult - 1) == 0):
        return "shift"
    if shape.width <= 4:
        return "table"
    return "dsp"


def term_range(shape, zero, mult) -> tuple[int, int]:
    lo, hi = shape_range(shape)
    ends = [(lo - zero) * mult, (hi - zero) * mult]
    return min(ends), max(ends)


def term_shape(shape, zero, mult):
    return signed(acc_bits(*term_range(shape, zero, mult)))


def term(m, value, shape, zero, mult, name=None) -> Signal:
    """A combinational signal holding ``(value - zero) * mult``."""
    out = Signal(term_shape(shape, zero, mult), name=name)
    kind = term_kind(shape, mult)
    if kind == "shift":
        m.d.comb += out.eq(0 if mult == 0 else (value - zero) << (mult.bit_length() - 1))
    elif kind == "table":
        with m.Switch(Value.cast(value).as_unsigned()):
            for r in range(1 << shape.width):
                x = r - (1 << shape.width) if shape.signed and r >> (shape.width - 1) else r
                with m.Case(r):
                    m.d.comb += out.eq((x - zero) * mult)
    else:
        m.d.comb += out.eq((value - zero) * mult)
    return out


def offset_shape(shape, zero):
    """Shape of ``value - zero`` (the first register of a two-stage product term)."""
    lo, hi = shape_range(shape)
    return signed(acc_bits(min(lo - zero, 0), max(hi - zero, 0)))


def input_register(m, en, value, shape, zero, mult, name) -> Signal:
    """First register of a two-stage term: ``value - zero`` (the raw value for a table),
    updated when ``en``; :func:`term_of_register` turns it into the term."""
    if term_kind(shape, mult) == "table":
        r = Signal(shape, name=name)
        expr = value
    else:
        r = Signal(offset_shape(shape, zero), name=name)
        expr = value - zero
    with m.If(en):
        m.d.sync += r.eq(expr)
    return r


def term_of_register(m, reg, shape, zero, mult, name=None) -> Signal:
    """``(value - zero) * mult`` (combinational) from :func:`input_register`'s register: a
    wire shift, a table, or a product whose factor is a register (nothing in front of the DSP)."""
    out = Signal(term_shape(shape, zero, mult), name=name)
    kind = term_kind(shape, mult)
    if kind == "table":
        return term(m, reg, shape, zero, mult, name)
    if kind == "shift":
        m.d.comb += out.eq(0 if mult == 0 else reg << (mult.bit_length() - 1))
    else:
        m.d.comb += out.eq(reg * mult)
    return out


def registered_term(m, reg, shape, zero, mult, stages, platform=None, name="t") -> Value:
    """:func:`term_of_register` registered ``stages`` times: a product term is a
    :func:`~onnx2hw.rtl._dsp.registered_product` (``PRODUCT_LATENCY`` stages), any other term
    registers (more to keep step with a product beside it)."""
    if term_kind(shape, mult) == "dsp":
        if stages != PRODUCT_LATENCY:
            raise ValueError(f"a DSP term takes {PRODUCT_LATENCY} register stages, not {stages!r}")
        return registered_product(m, reg, Const(mult), platform=platform, name=name)[:term_shape(
            shape, zero, mult).width].as_signed()
    return delay(m, Const(1), term_of_register(m, reg, shape, zero, mult), stages, name=f"{name}_r")[-1]
