"""onnx2hw.rtl.synth_check: which platform a component is elaborated with (the ECP5 stand-in by
default, so that family-specific primitives are measured), and the cell counts that follow."""
import pytest
from amaranth.hdl import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from onnx2hw.rtl.synth_check import FamilyPlatform, yosys_stat


class _Seen(wiring.Component):
    """Registers its input; records the platform it was elaborated with."""

    def __init__(self):
        self.seen = []
        super().__init__({"i": In(4), "o": Out(4)})

    def elaborate(self, platform):
        self.seen.append(platform)
        m = Module()
        r = Signal(4)
        m.d.sync += r.eq(self.i)
        m.d.comb += self.o.eq(r)
        return m


@pytest.mark.synth
def test_ecp5_elaborates_with_the_family_stand_in():
    c = _Seen()
    st = yosys_stat(c, "ecp5")
    assert [getattr(p, "family", None) for p in c.seen] == ["ecp5"]
    assert isinstance(c.seen[0], FamilyPlatform)
    assert st["ff"] == 4


@pytest.mark.synth
@pytest.mark.parametrize("family", ["ecp5", "ice40"])
def test_explicit_platform_none_and_ice40_default(family):
    c = _Seen()
    yosys_stat(c, family, platform=None)
    assert c.seen == [None]
    if family == "ice40":
        d = _Seen()
        yosys_stat(d, "ice40")
        assert [getattr(p, "family", None) for p in d.seen] == ["ice40"]


def test_family_platform_names_its_family():
    assert FamilyPlatform("ecp5").family == "ecp5"
    assert repr(FamilyPlatform("ice40")) == "FamilyPlatform('ice40')"
