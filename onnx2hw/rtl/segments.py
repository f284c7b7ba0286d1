"""One stream carrying several tensors one after the other, split into a stream per tensor and
joined back: the accelerator's boundary for a model with several inputs or outputs."""
from __future__ import annotations

from amaranth.hdl import Module, Signal, unsigned
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from . import _blockparams as _p
from .cost import Cost

__all__ = ["SegmentSplit", "SegmentJoin", "bench_config"]


def _segments(shapes, counts, what: str) -> tuple[tuple, tuple[int, ...]]:
    """Checked element shapes and transfer counts of the segments (two or more of each, equal in number)."""
    if not isinstance(shapes, (tuple, list)) or len(shapes) < 2:
        raise ValueError(f"{what} must be a sequence of at least two shapes, not {shapes!r}")
    if not isinstance(counts, (tuple, list)) or len(counts) != len(shapes):
        raise ValueError(f"counts must be a sequence of {len(shapes)} transfer counts (one per segment), "
                         f"not {counts!r}")
    shapes = tuple(_p.elem_shape(s, f"{what}[{k}]") for k, s in enumerate(shapes))
    counts = tuple(_p.positive_int(c, f"counts[{k}]") for k, c in enumerate(counts))
    return shapes, counts


def _position(m: Module, counts: tuple[int, ...]):
    """The segment being streamed (one-hot ``hot``) and its transfers left after the current
    one (``left``), as registers; returns ``(hot, last, advance)``: ``last`` is high on the
    segment's last transfer, and driving ``advance`` high counts one transfer (after the
    last segment's last transfer the first segment comes next)."""
    n = len(counts)
    hot = Signal(n, init=1, name="segment")
    left = Signal(max(1, (max(counts) - 1).bit_length()), init=counts[0] - 1, name="left")
    last = Signal(name="last")
    advance = Signal(name="advance")
    reload = 0
    for k in range(n):      # the next segment's count, selected by the one-hot current segment
        reload = reload | (hot[k].replicate(len(left)) & (counts[(k + 1) % n] - 1))
    m.d.comb += last.eq(left == 0)
    with m.If(advance):
        with m.If(last):
            m.d.sync += [hot.eq(hot.rotate_left(1)), left.eq(reload)]
        with m.Else():
            m.d.sync += left.eq(left - 1)
    return hot, last, advance


def _cost(counts, lanes: int, mux_bits: int, family: str) -> Cost:
    """The segment counter and its reload, the one-hot segment and its gates, and ``mux_bits``
    bits of a one-hot multiplexer of the segments' payloads."""
    _p.family(family)
    n, cbits = len(counts), max(1, (max(counts) - 1).bit_length())
    return Cost(sum(counts), 0, lut=3 * cbits + 2 * n + mux_bits * (n - 1), ff=cbits + n, dsp=0, ebr=0)


class SegmentSplit(wiring.Component):
    """Split a stream of consecutive segments into one stream per segment.

    Per round (one inference), the first ``counts[0]`` transfers of ``i`` leave on ``o0``,
    the next ``counts[1]`` on ``o1``, and so on; then the next round starts at ``o0``. Each
    lane is converted to its output's element shape by keeping its low bits (value-preserving
    for every value the output shape holds: the input element is a common type wide enough
    for all segments). Lane counts do not change: a link after the block converts them.

    Parameters
    ----------
    in_shape : ShapeLike
        Element shape of ``i``.
    lanes : int
        Lanes per transfer, on ``i`` and on every output.
    out_shapes : sequence of ShapeLike
        Element shape of each output (two or more).
    counts : sequence of int
        Transfers of each segment per round.

    Latency 0 (``i`` passes to the current output through wires), one transfer per cycle.
    ``oK.valid = i.valid & (segment == K)`` does not depend on any ready; ``oK.payload`` is
    ``i.payload``, held because ``i`` honours the stream rules and the segment changes only on
    a transfer; ``i.ready`` is the current output's ready (combinational).

    Deadlock freedom: segment ``K`` is taken whole before segment ``K + 1`` starts. A consumer
    that needs two segments at once (a layer joining two model inputs) would wait for ``K + 1``
    while this block waits for it to take the rest of ``K``; so the link from every output but
    the last buffers its whole segment (the dataflow compiler sizes its FIFO so, or the FIFOs
    of a fork's branches do), and this block never waits on an output that waits for a later one.

    Ports: ``i`` (in), ``o0`` ... ``o{n-1}`` (out).
    """

    def __init__(self, in_shape, lanes: int, out_shapes, counts):
        self.in_shape = _p.elem_shape(in_shape, "in_shape")
        self.lanes = _p.positive_int(lanes, "lanes")
        self.out_shapes, self.counts = _segments(out_shapes, counts, "out_shapes")
        ports = {"i": In(stream.Signature(_p.lanes_layout(self.in_shape, self.lanes)))}
        ports.update({f"o{k}": Out(stream.Signature(_p.lanes_layout(s, self.lanes)))
                      for k, s in enumerate(self.out_shapes)})
        super().__init__(ports)

    @property
    def outputs(self) -> list:
        return [getattr(self, f"o{k}") for k in range(len(self.counts))]

    def elaborate(self, platform):
        m = Module()
        hot, _last, advance = _position(m, self.counts)
        ready = 0
        for k, o in enumerate(self.outputs):
            m.d.comb += o.valid.eq(self.i.valid & hot[k])
            m.d.comb += [o.payload[j].eq(self.i.payload[j]) for j in range(self.lanes)]
            ready = ready | (hot[k] & o.ready)
        m.d.comb += [self.i.ready.eq(ready), advance.eq(self.i.valid & self.i.ready)]
        return m

    @staticmethod
    def estimate(in_shape, lanes: int, out_shapes, counts, family: str = "ecp5") -> Cost:
        """Counter and gates; the payload is wires. ``cycles``: transfers per round."""
        _p.elem_shape(in_shape, "in_shape")
        _p.positive_int(lanes, "lanes")
        _shapes, counts = _segments(out_shapes, counts, "out_shapes")
        return _cost(counts, lanes, 0, family)


class SegmentJoin(wiring.Component):
    """Join one stream per segment into one stream of consecutive segments.

    Per round (one inference), ``counts[0]`` transfers are taken from ``i0`` and sent on ``o``,
    then ``counts[1]`` from ``i1``, and so on; then the next round starts at ``i0``. Each lane
    is converted to the output's element shape value-preservingly (sign- or zero-extended:
    ``out_shape`` holds every input's values). Lane counts do not change.

    Parameters
    ----------
    in_shapes : sequence of ShapeLike
        Element shape of each input (two or more).
    lanes : int
        Lanes per transfer, on every input and on ``o``.
    out_shape : ShapeLike
        Element shape of ``o``.
    counts : sequence of int
        Transfers of each segment per round.

    Latency 0 (the current input passes to ``o`` through a multiplexer), one transfer per
    cycle. ``o.valid`` is the current input's valid and ``o.payload`` its payload, both held
    by that input until the transfer (the segment changes only on a transfer), so ``o``
    honours the stream rules; ``iK.ready = o.ready & (segment == K)`` (combinational).

    Deadlock freedom: segment ``K + 1`` is taken only after all of segment ``K``. A producer
    of a later segment that cannot finish its output may hold up the producer of an earlier
    one (they share a layer before them), so the link into every input but the first buffers
    its whole segment (the dataflow compiler sizes its FIFO so, or the FIFOs of a fork's
    branches do): no producer ever waits on this block for a segment it has not reached.

    Ports: ``i0`` ... ``i{n-1}`` (in), ``o`` (out).
    """

    def __init__(self, in_shapes, lanes: int, out_shape, counts):
        self.in_shapes, self.counts = _segments(in_shapes, counts, "in_shapes")
        self.lanes = _p.positive_int(lanes, "lanes")
        self.out_shape = _p.elem_shape(out_shape, "out_shape")
        ports = {f"i{k}": In(stream.Signature(_p.lanes_layout(s, self.lanes))) for k, s in enumerate(self.in_shapes)}
        ports["o"] = Out(stream.Signature(_p.lanes_layout(self.out_shape, self.lanes)))
        super().__init__(ports)

    @property
    def inputs(self) -> list:
        return [getattr(self, f"i{k}") for k in range(len(self.counts))]

    def elaborate(self, platform):
        m = Module()
        hot, _last, advance = _position(m, self.counts)
        width = self.out_shape.width
        valid = 0
        lanes = [0] * self.lanes
        for k, i in enumerate(self.inputs):
            m.d.comb += i.ready.eq(hot[k] & self.o.ready)
            valid = valid | (hot[k] & i.valid)
            for j in range(self.lanes):
                wide = Signal(self.out_shape, name=f"i{k}_lane{j}")
                m.d.comb += wide.eq(i.payload[j])
                lanes[j] = lanes[j] | (hot[k].replicate(width) & wide.as_unsigned())
        m.d.comb += [self.o.valid.eq(valid), advance.eq(self.o.valid & self.o.ready)]
        m.d.comb += [self.o.payload[j].eq(lanes[j]) for j in range(self.lanes)]
        return m

    @staticmethod
    def estimate(in_shapes, lanes: int, out_shape, counts, family: str = "ecp5") -> Cost:
        """Counter, gates and the payload's one-hot multiplexer."""
        _shapes, counts = _segments(in_shapes, counts, "in_shapes")
        lanes = _p.positive_int(lanes, "lanes")
        width = _p.elem_shape(out_shape, "out_shape").width
        return _cost(counts, lanes, lanes * width, family)


def bench_config():
    """Representative configurations for ``bench.rtl`` (name, factory, feeds, expect)."""
    import numpy as np
    from amaranth.hdl import signed
    rng = np.random.default_rng(0)
    x = rng.integers(-8, 8, size=(300 * 7, 4))
    a, b = rng.integers(0, 256, size=(300 * 4, 4)), rng.integers(-8, 8, size=(300 * 3, 4))
    return [("SegmentSplit s9x4 -> u8/s4 (4+3)",
             lambda: SegmentSplit(signed(9), 4, (unsigned(8), signed(4)), (4, 3)), {"i": x},
             {"o0": 1200, "o1": 900}),
            ("SegmentJoin u8/s4 x4 -> s9 (4+3)",
             lambda: SegmentJoin((unsigned(8), signed(4)), 4, signed(9), (4, 3)), {"i0": a, "i1": b},
             {"o": 2100})]
