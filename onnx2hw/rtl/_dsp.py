"""One registered product in an ECP5 ``MULT18X18D`` with the DSP's own registers.

Yosys ``synth_ecp5`` maps ``$mul`` to a ``MULT18X18D`` with every internal register off
(``share/lattice/dsp_map_18x18.v``), so operand and product registers written in Amaranth stay in
fabric flip-flops and both routes to and from the DSP column are in the critical path.
:func:`dsp_product` instantiates the primitive itself with its input registers and one product
register on, so that fabric paths end at the DSP's input registers and start from its product
register. The product register is the one after the multiplier (``REG_PIPELINE_CLK``) by
default, not the output register (``REG_OUTPUT_CLK``): see "Which product register" below and
:data:`PRODUCT_REGISTER`.

Hardware facts this relies on (checked against the sources, not guessed):

* Parameter and port names and defaults: the Yosys blackbox ``cells_bb_ecp5.v``
  (``REG_{INPUTA,INPUTB,INPUTC,PIPELINE,OUTPUT}_{CLK,CE,RST}``, ``GSR``, ``RESETMODE``, ...).
  The prjtrellis fuzzer ``fuzzers/ECP5/073-mult18_config`` fuzzes each ``REG_*_CLK`` over
  NONE/CLK0..3 and each ``_CE``/``_RST`` over the four slots; nextpnr's ``ecp5/bitstream.cc``
  writes ``REG_INPUTA/B_CLK/CE/RST``, ``REG_PIPELINE_CLK/CE/RST``, ``REG_OUTPUT_CLK`` (and
  ``REG_OUTPUT_RST`` for sites 0 and 4 only) from the cell parameters, with the CLK/CE/RST input
  muxes set to pass-through (active-high CE and RST), and sets ``CIBOUT_BYP`` (P straight from
  the pipeline stage) when ``REG_OUTPUT_CLK`` is NONE.
* Register structure: input registers (A, B and the SIGNED bits), multiplier, pipeline
  register, output register, each with its own CLK/CE/RST select -- as Lattice's simulation model
  of the ECP3 ``MULT18X18C`` (same parameter set) implements it. No ECP5 model of the registered
  modes was available to run (see Simulation).
* Timing: nextpnr-ecp5 (``getPortTimingClass`` / ``getPortClockingInfo``; nextpnr PR #435
  "Alter MULT18X18D timing db based on register config") treats a ``MULT18X18D`` with both
  inputs registered as clocked: A/B (and CE/RST/SIGNED) become register inputs and P register
  outputs of ``CLK0`` ("if this port is clocked at all, it must be clocked from CLK0"), with
  setup and clock-to-out from the timing database entry ``MULT18X18D_REGS_ALL`` when the output
  register is on and ``MULT18X18D_REGS_INPUT`` when it is not. nextpnr does not look at the
  pipeline register: with it, P's clock-to-out is taken from ``REGS_INPUT``, i.e. through the
  multiplier -- pessimistic. The path inside the DSP (input register -> multiplier -> product
  register) is not timed at all; the unregistered A/B -> P delay in the database is 3.93 ns on
  speed grade 6 (read off a critical-path report), so that internal path should be near 5 ns --
  an estimate, not a datasheet figure.
* At most four distinct CLK, four CE and four RST nets per DSP block (its ``MULT18X18D`` and
  ``ALU54B`` sites share CLK0..3, CE0..3, RST0..3; ``Arch::is_dsp_location_valid``; and
  ``Arch::remap_dsp_blocks`` renumbers a cell's CEn and its ``REG_*_CE`` parameters to fit,
  failing with an error when no slot is free). ``CLK0`` and ``CE0`` are connected here,
  ``CLK1..3``/``CE1..3`` are left unconnected as Yosys' own mapping leaves them (nextpnr's packer
  creates them empty, its bitstream writer leaves them unrouted), so products with different
  ``en`` (or ``en=None``: the constant-1 net) share a block four distinct enables at most, which
  the placer respects. All four RST inputs are tied low: the RST select of some registers is not
  in the database (below), and one constant net on all four slots is the same for every
  product, so it costs nothing in that count.

Which product register. The prjtrellis database (``MIB2_DSP0..8`` tiles) has no
``REG_OUTPUT_CE`` setting for any ``MULT18_n`` site, and ``REG_OUTPUT_RST`` only for sites 0 and
4; nextpnr never writes ``REG_OUTPUT_CE``. So with the open flow the output register's clock
enable is whatever its unconfigured select means on the silicon (the all-zero default of the CE
selects that are in the database is ``CE3``, which is left unconnected here). With an ``en`` that
stalls, an output register that is not enabled by ``en`` would load the product of the held
operands one edge early during a stall -- a difference from the behavioural model that no
simulation here can show. The pipeline register's CLK, CE and RST selects are all in the database
and written by nextpnr, so ``PRODUCT_REGISTER = "PIPELINE"`` (the default) is the configuration
whose cycle behaviour is fully set by the bitstream; ``"OUTPUT"`` (what Yosys users would reach
for, and the better figure in nextpnr's model) is kept for a board test to settle.

Simulation: Yosys' ``cells_sim_ecp5.v`` model of ``MULT18X18D`` stops with
``ERROR_UNMODELLED_MULT18X18D_MODE`` for any registered mode, so the primitive itself cannot be
simulated here (nor evaluated by Yosys ``sim``/``eval``: it is a blackbox). Simulation
(amaranth.sim, and cocotb/Verilator through ``verilog.convert``) runs with ``platform=None`` and
gets the behavioural model: two ordinary register levels with the same enable.

``python -m bench dsp`` measures the Fmax of products between fabric registers for each choice of
:data:`PRODUCT_REGISTER`.
"""
from __future__ import annotations

import weakref

from amaranth.hdl import ClockSignal, Const, Instance, Shape, Signal, Value

__all__ = ["dsp_product", "registered_product", "dsp_sites", "plan_dsp_sites", "dsp_chunks", "product_dsps", "PRODUCT_LATENCY", "fits_port", "DSP_PORT_BITS",
           "CHUNK", "PRODUCT_REGISTER"]

#: operand width of one MULT18X18D port (signed or unsigned per SIGNEDA/SIGNEDB)
DSP_PORT_BITS = 18
#: width of the unsigned low pieces of an operand wider than a port (:func:`dsp_chunks`)
CHUNK = 17

#: which MULT18X18D register holds the product: ``"PIPELINE"`` (``REG_PIPELINE_CLK``, the register
#: after the multiplier, with the output register bypassed) or ``"OUTPUT"`` (``REG_OUTPUT_CLK``,
#: the shortest clock-to-out in nextpnr's model, but its CE select is never configured by the open
#: flow). Same cycle behaviour either way; see "Which product register" in the module notes.
PRODUCT_REGISTER = "PIPELINE"

def _free_name(m, name: str) -> str:
    k = 0
    while True:
        cand = name if k == 0 else f"{name}_{k}"
        try:
            m.submodules[cand]
        except AttributeError:
            return cand
        k += 1


def dsp_product(m, a, b, *, platform=None, en=None, name="dsp"):
    """Registered product ``a * b``, latency 2 clock edges (enabled edges when ``en`` is given):
    the operands are registered (DSP input registers), then the product (a DSP register after
    the multiplier: :data:`PRODUCT_REGISTER`).

    Parameters
    ----------
    m : amaranth.hdl.Module
        The module the registers (or the ``MULT18X18D`` instance) are added to; they are clocked
        by the ``sync`` domain.
    a, b : Value-castable
        Operands, each fitting one 18-bit DSP port: 1..18 bits, signed or unsigned (an unsigned
        18-bit operand uses the port with SIGNED=0). :class:`ValueError` otherwise.
    platform :
        The elaboration platform. When ``getattr(platform, "family", None) == "ecp5"`` the
        product is one ``MULT18X18D`` with ``REG_INPUTA_CLK = REG_INPUTB_CLK = "CLK0"`` and
        ``REG_PIPELINE_CLK = "CLK0"`` (output register off; with ``PRODUCT_REGISTER = "OUTPUT"``
        the other way round), every register on CE0 and RST0, CE0 = ``en`` (or 1), RST0..3 = 0,
        ``GSR = "DISABLED"``, SIGNEDA/SIGNEDB constant per operand; anything else (``None`` for
        simulation and Verilog export, other families) gets two ordinary Amaranth register
        levels with the same cycle behaviour and the same ``en``.
    en : Value, optional
        1-bit clock enable of both register levels; ``None`` = always enabled.
    name : str
        Prefix of the instance / register names.

    Returns
    -------
    Signal
        Of the shape Amaranth gives ``a * b`` (width ``a.width + b.width``, signed if either is).
        After an enabled edge it holds the product of the operands that were present at the
        enabled edge before it; it changes only at enabled edges.

    The registers have no reset (the DSP's RST inputs are tied low and GSR is off, and the
    behavioural registers are ``reset_less``): a caller tracks which outputs are valid, as the
    stream blocks do with their pipelines' valid bits. Nothing else is needed from the caller:
    operand extension to 18 bits and the slice ``P[0:width]`` are done here.
    """
    a, b = Value.cast(a), Value.cast(b)
    for label, v in (("a", a), ("b", b)):
        if not fits_port(v.shape()):
            raise ValueError(f"dsp_product operand {label} is {v.shape()!r}: a MULT18X18D port "
                             f"takes 1..{DSP_PORT_BITS} bits (signed or unsigned)")
    if en is not None and Value.cast(en).shape().width != 1:
        raise ValueError(f"dsp_product en must be 1 bit wide, not {Value.cast(en).shape()!r}")
    p = Signal((a * b).shape(), name=f"{name}_p")
    if getattr(platform, "family", None) == "ecp5":
        _mult18x18d(m, a, b, p, en, name, _next_site(platform))
    else:
        _registers(m, a, b, p, en, name)
    return p


def fits_port(shape) -> bool:
    """Whether an operand of ``shape`` fits one ``MULT18X18D`` port."""
    return 1 <= shape.width <= DSP_PORT_BITS


#: latency of :func:`registered_product`: the DSP's input and product registers, then two fabric
#: landing registers
PRODUCT_LATENCY = 4


#: ``MULT18X18D`` sites of the ECP5 devices whose layout was read off nextpnr-ecp5 here (its
#: ``--write`` netlist's ``NEXTPNR_BEL`` attributes and the DSP tiles of a bitstream's config):
#: device -> (tile rows, first column of each 9-column DSP tile group); a group's four sites are
#: ``X{x0 + z}/Y{y}/MULT18_{z}`` for z = 0, 1, 4, 5
DSP_LAYOUT = {"LFE5U-85F": ((10, 34, 58), (4, 13, 22, 31, 40, 49, 58, 69, 78, 87, 96, 105, 114))}

_plans: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()   # platform -> iterator of sites


def dsp_sites(device) -> list[str]:
    """The ``MULT18X18D`` bel names of ``device`` in one path through its DSP rows (the first
    row left to right, the next right to left, ...); ``[]`` for a device not in :data:`DSP_LAYOUT`."""
    rows, groups = DSP_LAYOUT.get(device, ((), ()))
    sites = []
    for k, y in enumerate(rows):
        row = [f"X{x0 + z}/Y{y}/MULT18_{z}" for x0 in groups for z in (0, 1, 4, 5)]
        sites += row if k % 2 == 0 else row[::-1]
    return sites


def plan_dsp_sites(platform, count: int) -> None:
    """Place the next ``count`` DSP products elaborated for ``platform`` (in elaboration order:
    the pipeline's stages in order, a block's products row by row) on sites spread evenly along
    :func:`dsp_sites`, each as a nextpnr ``BEL`` constraint; products beyond ``count`` are left
    to the placer. Without it nextpnr's analytic placer puts DSPs on free sites far from where it
    placed their logic, and the product routes cross the chip. Does nothing for a device without a
    known layout."""
    sites = dsp_sites(getattr(platform, "device", None))
    if sites and count > 0:
        _plans[platform] = iter([sites[i * len(sites) // count] for i in range(min(count, len(sites)))])


def _next_site(platform):
    plan = _plans.get(platform) if platform is not None else None
    return next(plan, None) if plan is not None else None


def dsp_chunks(v):
    """Split ``v`` into ``[(piece, shift)]``, each piece fitting a signed 18-bit DSP port:
    unsigned :data:`CHUNK`-bit low pieces and a top piece of ``v``'s signedness, so that
    ``v == sum(piece << shift)``."""
    v = Value.cast(v)
    shape = v.shape()
    w = shape.width
    limit = DSP_PORT_BITS if shape.signed else CHUNK
    if w <= limit:
        return [(v, 0)]
    const = v.value if isinstance(v, Const) else None   # a constant splits into constants
    out = []
    k = 0
    while w - k > limit:
        out.append((v[k:k + CHUNK] if const is None else Const((const >> k) & ((1 << CHUNK) - 1), CHUNK), k))
        k += CHUNK
    if const is not None:
        out.append((Const(const >> k, Shape(w - k, shape.signed)), k))
    else:
        top = v[k:]
        out.append((top.as_signed() if shape.signed else top, k))
    return out


def product_dsps(a, b) -> int:
    """``MULT18X18D`` count of :func:`registered_product` for operands ``a`` and ``b``, each an
    Amaranth shape (a variable) or an ``int`` (a constant: its zero pieces take no DSP)."""
    def pieces(v):
        if isinstance(v, int):
            return sum(1 for c, _ in dsp_chunks(Const(v)) if c.value)
        w, limit = v.width, DSP_PORT_BITS if v.signed else CHUNK
        return 1 if w <= limit else 1 + -(-(w - limit) // CHUNK)
    if all(fits_port(Const(v).shape() if isinstance(v, int) else v) for v in (a, b)):
        return 1
    return pieces(a) * pieces(b)


def registered_product(m, a, b, *, platform=None, en=None, name="dsp"):
    """``a * b`` through :func:`dsp_product`, then two fabric landing registers: latency
    :data:`PRODUCT_LATENCY`. The route from a DSP's product to the logic it feeds crosses the chip
    when the DSP column sites near that logic are taken (in a design that uses most of the
    device's DSPs); two let the placer put one
    register beside the DSP and one beside the consumer, and split a long route in two. An operand
    wider than a port is split (:func:`dsp_chunks`; a constant piece of 0 is dropped): every piece
    pair is its own registered DSP product with its own first landing register, and the second
    takes their shifted sum, so no path runs through a multiplier (Yosys would split a wide ``*``
    over unregistered DSPs chained through fabric adders). Same result shape either way."""
    a, b = Value.cast(a), Value.cast(b)
    shape = (a * b).shape()
    if fits_port(a.shape()) and fits_port(b.shape()):
        pairs = [(a, b, 0)]
    else:
        pairs = [(ca, cb, ka + kb) for ca, ka in dsp_chunks(a) for cb, kb in dsp_chunks(b)
                 if not any(isinstance(c, Const) and c.value == 0 for c in (ca, cb))]
    stmts, parts = [], []
    for i, (ca, cb, shift) in enumerate(pairs):
        part = name if len(pairs) == 1 else f"{name}_{i}"
        p = dsp_product(m, ca, cb, platform=platform, en=en, name=part)
        for k in range(PRODUCT_LATENCY - 3):   # the landing registers before the sum
            r = Signal(p.shape(), name=f"{part}_l{k}", reset_less=True)
            stmts.append(r.eq(p))
            p = r
        parts.append(p << shift if shift else p)
    land = Signal(shape, name=f"{name}_l", reset_less=True)
    stmts.append(land.eq(sum(parts, Const(0, shape)) if len(parts) > 1 else parts[0]))
    if en is None:
        m.d.sync += stmts
    else:
        with m.If(en):
            m.d.sync += stmts
    return land


def _registers(m, a, b, p, en, name):
    """The behavioural form: operand registers, then the product register (driving ``p``)."""
    ra = Signal(a.shape(), name=f"{name}_a", reset_less=True)
    rb = Signal(b.shape(), name=f"{name}_b", reset_less=True)
    rp = Signal(p.shape(), name=f"{name}_pr", reset_less=True)
    stmts = [ra.eq(a), rb.eq(b), rp.eq(ra * rb)]
    if en is None:
        m.d.sync += stmts
    else:
        with m.If(en):
            m.d.sync += stmts
    m.d.comb += p.eq(rp)


def _mult18x18d(m, a, b, p, en, name, bel=None):
    xa = Signal(DSP_PORT_BITS, name=f"{name}_xa")   # sign- or zero-extended by .eq (its shape)
    xb = Signal(DSP_PORT_BITS, name=f"{name}_xb")
    full = Signal(2 * DSP_PORT_BITS, name=f"{name}_full")
    m.d.comb += [xa.eq(a), xb.eq(b), p.eq(full[:p.shape().width])]
    ce = Const(1, 1) if en is None else Value.cast(en)
    ports = {}
    for i in range(DSP_PORT_BITS):
        ports[f"i_A{i}"] = xa[i]
        ports[f"i_B{i}"] = xb[i]
        ports[f"i_C{i}"] = Const(0, 1)
    for i in range(2 * DSP_PORT_BITS):
        ports[f"o_P{i}"] = full[i]
    regs = {}
    if PRODUCT_REGISTER not in ("OUTPUT", "PIPELINE"):
        raise ValueError(f"PRODUCT_REGISTER must be 'OUTPUT' or 'PIPELINE', not "
                         f"{PRODUCT_REGISTER!r}")
    out = "CLK0" if PRODUCT_REGISTER == "OUTPUT" else "NONE"
    pipe = "CLK0" if PRODUCT_REGISTER == "PIPELINE" else "NONE"
    for reg, clk in (("INPUTA", "CLK0"), ("INPUTB", "CLK0"), ("INPUTC", "NONE"),
                     ("PIPELINE", pipe), ("OUTPUT", out)):
        regs[f"p_REG_{reg}_CLK"] = clk
        regs[f"p_REG_{reg}_CE"] = "CE0"
        regs[f"p_REG_{reg}_RST"] = "RST0"
    inst = Instance(
        "MULT18X18D",
        **regs,
        **({"a_BEL": bel} if bel else {}),
        p_GSR="DISABLED", p_RESETMODE="SYNC", p_MULT_BYPASS="DISABLED", p_CAS_MATCH_REG="FALSE",
        p_SOURCEB_MODE="B_SHIFT", p_HIGHSPEED_CLK="NONE",
        i_CLK0=ClockSignal("sync"), i_CE0=ce,
        # all four resets low: the RST select of some registers is not in the database (see the
        # module notes), and one constant net on all four costs nothing in the per-block count
        i_RST0=Const(0, 1), i_RST1=Const(0, 1), i_RST2=Const(0, 1), i_RST3=Const(0, 1),
        i_SIGNEDA=Const(int(a.shape().signed), 1), i_SIGNEDB=Const(int(b.shape().signed), 1),
        i_SOURCEA=Const(0, 1), i_SOURCEB=Const(0, 1),
        **ports,
    )
    m.submodules[_free_name(m, name)] = inst
