"""Stream harness on Amaranth's own simulator (breadth testing of RTL blocks).

One testbench process drives every stream port of a component cycle by cycle: sources push
whole ``(transfers, lanes)`` arrays, sinks collect a given number of transfers, and a monitor
checks the stream rules on every output port:

* once ``valid`` is high it stays high, with the same ``payload``, until ``valid & ready``;
* ``valid`` never depends combinationally on ``ready`` (checked by evaluating ``valid`` with
  ``ready`` at both values each cycle);
* no transfer beyond the expected count (checked during a drain period with ``ready`` high);
* every fed input transfer is consumed.

Violations, deadlocks and timeouts raise ``AssertionError`` naming the port and cycle.
"""
from __future__ import annotations

from amaranth.hdl import Module, Signal, Value
from amaranth.sim import Simulator

from ._stream import (Pause, as_transfers, check_names, default_max_cycles, observe_sink, pack,
                      stream_ports, unpack)

__all__ = ["run_stream"]


def run_stream(dut, feeds: dict, expect: dict, *, src_pause="none", sink_pause="none", seed=0,
               max_cycles=None, drain=32, idle_limit=4096, check_comb=True, vcd_path=None):
    """Drive ``dut`` (an Amaranth ``wiring.Component``) through its stream ports.

    Parameters
    ----------
    dut : wiring.Component
        Block under test; its ``stream.Signature`` ports have ``data.ArrayLayout`` payloads
        (plain ``Shape`` payloads count as one lane).
    feeds : dict of str to array
        Input port name -> ``(transfers, lanes)`` integer array (1-D allowed for one lane).
        Values must fit the element shape. Input ports not named stay idle (``valid`` low).
    expect : dict of str to int
        Output port name -> number of transfers to collect. Output ports not named are held
        ready and not checked.
    src_pause, sink_pause : {"none", "3of4", "random"}
        When sources may raise ``valid`` / sinks raise ``ready``: always, one cycle in four,
        or a seeded 50 % coin flip (independent per port).
    seed : int
        Seed of the ``"random"`` patterns.
    max_cycles : int, optional
        Give up after this many cycles (default ``4096 + 64 * (fed + expected transfers)``).
    drain : int
        Cycles run after the last expected output (and last input consumed) with ``ready``
        high, during which any further output transfer is an error.
    idle_limit : int
        Cycles without any transfer after which the run fails as deadlocked.
    check_comb : bool
        Check each cycle that output ``valid`` does not depend on ``ready`` (slower: the outputs
        are settled with ``ready`` at both values).
    vcd_path : str, optional
        Write a VCD waveform there.

    Returns
    -------
    outputs : dict of str to ndarray
        ``(transfers, lanes)`` int64 arrays, signed per the payload element shape.
    cycles : int
        Cycles from the first cycle to the last output transfer, inclusive.
    """
    ports = stream_ports(dut)
    check_names(ports, feeds, expect)
    arrays = {n: as_transfers(n, a, ports[n]) for n, a in feeds.items()}
    if max_cycles is None:
        max_cycles = default_max_cycles(arrays, expect)
    bench = _Bench(dut, ports, arrays, expect, src_pause=src_pause, sink_pause=sink_pause, seed=seed,
                   limits=(max_cycles, drain, idle_limit), check_comb=check_comb)
    _simulate(dut, bench.testbench, vcd_path)
    outputs = {n: unpack(bench.got[n], ports[n]) for n in bench.outs if n in expect}
    return outputs, int(bench.cycles)


def _simulate(dut, testbench, vcd_path) -> None:
    """Run ``testbench`` on ``dut`` in Amaranth's simulator, writing a VCD to ``vcd_path`` if given."""
    top = Module()                       # a sync domain even for purely combinational blocks
    top.submodules.dut = dut
    tick = Signal(name="harness_tick")
    top.d.sync += tick.eq(~tick)
    sim = Simulator(top)
    sim.add_clock(1e-8)
    sim.add_testbench(testbench)
    if vcd_path is not None:
        with sim.write_vcd(str(vcd_path)):
            sim.run()
    else:
        sim.run()


class _Bench:
    """The testbench of one :func:`run_stream`: every port's state and the steps of one cycle.

    Each cycle, in this order: the run limits are checked, sources raise ``valid`` (per their
    pause pattern), sinks set ``ready`` (after the combinational check), outputs are observed,
    accepted inputs advance; then the clock ticks.
    """

    def __init__(self, dut, ports, arrays, expect, *, src_pause, sink_pause, seed, limits, check_comb):
        self.name = type(dut).__name__
        self.ins = [n for n in ports if ports[n].is_input]
        self.outs = [n for n in ports if not ports[n].is_input]
        self.expect = expect
        self.packed = {n: pack(arrays[n], ports[n]) if n in arrays else [] for n in self.ins}
        self.want = {n: int(expect.get(n, 0)) for n in self.outs}
        self.sig = {n: (Value.cast(getattr(dut, n).payload), getattr(dut, n).valid, getattr(dut, n).ready)
                    for n in ports}
        self.src_p = {n: Pause(src_pause, seed, 2 * k + 1) for k, n in enumerate(self.ins)}
        self.snk_p = {n: Pause(sink_pause, seed, 2 * k + 2) for k, n in enumerate(self.outs)}
        self.max_cycles, self.drain, self.idle_limit = limits
        self.check_comb = check_comb
        self.got = {n: [] for n in self.outs}
        self.idx = {n: 0 for n in self.ins}             # next transfer of each source
        self.holding = {n: False for n in self.ins}     # a source's transfer is offered
        self.vstate = {n: 0 for n in self.ins}          # the source's valid as last set
        self.stalled = {n: None for n in self.outs}     # payload seen with valid & ~ready last cycle
        self.last_out, self.last_xfer, self.done_at = -1, 0, None
        self.cycles = None

    def fail(self, msg):
        """Raise the harness's ``AssertionError``, naming the block."""
        raise AssertionError(f"{self.name}: {msg}")

    async def testbench(self, ctx):
        """Run cycles until ``drain`` cycles after the last expected output and input; sets
        :attr:`cycles`."""
        for n in self.ins:
            ctx.set(self.sig[n][1], 0)
        cyc = 0
        while True:
            self._check_limits(cyc)
            if self._drained(cyc):
                break
            self._drive_sources(ctx, cyc)
            ready, alt = self._set_ready(ctx, cyc)
            out_xfer = self._observe_sinks(ctx, cyc, ready, alt)
            in_xfer = self._take_inputs(ctx)
            if out_xfer or in_xfer:
                self.last_xfer = cyc
            await ctx.tick()
            cyc += 1
        self.cycles = self.last_out + 1 if self.last_out >= 0 else self.done_at

    def _progress(self) -> str:
        """Transfers collected and fed so far, per port (for timeout and deadlock messages)."""
        got, want, idx, packed = self.got, self.want, self.idx, self.packed
        return ", ".join([f"{n}: {len(got[n])}/{want[n]} out" for n in self.outs if n in self.expect]
                         + [f"{n}: {idx[n]}/{len(packed[n])} in" for n in self.ins if packed[n]])

    def _check_limits(self, cyc):
        """Fail at ``max_cycles`` or after ``idle_limit`` cycles without a transfer."""
        if cyc >= self.max_cycles:
            self.fail(f"timeout after {self.max_cycles} cycles ({self._progress()})")
        if cyc - self.last_xfer > self.idle_limit:
            self.fail(f"deadlock: no transfer for {self.idle_limit} cycles at cycle {cyc} "
                      f"({self._progress()})")

    def _drained(self, cyc) -> bool:
        """Whether every expected output was collected and every input consumed ``drain`` cycles
        ago (remembering the first cycle at which both held)."""
        finished = all(len(self.got[n]) >= self.want[n] for n in self.outs)
        consumed = all(self.idx[n] >= len(self.packed[n]) for n in self.ins)
        if finished and consumed:
            if self.done_at is None:
                self.done_at = cyc
            return cyc - self.done_at >= self.drain
        return False

    def _drive_sources(self, ctx, cyc):
        """Offer each idle source's next transfer when its pause pattern allows, else lower
        ``valid``; an offered transfer stays until accepted."""
        for n in self.ins:
            if not self.holding[n]:
                if self.idx[n] < len(self.packed[n]) and self.src_p[n](cyc):
                    ctx.set(self.sig[n][0], self.packed[n][self.idx[n]])
                    ctx.set(self.sig[n][1], 1)
                    self.holding[n] = True
                elif self.vstate[n]:
                    ctx.set(self.sig[n][1], 0)
                    self.vstate[n] = 0
                if self.holding[n]:
                    self.vstate[n] = 1

    def _set_ready(self, ctx, cyc):
        """Set each sink's ``ready`` (high once its expected count is reached, to expose extra
        transfers). Returns the ready values and, with ``check_comb``, each output's ``valid``
        settled with ``ready`` inverted first (else ``None``)."""
        ready = {n: (len(self.got[n]) >= self.want[n]) or self.snk_p[n](cyc) for n in self.outs}
        alt = None
        if self.check_comb:
            for n in self.outs:
                ctx.set(self.sig[n][2], int(not ready[n]))
            alt = {n: ctx.get(self.sig[n][1]) for n in self.outs}
        for n in self.outs:
            ctx.set(self.sig[n][2], int(ready[n]))
        return ready, alt

    def _observe_sinks(self, ctx, cyc, ready, alt) -> bool:
        """Check and collect every output this cycle; whether any transferred."""
        any_xfer = False
        for n in self.outs:
            v = ctx.get(self.sig[n][1])
            if self.check_comb and v != alt[n]:
                self.fail(f"{n}.valid depends combinationally on {n}.ready at cycle {cyc}")
            p = ctx.get(self.sig[n][0]) if v else None
            x, self.stalled[n], took = observe_sink(n, cyc, v, p, ready[n], self.got[n], self.want[n],
                                                    self.stalled[n], n in self.expect, self.fail)
            if took:
                self.last_out = cyc
            any_xfer = any_xfer or x
        return any_xfer

    def _take_inputs(self, ctx) -> bool:
        """Advance each source whose offered transfer is accepted this cycle; whether any was."""
        any_xfer = False
        for n in self.ins:
            if self.holding[n] and ctx.get(self.sig[n][2]):
                self.holding[n] = False
                self.idx[n] += 1
                any_xfer = True
        return any_xfer
