"""Register replicas for high-fanout control, and memories split into banks that each read
their own replica of the address.

A register driving hundreds of cells (the address of a 640-bit-wide LUT RAM, the select of a
640-bit multiplexer) is one net spread across a block's whole area, many times the delay of a
local net. Neither Yosys nor nextpnr duplicates registers, and Yosys'
``opt_merge`` merges identical ones, so the replicas are marked (wire attribute
:data:`REPLICA_ATTR`) and :data:`YOSYS_KEEP_REPLICAS`, run right after ``proc``, puts ``keep`` on
the flip-flops that drive marked wires: ``opt_merge`` leaves two cells alone when both have
``keep``. Simulation sees ordinary registers with the same value.
"""
from __future__ import annotations

from amaranth.hdl import Mux, Signal, Value, unsigned
from amaranth.lib import memory

__all__ = ["REPLICA_ATTR", "YOSYS_KEEP_REPLICAS", "COLLISION_X_ATTR", "YOSYS_COLLISION_X", "BANK_BITS", "replicas", "banks_of", "banked_memory"]

#: wire attribute naming a replica register
REPLICA_ATTR = "onnx2hw_replica"
#: Yosys command (after ``proc``): keep the flip-flops that drive replica wires
YOSYS_KEEP_REPLICAS = f"setattr -set keep 1 a:{REPLICA_ATTR} %ci1 t:$dff %i"
#: attribute of a memory with one read and one write port whose read data is never used in a
#: cycle that writes the address read: Yosys otherwise keeps the old word on such a collision
#: by registering the write and multiplexing it after the RAM's read data (a LUT between a block
#: RAM's late read data and its first register, see :mod:`~.ram_outreg`, and a register per bit)
COLLISION_X_ATTR = "onnx2hw_collision_x"
#: Yosys commands (after ``proc``): gather each memory into one cell and mark the read of the
#: memories with :data:`COLLISION_X_ATTR` undefined on a collision
YOSYS_COLLISION_X = (f"memory_collect a:{COLLISION_X_ATTR}; "
                     f"setparam -set RD_COLLISION_X_MASK 1'1 a:{COLLISION_X_ATTR} t:$mem_v2 %i")
#: widest slice of a bank (a multiple of the 4-bit distributed-RAM cell)
BANK_BITS = 64


def replicas(m, nxt, count: int, name: str, init: int = 0, copy: bool = False) -> list[Signal]:
    """``count`` registers all loaded with ``nxt`` every cycle (the next value of one of the
    caller's registers, whose ``init`` they share, so each replica always equals it), kept
    apart through synthesis.

    ``copy``: ``nxt`` is itself a register (the replicas follow it a cycle late); they then
    take no reset (the reset holds ``nxt`` at its ``init`` for longer than a cycle): a reset
    gated into each replica's data becomes one LUT that Yosys shares between all the replicas,
    a net across the chip again."""
    nxt = Value.cast(nxt)
    out = []
    for k in range(count):
        r = Signal(nxt.shape(), name=f"{name}_rep{k}", init=init, reset_less=copy, attrs={REPLICA_ATTR: 1})
        m.d.sync += r.eq(nxt)
        out.append(r)
    return out


def banks_of(width: int) -> list[tuple[int, int]]:
    """Bit ranges ``[(lo, hi)]`` of at most :data:`BANK_BITS` (4-bit aligned) covering ``width``."""
    n = -(-width // BANK_BITS)
    step = -(-(-(-width // n)) // 4) * 4
    return [(lo, min(lo + step, width)) for lo in range(0, width, step)]


def banked_memory(m, width: int, depth: int, *, addr_next, init=None, write=None, name="bank"):
    """A ``width`` x ``depth`` distributed RAM (``write = (data, en)``) or LUT ROM (``init``)
    split into :func:`banks_of` slices, each addressed by its own replica of the caller's
    address register (loaded from its next value ``addr_next``, init 0). Returns the read data,
    registered: ``mem[addr]`` one cycle after ``addr`` (as ``Memory.read_port()``, always
    enabled). A write stores ``data`` at ``addr`` when ``en`` (read-before-write in that cycle).

    The write is carried out one cycle late, from registers (``data`` once, ``en`` and the
    address replicated per bank), so that a combinational ``en`` drives a few flip-flops rather
    than the write enable of every RAM cell across the banks; a read of the address written in
    the cycle before takes the pending data instead of the RAM's, so reads see exactly what an
    immediate write would give. That choice is a register per bank (``en`` and an unchanged
    address, computed a cycle ahead): a compare of the bank's address registers after the RAM's
    read would be a LUT routed to all its bits."""
    slices = banks_of(width)
    addrs = replicas(m, addr_next, len(slices), f"{name}_a")
    out = Signal(width, name=f"{name}_q")
    if write is not None:
        wdata = Signal(width, name=f"{name}_wd", reset_less=True)
        m.d.sync += wdata.eq(write[0])
        wens = replicas(m, write[1], len(slices), f"{name}_we")
    for b, (lo, hi) in enumerate(slices):
        words = [(int(w) >> lo) & ((1 << (hi - lo)) - 1) for w in (init or [])]
        mem = memory.Memory(shape=unsigned(hi - lo), depth=depth, init=words)
        m.submodules[f"{name}{b}"] = mem
        rp = mem.read_port(domain="comb")
        m.d.comb += rp.addr.eq(addrs[b])
        if write is None:
            m.d.sync += out[lo:hi].eq(rp.data)
            continue
        waddr = replicas(m, addrs[b], 1, f"{name}_wa{b}", copy=True)[0]
        hit = replicas(m, write[1] & (addrs[b] == addr_next), 1, f"{name}_hit{b}")[0]
        wp = mem.write_port()
        m.d.comb += [wp.addr.eq(waddr), wp.data.eq(wdata[lo:hi]), wp.en.eq(wens[b])]
        m.d.sync += out[lo:hi].eq(Mux(hit, wdata[lo:hi], rp.data))
    return out
