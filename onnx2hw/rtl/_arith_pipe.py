"""Pipeline plumbing shared by the arithmetic blocks (MVU, depthwise, Requantize, Thresholds, Add).

The large blocks use a *free-running* pipeline: no register of the datapath has a clock enable
(a stall enable fanning out to thousands of flip-flops across the chip would be the slowest net
of a design). Flow control is by credits: a work item enters the pipeline only while its result
has a place reserved in the block's :class:`OutputQueue`, a small FIFO on the output, so the
pipeline never has to stop. ``i.ready`` and the credit test are functions of registers only.
Small blocks keep a one-register stage (:func:`register_stage`).
"""
from __future__ import annotations

from dataclasses import replace

from amaranth.hdl import Const, Mux, Signal, Value, unsigned
from amaranth.lib import data, memory

from ._linebuf import ebr_slices, ebr_tiling, row_mux
from .replicate import BANK_BITS, banked_memory, replicas
from .fifo import StreamFIFO


def queue_depth(stages: int, beats: int = 1) -> int:
    """Entries an :class:`OutputQueue` needs so that credits never throttle a pipeline of
    ``stages`` registers (issue to output register) producing one result every ``beats`` cycles:
    a credit comes back ``stages + 3`` cycles after it was taken (the FIFO's two-cycle latency
    and the registered credit test), plus one entry of slack; at least 3 (a buffered FIFO)."""
    if stages < 1 or beats < 1:
        raise ValueError(f"stages and beats must be positive, not {stages!r}, {beats!r}")
    return max(3, -(-(stages + 3) // beats) + 1)


class OutputQueue:
    """Credit-controlled output FIFO of a free-running pipeline, driving stream ``o``.

    The caller issues a work item only while ``ok`` (a register) is high, sets ``reserve`` in
    the cycle it issues an item that will produce a result, and later drives ``valid`` (one
    cycle per result, no back-pressure) with ``data`` (a View of ``o.payload``'s layout). The
    FIFO (:class:`~onnx2hw.rtl.fifo.StreamFIFO` of ``depth`` entries, see :func:`queue_depth`)
    can never overflow: ``free`` counts entries neither reserved nor occupied. ``o.valid`` and
    ``o.payload`` come from the FIFO's registers/memory (a ``SyncFIFOBuffered``: at least 3
    entries), :attr:`LATENCY` cycles after ``valid``.
    """

    LATENCY = 2

    def __init__(self, m, o, depth: int, name: str = "oq"):
        layout = o.payload.shape()
        self.depth = depth
        self.fifo = StreamFIFO(layout.elem_shape, layout.length, depth)
        m.submodules[name] = q = self.fifo
        self.data = Signal(layout, name=f"{name}_data")
        self.valid = Signal(name=f"{name}_valid")
        self.reserve = Signal(name=f"{name}_reserve")
        self.ok = Signal(init=1, name=f"{name}_ok")
        free = Signal(range(depth + 1), init=depth, name=f"{name}_free")
        pop = Signal(name=f"{name}_pop")
        m.d.comb += [
            q.i.valid.eq(self.valid), q.i.payload.eq(self.data),
            o.valid.eq(q.o.valid), o.payload.eq(q.o.payload), q.o.ready.eq(o.ready),
            pop.eq(q.o.valid & o.ready),
        ]
        nxt = Signal(range(depth + 1), name=f"{name}_free_next")
        m.d.comb += nxt.eq(free)
        with m.If(pop & ~self.reserve):
            m.d.comb += nxt.eq(free + 1)
        with m.Elif(self.reserve & ~pop):
            m.d.comb += nxt.eq(free - 1)
        m.d.sync += [free.eq(nxt), self.ok.eq(nxt != 0)]
        #: ``ok`` of the next cycle (for a caller's registers that fold ``ok`` in)
        self.ok_next = nxt != 0

    @staticmethod
    def estimate(o_shape, lanes: int, depth: int, family: str = "ecp5"):
        """Cost of the queue (the FIFO's plus the credit counter); add it to the pipeline's:
        ``latency`` is the FIFO's."""
        c = StreamFIFO.estimate(o_shape, lanes, depth, family=family)
        bits = depth.bit_length()
        return replace(c, lut=c.lut + 2 * bits + 2, ff=c.ff + bits + 1)


def register_stage(m, i, o) -> Value:
    """Handshake of a one-register stage from stream ``i`` to ``o``: ``i.ready = ~o.valid | o.ready``,
    ``o.valid`` a register set by an accepted transfer and cleared once taken. Returns the accept
    condition (``i.valid & i.ready``); the caller registers ``o.payload`` under it."""
    m.d.comb += i.ready.eq(~o.valid | o.ready)
    with m.If(o.valid & o.ready):
        m.d.sync += o.valid.eq(0)
    accept = i.valid & i.ready
    with m.If(accept):
        m.d.sync += o.valid.eq(1)
    return accept


def delay(m, en, value, stages, name="d", reset_less=False):
    """``value`` delayed by ``stages`` enabled clock edges (list of every stage, index 0 = value)."""
    out = [value]
    for k in range(stages):
        shape = value.shape() if isinstance(value, data.View) else Value.cast(value).shape()
        r = Signal(shape, name=f"{name}{k + 1}", reset_less=reset_less)
        with m.If(en):
            m.d.sync += r.eq(out[-1])
        out.append(r)
    return out


def register_operands(m, en, xs, ws):
    """Register both factor lists of a product array (a pipeline stage in front of DSP
    multipliers, updated when ``en``); returns the registered ``(xs, ws)``."""
    xr = [Signal(v.shape(), name=f"x_r{j}") for j, v in enumerate(xs)]
    wr = [Signal(v.shape(), name=f"w_r{j}") for j, v in enumerate(ws)]
    with m.If(en):
        m.d.sync += [r.eq(v) for r, v in zip(xr + wr, xs + ws)]
    return xr, wr


#: ROMs of at most this many words are LUT logic (Yosys), deeper ones block RAM
LUT_ROM_WORDS = 64

#: ... unless they hold at most this many bits (Yosys ``synth_ecp5`` maps 65x32 and 512x4 to
#: logic, 144x16 and 512x8 to one DP16KD)
ROM_LOGIC_BITS = 2080

#: fabric registers each block row of a registered block-RAM ROM is read through before the
#: row select: the placer may put a single one beside its consumers, far from its block RAM,
#: whose read data is late (:mod:`~.ram_outreg`); a chain of two lets it split the distance
ROM_LANDING = 2


def rom_cost(depth: int, width: int) -> tuple[int, int]:
    """``(EBR blocks, LUT4s)`` of a ``depth`` x ``width`` :func:`rom` as Yosys maps it on ECP5
    (in logic about 1.4 LUT4 per bit per 16 words)."""
    if depth <= 1:
        return 0, 0
    if depth <= LUT_ROM_WORDS or depth * width <= ROM_LOGIC_BITS:
        return 0, int(1.4 * width * -(-depth // 16))
    return ebr_tiling(depth, width)[0], 0


def rom_latency(depth: int, ebr_register: bool = False, replicated: bool = False) -> int:
    """Cycles from address to data of a ``depth``-word :func:`rom`: with ``ebr_register`` in
    block RAM 4 (the read, :data:`ROM_LANDING` row registers, the landing register after the
    row select), or 5 when ``replicated`` (``ebr_register`` with ``addr_next``), else 1."""
    if not ebr_register or depth <= LUT_ROM_WORDS:
        return 1
    return ROM_LANDING + 2 + (1 if replicated else 0)


def rom_register_cost(depth: int, width: int, addr_next: bool = False) -> tuple[int, int]:
    """``(LUT4, FF)`` that ``ebr_register`` adds to a ``depth`` x ``width`` :func:`rom`: the
    :data:`ROM_LANDING` registers per block row, the multiplexer after them and the landing
    register after it (with ``addr_next``: the address replicas too)."""
    if rom_latency(depth, ebr_register=True) == 1:
        return 0, 0
    words = ebr_tiling(depth, width)[1]
    rows = -(-depth // words)
    slices = len(ebr_slices(depth, width)) if addr_next else 0
    return (rows - 1) * width, (ROM_LANDING * rows + 1) * width + rows * slices * (words - 1).bit_length()


def rom(m, words, width, addr, en, name, addr_next=None, ebr_register=False):
    """Synchronous-read ROM of ``words`` (``width``-bit ints); latency :func:`rom_latency`,
    holds when ``en`` is low.

    A one-word ROM is a constant (the data is valid from reset on). With ``addr_next`` (the
    next value of the register ``addr``, and ``en`` constant 1) a wide LUT ROM is banked, each
    bank reading its own replica of ``addr`` (``replicate.banked_memory``). With
    ``ebr_register`` a block RAM ROM is split by depth into one memory per block row
    (:func:`ebr_tiling`), each read through its own :data:`ROM_LANDING` fabric registers, and
    the rows' last registers are multiplexed into a landing register (latency 4): a block RAM's
    read data is late (:mod:`~.ram_outreg`), so it meets neither Yosys's depth multiplexer nor a
    route across the chip before a register; with no register after the multiplexer, the placer
    pulls the row registers away from their blocks towards the consumer.
    With ``addr_next`` too (``addr`` is a register, ``en`` constant 1) each block row is also
    split by width, every
    :data:`~._linebuf.EBR_PER_ADDR` blocks reading their own copy of ``addr`` registered once more
    (latency 5).
    """
    words = [int(w) for w in words]
    if len(words) == 1:
        return Const(words[0], unsigned(max(width, 1)))
    if addr_next is not None and len(words) <= LUT_ROM_WORDS and width > BANK_BITS:
        return banked_memory(m, width, len(words), addr_next=addr_next, init=words, name=name)
    if rom_latency(len(words), ebr_register) > 1:
        return _registered_block_rom(m, words, width, addr, en, name, replicated=addr_next is not None)
    mem = memory.Memory(shape=unsigned(width), depth=len(words), init=words)
    m.submodules[name] = mem
    rd = mem.read_port()
    m.d.comb += [rd.addr.eq(addr), rd.en.eq(en)]
    return rd.data


def _registered_block_rom(m, words, width, addr, en, name, replicated=False):
    """:func:`rom` ``ebr_register`` case: the row memories, their registers and the row select.
    ``replicated``: each row is split by width (:func:`~._linebuf.ebr_slices`), each slice
    addressed by its own copy of ``addr`` one cycle late, so that the address fans out from a
    register to registers only (one address register driving every block of a deep ROM is a net
    across the chip, and so is its next value routed to replicas)."""
    rows = ebr_tiling(len(words), width)[1]
    lo = (rows - 1).bit_length()
    slices = ebr_slices(len(words), width) if replicated else [(0, width)]
    regs = []
    for c in range(0, len(words), rows):
        part = words[c:c + rows]
        abits = max(1, (len(part) - 1).bit_length())
        r = Signal(width, name=f"{name}{c // rows}_q", reset_less=True)
        for j, (b, hi) in enumerate(slices):
            k = f"{c // rows}" if len(slices) == 1 else f"{c // rows}_{j}"
            mem = memory.Memory(shape=unsigned(hi - b), depth=len(part),
                                init=[(w >> b) & ((1 << (hi - b)) - 1) for w in part])
            m.submodules[f"{name}{k}"] = mem
            rd = mem.read_port()
            a = replicas(m, addr, 1, f"{name}{k}_a", init=addr.init, copy=True)[0] if replicated else addr
            m.d.comb += [rd.addr.eq(a[:abits]), rd.en.eq(en)]
            with m.If(en):
                m.d.sync += r[b:hi].eq(rd.data)
        regs.append(delay(m, en, r, ROM_LANDING - 1, name=f"{name}{c // rows}_q", reset_less=True)[-1])
    if len(regs) == 1:
        out = regs[0]
    else:
        sel = delay(m, en, addr[lo:], ROM_LANDING + 1 + (1 if replicated else 0), name=f"{name}_sel")[-1]
        out = row_mux(regs, sel)
    land = Signal(width, name=f"{name}_land", reset_less=True)
    with m.If(en):
        m.d.sync += land.eq(out)
    return land


def pack_words(rows, width):
    """Pack rows of non-negative field values (each ``width`` bits, element 0 lowest) into ints."""
    out = []
    for row in rows:
        w = 0
        for k, v in enumerate(row):
            w |= (int(v) & ((1 << width) - 1)) << (k * width)
        out.append(w)
    return out


def queued(cost, o_shape, lanes: int, stages: int, beats: int = 1, family: str = "ecp5"):
    """``cost`` of a free-running pipeline of ``stages`` registers plus its :class:`OutputQueue`
    for ``lanes`` lanes of ``o_shape``, one result per ``beats`` cycles."""
    return cost + OutputQueue.estimate(o_shape, lanes, queue_depth(stages, beats), family)


def channel_front(m, i, o, pe: int, nf: int, acc_bits: int, stages: int):
    """Front of a free-running per-channel stream block (Requantize, Thresholds) of ``stages``
    registers: the :class:`OutputQueue` (the caller drives its ``valid``/``data``), the take
    (``i.ready`` is the queue's credit register), a fold counter over the ``nf`` channel groups
    and the registered input word (stage 1). Returns ``(q, fold, x1, v1)``."""
    q = OutputQueue(m, o, queue_depth(stages))
    take = Signal()
    m.d.comb += [i.ready.eq(q.ok), take.eq(i.valid & q.ok), q.reserve.eq(take)]
    fold = Signal(range(nf), name="fold")
    with m.If(take):
        m.d.sync += fold.eq(Mux(fold == nf - 1, 0, fold + 1))
    x1 = Signal(pe * acc_bits, name="x1")
    v1 = Signal(name="v1")
    m.d.sync += [x1.eq(i.payload), v1.eq(take)]
    return q, fold, x1, v1
