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

    ins = [n for n in ports if ports[n].is_input]
    outs = [n for n in ports if not ports[n].is_input]
    packed = {n: pack(arrays[n], ports[n]) if n in arrays else [] for n in ins}
    want = {n: int(expect.get(n, 0)) for n in outs}
    sig = {n: (Value.cast(getattr(dut, n).payload), getattr(dut, n).valid, getattr(dut, n).ready)
           for n in ports}
    src_p = {n: Pause(src_pause, seed, 2 * k + 1) for k, n in enumerate(ins)}
    snk_p = {n: Pause(sink_pause, seed, 2 * k + 2) for k, n in enumerate(outs)}
    got = {n: [] for n in outs}
    result = {}

    def fail(msg):
        raise AssertionError(f"{type(dut).__name__}: {msg}")

    async def tb(ctx):
        idx = {n: 0 for n in ins}
        holding = {n: False for n in ins}
        stalled = {n: None for n in outs}   # payload seen with valid & ~ready last cycle
        last_out = -1
        last_xfer = 0
        done_at = None
        cyc = 0
        vstate = {n: 0 for n in ins}
        for n in ins:
            ctx.set(sig[n][1], 0)
        while True:
            if cyc >= max_cycles:
                prog = ", ".join([f"{n}: {len(got[n])}/{want[n]} out" for n in outs if n in expect]
                                 + [f"{n}: {idx[n]}/{len(packed[n])} in" for n in ins if packed[n]])
                fail(f"timeout after {max_cycles} cycles ({prog})")
            if cyc - last_xfer > idle_limit:
                prog = ", ".join([f"{n}: {len(got[n])}/{want[n]} out" for n in outs if n in expect]
                                 + [f"{n}: {idx[n]}/{len(packed[n])} in" for n in ins if packed[n]])
                fail(f"deadlock: no transfer for {idle_limit} cycles at cycle {cyc} ({prog})")
            finished = all(len(got[n]) >= want[n] for n in outs)
            consumed = all(idx[n] >= len(packed[n]) for n in ins)
            if finished and consumed:
                if done_at is None:
                    done_at = cyc
                if cyc - done_at >= drain:
                    break
            # Sources.
            for n in ins:
                if not holding[n]:
                    if idx[n] < len(packed[n]) and src_p[n](cyc):
                        ctx.set(sig[n][0], packed[n][idx[n]])
                        ctx.set(sig[n][1], 1)
                        holding[n] = True
                    elif vstate[n]:
                        ctx.set(sig[n][1], 0)
                        vstate[n] = 0
                    if holding[n]:
                        vstate[n] = 1
            # Sinks (ready high once the expected count is reached, to expose extra transfers).
            ready = {n: (len(got[n]) >= want[n]) or snk_p[n](cyc) for n in outs}
            if check_comb:
                for n in outs:
                    ctx.set(sig[n][2], int(not ready[n]))
                alt = {n: ctx.get(sig[n][1]) for n in outs}
            for n in outs:
                ctx.set(sig[n][2], int(ready[n]))
            any_xfer = False
            for n in outs:
                v = ctx.get(sig[n][1])
                if check_comb and v != alt[n]:
                    fail(f"{n}.valid depends combinationally on {n}.ready at cycle {cyc}")
                p = ctx.get(sig[n][0]) if v else None
                x, stalled[n], took = observe_sink(n, cyc, v, p, ready[n], got[n], want[n], stalled[n],
                                                   n in expect, fail)
                if took:
                    last_out = cyc
                any_xfer = any_xfer or x
            for n in ins:
                if holding[n] and ctx.get(sig[n][2]):
                    holding[n] = False
                    idx[n] += 1
                    any_xfer = True
            if any_xfer:
                last_xfer = cyc
            await ctx.tick()
            cyc += 1
        result["cycles"] = last_out + 1 if last_out >= 0 else done_at

    top = Module()                       # a sync domain even for purely combinational blocks
    top.submodules.dut = dut
    tick = Signal(name="harness_tick")
    top.d.sync += tick.eq(~tick)
    sim = Simulator(top)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    if vcd_path is not None:
        with sim.write_vcd(str(vcd_path)):
            sim.run()
    else:
        sim.run()
    outputs = {n: unpack(got[n], ports[n]) for n in outs if n in expect}
    return outputs, int(result["cycles"])
