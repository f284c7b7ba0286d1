"""``Cast``: a registered lane-wise ``+ offset`` into a new lane shape."""
from __future__ import annotations

from amaranth.hdl import Module, Shape
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ._arith_pipe import register_stage

__all__ = ["Cast", "bench_config"]


class Cast(wiring.Component):
    """Lane-wise ``y = x + offset`` into ``Shape(bits, signed)``.

    Parameters
    ----------
    bits, signed : output lane shape; ``offset`` : int constant added to every lane.
    in_shape : input lane shape; ``lanes`` : lanes per transfer.

    Latency 1 cycle (registered output), one transfer per cycle; ``o.valid``/``o.payload`` are
    registers held until taken and ``i.ready = ~o.valid | o.ready``.
    """

    def __init__(self, *, bits, signed, offset=0, in_shape, lanes):
        if not isinstance(bits, int) or bits < 1:
            raise ValueError(f"bits must be a positive int, not {bits!r}")
        self.offset = int(offset)
        super().__init__({
            "i": In(stream.Signature(data.ArrayLayout(in_shape, lanes))),
            "o": Out(stream.Signature(data.ArrayLayout(Shape(bits, signed), lanes))),
        })

    def elaborate(self, platform):
        m = Module()
        with m.If(register_stage(m, self.i, self.o)):
            for j in range(len(self.i.payload)):
                m.d.sync += self.o.payload[j].eq(self.i.payload[j] + self.offset)
        return m


def bench_config():
    """Representative configuration for ``bench.rtl`` (name, factory, feeds, expect)."""
    import numpy as np
    from amaranth.hdl import signed
    x = np.random.default_rng(0).integers(-128, 128, size=(2000, 8))
    return [("Cast s8->u8 +128 x8", lambda: Cast(bits=8, signed=False, offset=128,
                                                 in_shape=signed(8), lanes=8),
             {"i": x}, {"o": len(x)})]
