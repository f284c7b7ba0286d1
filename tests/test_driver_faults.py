"""Faults on the host link, injected into the simulated board's UART (``port="sim"``): flipped,
dropped, duplicated and delayed bytes, noise (a babbling port), and a run killed mid-transfer
followed by a new one on the same link. Every run either returns results bit-exact against the
golden integer executor or raises one :class:`LinkError` naming the port; none hangs."""
from __future__ import annotations

import numpy as np
import pytest

import _int_models as models
from _link_helpers import golden as _golden, random_inputs as _inputs
from onnx2hw import protocol as P
from onnx2hw.build_info import build_info
from onnx2hw.dataflow.compile import compile_pipeline
from onnx2hw.dataflow.fold import Budget
from onnx2hw.driver import Accelerator, LinkError
from onnx2hw.driver.accelerator import new_session

pytestmark = pytest.mark.filterwarnings("ignore::amaranth.hdl._ir.UnusedElaboratable")

SMALL = Budget(6000, 12, 20, "small")
CLK = 25e6
FAST = CLK / 4          # 4 clock cycles per bit keeps the simulation short


@pytest.fixture(scope="module")
def mlp():
    # outputs that differ from one input to the next (signed, 12 bits): a stale or misplaced
    # result cannot pass for the right one
    g = models.mlp(seed=3, sizes=(6, 5), w_type=models.IntType(2, True), act=None)
    p = compile_pipeline(g, budget=SMALL)
    return g, p, build_info(p, "ulx3s-85f", CLK, 3e6)


class _Nth:
    """Deterministic fault: ``fn(data)`` replaces the ``nth`` chunk sent in ``direction`` (whole
    frames to the board, single bytes to the host); the result may hold pauses (floats)."""

    def __init__(self, direction, nth, fn):
        self.direction, self.nth, self.fn = direction, nth, fn
        self.seen = 0

    def __call__(self, direction, data):
        if direction != self.direction:
            return data
        self.seen += 1
        return self.fn(data) if self.seen - 1 == self.nth else data


def _kill_after(transport, reads):
    """Make the ``reads``-th read of ``transport`` that returns bytes raise KeyboardInterrupt
    (0: the first read at all), as a Ctrl-C in the middle of a run would; then restore it."""
    real = transport.read
    got = [0]

    def read(max_bytes, timeout):
        if reads == 0 or got[0] >= reads:
            del transport.read
            raise KeyboardInterrupt
        out = real(max_bytes, timeout)
        got[0] += bool(out)
        return out

    transport.read = read


# --------------------------------------------------------------------------- byte faults
@pytest.mark.parametrize("fault", [
    dict(corrupt=0.006), dict(drop=0.006), dict(duplicate=0.006), dict(delay=0.01),
    dict(corrupt=0.003, drop=0.003, duplicate=0.003, delay=0.003),
], ids=["flip", "drop", "duplicate", "delay", "mixed"])
def test_random_byte_faults_both_directions(mlp, fault):
    g, p, info = mlp
    x = _inputs(g, 8, 5)
    with Accelerator.open(info, "sim", baud=FAST, pipeline=p, batch=2, seed=3, **fault) as acc:
        y = acc.run(x, raw=True)
        assert acc.transport.faults >= 2
    np.testing.assert_array_equal(y, _golden(g, x))


def _dup(k):
    return lambda d: d[:k] + d[k:k + 1] + d[k:]


def _pause(k, seconds):
    return lambda d: [d[:k], float(seconds), d[k:]]


BYTE = 10 / FAST


@pytest.mark.parametrize("fault,resent", [
    (_Nth("to_board", 0, _dup(9)), True),                    # duplicated payload byte -> board CRC error
    (_Nth("to_board", 0, _dup(0)), False),                   # duplicated magic byte: still found
    (_Nth("to_host", 9, _dup(0)), True),                     # duplicated result byte -> host CRC error
    (_Nth("to_board", 0, _pause(9, 50 * BYTE)), False),      # short stall mid-frame: nothing lost
    (_Nth("to_board", 0, _pause(9, 1500 * BYTE)), True),     # long stall: resent, duplicate dropped
    (_Nth("to_host", 9, _pause(0, 1500 * BYTE)), True),      # result stalls past its time-out
    # noise before the first frame: a false magic with a bad type, and with an impossible count;
    # the board hunts on from the byte that failed and loses nothing
    (_Nth("to_board", 0, lambda d: b"\x00\xA5\xA5\x5A\x33" + d), False),
    (_Nth("to_board", 0, lambda d: P.MAGIC + bytes((P.T_DATA, 1, 2, 3, 250)) + d), False),
    # a false RESULT header in noise before a result: the host finds the real frame behind it
    (_Nth("to_host", 0, lambda d: P.MAGIC + bytes((P.T_RESULT, 1, 2, 3, 1)) + d), False),
], ids=["b-dup", "b-dup-magic", "h-dup", "b-stall", "b-long-stall", "h-long-stall", "b-noise",
        "b-false-count", "h-false-header"])
def test_deterministic_faults(mlp, fault, resent):
    g, p, info = mlp
    x = _inputs(g, 6, 11)
    with Accelerator.open(info, "sim", baud=FAST, pipeline=p, batch=2, inject=fault) as acc:
        y = acc.run(x, raw=True)
        s = acc.stats
        assert acc.transport.faults == 1
    np.testing.assert_array_equal(y, _golden(g, x))
    assert (s.resent > 0) == resent, s
    assert s.frames == 3 + s.resent


# --------------------------------------------------------------------------- a babbling port
def test_babbling_port_ends_in_a_deadline_error(mlp):
    """A port that delivers nothing but noise: a LinkError naming the port within the deadline,
    not a hang (retries are set high so that the deadline is what ends it)."""
    g, p, info = mlp
    with Accelerator.open(info, "sim", baud=FAST, pipeline=p, batch=2, retries=1000, babble=1.0) as acc:
        deadline = acc.default_deadline(6)
        with pytest.raises(LinkError, match=r"^sim: no valid answer within the .* s deadline; expected the "
                                            r"results of inferences 0\.\.5"):
            acc.run(_inputs(g, 6, 0), raw=True)
        assert acc.transport.now() < deadline * 1.05
        assert acc.stats.bytes_in > 100
    # the default allows for the retries and grows with the run
    assert deadline > 4 * acc._timeout()
    assert acc.default_deadline(60) > deadline


def test_babbling_port_with_few_retries_fails_on_retries(mlp):
    g, p, info = mlp
    with Accelerator.open(info, "sim", baud=FAST, pipeline=p, batch=2, retries=1, babble=1.0) as acc:
        with pytest.raises(LinkError, match=r"^sim: inferences 0\.\.1 failed after 1 retries"):
            acc.run(_inputs(g, 4, 0), raw=True)


def test_explicit_deadline(mlp):
    g, p, info = mlp
    with pytest.raises(ValueError, match="deadline"):
        Accelerator.open(info, "sim", baud=FAST, pipeline=p, deadline=0)
    with Accelerator.open(info, "sim", baud=FAST, pipeline=p, deadline=2e-5) as acc:
        with pytest.raises(LinkError, match=r"sim: no valid answer within the 2e-05 s deadline"):
            acc.run(_inputs(g, 4, 0), raw=True)
        assert acc.transport.now() < 3e-5


def test_some_noise_is_survived(mlp):
    g, p, info = mlp
    x = _inputs(g, 12, 4)
    with Accelerator.open(info, "sim", baud=FAST, pipeline=p, batch=2, babble=0.03, seed=2) as acc:
        y = acc.run(x, raw=True)
        assert acc.transport.faults >= 3 and acc.stats.noise_bytes >= 3
    np.testing.assert_array_equal(y, _golden(g, x))


# --------------------------------------------------------------------------- interrupted runs
@pytest.mark.parametrize("reads", [0, 3, 30], ids=["before-replies", "mid-reply", "later"])
def test_run_killed_mid_transfer_then_new_run(mlp, reads):
    """Ctrl-C during a run leaves frames in the board and replies on the wire; a new
    Accelerator (as a new `onnx2hw run` would open) on the same link gets only its own results."""
    g, p, info = mlp
    x_old, x_new = _inputs(g, 8, 1), _inputs(g, 8, 2)
    old = Accelerator.open(info, "sim", baud=FAST, pipeline=p, batch=2)
    _kill_after(old.transport, reads)
    with pytest.raises(KeyboardInterrupt):
        old.run(x_old, raw=True)
    new = Accelerator(info, old.transport, batch=2)
    assert new.session != old.session
    y = new.run(x_new, raw=True)
    np.testing.assert_array_equal(y, _golden(g, x_new))
    if reads == 0:
        # the old frames' first result is sent while the new run's first frame is received
        assert new.stats.stale >= 1
    # and the link is in order afterwards
    x3 = _inputs(g, 4, 3)
    np.testing.assert_array_equal(new.run(x3, raw=True), _golden(g, x3))
    assert new.stats.resent == 0


def test_run_killed_while_writing_then_new_run(mlp):
    """The old run dies half-way through writing its second frame: the board is left inside a
    frame, swallows the new run's first bytes, and the new run recovers by resending."""
    g, p, info = mlp
    x_old, x_new = _inputs(g, 8, 1), _inputs(g, 8, 2)
    old = Accelerator.open(info, "sim", baud=FAST, pipeline=p, batch=2,
                           inject=_Nth("to_board", 1, lambda d: d[:15]))
    _kill_after(old.transport, 0)
    with pytest.raises(KeyboardInterrupt):
        old.run(x_old, raw=True)
    new = Accelerator(info, old.transport, batch=2)
    y = new.run(x_new, raw=True)
    np.testing.assert_array_equal(y, _golden(g, x_new))
    assert new.stats.resent >= 1


def test_interrupted_run_on_the_same_accelerator_starts_a_new_session(mlp):
    g, p, info = mlp
    x_old, x_new = _inputs(g, 8, 1), _inputs(g, 8, 2)
    with Accelerator.open(info, "sim", baud=FAST, pipeline=p, batch=2) as acc:
        first = acc.session
        _kill_after(acc.transport, 3)
        with pytest.raises(KeyboardInterrupt):
            acc.run(x_old, raw=True)
        y = acc.run(x_new, raw=True)
        assert acc.session != first
        again = acc.session
        acc.run(x_new[:2], raw=True)
        assert acc.session == again                  # a completed run keeps its session
    np.testing.assert_array_equal(y, _golden(g, x_new))


def test_reused_session_would_be_silently_wrong(mlp):
    """The control: were the new run to reuse the old session and sequence numbers (as the
    link did before sessions), the old run's replies would be taken as its own."""
    g, p, info = mlp
    x_old, x_new = _inputs(g, 8, 1), _inputs(g, 8, 2)
    old = Accelerator.open(info, "sim", baud=FAST, pipeline=p, batch=2)
    seq0 = old._seq
    _kill_after(old.transport, 0)
    with pytest.raises(KeyboardInterrupt):
        old.run(x_old, raw=True)
    new = Accelerator(info, old.transport, batch=2)
    new.session, new._seq = old.session, seq0
    y = new.run(x_new, raw=True)
    wrong = (y != _golden(g, x_new)).reshape(len(y), -1).any(axis=1)
    assert wrong[:2].all() and (y[:2] == _golden(g, x_old)[:2]).all()
    assert len({_golden(g, x_new)[k].tobytes() for k in range(8)}) == 8


def test_sessions():
    s = [new_session() for _ in range(200)]
    assert all(1 <= v <= 0xFFFF for v in s)
    assert all(a != b for a, b in zip(s, s[1:]))
    assert len(set(s)) > 150                          # random, not a counter from a fixed start


def test_frames_carry_the_session(mlp):
    g, p, info = mlp
    sent = []

    def spy(direction, data):
        if direction == "to_board":
            sent.append(data)
        return data

    with Accelerator.open(info, "sim", baud=FAST, pipeline=p, batch=2, inject=spy) as acc:
        acc.run(_inputs(g, 4, 0), raw=True)
        frames = P.FrameParser(lambda t, c: c * acc.fmt.in_bytes).feed(b"".join(sent))
        assert len(frames) == 2 and all(f.ok and f.session == acc.session for f in frames)
        assert acc.stats.stale == 0
