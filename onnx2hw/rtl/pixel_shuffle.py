"""PixelShuffleUnit: DepthToSpace and SpaceToDepth on a channels-last stream, through a
double-buffered bank of rows read out in the output's order."""
from __future__ import annotations

from amaranth.hdl import Module, Signal
from amaranth.lib import memory, stream, wiring
from amaranth.lib.wiring import In, Out

from . import _blockparams as _p
from ._linebuf import Counter, ram_cost
from .cost import Cost

__all__ = ["PixelShuffleUnit", "OPS", "MODES", "bench_config"]

OPS = ("depth_to_space", "space_to_depth")
MODES = ("DCR", "CRD")


class PixelShuffleUnit(wiring.Component):
    """Sub-pixel reordering of an NHWC stream by a block of ``r x r`` pixels.

    With ``(H, W)`` = ``(height, width)``, ``C`` = ``channels`` and ``r`` = ``block``:

    * ``depth_to_space``: input ``(H, W, C*r*r)`` -> output ``(H*r, W*r, C)``,
      ``y[h*r + i, w*r + j, c] = x[h, w, k]`` with ``k = (i*r + j)*C + c`` (mode ``DCR``) or
      ``k = c*r*r + i*r + j`` (mode ``CRD``, PyTorch's PixelShuffle);
    * ``space_to_depth``: input ``(H*r, W*r, C)`` -> output ``(H, W, C*r*r)``,
      ``y[h, w, k] = x[h*r + i, w*r + j, c]`` with ``k`` as above.

    Parameters
    ----------
    elem_shape : ShapeLike
        Lane shape (input and output).
    op : {"depth_to_space", "space_to_depth"}
    height, width, channels : int
        The deep side's image size and the shallow side's channels (above).
    block : int
        ``r`` (>= 1).
    mode : {"DCR", "CRD"}
        Channel order of the deep side; ``CRD`` only with one lane (its words would gather
        channels ``r*r`` apart: permute the deep side's channels to or from DCR order beside it).
    lanes : int
        Channels per transfer on both ports; divides ``channels``.

    A *bank* is what one output row reads: one input row (depth to space) or ``r`` input rows
    (space to depth), ``bank`` words of ``lanes`` values. The memory holds two banks: the input
    writes one, in arrival order, while the output reads the other in its own order (a loop
    nest of constant strides over the bank's words, the address stepped by one adder), so
    input and output each move one transfer per cycle once the first bank is full. A bank is
    written only while not full and read only while full. Latency: one bank of input, then 2
    cycles (block-RAM read and output register). ``i.ready`` is the write bank's empty flag (a
    register); ``o.valid``/``o.payload`` are registers held while ``o`` stalls (global enable
    ``~o.valid | o.ready``), so ``o.valid`` never depends on ``o.ready``.

    Ports: ``i`` (in), ``o`` (out).
    """

    LATENCY_IN_FILL = True

    def __init__(self, elem_shape, op: str, height: int, width: int, channels: int, block: int, mode: str = "DCR",
                 lanes: int = 1):
        (self.elem_shape, self.op, self.height, self.width, self.channels, self.block, self.mode,
         self.lanes) = _params(elem_shape, op, height, width, channels, block, mode, lanes)
        self.bank, self.loops = _nest(self.op, self.width, self.channels // self.lanes, self.block, self.mode)
        layout = _p.lanes_layout(self.elem_shape, self.lanes)
        super().__init__({"i": In(stream.Signature(layout)), "o": Out(stream.Signature(layout))})

    def elaborate(self, platform):
        m = Module()
        depth = self.bank
        word = self.elem_shape.width * self.lanes
        m.submodules.banks = mem = memory.Memory(shape=word, depth=2 * depth, init=[])
        wr, rd = mem.write_port(), mem.read_port()
        full = [Signal(name=f"full{b}") for b in range(2)]
        wbank, rbank = Signal(), Signal()
        wptr = Counter(depth, "wptr")
        loops = [(Counter(n, f"loop{k}"), step) for k, (n, step) in enumerate(_steps(self.loops))]
        raddr = Signal(range(depth))
        en = Signal()
        can_write, can_read = Signal(), Signal()
        m.d.comb += [
            en.eq(~self.o.valid | self.o.ready),
            can_write.eq(~(full[1] & wbank | full[0] & ~wbank)),
            can_read.eq(full[1] & rbank | full[0] & ~rbank),
            self.i.ready.eq(can_write),
        ]
        write = self.i.valid & can_write
        read = en & can_read
        m.d.comb += [
            wr.addr.eq(wptr.value + wbank * depth), wr.data.eq(self.i.payload.as_value()), wr.en.eq(write),
            rd.addr.eq(raddr + rbank * depth), rd.en.eq(en),
        ]
        wdone = write & wptr.last
        rdone = read
        for c, _ in loops:
            rdone = rdone & c.last
        with m.If(write):
            m.d.sync += wptr.wrap()
            with m.If(wptr.last):
                m.d.sync += wbank.eq(~wbank)
        for b in range(2):
            with m.If(wdone & (wbank == b)):
                m.d.sync += full[b].eq(1)
            with m.Elif(rdone & (rbank == b)):
                m.d.sync += full[b].eq(0)
        with m.If(read):
            # the innermost loop not at its last steps; the loops inside it restart
            with m.If(rdone):
                m.d.sync += [raddr.eq(0), rbank.eq(~rbank)]
                m.d.sync += [s for c, _ in loops for s in c.clear()]
            for k in reversed(range(len(loops))):
                c, step = loops[k]
                inner_last = ~c.last
                for ci, _ in loops[k + 1:]:
                    inner_last = inner_last & ci.last
                with m.If(inner_last):
                    m.d.sync += [raddr.eq(raddr + step), *c.inc()]
                    m.d.sync += [s for ci, _ in loops[k + 1:] for s in ci.clear()]
        with m.If(en):
            m.d.sync += self.o.valid.eq(can_read)
        m.d.comb += self.o.payload.eq(rd.data)
        return m

    @staticmethod
    def estimate(elem_shape, op: str, height: int, width: int, channels: int, block: int, mode: str = "DCR",
                 lanes: int = 1, family: str = "ecp5") -> Cost:
        """The two banks (:func:`ram_cost`) plus about 12 LUTs per loop counter and 30 of
        control; cycles = transfers per inference (input and output alike)."""
        shape, op, h, w, c, r, mode, lanes = _params(elem_shape, op, height, width, channels, block, mode, lanes)
        bank, loops = _nest(op, w, c // lanes, r, mode)
        ram = ram_cost(2 * bank, shape.width * lanes, _p.family(family))
        n = len([1 for count, _ in loops if count > 1]) + 1
        cycles = h * bank
        return Cost(cycles, bank + 2, ram.lut + 4 * ram.lutram + 12 * n + 30, ram.ff + shape.width * lanes + 8 * n + 8,
                    0, ram.ebr)


def _nest(op: str, width: int, groups: int, r: int, mode: str):
    """``(bank words, loops)``: the read order over one bank as ``(count, stride)`` word loops,
    outermost first (``groups`` = words per ``channels``)."""
    g = groups
    if op == "space_to_depth":   # bank: r input rows of width*r pixels; out (x, i, j, g) or (x, c, i, j)
        if mode == "DCR":
            return r * width * r * g, ((width, r * g), (r, width * r * g), (r, g), (g, 1))
        return r * width * r * g, ((width, r * g), (g, 1), (r, width * r * g), (r, g))
    if mode == "DCR":            # bank: one input row of width pixels of r*r*g words; out (i, x, j, g)
        return width * r * r * g, ((r, r * g), (width, r * r * g), (r, g), (g, 1))
    return width * r * r * g, ((r, r), (width, r * r * g), (r, 1), (g, r * r))


def _steps(loops):
    """Per loop of more than one count, the address step when it advances: its stride less
    what the loops inside it had advanced (they restart at 0)."""
    kept = [(n, s) for n, s in loops if n > 1]
    return [(n, s - sum((ni - 1) * si for ni, si in kept[k + 1:])) for k, (n, s) in enumerate(kept)]


def _params(elem_shape, op, height, width, channels, block, mode, lanes):
    shape = _p.elem_shape(elem_shape)
    if op not in OPS:
        raise ValueError(f"op must be one of {OPS!r}, not {op!r}")
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES!r}, not {mode!r}")
    h, w, c = (_p.positive_int(v, n) for v, n in ((height, "height"), (width, "width"), (channels, "channels")))
    r, lanes = _p.positive_int(block, "block"), _p.positive_int(lanes, "lanes")
    if c % lanes:
        raise ValueError(f"lanes {lanes!r} must divide channels {c!r}")
    if mode == "CRD" and lanes != 1 and r > 1:
        raise ValueError(f"mode 'CRD' needs lanes 1 (its words gather channels {r * r} apart), not {lanes!r}")
    return shape, op, h, w, c, r, mode, lanes


def bench_config():
    """Representative configuration for ``bench.rtl`` (name, factory, feeds, expect): 2x depth
    to space of a 16x16x64 8-bit map, 4 lanes."""
    import numpy as np
    from amaranth.hdl import signed
    x = np.random.default_rng(0).integers(-128, 128, size=(16 * 16 * 64 // 4, 4))
    return [("PixelShuffle s8 16x16x64 r2 x4", lambda: PixelShuffleUnit(signed(8), "depth_to_space", 16, 16, 16, 2,
                                                                         "DCR", 4), {"i": x}, {"o": len(x)})]
