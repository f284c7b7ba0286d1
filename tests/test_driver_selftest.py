"""Accelerator.selftest() against the simulated board top of a self-test build (a real integer
MLP, UART included, Amaranth's simulator): the board replays its stored inputs and its outputs
are checked against the golden integer executor's; a wrong expectation is caught; lost commands
are sent again."""
from __future__ import annotations

import base64
import zlib

import numpy as np
import pytest

import _int_models as models
from _link_helpers import golden as _golden, random_inputs as _inputs
from onnx2hw import protocol as P
from onnx2hw.build_info import build_info, selftest_data, selftest_record
from onnx2hw.dataflow.compile import compile_pipeline
from onnx2hw.dataflow.fold import Budget
from onnx2hw.driver import Accelerator
from onnx2hw.flow import link_format_of

pytestmark = pytest.mark.filterwarnings("ignore::amaranth.hdl._ir.UnusedElaboratable")

SMALL = Budget(6000, 12, 20, "small")
CLK = 25e6
FAST = CLK / 4


@pytest.fixture(scope="module")
def mlp_selftest():
    g = models.mlp(seed=1)
    p = compile_pipeline(g, budget=SMALL)
    x = _inputs(g, 5, 3)
    info = build_info(p, "ulx3s-85f", CLK, 3e6, selftest=selftest_record(p, x, source="random"))
    return g, p, x, info


def test_record_holds_the_inputs_and_the_golden_outputs(mlp_selftest):
    g, p, x, info = mlp_selftest
    fmt = link_format_of(p)
    data = selftest_data(info)
    assert data.samples == 5 and info["selftest"]["samples"] == 5
    np.testing.assert_array_equal(fmt.decode_outputs(data.outputs, 5), _golden(g, x))
    assert data.inputs == fmt.encode_inputs(x)
    assert info["selftest"]["output_crc32"] == zlib.crc32(data.outputs)


def test_selftest_passes_with_the_right_count(mlp_selftest):
    g, p, x, info = mlp_selftest
    with Accelerator.open(info, "sim", baud=FAST, pipeline=p) as acc:
        r = acc.selftest(3)
        # the board still runs inferences over the link after its self-test
        np.testing.assert_array_equal(acc.run(x[:2], raw=True), _golden(g, x[:2]))
    assert r.ok, r.problems
    c = r.counts
    assert (c.inferences, c.failed_passes) == (15, 0)
    # the CRC-32 the board computed over the first pass is that of the golden outputs
    assert c.first_crc == zlib.crc32(link_format_of(p).encode_outputs(_golden(g, x)))
    # back to back: close to the pipeline's II per inference, never faster than its slowest stage
    assert p.ii <= r.cycles_per_inference < 1.5 * p.ii + p.latency / 15
    assert 0 < c.latency_cycles <= c.cycles
    assert r.inferences_per_s == pytest.approx(15 * CLK / c.cycles)
    assert r.latency_us == pytest.approx(c.latency_cycles / CLK * 1e6)


def test_corrupted_expectation_is_detected(mlp_selftest):
    g, p, x, info = mlp_selftest
    out = bytearray(base64.b64decode(info["selftest"]["outputs"]))
    out[3] ^= 0x01                                # one bit of one golden output
    bad = dict(info, selftest=dict(info["selftest"], outputs=base64.b64encode(bytes(out)).decode(),
                                   output_crc32=zlib.crc32(bytes(out))))
    with Accelerator.open(bad, "sim", baud=FAST, pipeline=p) as acc:
        r = acc.selftest(2)
    assert not r.ok
    assert r.counts.failed_passes == 2 and r.counts.inferences == 10
    assert r.counts.first_crc == info["selftest"]["output_crc32"] != r.expected_crc
    assert "2 of 2 passes gave outputs that differ from the golden executor's" in r.problems[0]


def test_lost_command_is_sent_again(mlp_selftest):
    g, p, x, info = mlp_selftest
    seen = []

    def flip_first(direction, data):
        if direction != "to_board":
            return data
        seen.append(data)
        if len(seen) > 1:
            return data
        b = bytearray(data)
        b[9] ^= 0x10                               # the command's payload: the board reports E_CRC
        return bytes(b)

    with Accelerator.open(info, "sim", baud=FAST, pipeline=p, inject=flip_first) as acc:
        r = acc.selftest(1)
        s = acc.stats
    assert r.ok and r.counts.inferences == 5
    assert s.resent == 1 and s.board_errors[P.E_CRC] == 1


def test_build_without_selftest_is_refused(mlp_selftest):
    g, p, x, info = mlp_selftest
    plain = {k: v for k, v in info.items() if k != "selftest"}
    with Accelerator.open(plain, "sim", baud=FAST, pipeline=p) as acc:
        with pytest.raises(ValueError, match="no self-test"):
            acc.selftest(1)
    with Accelerator.open(info, "sim", baud=FAST, pipeline=p) as acc:
        with pytest.raises(ValueError, match="passes"):
            acc.selftest(0)


def test_record_that_does_not_match_is_refused(mlp_selftest):
    g, p, x, info = mlp_selftest
    short = dict(info, selftest=dict(info["selftest"], samples=4))
    with pytest.raises(ValueError, match="does not hold 4 inferences"):
        selftest_data(short)
    wrong = dict(info, selftest=dict(info["selftest"], output_crc32=1))
    with pytest.raises(ValueError, match="CRC"):
        selftest_data(wrong)
