"""Cost-model result shared by every RTL block.

Each block class offers ``estimate(..., family="ecp5") -> Cost`` as a classmethod /
staticmethod taking the same parameters as ``__init__`` (no elaboration needed), so
the dataflow compiler can fold and fit without building hardware.
"""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Cost", "FAMILIES", "unelaborated"]

FAMILIES = ("ecp5", "ice40")


@dataclass(frozen=True)
class Cost:
    """Estimated cost of one block instance.

    ``cycles``: cycles per input tensor/vector at full throughput (initiation interval
    contribution); ``latency``: cycles from first input transfer to first output;
    resources: LUT4, flip-flops, DSP (ECP5 MULT18X18D / iCE40 SB_MAC16) and EBR blocks.
    """

    cycles: int
    latency: int
    lut: int
    ff: int
    dsp: int
    ebr: int

    def __add__(self, other: "Cost") -> "Cost":
        return Cost(max(self.cycles, other.cycles), self.latency + other.latency,
                    self.lut + other.lut, self.ff + other.ff, self.dsp + other.dsp, self.ebr + other.ebr)


def unelaborated(cls, *args, **kwargs):
    """An instance of component ``cls`` made only to read its derived parameters (for
    ``estimate``): never elaborated, so Amaranth's "created but never used" warning is off."""
    self = cls.__new__(cls)
    self._MustUse__used = True
    cls.__init__(self, *args, **kwargs)
    return self
