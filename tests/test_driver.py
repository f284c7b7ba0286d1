"""The host driver through the simulated board top (UART, framing, real accelerator; Verilator,
or Amaranth's simulator without it): bit-exact against the golden integer executor, and robust to corrupted
and dropped bytes on the simulated link (retried, never returned as results)."""
from __future__ import annotations

import gc
import json

import numpy as np
import pytest

from _paths import EXAMPLES
import _int_models as models
from _link_helpers import golden as _golden, random_inputs as _inputs
from onnx2hw.dataflow.compile import compile_pipeline
from onnx2hw.dataflow.fold import Budget
from onnx2hw.driver import Accelerator, LinkError, read_build_info, write_build_info
from onnx2hw import protocol as P
from onnx2hw.build_info import build_info
import onnx2hw
from onnx2hw.flow import link_format_of
from onnx2hw.golden.integer import execute_integer
from onnx2hw.ir import ModelError
from onnx2hw.layers import dequantize_outputs, quantize_inputs

pytestmark = pytest.mark.filterwarnings("ignore::amaranth.hdl._ir.UnusedElaboratable")

SMALL = Budget(6000, 12, 20, "small")
CLK = 25e6
FAST = CLK / 4          # 4 clock cycles per bit keeps the simulation short
DIGITS = str(EXAMPLES / "digits_mlp_int8.onnx")


@pytest.fixture(scope="module")
def mlp():
    g = models.mlp(seed=1)
    p = compile_pipeline(g, budget=SMALL)
    return g, p, build_info(p, "ulx3s-85f", CLK, 3e6)


class _Nth:
    """Deterministic fault: mangle byte ``index`` of the ``nth`` chunk sent in ``direction``
    (chunks are whole frames to the board, single bytes to the host)."""

    def __init__(self, direction, nth, index=0, drop=False):
        self.direction, self.nth, self.index, self.drop = direction, nth, index, drop
        self.seen = 0

    def __call__(self, direction, data):
        if direction != self.direction:
            return data
        self.seen += 1
        if self.seen - 1 != self.nth:
            return data
        b = bytearray(data)
        if self.drop:
            del b[self.index]
        else:
            b[self.index] ^= 0x10
        return bytes(b)


@pytest.mark.parametrize("batch", [1, 3, None])
def test_mlp_bit_exact_through_board(mlp, batch):
    g, p, info = mlp
    x = _inputs(g, 7, batch or 0)
    with Accelerator.open(info, "sim", baud=FAST, pipeline=p, batch=batch) as acc:
        y = acc.run(x, raw=True)
        s = acc.stats
    np.testing.assert_array_equal(y, _golden(g, x))
    assert acc.link_bound == pytest.approx(FAST / 10 / 24)          # 24 input bytes > 6 output bytes
    assert 0.3 * acc.link_bound < s.inferences_per_s < acc.link_bound
    b = batch or -(-7 // 4)          # default: about four frames per run, to overlap them
    assert s.frames == -(-7 // b) and s.resent == 0 and s.crc_errors == 0 and not s.board_errors


@pytest.mark.parametrize("skew", [-0.02, 0.02])
def test_host_bridge_baud_error(mlp, skew):
    # a host UART 2 % off the board's rate in both directions still works (4 cycles per bit
    # on the board; the receiver samples mid-bit)
    g, p, info = mlp
    x = _inputs(g, 4, 9)
    with Accelerator.open(info, "sim", baud=CLK / 16, pipeline=p, skew=skew) as acc:
        np.testing.assert_array_equal(acc.run(x, raw=True), _golden(g, x))
        assert acc.stats.resent == 0


def test_signed_outputs_and_wide_elements():
    # last layer without activation: signed accumulator-width outputs (more than one byte)
    g = models.mlp(seed=3, sizes=(6, 5), w_type=models.IntType(2, True), act=None)
    p = compile_pipeline(g, budget=SMALL)
    info = build_info(p, "ulx3s-85f", CLK, 3e6)
    assert info["pipeline"]["output"]["bits"] > 8 and info["pipeline"]["output"]["signed"]
    x = _inputs(g, 4, 3)
    with Accelerator.open(info, "sim", baud=FAST, pipeline=p) as acc:
        np.testing.assert_array_equal(acc.run(x, raw=True), _golden(g, x))


@pytest.mark.parametrize("fault", [
    _Nth("to_board", 0, index=9),              # payload bit flip in frame 1 -> board CRC error
    _Nth("to_board", 1, index=5),              # header (seq) flip in frame 2 -> board CRC error
    _Nth("to_board", 1, index=3),              # header (session) flip -> CRC error of another session
    _Nth("to_board", 0, index=12, drop=True),  # dropped payload byte -> frame 1 and 2 merge
    _Nth("to_board", 0, index=0, drop=True),   # dropped magic byte -> frame unseen, overtaken
    _Nth("to_host", 8),                        # corrupted result payload -> host CRC error
    _Nth("to_host", 1, drop=True),             # dropped result magic byte -> result lost
    _Nth("to_host", 10, drop=True),            # dropped result byte -> bad CRC / length
], ids=["b-flip", "b-seq", "b-session", "b-drop", "b-magic", "h-flip", "h-magic", "h-drop"])
def test_faults_are_detected_and_retried(mlp, fault):
    g, p, info = mlp
    x = _inputs(g, 6, 11)
    with Accelerator.open(info, "sim", baud=FAST, pipeline=p, batch=2, inject=fault) as acc:
        y = acc.run(x, raw=True)
        s = acc.stats
        faults = acc.transport.faults
    assert faults == 1
    np.testing.assert_array_equal(y, _golden(g, x))
    assert s.resent >= 1
    if fault.direction == "to_board" and not fault.drop and fault.index != 3:
        assert s.board_errors[P.E_CRC] >= 1
    if fault.direction == "to_host" and not fault.drop:
        assert s.crc_errors == 1


def test_random_byte_errors_both_directions(mlp):
    g, p, info = mlp
    x = _inputs(g, 12, 5)
    with Accelerator.open(info, "sim", baud=FAST, pipeline=p, batch=2, corrupt=0.004, drop=0.004,
                          seed=7) as acc:
        y = acc.run(x, raw=True)
        assert acc.transport.faults >= 2
        assert acc.stats.resent >= 1
    np.testing.assert_array_equal(y, _golden(g, x))


def test_link_that_always_fails_raises(mlp):
    g, p, info = mlp

    def garble(direction, data):
        if direction != "to_board":
            return data
        b = bytearray(data)
        b[-1] ^= 0xFF                       # every frame's CRC is wrong
        return bytes(b)

    with Accelerator.open(info, "sim", baud=FAST, pipeline=p, batch=2, retries=2, inject=garble) as acc:
        with pytest.raises(LinkError, match="failed after 2 retries.*CRC mismatch"):
            acc.run(_inputs(g, 2, 0), raw=True)
        assert acc.stats.board_errors[P.E_CRC] == 3


@pytest.fixture(scope="module")
def digits_build(tmp_path_factory):
    design = onnx2hw.compile(DIGITS, target_cycles=256)
    d = tmp_path_factory.mktemp("digits")
    write_build_info(d, design.pipeline, "ulx3s", CLK, 3e6, model=DIGITS)
    return d, design


def test_digits_mlp_float_path_bit_exact(digits_build):
    d, design = digits_build
    g = design.integer
    with np.load(EXAMPLES / "digits_test.npz") as f:
        x = f["input"][:4].astype(np.float32)
    want_int = execute_integer(g, quantize_inputs(g, {"input": x}))[g.output_specs[0].name]
    want = dequantize_outputs(g, {g.output_specs[0].name: want_int})["logits"]
    # no pipeline given: the simulated transport rebuilds the design from the build directory
    with Accelerator.open(d, "sim", baud=FAST) as acc:
        np.testing.assert_array_equal(acc.quantize(x), quantize_inputs(g, {"input": x})["input"])
        y = acc.run(x)
        assert acc.stats.inferences == 4
    assert y.dtype == np.float32 and y.shape == (4, 10)
    np.testing.assert_array_equal(y, want)


def test_build_info_round_trip_and_errors(digits_build, tmp_path):
    d, design = digits_build
    info = read_build_info(d)
    assert info["pipeline"] == design.pipeline.describe()
    assert info["board"] == "ulx3s" and info["link"]["in_bytes"] == 64 and info["link"]["out_bytes"] == 10
    assert json.loads((d / "accelerator.json").read_text())["quant"]["input"]["scale"] == pytest.approx(1 / 255)
    with pytest.raises(ModelError, match="not a build directory"):
        read_build_info(tmp_path)
    (tmp_path / "accelerator.json").write_text("{nope")
    with pytest.raises(ModelError, match="cannot read"):
        read_build_info(tmp_path)
    bad = dict(info, baud=-5)
    (tmp_path / "accelerator.json").write_text(json.dumps(bad))
    with pytest.raises(ModelError, match="baud"):
        read_build_info(tmp_path)


def test_rebuilt_design_must_match(digits_build):
    d, _design = digits_build
    info = read_build_info(d)
    info["pipeline"] = dict(info["pipeline"], ii_cycles=1)
    with pytest.raises(ModelError, match="does not match"):
        Accelerator.open(info, "sim", baud=FAST)


def test_bad_arguments(mlp):
    g, p, info = mlp
    with pytest.raises(ValueError, match="batch"):
        Accelerator.open(info, "sim", baud=FAST, pipeline=p, batch=99)
    with Accelerator.open(info, "sim", baud=FAST, pipeline=p) as acc:
        with pytest.raises(ValueError, match="raw input shape"):
            acc.run(np.zeros((2, 5), np.int64), raw=True)
        with pytest.raises(ValueError, match="does not fit"):
            acc.run(np.full((1, 24), 300), raw=True)
    with pytest.raises(ValueError, match="baud rate"):
        Accelerator.open(info, "sim", baud=CLK, pipeline=p)
    with pytest.raises(ValueError, match="baud must be a positive number"):
        Accelerator.open(info, "/dev/nonexistent-tty", baud=float("inf"))
    with pytest.raises(LinkError, match="cannot open serial port"):
        Accelerator.open(info, "/dev/nonexistent-tty", baud=3e6)


def test_cli_run_sim(digits_build, tmp_path, capsys):
    from onnx2hw.cli import main

    d, design = digits_build
    g = design.integer
    with np.load(EXAMPLES / "digits_test.npz") as f:
        x = f["input"][4:6].astype(np.float32)
    np.savez(tmp_path / "x.npz", input=x)
    rc = main(["run", str(d), "--port", "sim", "--baud", str(FAST), "--inputs", str(tmp_path / "x.npz"),
               "-o", str(tmp_path / "y.npz")])
    assert rc == 0
    out = capsys.readouterr().out
    assert "2 inferences" in out and "0 resent" in out
    want_int = execute_integer(g, quantize_inputs(g, {"input": x}))[g.output_specs[0].name]
    want = dequantize_outputs(g, {g.output_specs[0].name: want_int})["logits"]
    with np.load(tmp_path / "y.npz") as f:
        np.testing.assert_array_equal(f["logits"], want)


def test_cli_run_errors(digits_build, tmp_path, capsys):
    from onnx2hw.cli import main

    d, _design = digits_build
    assert main(["run", str(tmp_path), "--port", "sim", "--inputs", "x.npz"]) == 2
    assert "not a build directory" in capsys.readouterr().err
    np.savez(tmp_path / "x.npz", other=np.zeros((1, 64)), more=np.zeros(1))
    assert main(["run", str(d), "--port", "sim", "--inputs", str(tmp_path / "x.npz")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "missing input(s) 'input'; unknown key(s) 'other', 'more'" in err
    np.savez(tmp_path / "x.npz", input=np.zeros((1, 64), np.float32))
    assert main(["run", str(d), "--port", "/dev/nonexistent-tty", "--inputs", str(tmp_path / "x.npz")]) == 2
    assert "cannot open serial port" in capsys.readouterr().err


@pytest.mark.parametrize("arrays, raw, mention", [
    ({"input": np.full((2, 64), "x")}, False, "input array 'input' has dtype 'str32'; the model input is float32"),
    ({"input": np.full((2, 64), b"x")}, True, "raw input array 'input' has dtype 'bytes8'; the input takes uint8"),
    ({"x": np.zeros((2, 64), np.float32), "y": np.zeros(2)}, False, "missing input(s) 'input'"),
    ({"input": np.zeros((2, 8, 8), np.float32)}, False, "has shape (2, 8, 8); the input has rank 2 ([N, 64])"),
    ({"input": np.zeros((2, 65), np.uint8)}, True, "has shape (2, 65); the input is [N, 64] (dim 1 must be 64)"),
    ({"input": np.full((2, 64), -1)}, True, "has values outside uint8 [0, 255]"),
])
def test_cli_run_input_errors_are_one_line(digits_build, tmp_path, capsys, arrays, raw, mention):
    """Every bad --inputs archive is refused before the board is opened, in the words of `sim`."""
    from onnx2hw.cli import main

    d, _design = digits_build
    np.savez(tmp_path / "x.npz", **arrays)
    argv = ["run", str(d), "--port", "/dev/nonexistent-tty", "--inputs", str(tmp_path / "x.npz")]
    assert main(argv + ["--raw"] * raw) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("error: ") and captured.err.count("\n") == 1 and not captured.out
    assert mention in captured.err, captured.err


def test_cli_run_takes_a_labelled_test_set(digits_build, tmp_path, capsys):
    """The inputs are the array named after the model input; other keys (labels) are left alone,
    and an archive of one array is taken whatever its key."""
    from onnx2hw.cli import main

    d, design = digits_build
    with np.load(EXAMPLES / "digits_test.npz") as f:
        x, label = f["input"][:2], f["label"][:2]
    for i, arrays in enumerate(({"input": x, "label": label}, {"digits": x})):
        path = tmp_path / f"x{i}.npz"
        np.savez(path, **arrays)
        assert main(["run", str(d), "--port", "sim", "--baud", str(FAST), "--inputs", str(path),
                     "-o", str(tmp_path / f"y{i}.npz")]) == 0
        with np.load(tmp_path / f"y{i}.npz") as f:
            np.testing.assert_array_equal(f["logits"], design.golden({"input": x})["logits"])
    assert "2 inferences" in capsys.readouterr().out


def test_cli_run_link_error_is_one_line(digits_build, tmp_path, capsys):
    from onnx2hw.cli import main

    d, _design = digits_build
    np.savez(tmp_path / "x.npz", input=np.zeros((2, 64), np.float32))
    args = ["run", str(d), "--port", "sim", "--baud", str(FAST), "--inputs", str(tmp_path / "x.npz")]
    gc.collect()                    # warnings about other tests' objects do not belong to this output
    capsys.readouterr()
    assert main(args + ["--deadline", "1e-6"]) == 2
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and captured.err.startswith("error: sim: no valid answer within")
    assert "deadline" in captured.err and "Traceback" not in captured.err and not captured.out
    assert main(args + ["--deadline", "-1"]) == 2
    assert "--deadline must be a positive number" in capsys.readouterr().err
    assert main(args + ["--baud", "inf"]) == 2
    assert "--baud must be a positive number" in capsys.readouterr().err


def test_serial_transport_over_a_pty(mlp):
    """The pyserial transport against the simulated board behind a pseudo-terminal."""
    import os
    import select
    import threading

    from onnx2hw.driver.native_transport import board_transport
    from onnx2hw.rtl.accelerator import AcceleratorCore
    from onnx2hw.rtl.board_top import BoardTop

    g, p, info = mlp
    master, slave = os.openpty()
    board = board_transport(BoardTop(AcceleratorCore(p), link_format_of(p), CLK, FAST))
    stop = threading.Event()

    def bridge():
        while not stop.is_set():
            if select.select([master], [], [], 0.005)[0]:
                board.write(os.read(master, 4096))
            out = board.read(4096, 40 / FAST)
            if out:
                os.write(master, out)

    thread = threading.Thread(target=bridge, daemon=True)
    thread.start()
    x = _inputs(g, 3, 21)
    try:
        with Accelerator.open(info, os.ttyname(slave), baud=FAST, batch=1) as acc:
            acc.transport.margin_s = 30.0      # the simulated board runs far slower than real time
            y = acc.run(x, raw=True)
            assert acc.stats.resent == 0 and acc.stats.frames == 3
    finally:
        stop.set()
        thread.join(5)
        os.close(master)
        os.close(slave)
    np.testing.assert_array_equal(y, _golden(g, x))
