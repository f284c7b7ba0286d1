"""Clock domain (through a PLL) and pin hookup of a board top."""
from __future__ import annotations

from amaranth.hdl import ClockDomain, ClockSignal, Const, Instance, ResetSignal, Signal
from amaranth.lib.cdc import ResetSynchronizer


def make_clock(board, clock_hz: float, pll):
    """``clock(m, platform)`` creating the ``sync`` domain at ``clock_hz``."""

    def clock(m, platform):
        if pll is None:                 # the platform's default clock domain runs at clock_hz
            return
        m.domains.sync = ClockDomain("sync")
        locked = Signal(name="pll_locked")
        out = Signal(name="pll_clk")
        if pll.primitive == "EHXPLLL":
            clk = platform.request(platform.default_clk, dir="i")
            m.submodules.pll = Instance(
                "EHXPLLL", **pll.instance_kwargs(),
                i_CLKI=clk.i, o_CLKOP=out, i_CLKFB=out, o_LOCK=locked,
                i_RST=0, i_STDBY=0, i_PHASESEL0=0, i_PHASESEL1=0, i_PHASEDIR=1, i_PHASESTEP=1,
                i_PHASELOADREG=1, i_PLLWAKESYNC=0, i_ENCLKOP=0)
        else:
            pad = platform.request(platform.default_clk, dir="-")
            m.submodules.pll = Instance(
                "SB_PLL40_PAD", **pll.instance_kwargs(),
                i_PACKAGEPIN=pad.io, o_PLLOUTGLOBAL=out, o_LOCK=locked,
                i_RESETB=1, i_BYPASS=0)
        m.d.comb += ClockSignal("sync").eq(out)
        # no explicit constraint on the PLL output: nextpnr derives it from the input clock's
        # constraint and the PLL parameters (a net constraint would name a net Yosys renames)
        if pll.primitive == "EHXPLLL":
            # The synchronized reset drives every flip-flop's LSR: on general routing that one
            # net must cross the whole design within a clock period. Through a DCCA it is a global
            # (primary clock) net, which reaches the LSR of every slice with a low, even delay.
            m.domains.rst_src = ClockDomain("rst_src")
            m.d.comb += ClockSignal("rst_src").eq(out)
            m.submodules.rst_sync = ResetSynchronizer(~locked, domain="rst_src")
            m.submodules.rst_global = Instance("DCCA", i_CLKI=ResetSignal("rst_src"), i_CE=Const(1, 1),
                                               o_CLKO=ResetSignal("sync"))
        else:
            m.submodules.rst_sync = ResetSynchronizer(~locked, domain="sync")

    return clock


def make_pins(board):
    """``pins(m, platform, top)`` wiring the UART and the status LEDs."""

    def pins(m, platform, top):
        uart = platform.request("uart", 0)
        m.d.comb += [top.uart_rx.eq(uart.rx.i), uart.tx.o.eq(top.uart_tx)]
        requested = {}
        for status, res in board.leds:
            if res is None:
                continue
            name, number, sub = (res + (None,))[:3]
            if (name, number) not in requested:
                requested[name, number] = platform.request(name, number)
            pin = requested[name, number]
            target = getattr(pin, sub) if sub else pin
            m.d.comb += target.o.eq(getattr(top, f"led_{status}"))

    return pins
