"""The native stream harness (a C++ main driving the Verilated design): the same data, cycle counts,
pauses and error lines as the Python harness, and the cycle of a mismatching transfer."""
import os

import numpy as np
import pytest
from amaranth.hdl import Module, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from onnx2hw.sim import native_run
from onnx2hw.sim.native_run import ports_header, run_native
from onnx2hw.sim.pysim import run_stream
from onnx2hw.sim._stream import stream_ports
from test_sim_harness import _Comb, _Fork2, _Reg, _data, _xorshift_pauses

pytestmark = [pytest.mark.sim, pytest.mark.filterwarnings("ignore:.*created but never used")]


@pytest.fixture(autouse=True)
def _native():
    reason = native_run.native_available()
    if reason:
        pytest.skip(f"native simulator unavailable: {reason}")


def _first_line(excinfo) -> str:
    return str(excinfo.value).splitlines()[0]


@pytest.mark.parametrize("src,sink", [("none", "none"), ("3of4", "random"), ("random", "3of4"),
                                      ("random", "random")])
def test_matches_pysim(src, sink):
    x = _data(400)
    stats = {}
    out, cycles = run_native(_Reg(), {"i": x}, {"o": len(x)}, src_pause=src, sink_pause=sink, seed=5, stats=stats)
    np.testing.assert_array_equal(out["o"], x)
    _, py_cycles = run_stream(_Reg(), {"i": x}, {"o": len(x)}, src_pause=src, sink_pause=sink, seed=5)
    assert cycles == py_cycles            # same pause sequences, same cycle count
    assert stats["cycles_run"] == cycles + 32   # the drain after the last transfer
    if src == sink == "none":
        assert cycles == len(x) + 1       # one register stage


def test_applies_the_pauses():
    """Behind an always-ready sink the register takes an input exactly on the cycles its source may
    act: the input's stall cycles are the paused cycles before the last transfer."""
    n = 300
    x = _data(n)
    stats = {}
    _, cycles = run_native(_Reg(), {"i": x}, {"o": n}, src_pause="random", seed=11, stats=stats)
    last = [c for c, b in enumerate(_xorshift_pauses(11, 1, 10 * n)) if b][n - 1]
    assert stats["stalls"] == {"i": last + 1 - n, "o": 0}
    assert cycles == last + 2
    stats = {}
    run_native(_Reg(), {"i": x}, {"o": n}, src_pause="3of4", stats=stats)
    assert stats["stalls"] == {"i": 3 * n, "o": 0}


def test_comb_block_and_several_outputs():
    """A block without clock or reset, and one with two outputs: the Python harness's data and cycles."""
    x = np.random.default_rng(3).integers(0, 255, size=(300, 1))
    kw = dict(src_pause="random", sink_pause="random", seed=7)
    got, cycles = run_native(_Comb(), {"i": x}, {"o": 300}, **kw)
    np.testing.assert_array_equal(got["o"], x + 1)
    assert cycles == run_stream(_Comb(), {"i": x}, {"o": 300}, **kw)[1]
    x = np.random.default_rng(4).integers(0, 16, size=(300, 1))
    got, cycles = run_native(_Fork2(), {"i": x}, {"o0": 300, "o1": 300}, **kw)
    np.testing.assert_array_equal(got["o0"], x)
    np.testing.assert_array_equal(got["o1"], x)
    assert cycles == run_stream(_Fork2(), {"i": x}, {"o0": 300, "o1": 300}, **kw)[1]


@pytest.mark.parametrize("bug,pattern", [
    ("unstable", "payload changed while stalled"),
    ("drop_valid", "valid dropped before transfer"),
    ("lose", "deadlock: no transfer for 64 cycles"),
    ("duplicate", "more than the expected"),
])
def test_catches_broken_block_like_pysim(bug, pattern):
    """Each stream-rule violation (and a deadlock) gives the Python harness's very line, and the
    failing run is repeated with a trace whose file is named."""
    x = _data(200)
    kw = dict(src_pause="random", sink_pause="3of4", seed=4, idle_limit=64)
    with pytest.raises(AssertionError, match=pattern) as py:
        run_stream(_Reg(bug), {"i": x}, {"o": len(x)}, check_comb=False, **kw)
    with pytest.raises(AssertionError, match=pattern) as nat:
        run_native(_Reg(bug), {"i": x}, {"o": len(x)}, **kw)
    assert _first_line(nat) == _first_line(py)
    wave = str(nat.value).split("waveform: ")[-1].strip()
    assert os.path.isfile(wave) and os.path.getsize(wave) > 0


def test_timeout_and_unconsumed_input_like_pysim():
    x = _data(50)
    with pytest.raises(AssertionError, match=r"_Reg: timeout after 30 cycles \(o: \d+/50 out, i: \d+/50 in\)\n") as nat:
        run_native(_Reg(), {"i": x}, {"o": 50}, max_cycles=30)
    with pytest.raises(AssertionError) as py:
        run_stream(_Reg(), {"i": x}, {"o": 50}, max_cycles=30, check_comb=False)
    assert _first_line(nat) == _first_line(py)
    with pytest.raises(AssertionError, match=r"deadlock.*o: 10/10 out, i: 10/50 in") as nat:
        run_native(_Reg("stop", at=10), {"i": x}, {"o": 10}, idle_limit=40)
    with pytest.raises(AssertionError) as py:
        run_stream(_Reg("stop", at=10), {"i": x}, {"o": 10}, idle_limit=40, check_comb=False)
    assert _first_line(nat) == _first_line(py)


def test_wide_payloads():
    """Payloads of several 32-bit words (9 lanes x 13 bits = 117 bits) pass intact, and a stalled
    payload's change is reported with both full payloads, as the Python harness does."""
    x = np.random.default_rng(2).integers(0, 1 << 13, size=(300, 9))
    out, _ = run_native(_Reg(w=13, lanes=9, sgn=False), {"i": x}, {"o": 300}, src_pause="random",
                        sink_pause="random")
    np.testing.assert_array_equal(out["o"], x)
    y = np.random.default_rng(5).integers(-(1 << 11), 1 << 11, size=(200, 5))   # 60 bits, signed
    out, _ = run_native(_Reg(w=12, lanes=5), {"i": y}, {"o": 200}, src_pause="3of4", sink_pause="random")
    np.testing.assert_array_equal(out["o"], y)
    kw = dict(src_pause="random", sink_pause="3of4", seed=4)
    with pytest.raises(AssertionError) as py:
        run_stream(_Reg("unstable", w=13, lanes=9, sgn=False), {"i": x}, {"o": 300}, check_comb=False, **kw)
    with pytest.raises(AssertionError, match="payload changed while stalled") as nat:
        run_native(_Reg("unstable", w=13, lanes=9, sgn=False), {"i": x}, {"o": 300}, waves=True, **kw)
    assert _first_line(nat) == _first_line(py)


def test_golden_mismatch_names_transfer_and_cycle():
    """Outputs compared as collected: the first differing transfer and its cycle; the run goes on.
    Without pauses the register passes input transfer k (cycle k) on at cycle k + 1."""
    x = _data(100)
    want = x.copy()
    want[37, 1] += 1
    want[80, 0] -= 1
    found = {}
    out, cycles = run_native(_Reg(), {"i": x}, {"o": 100}, golden={"o": want}, mismatches=found)
    np.testing.assert_array_equal(out["o"], x)
    assert cycles == 101
    assert found == {"o": (37, 38)}
    found = {}
    run_native(_Reg(), {"i": x}, {"o": 100}, golden={"o": x}, mismatches=found)
    assert found == {}


class _Named(wiring.Component):
    """A register whose port names have underscores in them (Verilator encodes ``__`` in names)."""

    def __init__(self):
        lay = data.ArrayLayout(unsigned(6), 1)
        super().__init__({"in_a": In(stream.Signature(lay)), "out_": Out(stream.Signature(lay))})

    def elaborate(self, platform):
        m = Module()
        full = Signal()
        take = self.out_.ready | ~full
        m.d.comb += [self.in_a.ready.eq(take), self.out_.valid.eq(full)]
        with m.If(take):
            m.d.sync += [full.eq(self.in_a.valid), self.out_.payload.eq(self.in_a.payload)]
        return m


def test_port_names_with_underscores():
    assert native_run._member("i__payload") == "i___05Fpayload"
    assert native_run._member("out___valid") == "out___05F_valid"
    header = ports_header(stream_ports(_Named()))
    assert "SRC(in_a___05Fpayload, in_a___05Fvalid, in_a___05Fready, in_a)" in header
    x = np.random.default_rng(6).integers(0, 64, size=(50, 1))
    out, cycles = run_native(_Named(), {"in_a": x}, {"out_": 50}, src_pause="random", sink_pause="random", seed=2)
    np.testing.assert_array_equal(out["out_"], x)
    assert cycles == run_stream(_Named(), {"in_a": x}, {"out_": 50}, src_pause="random", sink_pause="random",
                                seed=2)[1]


def test_missing_compiler_is_one_clear_error(monkeypatch):
    monkeypatch.setattr(native_run, "_compiler", lambda: None)
    with pytest.raises(RuntimeError, match=r"^cannot run the native simulator: no C\+\+ compiler found"):
        run_native(_Reg, {"i": _data(4)}, {"o": 4})


def test_bad_golden_is_rejected():
    with pytest.raises(ValueError, match="golden 'o' has 3 transfers, expect says 4"):
        run_native(_Reg, {"i": _data(4)}, {"o": 4}, golden={"o": _data(3)})


def test_model_mismatch_names_its_cycle(monkeypatch):
    """Whole-model simulation compares each chunk's outputs as they are collected: a golden tensor
    made wrong in one element (inference 3, element 4) is reported with the cycle its transfer
    was collected in, within the run's cycles."""
    import onnx2hw
    from onnx2hw.design import MismatchError
    from onnx2hw.sim import model_sim

    design = onnx2hw.compile(os.path.join(os.path.dirname(__file__), "..", "examples", "digits_mlp_int8.onnx"),
                             board="ulx3s")
    real = model_sim.execute_integer

    def one_off(graph, feeds, **kw):
        out = real(graph, feeds, **kw)
        name = graph.output_specs[0].name
        wrong = out[name].copy()
        wrong.reshape(len(wrong), -1)[3, 4] += 1
        return {**out, name: wrong}

    monkeypatch.setattr(model_sim, "execute_integer", one_off)
    monkeypatch.setattr(model_sim, "locate_divergence", lambda *a, **k: None)   # not what is tested here
    report = design.simulate_raw(design.random_inputs(5), timing=False)
    assert report.first_mismatch[:2] == (3, 4) and report.exact == 4
    start, cycle = report.mismatch_at
    assert start == 0 and 0 < cycle < report.cycles
    with pytest.raises(MismatchError, match=rf"inference 3, output element 4: .*, collected at cycle {cycle} of "
                                            r"the simulator run from inference 0"):
        raise MismatchError(report)
