"""ECP5 boards: ULX3S (12F/25F/45F/85F) and OrangeCrab r0.2 (25F)."""
from __future__ import annotations

from amaranth.build import Attrs
from amaranth.vendor import LatticeECP5Platform
from amaranth_boards.orangecrab_r0_2 import OrangeCrabR0_2_25FPlatform
from amaranth_boards.resources import UARTResource

from onnx2hw.dataflow.fold import Budget

from ._board import Board

__all__ = ["ULX3S", "ORANGECRAB", "OrangeCrabUARTPlatform"]

_FT231X = ("FTDI FT231X datasheet: 300 baud to 3 Mbaud")

#: ULX3S variants: (name suffix, device, LUT4, DSP, EBR); docs/architecture.md, device budgets
_ULX3S = (("12f", "LFE5U-12F", 12000, 28, 32), ("25f", "LFE5U-25F", 24288, 28, 56),
          ("45f", "LFE5U-45F", 43848, 72, 108), ("85f", "LFE5U-85F", 83640, 156, 208))


def _ulx3s(suffix, device, lut, dsp, ebr) -> Board:
    return Board(
        name=f"ulx3s-{suffix}", title=f"ULX3S-{suffix.upper()}", family="ecp5", device=device,
        package="CABGA381", nextpnr_device=device[6:-1].lower() + "k", nextpnr_package="CABGA381",
        budget=Budget(lut, dsp, ebr, device), osc_hz=25e6, max_baud=3e6, baud_source=_FT231X,
        platform_class=f"amaranth_boards.ulx3s:ULX3S_{suffix.upper()}_Platform",
        leds=(("idle", ("led", 0)), ("busy", ("led", 1)), ("error", ("led", 7))),
        uart_note="FT231X USB-UART on the US1 port", default_clock_hz=75e6, default_baud=3e6)


ULX3S = {b.name: b for b in (_ulx3s(*v) for v in _ULX3S)}


class OrangeCrabUARTPlatform(OrangeCrabR0_2_25FPlatform):
    """OrangeCrab r0.2 (25F) with a UART on Feather pins 0 (RX) and 1 (TX) for an external
    3.3 V USB-serial adapter, and without the DFU packaging step (a plain ``.bit``)."""

    resources = OrangeCrabR0_2_25FPlatform.resources + [
        UARTResource(0, rx="0", tx="1", conn=("io", 0), attrs=Attrs(IO_TYPE="LVCMOS33")),
    ]

    @property
    def required_tools(self):
        return LatticeECP5Platform.required_tools.fget(self)

    @property
    def command_templates(self):
        return LatticeECP5Platform.command_templates.fget(self)


ORANGECRAB = Board(
    name="orangecrab", title="OrangeCrab r0.2 (25F)", family="ecp5", device="LFE5U-25F",
    package="CSFBGA285", nextpnr_device="25k", nextpnr_package="CSFBGA285",
    budget=Budget(24288, 28, 56, "LFE5U-25F"), osc_hz=48e6, max_baud=1e6,
    baud_source="no on-board USB-UART: external 3.3 V adapter on Feather pins 0/1, "
                "limited to 1 Mbaud for common adapters (CP2102: 1 Mbaud)",
    platform_class="onnx2hw.boards.ecp5:OrangeCrabUARTPlatform",
    leds=(("idle", ("rgb_led", 0, "g")), ("busy", ("rgb_led", 0, "b")), ("error", ("rgb_led", 0, "r"))),
    uart_note="external USB-UART on Feather pins 0 (RX) / 1 (TX)", default_clock_hz=48e6,
    default_baud=1e6)
