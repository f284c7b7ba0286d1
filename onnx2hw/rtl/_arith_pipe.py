"""Pipeline plumbing shared by the arithmetic blocks (MVU, Requantize, Thresholds).

The blocks use a *global-enable* pipeline: every stage register advances when ``en`` is high,
with ``en = ~o.valid | o.ready`` (the last stage is the output register). The input side has a
one-entry skid register so that ``i.ready`` is a flip-flop: ready paths never chain
combinationally through several blocks.
"""
from __future__ import annotations

from amaranth.hdl import Const, Mux, Signal, Value, unsigned
from amaranth.lib import data, memory


def input_skid(m, port, take, name="i"):
    """One-entry skid register in front of a consumer.

    Returns ``(valid, payload)`` of the buffered-or-direct source; ``take`` (driven by the caller,
    may depend on ``valid``) consumes it. ``port.ready`` is a register: high while the skid is empty.
    """
    width = Value.cast(port.payload).shape().width
    skid_v = Signal(name=f"{name}_skid_v")
    skid_d = Signal(width, name=f"{name}_skid_d")
    flat = Value.cast(port.payload)
    valid = Signal()
    data = Signal(width)
    m.d.comb += [
        port.ready.eq(~skid_v),
        valid.eq(skid_v | port.valid),
        data.eq(flat),
    ]
    with m.If(skid_v):
        m.d.comb += data.eq(skid_d)
        with m.If(take):
            m.d.sync += skid_v.eq(0)
    with m.Elif(port.valid & ~take):
        m.d.sync += [skid_v.eq(1), skid_d.eq(flat)]
    return valid, data


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


def delay(m, en, value, stages, name="d"):
    """``value`` delayed by ``stages`` enabled clock edges (list of every stage, index 0 = value)."""
    out = [value]
    for k in range(stages):
        shape = value.shape() if isinstance(value, data.View) else Value.cast(value).shape()
        r = Signal(shape, name=f"{name}{k + 1}")
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


def rom(m, words, width, addr, en, name):
    """Synchronous-read ROM of ``words`` (``width``-bit ints); 1-cycle latency, holds when ``en`` is low.

    A one-word ROM is a constant (the data is valid from reset on).
    """
    words = [int(w) for w in words]
    if len(words) == 1:
        return Const(words[0], unsigned(max(width, 1)))
    mem = memory.Memory(shape=unsigned(width), depth=len(words), init=words)
    m.submodules[name] = mem
    rd = mem.read_port()
    m.d.comb += [rd.addr.eq(addr), rd.en.eq(en)]
    return rd.data


def pack_words(rows, width):
    """Pack rows of non-negative field values (each ``width`` bits, element 0 lowest) into ints."""
    out = []
    for row in rows:
        w = 0
        for k, v in enumerate(row):
            w |= (int(v) & ((1 << width) - 1)) << (k * width)
        out.append(w)
    return out


def channel_front(m, i, o, pe: int, nf: int, acc_bits: int):
    """Front of a per-channel stream block (Requantize, Thresholds): the global enable
    ``en = ~o.valid | o.ready``, the input skid, a fold counter over the ``nf`` channel groups
    and the registered input word (stage 1). Returns ``(en, out_valid, fold, x1, v1)``;
    the caller drives ``out_valid`` (``o.valid`` follows it)."""
    en = Signal()
    out_valid = Signal()
    m.d.comb += [en.eq(~out_valid | o.ready), o.valid.eq(out_valid)]
    take = Signal()
    src_valid, src_data = input_skid(m, i, take)
    m.d.comb += take.eq(en & src_valid)
    fold = Signal(range(nf), name="fold")
    with m.If(take):
        m.d.sync += fold.eq(Mux(fold == nf - 1, 0, fold + 1))
    x1 = Signal(pe * acc_bits, name="x1")
    v1 = Signal(name="v1")
    with m.If(en):
        m.d.sync += [x1.eq(src_data), v1.eq(src_valid)]
    return en, out_valid, fold, x1, v1
