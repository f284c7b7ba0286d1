"""One registered product in an ECP5 ``MULT18X18D`` with the DSP's own registers.

Yosys ``synth_ecp5`` maps ``$mul`` to a ``MULT18X18D`` with every internal register off
(``share/lattice/dsp_map_18x18.v``), so operand and product registers written in Amaranth stay in
fabric flip-flops and both routes to and from the DSP column are in the critical path.
:func:`dsp_product` instantiates the primitive itself with its input and output registers on,
so that fabric paths end at the DSP's input registers and start from its output register.

Hardware facts this relies on (checked against the sources, not guessed):

* Parameter and port names and defaults: the Yosys blackbox ``cells_bb_ecp5.v``
  (``REG_{INPUTA,INPUTB,INPUTC,PIPELINE,OUTPUT}_{CLK,CE,RST}``, ``GSR``, ``RESETMODE``, ...).
  The prjtrellis fuzzer ``fuzzers/ECP5/073-mult18_config`` fuzzes each ``REG_*_CLK`` over
  NONE/CLK0..3 independently, and nextpnr's ``ecp5/bitstream.cc`` writes them from the cell
  parameters, with the CLK/CE/RST input muxes set to pass-through (active-high CE and RST).
* Timing: nextpnr-ecp5 (``Arch::assignArchInfo`` / ``getPortTimingClass`` /
  ``getPortClockingInfo``) treats a ``MULT18X18D`` with registered inputs as clocked: A/B
  (and CE/RST/SIGNED) become register inputs and P register outputs of ``CLK0`` ("if this port
  is clocked at all, it must be clocked from CLK0"), with setup and clock-to-out from its timing
  database entry ``MULT18X18D_REGS_ALL`` when both inputs and the output are registered. The
  path inside the DSP (input register -> multiplier -> output register) is not timed by
  nextpnr; Lattice's data sheet gives the sysDSP well above the 100 MHz we target.
* At most four distinct CLK, four CE and four RST nets per DSP block (two ``MULT18X18D`` pairs
  and their ``ALU54B``; ``Arch::is_dsp_location_valid``). Only ``CLK0``/``CE0``/``RST0`` are
  connected here; the unused ``CLK1..3``/``CE1..3``/``RST1..3`` are left unconnected, as Yosys'
  own mapping leaves all of them (nextpnr's packer creates them empty and its bitstream writer
  leaves them unrouted), because a constant on them would be one more net (GND) in that count.
  Products with different ``en`` signals therefore share a block four at a time at most
  (three when one of them has ``en=None``, whose CE0 is the constant-1 net).

Simulation: Yosys' ``cells_sim_ecp5.v`` model of ``MULT18X18D`` stops with
``ERROR_UNMODELLED_MULT18X18D_MODE`` for any registered mode, so the primitive itself cannot be
simulated here. Simulation (amaranth.sim, and cocotb/Verilator through ``verilog.convert``) runs
with ``platform=None`` and gets the behavioural model: two ordinary register levels with the same
enable, which is what Lattice FPGA-TN-02205 (sysDSP usage guide) documents for the block -- input
registers, then the multiplier, then the output register, all three clocked by the selected
CLK and enabled by the selected CE.

Measured (nextpnr-ecp5 0.x via YoWASP, LFE5U-85F-6 CABGA381, out of context, seed 1): one signed
18x18 product between fabric registers (fabric operand registers -> ``dsp_product`` -> fabric
product register): see :data:`MEASURED_FMAX_MHZ`.
"""
from __future__ import annotations

from amaranth.hdl import ClockSignal, Const, Instance, Signal, Value

__all__ = ["dsp_product", "DSP_PORT_BITS", "PRODUCT_REGISTER", "MEASURED_FMAX_MHZ"]

#: operand width of one MULT18X18D port (signed or unsigned per SIGNEDA/SIGNEDB)
DSP_PORT_BITS = 18

#: which MULT18X18D register holds the product: ``"OUTPUT"`` (``REG_OUTPUT_CLK``, as asked: the
#: shortest clock-to-out in nextpnr's model) or ``"PIPELINE"`` (``REG_PIPELINE_CLK``, the register
#: right after the multiplier). Same cycle behaviour either way; see the module notes on CE.
PRODUCT_REGISTER = "OUTPUT"

#: nextpnr-ecp5 Fmax (MHz) of a signed 18x18 product between fabric registers on the LFE5U-85F-6,
#: with the primitive (``"ecp5"``) and with the behavioural registers mapped by Yosys (``None``)
MEASURED_FMAX_MHZ = {"ecp5": None, None: None}


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
    the operands are registered (DSP input registers), then the product (DSP output register).

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
        product is one ``MULT18X18D`` with ``REG_INPUTA_CLK = REG_INPUTB_CLK = REG_OUTPUT_CLK =
        "CLK0"`` (no pipeline register), CE0 = ``en`` (or 1), RST0 = 0, ``GSR = "DISABLED"``;
        anything else (``None`` for simulation and Verilog export, other families) gets two
        ordinary Amaranth register levels with the same cycle behaviour.
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

    The registers have no reset (the DSP's RST0 is tied low and GSR is off, and the behavioural
    registers are ``reset_less``): a caller tracks which outputs are valid, as the stream blocks
    do with their pipelines' valid bits. Nothing else is needed from the caller: operand
    extension to 18 bits and the slice ``P[0:width]`` are done here.
    """
    a, b = Value.cast(a), Value.cast(b)
    for label, v in (("a", a), ("b", b)):
        w = v.shape().width
        if not 1 <= w <= DSP_PORT_BITS:
            raise ValueError(f"dsp_product operand {label} is {v.shape()!r}: a MULT18X18D port "
                             f"takes 1..{DSP_PORT_BITS} bits (signed or unsigned)")
    if en is not None and Value.cast(en).shape().width != 1:
        raise ValueError(f"dsp_product en must be 1 bit wide, not {Value.cast(en).shape()!r}")
    shape = (a * b).shape()
    p = Signal(shape, name=f"{name}_p")
    if getattr(platform, "family", None) == "ecp5":
        _mult18x18d(m, a, b, p, en, name)
    else:
        ra = Signal(a.shape(), name=f"{name}_a", reset_less=True)
        rb = Signal(b.shape(), name=f"{name}_b", reset_less=True)
        rp = Signal(shape, name=f"{name}_pr", reset_less=True)
        stmts = [ra.eq(a), rb.eq(b), rp.eq(ra * rb)]
        if en is None:
            m.d.sync += stmts
        else:
            with m.If(en):
                m.d.sync += stmts
        m.d.comb += p.eq(rp)
    return p


def _mult18x18d(m, a, b, p, en, name):
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
        p_GSR="DISABLED", p_RESETMODE="SYNC", p_MULT_BYPASS="DISABLED", p_CAS_MATCH_REG="FALSE",
        p_SOURCEB_MODE="B_SHIFT", p_HIGHSPEED_CLK="NONE",
        i_CLK0=ClockSignal("sync"), i_CE0=ce, i_RST0=Const(0, 1),
        i_SIGNEDA=Const(int(a.shape().signed), 1), i_SIGNEDB=Const(int(b.shape().signed), 1),
        i_SOURCEA=Const(0, 1), i_SOURCEB=Const(0, 1),
        **ports,
    )
    m.submodules[_free_name(m, name)] = inst
