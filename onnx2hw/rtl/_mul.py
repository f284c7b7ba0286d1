"""Products and pipelined sums for the arithmetic blocks.

* :func:`lut_product` — ``a*b`` from selects and carry-chain adds (no ``*``, so Yosys keeps it in
  LUT/carry logic), optionally with one register inside; :func:`lut_product_cost` its size.
* :func:`pair_field` / :func:`pack_pair` / :func:`unpack_pair` — two narrow products with a shared
  factor in one ``MULT18X18D``: ``a * (b0 + b1 * 2**F)``, split exactly.
* :func:`split_product` (pieces: ``_dsp.dsp_chunks``) — products of any width split into signed 18×18
  pieces (one ECP5 ``MULT18X18D`` each), registered in and out, partial sums pipelined.
* :func:`adder_tree` — pairwise sum with a register boundary every ``per_stage`` levels.
"""
from __future__ import annotations

from amaranth.hdl import Cat, Const, Mux, Signal, Value

from ._dsp import CHUNK, DSP_PORT_BITS as DSP_SIGNED, PRODUCT_LATENCY, dsp_chunks, registered_product


#: carry-chain levels of a LUT product computed before its internal register (with ``m`` given)
LUT_LEVELS_PER_STAGE = 2


def lut_product_registers(a_width: int, b_width: int) -> int:
    """Register stages :func:`lut_product` puts inside a product of these operand widths when
    given a module: one when its tree has more than :data:`LUT_LEVELS_PER_STAGE` levels (a
    narrow operand of 5..16 bits), else none."""
    levels = (min(a_width, b_width) - 1).bit_length()
    return 1 if levels > LUT_LEVELS_PER_STAGE else 0


def lut_product_cost(a_width: int, b_width: int, constant: bool = False) -> tuple[float, float]:
    """(LUT4 equivalents, flip-flops) of one registered :func:`lut_product` of a module, operand
    registers included: least-squares fit to Yosys synth_ecp5 stat of matrix-vector and
    depthwise units (1x8, 2x2, 4x4, 4x8, 8x8 products: whole units within 17 % LUT, 16 % FF).
    ``constant``: one operand
    is a constant (the selects vanish)."""
    small, large = min(a_width, b_width), max(a_width, b_width)
    if constant:
        return small * large / 2, small + large
    lut = 2.1 * small * (large + 1) if small > 1 else large + 1.0
    inner = lut_product_registers(a_width, b_width)
    return lut, 1.6 * (a_width + b_width) + 2 * (large + 4) * inner + 2 * small


def lut_product(a, b, m=None, en=None, name="lp"):
    """``a * b`` in LUT and carry logic (no ``*``, so Yosys maps no DSP).

    The narrower operand's bits select copies of the wider one (its top bit with a negative
    weight when signed); the copies are summed as a pairwise tree in which each addition passes
    the bits below the later term's shift straight through (``Cat(x[:d], x[d:] + y)``). The
    slicing keeps every addition a separate carry-chain adder: a plain sum of the selected terms
    is merged by Yosys' ``alumacc`` into one ``$macc`` that becomes LUT full adders, about 2.2x
    the logic (8x8 signed, synth_ecp5: 300 LUT4 equivalents -> 136: 64 LUT4 and 36 CCU2C).
    Depth: one LUT and ``ceil(log2(n))`` carry chains for an ``n``-bit narrow operand.

    With a module ``m`` the partial sums after :data:`LUT_LEVELS_PER_STAGE` levels are
    registered (enabled by ``en``) when the tree is deeper (:func:`lut_product_registers`), so
    an 8x8 product is two short pipeline stages; the caller accounts for the latency.
    """
    a, b = Value.cast(a), Value.cast(b)
    if a.shape().width > b.shape().width:
        a, b = b, a
    n = a.shape().width
    regs = lut_product_registers(n, b.shape().width) if m is not None else 0
    bs = b if b.shape().signed else Cat(b, Const(0, 1)).as_signed()
    # (term, shift, subtracted): a signed narrow factor's top bit weighs -2**(n-1); its term is
    # always the last item, so it is subtracted by the addition that takes it (no negation chain)
    items = [(Mux(a[k], bs, 0), k, a.shape().signed and k == n - 1) for k in range(n)]
    level = 0
    while len(items) > 1:
        nxt = []
        for i in range(0, len(items) - 1, 2):
            (x, sx, _), (y, sy, neg) = items[i], items[i + 1]
            d = sy - sx
            if x.shape().width > d:
                hi = x[d:].as_signed() - y if neg else x[d:].as_signed() + y
                nxt.append((Cat(x[:d], hi).as_signed(), sx, False))
            else:  # x lies wholly below y's shift (1-bit operands)
                nxt.append((x - (y << d) if neg else x + (y << d), sx, False))
        if len(items) % 2:
            nxt.append(items[-1])
        items = nxt
        level += 1
        if regs and level == LUT_LEVELS_PER_STAGE:
            regd = []
            for k, (v, sh, neg) in enumerate(items):
                r = Signal(v.shape(), name=f"{name}_l{level}_{k}")
                with m.If(en):
                    m.d.sync += r.eq(v)
                regd.append((r, sh, neg))
            items = regd
    v, _, neg = items[0]
    return -v if neg else v     # (a 1-bit signed factor: 0 or -b)


def pair_field(a_width: int, a_signed: bool, b_width: int, b_signed: bool) -> int | None:
    """Bit offset ``F`` of the second product when two products ``a*b0``, ``a*b1`` share one
    MULT18X18D as ``a * (b0 + b1 * 2**F)``; ``None`` when they do not fit one (18x18 signed
    ports: ``a`` and the packed factor of ``F + b_width`` bits, both as signed values).

    ``F = a_width + b_width``: each product fits an ``F``-bit field (signed when either factor
    is), so the low field is read exactly and the high one after a borrow correction.
    """
    f = a_width + b_width
    a_port = a_width + (0 if a_signed else 1)
    if pair_width(f, b_width) > DSP_SIGNED or a_port > DSP_SIGNED:
        return None
    return f


def pair_width(field: int, b_width: int) -> int:
    """Signed width of a packed factor ``b0 + b1 * 2**field`` of ``b_width``-bit factors (the
    low one's borrow can take the sum one bit below ``b1 * 2**field``)."""
    return field + b_width + 1


def pack_pair(b0: int, b1: int, field: int) -> int:
    """The packed factor ``b0 + b1 * 2**field`` (an integer, e.g. for a weight memory)."""
    return int(b0) + (int(b1) << field)


def unpack_pair(p, field: int, signed: bool):
    """``(a*b0, a*b1)`` from the product ``p = a * (b0 + b1 * 2**field)`` of a packed factor
    (:func:`pack_pair`): the low field sign-extended, the high field plus the borrow the low
    one took from it when negative. ``signed``: either factor is signed."""
    p = Value.cast(p)
    if not signed:
        return p[:field], p[field:]
    lo = p[:field].as_signed()
    return lo, p[field:].as_signed() + p[field - 1]


def tree_registers(n_items: int, per_stage: int, extra_levels: int = 1) -> int:
    """Register boundaries :func:`adder_tree` inserts for ``n_items`` inputs.

    ``extra_levels`` counts the additions the caller performs after the tree in the same stage
    as its last levels (e.g. the accumulator).
    """
    levels = max(n_items - 1, 0).bit_length()
    return max(0, (levels + extra_levels - 1) // per_stage)


def adder_tree(m, en, items, per_stage=2, extra_levels=1, name="t"):
    """Sum ``items`` pairwise; registers (enabled by ``en``) every ``per_stage`` levels.

    Returns the combinational sum after the last register boundary; the number of boundaries is
    :func:`tree_registers` ``(len(items), per_stage, extra_levels)``. A constant item crosses a
    boundary unregistered: a register of it differs from it only before its first enable, when
    no valid data is in the tree, and Yosys merges equal constant registers of distant blocks
    into one (a long route) where a constant costs nothing.
    """
    items = [Value.cast(v) for v in items]
    regs = tree_registers(len(items), per_stage, extra_levels)
    level = 0
    done = 0
    while len(items) > 1 or done < regs:
        if len(items) > 1:
            nxt = [items[k] + items[k + 1] for k in range(0, len(items) - 1, 2)]
            if len(items) % 2:
                nxt.append(items[-1])
            items = nxt
        level += 1
        if done < regs and (level % per_stage == 0 or len(items) == 1):
            regd = []
            for k, v in enumerate(items):
                if isinstance(v, Const):
                    regd.append(v)
                    continue
                r = Signal(v.shape(), name=f"{name}_l{level}_{k}")
                with m.If(en):
                    m.d.sync += r.eq(v)
                regd.append(r)
            items = regd
            done += 1
    return items[0]


def n_dsp(a_width: int, a_signed: bool, b_width: int, b_signed: bool) -> int:
    """MULT18X18D count of :func:`split_product` for these operand shapes."""
    def pieces(w, s):
        limit = DSP_SIGNED if s else CHUNK
        return 1 if w <= limit else 1 + -(-(w - limit) // CHUNK)
    return pieces(a_width, a_signed) * pieces(b_width, b_signed)


def split_product_latency(a_shape, b_shape, per_stage=2) -> int:
    n = n_dsp(a_shape.width, a_shape.signed, b_shape.width, b_shape.signed)
    return 1 + PRODUCT_LATENCY + tree_registers(n, per_stage, extra_levels=0) + (1 if n > 1 else 0)


def split_product(m, en, a, b, per_stage=2, name="p", platform=None):
    """Registered ``a * b`` built from 18×18 DSP pieces.

    Pipeline: operand registers, each piece a :func:`~onnx2hw.rtl._dsp.registered_product` (the
    DSP's input and product registers on ECP5), then a pipelined sum of the shifted pieces
    (registered). Returns ``(product_signal, latency)``; all registers advance on ``en``.
    """
    a, b = Value.cast(a), Value.cast(b)
    ra = Signal(a.shape(), name=f"{name}_a")
    rb = Signal(b.shape(), name=f"{name}_b")
    with m.If(en):
        m.d.sync += [ra.eq(a), rb.eq(b)]
    parts = []
    for ca, ka in dsp_chunks(ra):
        for cb, kb in dsp_chunks(rb):
            r = registered_product(m, ca, cb, platform=platform, en=en,
                                   name=f"{name}_pp{len(parts)}")
            parts.append(r << (ka + kb) if ka + kb else r)
    if len(parts) == 1:
        return parts[0], 1 + PRODUCT_LATENCY
    total = adder_tree(m, en, parts, per_stage, extra_levels=0, name=f"{name}_s")
    out = Signal(total.shape(), name=f"{name}_out")
    with m.If(en):
        m.d.sync += out.eq(total)
    return out, split_product_latency(a.shape(), b.shape(), per_stage)
