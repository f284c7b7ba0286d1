"""iCE40 boards: iCEBreaker (iCE40 UP5K)."""
from __future__ import annotations

from onnx2hw.dataflow.fold import Budget

from ._board import Board

__all__ = ["ICEBREAKER"]

ICEBREAKER = Board(
    name="icebreaker", title="iCEBreaker", family="ice40", device="iCE40UP5K", package="SG48",
    nextpnr_device="up5k", nextpnr_package="sg48", budget=Budget(5280, 8, 30, "iCE40UP5K"),
    osc_hz=12e6, max_baud=3e6,
    baud_source="FTDI FT2232H datasheet: UART up to 12 Mbaud; 3 Mbaud = 12 MHz / 4 is kept "
                "as the safe limit",
    platform_class="amaranth_boards.icebreaker:ICEBreakerPlatform",
    # the board has a red and a green user LED: green = busy, red = error (idle: both off)
    leds=(("idle", None), ("busy", ("led", 1)), ("error", ("led", 0))),
    # default clock = the oscillator: requantizers wider than SB_MAC16 become LUT multipliers,
    # too slow on iCE40 for a 24 MHz default to meet timing reliably
    uart_note="FT2232H channel B", default_clock_hz=12e6, default_baud=3e6)
