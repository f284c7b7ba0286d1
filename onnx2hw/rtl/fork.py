"""Broadcast one stream to two consumers (residual branches)."""
from __future__ import annotations

from amaranth.hdl import Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from . import _blockparams as _p
from .cost import Cost

__all__ = ["Fork"]


class Fork(wiring.Component):
    """Copy every transfer of ``i`` to both ``o0`` and ``o1``.

    Parameters
    ----------
    elem_shape : ShapeLike
        Shape of one lane.
    lanes : int
        Lanes per transfer (>= 1).

    Each output has a "taken" flag set when it accepted the current input while the other
    did not; the input transfers (and both flags clear) once each output has accepted it, so a
    slow consumer delays the other by at most one transfer. Latency 0 (combinational path from
    ``i`` to the outputs), initiation interval 1. ``oN.valid = i.valid & ~takenN`` does not
    depend on any ready; ``oN.payload`` is ``i.payload``, stable because ``i`` honours the
    stream rules; ``i.ready`` depends combinationally on ``o0.ready`` and ``o1.ready``.

    Ports: ``i`` (in), ``o0``, ``o1`` (out).
    """

    def __init__(self, elem_shape, lanes: int = 1):
        self.elem_shape = _p.elem_shape(elem_shape)
        self.lanes = _p.positive_int(lanes, "lanes")
        layout = _p.lanes_layout(self.elem_shape, self.lanes)
        super().__init__({"i": In(stream.Signature(layout)), "o0": Out(stream.Signature(layout)),
                          "o1": Out(stream.Signature(layout))})

    def elaborate(self, platform):
        m = Module()
        taken0, taken1 = Signal(), Signal()
        done0 = Signal()
        done1 = Signal()
        m.d.comb += [
            self.o0.payload.eq(self.i.payload), self.o1.payload.eq(self.i.payload),
            self.o0.valid.eq(self.i.valid & ~taken0), self.o1.valid.eq(self.i.valid & ~taken1),
            done0.eq(taken0 | self.o0.ready), done1.eq(taken1 | self.o1.ready),
            self.i.ready.eq(done0 & done1),
        ]
        with m.If(self.i.valid):
            with m.If(done0 & done1):
                m.d.sync += [taken0.eq(0), taken1.eq(0)]
            with m.Else():
                m.d.sync += [taken0.eq(done0), taken1.eq(done1)]
        return m

    @staticmethod
    def estimate(elem_shape, lanes: int = 1, family: str = "ecp5") -> Cost:
        """Two flags and their logic; the payload is wires."""
        _p.elem_shape(elem_shape)
        _p.positive_int(lanes, "lanes")
        _p.family(family)
        return Cost(1, 0, lut=4, ff=2, dsp=0, ebr=0)


def bench_config():
    """Representative configuration for ``bench.rtl`` (name, factory, feeds, expect)."""
    import numpy as np
    from amaranth.hdl import signed
    x = np.random.default_rng(0).integers(-128, 128, size=(2000, 8))
    return [("Fork s8x8", lambda: Fork(signed(8), 8), {"i": x}, {"o0": len(x), "o1": len(x)})]
