"""onnx2hw.rtl._dsp.dsp_product: the behavioural registers (simulation) against an int64 NumPy
product, cycle by cycle with a random clock enable; the ECP5 mapping (MULT18X18D with its own
input and output registers) against the Yosys netlist."""
import json
import tempfile

import numpy as np
import pytest
from amaranth.hdl import Const, Module, Shape, Signal, signed, unsigned
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from amaranth.sim import Simulator

import onnx2hw.rtl._dsp as dsp
from onnx2hw.rtl._dsp import dsp_product
from onnx2hw.rtl.synth_check import FAMILY, FamilyPlatform, nextpnr_fmax, synthesize, yosys_stat

# the argument checks and the naming test build modules they never elaborate
pytestmark = pytest.mark.filterwarnings("ignore::amaranth.hdl._ir.UnusedElaboratable")


def _lo_hi(shape: Shape):
    if shape.signed:
        return -(1 << (shape.width - 1)), (1 << (shape.width - 1)) - 1
    return 0, (1 << shape.width) - 1


def _operands(shape: Shape, n: int, rng) -> np.ndarray:
    """``n`` operands of ``shape``: the extremes, zero and one first, then uniform."""
    lo, hi = _lo_hi(shape)
    edge = [v for v in (lo, hi, 0, 1, -1, lo + 1, hi - 1) if lo <= v <= hi]
    rest = rng.integers(lo, hi, endpoint=True, size=n, dtype=np.int64)
    return np.concatenate([np.array(edge, dtype=np.int64), rest])[:n]


def _run(sa: Shape, sb: Shape, xs, ys, ens):
    """Drive ``a``, ``b`` (and ``en`` unless ``ens`` is None) for one cycle each; return the
    product output read after every clock edge."""
    m = Module()
    a, b = Signal(sa, name="a"), Signal(sb, name="b")
    en = None if ens is None else Signal(name="en")
    p = dsp_product(m, a, b, en=en)
    assert p.shape() == (a * b).shape()
    got = []
    sim = Simulator(m)
    sim.add_clock(1e-6)

    async def tb(ctx):
        for k in range(len(xs)):
            ctx.set(a, int(xs[k]))
            ctx.set(b, int(ys[k]))
            if en is not None:
                ctx.set(en, int(ens[k]))
            await ctx.tick()
            got.append(ctx.get(p))

    sim.add_testbench(tb)
    sim.run()
    return got


def _expected(xs, ys, ens):
    """Output after each edge: the int64 product of the operands sampled at the enabled edge
    before the latest one (None while fewer than two enabled edges have passed)."""
    prods = np.asarray(xs, dtype=np.int64) * np.asarray(ys, dtype=np.int64)
    taken, out = [], []
    for k in range(len(prods)):
        if ens is None or ens[k]:
            taken.append(int(prods[k]))
        out.append(taken[-2] if len(taken) >= 2 else None)
    return out


CASES = [
    (unsigned(8), unsigned(8)),
    (signed(8), signed(8)),
    (signed(18), signed(18)),
    (unsigned(17), signed(18)),
    (signed(18), unsigned(17)),
    (unsigned(18), unsigned(18)),
    (signed(5), unsigned(1)),
    (unsigned(1), unsigned(1)),
    (signed(1), signed(12)),
]


@pytest.mark.parametrize("sa, sb", CASES, ids=lambda s: repr(s))
@pytest.mark.parametrize("with_en", [False, True], ids=["always", "en"])
def test_behavioural_product_latency_two_enabled_edges(sa, sb, with_en):
    rng = np.random.default_rng(sa.width * 131 + sb.width * 7 + sa.signed * 3 + sb.signed)
    n = 300
    xs, ys = _operands(sa, n, rng), _operands(sb, n, rng)
    rng.shuffle(ys)
    # runs of enabled and disabled edges, including long stalls and single-cycle gaps
    ens = (rng.random(n) < 0.6).astype(int) if with_en else None
    if with_en:
        ens[40:50] = 0
        ens[50:53] = 1
    got = _run(sa, sb, xs, ys, ens)
    want = _expected(xs, ys, ens)
    checked = 0
    for k, (g, w) in enumerate(zip(got, want)):
        if w is None:
            continue
        assert g == w, f"{sa} x {sb}: after edge {k} got {g}, expected {w}"
        checked += 1
    assert checked > n // 3


def test_exhaustive_small_signed_by_unsigned():
    """Every pair of a 4-bit signed and a 3-bit unsigned operand, always enabled."""
    sa, sb = signed(4), unsigned(3)
    pairs = [(x, y) for x in range(-8, 8) for y in range(8)]
    xs = [x for x, _ in pairs] + [0, 0]
    ys = [y for _, y in pairs] + [0, 0]
    got = _run(sa, sb, xs, ys, None)
    want = _expected(xs, ys, None)
    assert got[1:] == want[1:]
    assert len(set(want[1:])) > 20


@pytest.mark.parametrize("sa, sb", [(signed(19), signed(8)), (unsigned(19), unsigned(2)),
                                    (unsigned(4), signed(20)), (unsigned(0), unsigned(4))])
def test_rejects_operands_that_do_not_fit_a_port(sa, sb):
    with pytest.raises(ValueError, match="MULT18X18D port"):
        dsp_product(Module(), Signal(sa), Signal(sb))


def test_rejects_wide_enable():
    with pytest.raises(ValueError, match="1 bit"):
        dsp_product(Module(), Signal(4), Signal(4), en=Signal(2))


def test_names_do_not_collide():
    m = Module()
    plat = FamilyPlatform("ecp5")
    dsp_product(m, Signal(4), Signal(4), platform=plat)
    dsp_product(m, Signal(4), Signal(4), platform=plat)
    assert m.submodules["dsp"] is not m.submodules["dsp_1"]


# ---- ECP5 mapping ----------------------------------------------------------------------------

SYNTH_CASES = [(signed(18), signed(18), False), (unsigned(17), signed(18), True),
               (unsigned(8), unsigned(8), True)]


class _Between(wiring.Component):
    """Fabric operand registers -> dsp_product -> fabric product registers, per case."""

    def __init__(self):
        ports = {"en": In(1)}
        for k, (sa, sb, _) in enumerate(SYNTH_CASES):
            ports[f"a{k}"] = In(sa)
            ports[f"b{k}"] = In(sb)
            ports[f"p{k}"] = Out((Signal(sa) * Signal(sb)).shape())
        super().__init__(ports)

    def elaborate(self, platform):
        m = Module()
        for k, (sa, sb, use_en) in enumerate(SYNTH_CASES):
            ra, rb = Signal(sa, name=f"ra{k}"), Signal(sb, name=f"rb{k}")
            m.d.sync += [ra.eq(getattr(self, f"a{k}")), rb.eq(getattr(self, f"b{k}"))]
            p = dsp_product(m, ra, rb, platform=platform, en=self.en if use_en else None,
                            name=f"mul{k}")
            m.d.sync += getattr(self, f"p{k}").eq(p)
        return m


FABRIC_FF = sum(2 * (sa.width + sb.width) for sa, sb, _ in SYNTH_CASES)


def _netlist(component):
    with tempfile.TemporaryDirectory() as d:
        _, path = synthesize(component, "ecp5", workdir=d, json_out=True)
        return json.loads(path.read_text())["modules"]["top"]


@pytest.mark.synth
@pytest.mark.parametrize("product_register", ["PIPELINE", "OUTPUT"])
def test_ecp5_netlist_uses_the_dsp_registers_and_no_fabric_ff_between(monkeypatch,
                                                                     product_register):
    monkeypatch.setattr(dsp, "PRODUCT_REGISTER", product_register)
    top = _netlist(_Between())
    cells = top["cells"]
    dsps = {n: c for n, c in cells.items() if c["type"] == "MULT18X18D"}
    ffs = [c for c in cells.values() if c["type"] == "TRELLIS_FF"]
    assert len(dsps) == len(SYNTH_CASES)
    # only the fabric operand and product registers of the component remain in fabric
    assert len(ffs) == FABRIC_FF
    assert not [c for c in cells.values() if c["type"] in ("LUT4", "CCU2C")]
    # which cell port drives each net bit, and which cell ports each net bit drives
    driver, sinks = {}, {}
    for c in cells.values():
        for port, bits in c["connections"].items():
            for bit in bits:
                if c["port_directions"][port] == "output":
                    driver[bit] = (c["type"], port)
                else:
                    sinks.setdefault(bit, []).append((c["type"], port))
    pipe, out = ("CLK0", "NONE") if product_register == "PIPELINE" else ("NONE", "CLK0")
    for k, (sa, sb, use_en) in enumerate(SYNTH_CASES):
        name = next(n for n in dsps if f"mul{k}" in n)
        c = dsps[name]
        prm = c["parameters"]
        assert (prm["REG_INPUTA_CLK"], prm["REG_INPUTB_CLK"], prm["REG_PIPELINE_CLK"],
                prm["REG_OUTPUT_CLK"], prm["REG_INPUTC_CLK"]) == ("CLK0", "CLK0", pipe, out, "NONE")
        for reg in ("INPUTA", "INPUTB", "PIPELINE", "OUTPUT"):
            assert (prm[f"REG_{reg}_CE"], prm[f"REG_{reg}_RST"]) == ("CE0", "RST0")
        assert (prm["GSR"], prm["RESETMODE"], prm["MULT_BYPASS"]) == ("DISABLED", "SYNC",
                                                                      "DISABLED")
        conn = c["connections"]
        assert conn["SIGNEDA"] == [str(int(sa.signed))]
        assert conn["SIGNEDB"] == [str(int(sb.signed))]
        assert [conn[f"RST{i}"] for i in range(4)] == [["0"]] * 4
        assert conn["CLK0"] == top["ports"]["clk"]["bits"]
        assert conn["CE0"] == (top["ports"]["en"]["bits"] if use_en else ["1"])
        for port in ("CLK1", "CLK2", "CLK3", "CE1", "CE2", "CE3"):
            assert port not in conn or conn[port] == ["x"] or conn[port] == []
        # every operand bit comes straight from a fabric register (or is a constant extension)
        for letter, shape in (("A", sa), ("B", sb)):
            for i in range(18):
                bit = conn[f"{letter}{i}"][0]
                if i >= shape.width and not shape.signed:
                    assert bit == "0"
                else:
                    assert driver[bit] == ("TRELLIS_FF", "Q"), (name, letter, i)
        # every used product bit goes straight into a fabric register
        for i in range(sa.width + sb.width):
            assert sinks[conn[f"P{i}"][0]] == [("TRELLIS_FF", "DI")], (name, i)


@pytest.mark.synth
def test_platform_none_keeps_the_behavioural_registers_in_fabric():
    st = yosys_stat(_Between(), "ecp5", platform=None)
    assert st["dsp"] == len(SYNTH_CASES)
    # the two register levels of every product are fabric flip-flops when Yosys infers the DSP
    assert st["ff"] == 2 * FABRIC_FF
    assert yosys_stat(_Between(), "ecp5")["ff"] == FABRIC_FF


WIDE_CASES = [   # (a shape, b shape or int constant): operands wider than a port are split
    (signed(9), -1_234_567),
    (signed(10), (1 << 20) | 3),        # a zero low piece of the constant takes no DSP
    (unsigned(8), 300_000),
    (signed(20), signed(9)),
    (signed(22), unsigned(19)),
]


def _wide_operand(v, name):
    return Const(v) if isinstance(v, int) else Signal(v, name=name)


@pytest.mark.parametrize("sa, b", WIDE_CASES, ids=repr)
def test_wide_registered_product_against_int64(sa, b):
    """registered_product of operands wider than a DSP port (behavioural pieces): the product
    of the operands three edges back, exact over edge values and random ones."""
    m = Module()
    a, bv = Signal(sa, name="a"), _wide_operand(b, "b")
    p = dsp.registered_product(m, a, bv)
    assert p.shape() == (a * bv).shape()
    rng = np.random.default_rng(sa.width)
    n = 200
    xs = _operands(sa, n, rng)
    ys = np.full(n, b, dtype=np.int64) if isinstance(b, int) else _operands(b, n, rng)
    got = []
    sim = Simulator(m)
    sim.add_clock(1e-6)

    async def tb(ctx):
        for k in range(n):
            ctx.set(a, int(xs[k]))
            if not isinstance(b, int):
                ctx.set(bv, int(ys[k]))
            await ctx.tick()
            got.append(ctx.get(p))

    sim.add_testbench(tb)
    sim.run()
    want = [int(x) * int(y) for x, y in zip(xs, ys)]
    lat = dsp.PRODUCT_LATENCY
    assert got[lat - 1:] == want[:n - lat + 1]


class _Wide(wiring.Component):
    def __init__(self):
        ports = {}
        for k, (sa, b) in enumerate(WIDE_CASES):
            ports[f"a{k}"] = In(sa)
            if not isinstance(b, int):
                ports[f"b{k}"] = In(b)
            ports[f"p{k}"] = Out((Signal(sa) * _wide_operand(b, "b")).shape())
        super().__init__(ports)

    def elaborate(self, platform):
        m = Module()
        for k, (sa, b) in enumerate(WIDE_CASES):
            ra = Signal(sa, name=f"ra{k}")
            m.d.sync += ra.eq(getattr(self, f"a{k}"))
            bv = Const(b) if isinstance(b, int) else Signal(b, name=f"rb{k}")
            if not isinstance(b, int):
                m.d.sync += bv.eq(getattr(self, f"b{k}"))
            m.d.comb += getattr(self, f"p{k}").eq(dsp.registered_product(m, ra, bv, platform=platform,
                                                                         name=f"w{k}"))
        return m


@pytest.mark.synth
def test_wide_products_are_registered_dsp_pieces_on_ecp5():
    """On ECP5 every piece is a MULT18X18D with its input and product registers (none of Yosys'
    unregistered split products), as many as product_dsps counts."""
    top = _netlist(_Wide())
    dsps = [c for c in top["cells"].values() if c["type"] == "MULT18X18D"]
    assert len(dsps) == sum(dsp.product_dsps(sa, b) for sa, b in WIDE_CASES)
    for c in dsps:
        prm = c["parameters"]
        assert (prm["REG_INPUTA_CLK"], prm["REG_INPUTB_CLK"], prm["REG_PIPELINE_CLK"]) == ("CLK0",) * 3


# ---- DSP floorplan ----------------------------------------------------------------------------

def test_85f_sites_are_the_devices_156_in_one_path_through_its_rows():
    sites = dsp.dsp_sites("LFE5U-85F")
    assert len(sites) == len(set(sites)) == 156
    # names as nextpnr-ecp5 wrote them here for placed MULT18X18Ds (X8/Y10/MULT18_4, X5/Y34/MULT18_1)
    assert {"X8/Y10/MULT18_4", "X5/Y34/MULT18_1", "X13/Y10/MULT18_0", "X9/Y34/MULT18_5"} <= set(sites)
    xs = [int(s.split("/")[0][1:]) for s in sites]
    assert xs[:52] == sorted(xs[:52]) and xs[52:104] == sorted(xs[52:104], reverse=True)  # a snake
    assert dsp.dsp_sites("LFE5U-25F") == [] and dsp.dsp_sites(None) == []


def _bels(platform, products):
    m = Module()
    for _ in range(products):
        dsp_product(m, Signal(8), Signal(8), platform=platform)
    return [m.submodules["dsp" if k == 0 else f"dsp_{k}"].attrs.get("BEL") for k in range(products)]


def test_planned_products_take_spread_sites_in_order_and_the_rest_are_free():
    plat = FamilyPlatform("ecp5")
    plat.device = "LFE5U-85F"
    dsp.plan_dsp_sites(plat, 3)
    bels = _bels(plat, 4)
    sites = dsp.dsp_sites("LFE5U-85F")
    assert sorted(b for b in bels if b) == sorted([sites[0], sites[52], sites[104]])
    assert bels.count(None) == 1                                 # the fourth is the placer's
    other = FamilyPlatform("ecp5")                               # no plan: no constraint
    assert _bels(other, 2) == [None, None]
