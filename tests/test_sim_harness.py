"""The stream harnesses themselves: correct blocks pass, each kind of broken block is caught."""
import fcntl
import os
import time

import numpy as np
import pytest
from amaranth.hdl import Module, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from onnx2hw.sim import build_cache, cache_folder, cocotb_run
from onnx2hw.sim.cache_folder import cache_root
from onnx2hw.sim.cocotb_run import run_cocotb
from _sim_fixtures import require_simulator
from onnx2hw.sim.pysim import run_stream
from onnx2hw.sim._stream import port_seed

pytestmark = pytest.mark.filterwarnings("ignore:.*created but never used")


def _layout(w=8, lanes=2, sgn=True):
    return data.ArrayLayout(signed(w) if sgn else unsigned(w), lanes)


class _Reg(wiring.Component):
    """Pipeline register; ``bug`` selects a deliberate stream-rule or data violation."""

    def __init__(self, bug=None, w=8, lanes=2, sgn=True, at=5):
        self.bug, self.at = bug, at
        lay = _layout(w, lanes, sgn)
        super().__init__({"i": In(stream.Signature(lay)), "o": Out(stream.Signature(lay))})

    def elaborate(self, platform):
        m = Module()
        full = Signal()
        blink = Signal()
        count = Signal(16)
        take = Signal()
        if self.bug == "comb_valid":      # valid follows ready combinationally
            m.d.comb += [self.o.valid.eq(self.i.valid & self.o.ready),
                         self.o.payload.eq(self.i.payload), self.i.ready.eq(self.o.ready)]
            return m
        if self.bug == "duplicate":       # transfer `at` is emitted twice
            dup = Signal()
            m.d.comb += take.eq((self.o.ready | ~full) & ~dup)
            with m.If(dup & self.o.ready):
                m.d.sync += dup.eq(0)
            with m.If(take & self.i.valid):
                m.d.sync += [full.eq(1), self.o.payload.eq(self.i.payload), count.eq(count + 1)]
                with m.If(count == self.at):
                    m.d.sync += dup.eq(1)
            with m.Elif(take):
                m.d.sync += full.eq(0)
            m.d.comb += [self.o.valid.eq(full), self.i.ready.eq(take)]
            return m
        m.d.comb += take.eq(self.o.ready | ~full)
        open_ = (count < self.at) if self.bug == "stop" else 1   # "stop": refuse input after `at`
        with m.If(take):
            m.d.sync += [full.eq(self.i.valid & open_), self.o.payload.eq(self.i.payload)]
            with m.If(self.i.valid & open_):
                m.d.sync += count.eq(count + 1)
                if self.bug == "lose":    # transfer `at` is accepted and dropped
                    with m.If(count == self.at):
                        m.d.sync += full.eq(0)
        if self.bug == "unstable":        # payload changes while stalled
            with m.Else():
                m.d.sync += self.o.payload[0].eq(~self.o.payload[0])
        if self.bug == "drop_valid":      # valid blinks off while stalled
            with m.If(full & ~self.o.ready):
                m.d.sync += blink.eq(~blink)
            with m.Else():
                m.d.sync += blink.eq(0)
        m.d.comb += [self.o.valid.eq(full & ~blink), self.i.ready.eq(take & open_)]
        return m


class _Fork2(wiring.Component):
    """Two-output broadcast with per-output taken flags (exercises several output ports)."""

    def __init__(self):
        lay = _layout(4, 1, False)
        super().__init__({"i": In(stream.Signature(lay)), "o0": Out(stream.Signature(lay)),
                          "o1": Out(stream.Signature(lay))})

    def elaborate(self, platform):
        m = Module()
        t0, t1 = Signal(), Signal()
        done0 = t0 | (self.o0.valid & self.o0.ready)
        done1 = t1 | (self.o1.valid & self.o1.ready)
        m.d.comb += [self.o0.payload.eq(self.i.payload), self.o1.payload.eq(self.i.payload),
                     self.o0.valid.eq(self.i.valid & ~t0), self.o1.valid.eq(self.i.valid & ~t1),
                     self.i.ready.eq(done0 & done1)]
        with m.If(self.i.valid & done0 & done1):
            m.d.sync += [t0.eq(0), t1.eq(0)]
        with m.Elif(self.i.valid):
            m.d.sync += [t0.eq(done0), t1.eq(done1)]
        return m


def _data(n=600, lanes=2, seed=1):
    return np.random.default_rng(seed).integers(-128, 128, size=(n, lanes))


PAUSES = [("none", "none"), ("3of4", "none"), ("none", "3of4"), ("random", "random"),
          ("3of4", "random")]


@pytest.mark.parametrize("src,sink", PAUSES)
def test_good_register_passes(src, sink):
    x = _data(2000)
    out, cycles = run_stream(_Reg(), {"i": x}, {"o": len(x)}, src_pause=src, sink_pause=sink,
                             seed=3)
    np.testing.assert_array_equal(out["o"], x)
    assert out["o"].dtype == np.int64
    if src == sink == "none":
        assert cycles == len(x) + 1          # one register stage, one transfer per cycle
    elif "3of4" in (src, sink):
        assert cycles >= 4 * (len(x) - 1)    # one transfer per four cycles at best


def test_unsigned_and_wide_lanes():
    x = np.random.default_rng(2).integers(0, 1 << 13, size=(300, 9))
    out, _ = run_stream(_Reg(w=13, lanes=9, sgn=False), {"i": x}, {"o": 300},
                        src_pause="random", sink_pause="random")
    np.testing.assert_array_equal(out["o"], x)


def test_multiple_outputs():
    x = np.random.default_rng(4).integers(0, 16, size=(1000, 1))
    out, _ = run_stream(_Fork2(), {"i": x}, {"o0": 1000, "o1": 1000}, src_pause="random",
                        sink_pause="random", seed=9)
    np.testing.assert_array_equal(out["o0"], x)
    np.testing.assert_array_equal(out["o1"], x)


@pytest.mark.parametrize("bug,pattern", [
    ("unstable", "payload changed while stalled"),
    ("drop_valid", "valid dropped before transfer"),
    ("comb_valid", "valid depends combinationally on o.ready"),
    ("lose", "deadlock"),
    ("duplicate", "more than the expected"),
])
def test_broken_block_is_caught(bug, pattern):
    x = _data(200)
    with pytest.raises(AssertionError, match=pattern):
        run_stream(_Reg(bug), {"i": x}, {"o": len(x)}, src_pause="random",
                   sink_pause="3of4", idle_limit=64)


def test_timeout_names_progress():
    x = _data(50)
    with pytest.raises(AssertionError, match=r"timeout after 30 cycles \(o: \d+/50 out"):
        run_stream(_Reg(), {"i": x}, {"o": 50}, max_cycles=30)


def test_unconsumed_input_is_caught():
    x = _data(50)
    with pytest.raises(AssertionError, match=r"deadlock.*o: 10/10 out, i: 10/50 in"):
        run_stream(_Reg("stop", at=10), {"i": x}, {"o": 10}, idle_limit=40)


@pytest.mark.parametrize("feeds,expect,err,match", [
    ({"x": np.zeros((3, 2), int)}, {"o": 3}, ValueError, "feed 'x' is not an input"),
    ({"i": np.zeros((3, 2), int)}, {"i": 3}, ValueError, "expect 'i' is not an output"),
    ({"i": np.zeros((3, 3), int)}, {"o": 3}, ValueError, r"shape \(transfers, 2\)"),
    ({"i": np.full((3, 2), 200)}, {"o": 3}, ValueError, r"outside \[-128, 127\]"),
    ({"i": np.zeros((3, 2))}, {"o": 3}, TypeError, "integer array"),
    ({"i": np.zeros((3, 2), int)}, {"o": -1}, ValueError, "transfer count"),
])
def test_bad_arguments(feeds, expect, err, match):
    with pytest.raises(err, match=match):
        run_stream(_Reg(), feeds, expect)


def test_bad_pause_name():
    with pytest.raises(ValueError, match="'sometimes'"):
        run_stream(_Reg(), {"i": _data(4)}, {"o": 4}, src_pause="sometimes")


# --- cocotb + Verilator ---------------------------------------------------------------------

@pytest.mark.sim
@pytest.mark.parametrize("src,sink", [("none", "none"), ("random", "3of4")])
def test_cocotb_matches_pysim(src, sink):
    require_simulator()
    x = _data(3000)
    out, cycles = run_cocotb(_Reg(), {"i": x}, {"o": len(x)}, src_pause=src, sink_pause=sink,
                             seed=5)
    np.testing.assert_array_equal(out["o"], x)
    _, py_cycles = run_stream(_Reg(), {"i": x[:300]}, {"o": 300}, src_pause=src,
                              sink_pause=sink, seed=5)
    out2, cycles2 = run_cocotb(_Reg(), {"i": x[:300]}, {"o": 300}, src_pause=src,
                               sink_pause=sink, seed=5)
    assert cycles2 == py_cycles          # same pause sequences, same cycle count
    if src == sink == "none":
        assert cycles == len(x) + 1


@pytest.mark.sim
def test_cocotb_reuses_build():
    require_simulator()
    x = _data(20)
    run_cocotb(_Reg(), {"i": x}, {"o": 20})
    before = {p.parent.name: p.stat().st_mtime for p in cache_root().glob("*/.built")}
    t = time.monotonic()
    out, _ = run_cocotb(lambda: _Reg(), {"i": x}, {"o": 20})
    y = _data(700, seed=9)   # other data, count, pauses and seed: the same build (data are files)
    out2, _ = run_cocotb(_Reg(), {"i": y}, {"o": 700}, src_pause="random", sink_pause="3of4", seed=3)
    np.testing.assert_array_equal(out2["o"], y)
    after = {p.parent.name: p.stat().st_mtime for p in cache_root().glob("*/.built")}
    np.testing.assert_array_equal(out["o"], x)
    # no existing build was redone (another test worker may add builds of its own meanwhile)
    assert {k: after.get(k) for k in before} == before
    assert time.monotonic() - t < 30


@pytest.mark.sim
def test_cocotb_catches_and_keeps_waveform():
    require_simulator()
    x = _data(100)
    with pytest.raises(AssertionError, match="payload changed while stalled") as info:
        run_cocotb(_Reg("unstable"), {"i": x}, {"o": len(x)}, src_pause="random",
                   sink_pause="3of4")
    wave = str(info.value).split("waveform: ")[-1].strip()
    assert os.path.isfile(wave) and os.path.getsize(wave) > 0


class _Comb(wiring.Component):
    """Purely combinational pass-through adding one (no clock, no reset)."""

    def __init__(self):
        lay = _layout(8, 1, False)
        super().__init__({"i": In(stream.Signature(lay)), "o": Out(stream.Signature(lay))})

    def elaborate(self, platform):
        m = Module()
        m.d.comb += [self.o.payload[0].eq(self.i.payload[0] + 1), self.o.valid.eq(self.i.valid),
                     self.i.ready.eq(self.o.ready)]
        return m


def _first_line(excinfo) -> str:
    return str(excinfo.value).splitlines()[0]


@pytest.mark.sim
@pytest.mark.parametrize("bug,pattern", [
    ("unstable", "payload changed while stalled"),
    ("drop_valid", "valid dropped before transfer"),
    ("lose", "deadlock: no transfer for 64 cycles"),
    ("duplicate", "more than the expected"),
])
def test_cocotb_catches_broken_block_like_pysim(bug, pattern):
    """The Verilog wrapper reports each stream-rule violation (and a deadlock) with the very line
    the Python harness gives: same port, transfer, cycle and payloads (same pause sequences)."""
    require_simulator()
    x = _data(200)
    kw = dict(src_pause="random", sink_pause="3of4", seed=4, idle_limit=64)
    with pytest.raises(AssertionError, match=pattern) as py:
        run_stream(_Reg(bug), {"i": x}, {"o": len(x)}, check_comb=False, **kw)
    with pytest.raises(AssertionError, match=pattern) as co:
        run_cocotb(_Reg(bug), {"i": x}, {"o": len(x)}, **kw)
    assert _first_line(co) == _first_line(py)
    assert "waveform: " in str(co.value)


@pytest.mark.sim
def test_cocotb_timeout_and_unconsumed_input_like_pysim():
    """Time-out and deadlock lines name the progress of every port, as in the Python harness."""
    require_simulator()
    x = _data(50)
    with pytest.raises(AssertionError, match=r"_Reg: timeout after 30 cycles \(o: \d+/50 out, i: \d+/50 in\)\n") as co:
        run_cocotb(_Reg(), {"i": x}, {"o": 50}, max_cycles=30)
    with pytest.raises(AssertionError) as py:
        run_stream(_Reg(), {"i": x}, {"o": 50}, max_cycles=30, check_comb=False)
    assert _first_line(co) == _first_line(py)
    with pytest.raises(AssertionError, match=r"deadlock.*o: 10/10 out, i: 10/50 in") as co:
        run_cocotb(_Reg("stop", at=10), {"i": x}, {"o": 10}, idle_limit=40)
    with pytest.raises(AssertionError) as py:
        run_stream(_Reg("stop", at=10), {"i": x}, {"o": 10}, idle_limit=40, check_comb=False)
    assert _first_line(co) == _first_line(py)


def _xorshift_pauses(seed, salt, n):
    """The documented "random" pattern: bit 31 of xorshift32 (13, 17, 5) stepped once per cycle
    from the port's seed, the first step giving cycle 0 (written out here from that description)."""
    x, bits = port_seed(seed, salt), []
    for _ in range(n):
        x ^= (x << 13) & 0xFFFFFFFF
        x ^= x >> 17
        x ^= (x << 5) & 0xFFFFFFFF
        bits.append(x >> 31)
    return bits


@pytest.mark.sim
def test_cocotb_applies_the_pauses():
    """Stall cycles counted by the wrapper: a register behind an always-ready sink takes an input
    transfer exactly on the cycles its source may act, so the input's stall cycles are the
    paused cycles before the last transfer; "3of4" pauses three cycles per transfer."""
    require_simulator()
    n = 400
    x = _data(n)
    stats = {}
    out, cycles = run_cocotb(_Reg(), {"i": x}, {"o": n}, src_pause="random", sink_pause="none", seed=11,
                             stats=stats)
    np.testing.assert_array_equal(out["o"], x)
    bits = _xorshift_pauses(11, 1, 10 * n)
    last = [c for c, b in enumerate(bits) if b][n - 1]        # cycle of the n-th input transfer
    assert stats["stalls"] == {"i": last + 1 - n, "o": 0}
    assert cycles == last + 2                                 # one register stage
    assert 0.35 < stats["stalls"]["i"] / (last + 1) < 0.65
    stats = {}
    run_cocotb(_Reg(), {"i": x}, {"o": n}, src_pause="3of4", sink_pause="none", stats=stats)
    assert stats["stalls"] == {"i": 3 * n, "o": 0}
    stats = {}
    out, cycles = run_cocotb(_Reg(), {"i": x}, {"o": n}, src_pause="none", sink_pause="random", seed=2,
                             stats=stats)
    np.testing.assert_array_equal(out["o"], x)
    assert stats["stalls"]["o"] > n / 2 and stats["cycles_run"] == cycles + 32   # drain after the last


@pytest.mark.sim
def test_cocotb_comb_block_and_several_outputs_like_pysim():
    """A block without clock or reset, and one with two outputs, under random pauses: the same
    data and cycle counts as the Python harness."""
    require_simulator()
    x = np.random.default_rng(3).integers(0, 255, size=(500, 1))
    got, cycles = run_cocotb(_Comb(), {"i": x}, {"o": 500}, src_pause="random", sink_pause="random", seed=7)
    np.testing.assert_array_equal(got["o"], x + 1)
    assert cycles == run_stream(_Comb(), {"i": x}, {"o": 500}, src_pause="random", sink_pause="random", seed=7)[1]
    x = np.random.default_rng(4).integers(0, 16, size=(500, 1))
    got, cycles = run_cocotb(_Fork2(), {"i": x}, {"o0": 500, "o1": 500}, src_pause="random",
                             sink_pause="random", seed=9)
    np.testing.assert_array_equal(got["o0"], x)
    np.testing.assert_array_equal(got["o1"], x)
    assert cycles == run_stream(_Fork2(), {"i": x}, {"o0": 500, "o1": 500}, src_pause="random",
                                sink_pause="random", seed=9)[1]


@pytest.mark.sim
def test_cocotb_wide_payloads():
    """Payloads wider than 64 bits (9 lanes x 13 bits) pass through the wrapper's files intact,
    and a stalled-payload change on them is reported with both full payloads."""
    require_simulator()
    x = np.random.default_rng(2).integers(0, 1 << 13, size=(300, 9))
    out, _ = run_cocotb(_Reg(w=13, lanes=9, sgn=False), {"i": x}, {"o": 300}, src_pause="random",
                        sink_pause="random")
    np.testing.assert_array_equal(out["o"], x)
    kw = dict(src_pause="random", sink_pause="3of4", seed=4)
    with pytest.raises(AssertionError) as py:
        run_stream(_Reg("unstable", w=13, lanes=9, sgn=False), {"i": x}, {"o": 300}, check_comb=False, **kw)
    with pytest.raises(AssertionError, match="payload changed while stalled") as co:
        run_cocotb(_Reg("unstable", w=13, lanes=9, sgn=False), {"i": x}, {"o": 300}, **kw)
    assert _first_line(co) == _first_line(py)


@pytest.mark.sim
def test_icarus():
    require_simulator("icarus")
    x = _data(500)
    out, _ = run_cocotb(_Reg(), {"i": x}, {"o": len(x)}, simulator="icarus",
                        src_pause="random", sink_pause="random")
    np.testing.assert_array_equal(out["o"], x)


@pytest.mark.sim
def test_verilator_runtime_is_shared_and_a_damaged_one_falls_back(tmp_path, monkeypatch):
    """Verilator's design-independent runtime is compiled once per cache and linked into each
    design; if it is unusable, the design is built completely, with the same results."""
    import json

    require_simulator()
    monkeypatch.setenv("ONNX2HW_SIM_CACHE", str(tmp_path))
    x = _data(50)
    out, _ = run_cocotb(_Reg(), {"i": x}, {"o": len(x)}, src_pause="random", sink_pause="random")
    np.testing.assert_array_equal(out["o"], x)
    (built,) = [json.loads(p.read_text()) for p in tmp_path.glob("*/.built")]
    assert built["shared_runtime"]
    (runtime,) = [p for p in (tmp_path / "_runtime").iterdir() if p.is_dir()]
    # no verilated_dpi.o: designs are verilated without --public-flat-rw (see onnx2hw.sim.toolchain._execute_cmds)
    assert sorted(p.name for p in runtime.glob("*.o")) == ["verilated.o", "verilated_threads.o", "verilated_vpi.o"]
    for obj in runtime.glob("*.o"):
        obj.write_bytes(b"damaged")
    x3 = _data(50, lanes=3)
    out, _ = run_cocotb(_Reg(lanes=3), {"i": x3}, {"o": len(x3)}, src_pause="random", sink_pause="random")
    np.testing.assert_array_equal(out["o"], x3)
    fallback = [p.parent for p in tmp_path.glob("*/build.shared-runtime.log")]
    assert len(fallback) == 1 and not json.loads((fallback[0] / ".built").read_text())["shared_runtime"]


@pytest.mark.sim
def test_verilator_large_design_flags(tmp_path, monkeypatch):
    """Designs above LARGE_DESIGN bytes of Verilog are compiled for build speed, same results."""
    import json

    require_simulator()
    monkeypatch.setenv("ONNX2HW_SIM_CACHE", str(tmp_path))
    monkeypatch.setattr(build_cache, "LARGE_DESIGN", 0)
    x = _data(50)
    out, _ = run_cocotb(_Reg(), {"i": x}, {"o": len(x)}, src_pause="3of4", sink_pause="random")
    np.testing.assert_array_equal(out["o"], x)
    (built,) = [json.loads(p.read_text()) for p in tmp_path.glob("*/.built")]
    assert built["shared_runtime"] and "OPT_FAST=-O0" in built["flags"] and "-fno-merge-cond" in built["flags"]
    # a long run (cycle budget above LONG_RUN) gets a build of its own, compiled for speed
    monkeypatch.setattr(cocotb_run, "LONG_RUN", 1000)
    out, _ = run_cocotb(_Reg(), {"i": x}, {"o": len(x)}, src_pause="3of4", sink_pause="random")
    assert len(list(tmp_path.glob("*/.built"))) == 1          # 100 transfers: not a long run
    out, _ = run_cocotb(_Reg(), {"i": x}, {"o": len(x)}, src_pause="3of4", sink_pause="random",
                        expected_cycles=1001)
    np.testing.assert_array_equal(out["o"], x)
    flags = sorted(json.loads(p.read_text())["flags"] for p in tmp_path.glob("*/.built"))
    assert len(flags) == 2 and "OPT_FAST=-O2" in flags[1] and "-fno-merge-cond" in flags[1]
    # a failing long run is not re-run with tracing (no traced build, no waveform)
    with pytest.raises(AssertionError, match=r"deadlock.*\nnot re-run with tracing: a run of 1,001 cycles"):
        run_cocotb(_Reg("stop", at=10), {"i": x}, {"o": 10}, idle_limit=40, expected_cycles=1001)
    built = [json.loads(p.read_text()) for p in tmp_path.glob("*/.built")]
    assert len(built) == 3 and not any(b["waves"] for b in built)   # the stopping design's -O2 build only


def test_build_key_names_the_cocotb_install(monkeypatch):
    """A simulator build links cocotb's libraries from the environment that built it: another
    environment (or a removed one) must not reuse it from the shared cache."""
    key = build_cache.build_key("module top; endmodule", "verilator", "top", False, None)
    monkeypatch.setattr(build_cache.cocotb_config, "libs_dir", "/elsewhere/cocotb/libs")
    assert build_cache.build_key("module top; endmodule", "verilator", "top", False, None) != key


def test_cache_prune_removes_only_stale_and_unlocked_entries(tmp_path):
    """Builds and runtimes unused for STALE_DAYS days go (unless in use); recent ones and the
    newest failed runs stay."""
    now = time.time()
    old = now - (cache_folder.STALE_DAYS + 1) * 86400

    def entry(folder, stamp, when):
        folder.mkdir(parents=True)
        (folder / stamp).write_text("x")
        os.utime(folder / stamp, (when, when))
        os.utime(folder, (when, when))
        return folder

    stale = entry(tmp_path / ("a" * 20), ".built", old)
    fresh = entry(tmp_path / ("b" * 20), ".built", now)
    busy = entry(tmp_path / ("c" * 20), ".built", old)
    runtime = entry(tmp_path / "_runtime" / ("d" * 20), "runtime.json", old)
    native_rt = entry(tmp_path / "_native_rt" / ("e" * 20), "done", old)
    other = entry(tmp_path / "not-a-build", "x", old)
    runs = [entry(tmp_path / "runs" / f"Top-{i:02d}", "sim.log", old + i) for i in range(cache_folder.KEEP_FAILED_RUNS + 3)]
    with open(tmp_path / f"{busy.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        removed = set(cache_folder.prune_cache(tmp_path, now=now))
    assert removed == {stale, runtime, native_rt, *runs[:3]}
    assert fresh.exists() and busy.exists() and other.exists() and all(r.exists() for r in runs[3:])
