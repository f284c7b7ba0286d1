"""The :class:`Board` description shared by every board family module."""
from __future__ import annotations

import importlib
from dataclasses import dataclass

from onnx2hw.dataflow.fold import Budget
from onnx2hw.protocol import LinkFormat
from onnx2hw.rtl.board_top import BoardTop
from onnx2hw.rtl.uart import uart_divisor

from ._clock import make_clock, make_pins
from .pll import ecp5_pll, ice40_pll

__all__ = ["Board"]


@dataclass(frozen=True)
class Board:
    """One FPGA board: device, resources, clock, host link, and how to build a top for it.

    ``platform_class`` is ``"module:Class"`` of the amaranth_boards platform (or of a subclass
    in :mod:`boards`); ``nextpnr_device``/``nextpnr_package`` are nextpnr's option values;
    ``max_baud`` is the highest UART rate the board's USB-serial bridge is trusted with
    (``baud_source`` says why). ``leds`` maps status ``idle``/``busy``/``error`` to
    ``(resource, number[, subsignal])`` (``None`` = not shown). ``default_clock_hz`` and
    ``default_baud`` are a suggested system clock and link rate (the baud rate an exact divisor
    of the clock).
    """

    name: str
    title: str
    family: str
    device: str
    package: str
    nextpnr_device: str
    nextpnr_package: str
    budget: Budget
    osc_hz: float
    max_baud: float
    baud_source: str
    platform_class: str
    leds: tuple = ()
    uart_note: str = ""
    default_clock_hz: float = 0.0
    default_baud: float = 0.0

    def platform(self):
        """A fresh amaranth_boards platform instance for this board."""
        module, cls = self.platform_class.split(":")
        return getattr(importlib.import_module(module), cls)()

    def pll(self, clock_hz: float):
        """PLL parameters for ``clock_hz`` from the oscillator (``None`` if no PLL is needed)."""
        if abs(clock_hz - self.osc_hz) < 1e-6 * self.osc_hz:
            return None
        return (ecp5_pll if self.family == "ecp5" else ice40_pll)(float(self.osc_hz), float(clock_hz))

    def check_link(self, clock_hz: float, baud: float) -> None:
        """Reject a baud rate above the board's bridge or not derivable from ``clock_hz``."""
        if not isinstance(baud, (int, float)) or baud <= 0:
            raise ValueError(f"baud rate must be a positive number, not {baud!r}")
        if baud > self.max_baud:
            raise ValueError(f"baud rate {baud:g} is above the {self.max_baud:g} baud the {self.title} "
                             f"link supports ({self.baud_source})")
        uart_divisor(clock_hz, baud)

    def make_top(self, accelerator, link: LinkFormat, clock_hz: float, baud: float, *, selftest=None) -> BoardTop:
        """:class:`~onnx2hw.rtl.board_top.BoardTop` for this board: PLL to ``clock_hz``, the
        board's UART and status LEDs. ``link`` is the accelerator's byte layout on the host link
        (e.g. ``onnx2hw.flow.link_format_of(pipeline)``); ``selftest``: the inputs of a
        self-test build in link coding (see :class:`~onnx2hw.rtl.board_top.BoardTop`)."""
        self.check_link(clock_hz, baud)
        pll = self.pll(clock_hz)                    # fails early for an unreachable clock
        return BoardTop(accelerator, link, clock_hz, baud,
                        clock=make_clock(self, clock_hz, pll), pins=make_pins(self), selftest=selftest)

    def summary(self) -> dict:
        """JSON-ready facts (for ``onnx2hw boards`` and reports)."""
        return {"name": self.name, "title": self.title, "family": self.family, "device": self.device,
                "package": self.package, "lut": self.budget.lut, "dsp": self.budget.dsp,
                "ebr": self.budget.ebr, "osc_mhz": self.osc_hz / 1e6, "max_baud": self.max_baud,
                "default_clock_mhz": self.default_clock_hz / 1e6, "default_baud": self.default_baud,
                "nextpnr": f"--{self.nextpnr_device} --package {self.nextpnr_package}"}
