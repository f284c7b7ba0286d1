"""The board top: UART <-> framing <-> accelerator, with status LEDs.

Data path::

    uart_rx -> UARTRx -> Deframer -> (2-entry FIFO) -> BytesToLanes -> accelerator -> LanesToBytes -> Framer -> UARTTx -> uart_tx
                            \\-- tags (session, seq, count), error reports, live session --/

With a self-test (``selftest=`` the link coding of ``N`` inputs) a
:class:`~onnx2hw.rtl.selftest.SelfTest` sits between ``BytesToLanes``/``LanesToBytes`` and the
accelerator: SELFTEST commands from the deframer replay the stored inputs through the accelerator
at full speed, and their results go out through the framer.

Every reply carries the session of the request it answers; results of an earlier session still
queued when a new session's first frame is committed are dropped by the framer (see
:mod:`onnx2hw.protocol`).
"""
from __future__ import annotations

from amaranth.hdl import Module, Signal, unsigned
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..protocol import LinkFormat
from .cost import Cost
from .fifo import StreamFIFO
from .framing import BytesToLanes, Deframer, Framer, LanesToBytes
from .selftest import SelfTest
from .uart import UARTRx, UARTTx, uart_divisor

__all__ = ["BoardTop", "frame_timeout_cycles", "LINK_COST"]

#: resources of the host link (UART, framing with sessions, CRC, frame buffer) around the
#: accelerator, measured with Yosys (tests/test_rtl_board_top.py checks it); FFs rounded up;
#: reserved before the pipeline is folded
LINK_COST = {"ecp5": Cost(0, 0, 980, 700, 0, 1), "ice40": Cost(0, 0, 910, 700, 0, 5)}


def frame_timeout_cycles(clk_hz, divisor: int) -> int:
    """Idle cycles after which the board abandons a frame in progress: 64 byte times, but at
    least 20 ms, so that USB-serial bridges pausing between packets do not cut frames."""
    return max(64 * 10 * divisor, int(clk_hz * 0.02))


def _join(m, src, dst):
    m.d.comb += [dst.valid.eq(src.valid), src.ready.eq(dst.ready), dst.payload.eq(src.payload)]


class BoardTop(wiring.Component):
    """An accelerator behind a UART host link (protocol: :mod:`onnx2hw.protocol`).

    Parameters
    ----------
    accelerator : wiring.Component
        With ports ``i: In(stream.Signature(ArrayLayout(elem, in_lanes)))`` and
        ``o: Out(stream.Signature(ArrayLayout(elem, out_lanes)))`` (e.g.
        :class:`onnx2hw.rtl.accelerator.AcceleratorCore`).
    link : LinkFormat
        The byte layout of one inference on the link (:class:`onnx2hw.protocol.LinkFormat`,
        e.g. ``onnx2hw.flow.link_format_of(pipeline)``); its element widths and lanes must agree
        with the accelerator's ports.
    clk_hz, baud : number
        System clock and UART baud rate (``round(clk_hz / baud)`` cycles per bit, see
        :func:`onnx2hw.rtl.uart.uart_divisor`).
    clock : callable ``(m, platform) -> None``, optional
        Creates the ``sync`` clock domain at ``clk_hz`` on a board (e.g. through a PLL); default:
        the platform's default clock, which must then run at ``clk_hz``.
    pins : callable ``(m, platform, top) -> None``, optional
        Connects ``top.uart_rx``, ``top.uart_tx`` and the ``led_*`` ports to the board's pins;
        default: resource ``uart`` 0 and ``led`` 0..2.
    selftest : bytes, optional
        Inputs for a self-test build, in link coding (``link.encode_inputs``, a whole number of
        inferences), held in on-chip memory (:class:`~onnx2hw.rtl.selftest.SelfTest`). Without
        it the top is the plain link, unchanged.

    Ports
    -----
    uart_rx : In(1), idle high;  uart_tx : Out(1), idle high
    led_idle, led_busy, led_error : Out(1)
        ``led_busy`` while a frame is being received, results are queued or being sent;
        ``led_idle`` otherwise (a running self-test counts as busy); ``led_error`` lights for about 1/4 s after a dropped frame or a
        UART framing/overrun error.

    With ``platform=None`` (simulation, Verilog export) the UART lines and LEDs are the
    component's ports and the ``sync`` domain is external.
    """

    def __init__(self, accelerator, link: LinkFormat, clk_hz, baud, *, clock=None, pins=None, selftest=None):
        if not isinstance(accelerator, wiring.Component) or not {"i", "o"} <= set(accelerator.signature.members):
            raise TypeError(f"accelerator must be a wiring.Component with stream ports i and o, not {accelerator!r}")
        if not isinstance(link, LinkFormat):
            raise TypeError(f"link must be a protocol.LinkFormat, not {link!r}")
        self.fmt = link
        self.divisor = uart_divisor(clk_hz, baud)
        self.clk_hz, self.baud = clk_hz, baud
        il, ol = accelerator.i.payload.shape(), accelerator.o.payload.shape()
        for side, layout, bits, lanes in (("input", il, self.fmt.in_bits, self.fmt.in_lanes),
                                          ("output", ol, self.fmt.out_bits, self.fmt.out_lanes)):
            width = getattr(layout, "elem_shape", None)
            got = (layout.elem_shape.width if width is not None else None, getattr(layout, "length", None))
            if got != (bits, lanes):
                raise ValueError(f"accelerator {side} port carries (bits, lanes) = {got!r} but the "
                                 f"link format says {(bits, lanes)!r}")
        self.accelerator = accelerator
        self._clock, self._pins = clock, pins
        self.selftest = None if selftest is None else SelfTest(self.fmt, bytes(selftest))
        super().__init__({"uart_rx": In(1, init=1), "uart_tx": Out(1, init=1),
                          "led_idle": Out(1), "led_busy": Out(1), "led_error": Out(1)})

    def elaborate(self, platform):
        """On a board, its clock and pins (:meth:`_board`); the link's blocks
        (:meth:`_blocks`), joined from the UART through the accelerator (and the self-test,
        :meth:`_join_selftest`) back to it, and the LEDs (:meth:`_leds`)."""
        m = Module()
        if platform is not None:
            self._board(m, platform)
        rx, tx, dfr, b2l, acc, l2b, frm = self._blocks(m)
        m.d.comb += [rx.rx.eq(self.uart_rx), self.uart_tx.eq(tx.tx)]
        _join(m, rx.o, dfr.i)
        # the deframer's payload comes from its block RAM rows (through their multiplexer): it
        # lands in a 2-entry FIFO first, so the route across the chip to the input's shift
        # register and its LUTs starts from a fabric register
        m.submodules.land = land = StreamFIFO(unsigned(8), 1, 2)
        _join(m, dfr.o, land.i)
        _join(m, land.o, b2l.i)
        if self.selftest is None:
            _join(m, b2l.o, acc.i)
            _join(m, acc.o, l2b.i)
        else:
            self._join_selftest(m, dfr, land, b2l, acc, l2b, frm)
        _join(m, l2b.o, frm.i)
        _join(m, dfr.tag, frm.tag)
        _join(m, dfr.err, frm.err)
        _join(m, frm.o, tx.i)
        m.d.comb += frm.live.eq(dfr.session)
        self._leds(m, rx, dfr, frm)
        return m

    def _board(self, m, platform):
        """The ``sync`` domain at ``clk_hz`` (the given clock, or the board's default clock if
        it runs at ``clk_hz``) and the UART and LED pins."""
        if self._clock is not None:
            self._clock(m, platform)
        else:
            freq = platform.default_clk_frequency
            if abs(freq - self.clk_hz) > 1e-6 * freq:
                raise ValueError(f"clock of {self.clk_hz!r} Hz requested but the board's default "
                                 f"clock runs at {freq:.0f} Hz and no PLL was given")
        if self._pins is not None:
            self._pins(m, platform, self)
        else:
            uart = platform.request("uart", 0)
            m.d.comb += [self.uart_rx.eq(uart.rx.i), uart.tx.o.eq(self.uart_tx)]
            for k, led in enumerate((self.led_idle, self.led_busy, self.led_error)):
                m.d.comb += platform.request("led", k).o.eq(led)

    def _blocks(self, m):
        """The UART receiver and transmitter, the deframer, the bytes-to-lanes converter, the
        accelerator, the lanes-to-bytes converter and the framer, as submodules."""
        fmt, div = self.fmt, self.divisor
        m.submodules.rx = rx = UARTRx(div)
        m.submodules.tx = tx = UARTTx(div)
        m.submodules.deframer = dfr = Deframer(in_bytes=fmt.in_bytes, buffer_bytes=fmt.buffer_bytes,
                                               timeout=frame_timeout_cycles(self.clk_hz, div),
                                               max_count=fmt.max_batch, selftest=self.selftest is not None)
        il, ol = self.accelerator.i.payload.shape(), self.accelerator.o.payload.shape()
        m.submodules.unpack = b2l = BytesToLanes(elem_shape=il.elem_shape, lanes=il.length)
        m.submodules.accelerator = acc = self.accelerator
        m.submodules.pack = l2b = LanesToBytes(elem_shape=ol.elem_shape, lanes=ol.length)
        m.submodules.framer = frm = Framer(out_bytes=fmt.out_bytes, selftest=self.selftest is not None)
        return rx, tx, dfr, b2l, acc, l2b, frm

    def _join_selftest(self, m, dfr, land, b2l, acc, l2b, frm):
        """The self-test between the converters and the accelerator, its commands from the
        deframer and its results to the framer; the link is idle when no input byte is in the
        deframer, its landing FIFO or the converter."""
        m.submodules.selftest = st = self.selftest
        _join(m, b2l.o, st.i)
        _join(m, st.o, acc.i)
        _join(m, acc.o, st.ai)
        _join(m, st.ao, l2b.i)
        _join(m, dfr.cmd, st.cmd)
        _join(m, st.res, frm.st)
        m.d.comb += st.link_idle.eq(~dfr.pending & ~land.o.valid & ~b2l.busy)

    def _leds(self, m, rx, dfr, frm):
        """``led_busy``/``led_idle`` from the link's state; ``led_error`` stretched to about
        1/4 s by an up-counter that stops when its top bit sets (no wide compare)."""
        busy = dfr.in_frame | dfr.tag.valid | frm.busy | dfr.o.valid
        if self.selftest is not None:
            busy = busy | self.selftest.running
        m.d.comb += [self.led_busy.eq(busy), self.led_idle.eq(~busy)]
        k = max(1, (int(self.clk_hz) // 4).bit_length() - 1)
        stretch = Signal(k + 1, init=1 << k)
        with m.If(rx.error | dfr.err_lost | (dfr.err.valid & dfr.err.ready)):
            m.d.sync += stretch.eq(0)
        with m.Elif(~stretch[k]):
            m.d.sync += stretch.eq(stretch + 1)
        m.d.comb += self.led_error.eq(~stretch[k])
