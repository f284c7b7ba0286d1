"""cocotb testbench run by :func:`onnx2hw.sim.cocotb_run.run_cocotb` inside the HDL simulator.

Reads ``spec.json`` and ``feeds.npz`` from the directory in ``$ONNX2HW_TB_DIR``, drives every
stream port with one loop (two triggers per cycle: inputs change after the falling edge, the
settled values are sampled in the read-only phase before the next rising edge), checks the
stream rules on outputs, and writes ``out.npz`` or ``error.txt`` there.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, ReadOnly, RisingEdge, Timer

from onnx2hw.sim._stream import Pause, PortInfo, observe_sink, pack, unpack


class _Fail(Exception):
    pass


@cocotb.test()
async def stream_test(dut):
    rundir = Path(os.environ["ONNX2HW_TB_DIR"])
    spec = json.loads((rundir / "spec.json").read_text())
    try:
        outputs, cycles = await _run(dut, spec, rundir)
    except _Fail as e:
        (rundir / "error.txt").write_text(str(e))
        raise AssertionError(str(e)) from None
    np.savez(rundir / "out.npz", __cycles__=np.int64(cycles), **outputs)


async def _run(dut, spec, rundir):
    ports = {p["name"]: PortInfo(**p) for p in spec["ports"]}
    with np.load(rundir / "feeds.npz") as f:
        feeds = {n: f[n] for n in f.files}
    expect = {n: int(v) for n, v in spec["expect"].items()}
    seed, max_cycles = spec["seed"], spec["max_cycles"]
    drain, idle_limit = spec["drain"], spec["idle_limit"]
    ins = [n for n in ports if ports[n].is_input]
    outs = [n for n in ports if not ports[n].is_input]
    packed = {n: pack(feeds[n], ports[n]) if n in feeds else [] for n in ins}
    want = {n: expect.get(n, 0) for n in outs}
    h = {n: (getattr(dut, f"{n}__payload"), getattr(dut, f"{n}__valid"),
             getattr(dut, f"{n}__ready")) for n in ports}
    src_p = {n: Pause(spec["src_pause"], seed, 2 * k + 1) for k, n in enumerate(ins)}
    snk_p = {n: Pause(spec["sink_pause"], seed, 2 * k + 2) for k, n in enumerate(outs)}
    got = {n: [] for n in outs}
    top = spec["top_name"]

    def fail(msg):
        raise _Fail(f"{top}: {msg}")

    def progress():
        return ", ".join([f"{n}: {len(got[n])}/{want[n]} out" for n in outs if n in expect]
                         + [f"{n}: {idx[n]}/{len(packed[n])} in" for n in ins if packed[n]])

    for n in ins:
        h[n][1].value = 0
    for n in outs:
        h[n][2].value = 0
    if spec["clocked"]:
        cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
        dut.rst.value = 1
        for _ in range(2):
            await RisingEdge(dut.clk)
        await FallingEdge(dut.clk)
        dut.rst.value = 0
        next_cycle = lambda: FallingEdge(dut.clk)  # noqa: E731
    else:                                          # purely combinational block
        next_cycle = lambda: Timer(10, unit="ns")  # noqa: E731
        await Timer(5, unit="ns")

    idx = {n: 0 for n in ins}
    holding = {n: False for n in ins}
    vstate = {n: 0 for n in ins}
    rstate = {n: 0 for n in outs}
    stalled = {n: None for n in outs}
    last_out, last_xfer, done_at, cyc = -1, 0, None, 0
    while True:
        if cyc >= max_cycles:
            fail(f"timeout after {max_cycles} cycles ({progress()})")
        if cyc - last_xfer > idle_limit:
            fail(f"deadlock: no transfer for {idle_limit} cycles at cycle {cyc} ({progress()})")
        if all(len(got[n]) >= want[n] for n in outs) and all(idx[n] >= len(packed[n])
                                                              for n in ins):
            if done_at is None:
                done_at = cyc
            if cyc - done_at >= drain:
                break
        for n in ins:
            if not holding[n]:
                if idx[n] < len(packed[n]) and src_p[n](cyc):
                    h[n][0].value = packed[n][idx[n]]
                    h[n][1].value = 1
                    holding[n] = True
                    vstate[n] = 1
                elif vstate[n]:
                    h[n][1].value = 0
                    vstate[n] = 0
        ready = {}
        for n in outs:
            r = int(len(got[n]) >= want[n] or snk_p[n](cyc))
            ready[n] = r
            if r != rstate[n]:
                h[n][2].value = r
                rstate[n] = r
        await ReadOnly()
        any_xfer = False
        for n in outs:
            v = int(h[n][1].value)
            pv = h[n][0].value if v else None     # a 1-bit port reads as Logic (no to_unsigned)
            p = (pv.to_unsigned() if hasattr(pv, "to_unsigned") else int(pv)) if v else None
            x, stalled[n], took = observe_sink(n, cyc, v, p, ready[n], got[n], want[n], stalled[n],
                                               n in expect, fail)
            if took:
                last_out = cyc
            any_xfer = any_xfer or x
        for n in ins:
            if holding[n] and int(h[n][2].value):
                holding[n] = False
                idx[n] += 1
                any_xfer = True
        if any_xfer:
            last_xfer = cyc
        await next_cycle()
        cyc += 1
    outputs = {n: unpack(got[n], ports[n]) for n in outs if n in expect}
    return outputs, (last_out + 1 if last_out >= 0 else done_at)
