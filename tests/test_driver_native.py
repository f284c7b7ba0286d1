"""The host driver against the board top compiled with Verilator (``port="sim"``,
:class:`~onnx2hw.driver.native_transport.NativeTransport`): the whole digits test set through
``onnx2hw run --port sim`` at the build's baud rate, bit-exact against onnxruntime on the QDQ
model; the choice of simulator and a simulator that stops."""
from __future__ import annotations

import numpy as np
import pytest

from _oracle import spec_session
from _paths import EXAMPLES
import _int_models as models
import onnx2hw
from onnx2hw.build_info import build_info
from onnx2hw.dataflow.compile import compile_pipeline
from onnx2hw.dataflow.fold import Budget
from onnx2hw.driver import Accelerator, LinkError, write_build_info
from onnx2hw.driver.native_transport import NativeTransport, board_transport
from onnx2hw.driver.sim_transport import SimTransport
from onnx2hw.flow import link_format_of
from onnx2hw.rtl.accelerator import AcceleratorCore
from onnx2hw.rtl.board_top import BoardTop
from onnx2hw.sim.native_run import native_available

pytestmark = [pytest.mark.sim, pytest.mark.filterwarnings("ignore::amaranth.hdl._ir.UnusedElaboratable")]

CLK = 75e6
BAUD = 3e6      # the ULX3S build's clock and rate (`make demo`): 25 clock cycles per bit
DIGITS = EXAMPLES / "digits_mlp_int8.onnx"


@pytest.fixture(scope="module")
def native():
    reason = native_available()
    assert reason is None, f"the native simulator cannot be built here: {reason}"


def test_cli_run_sim_whole_digits_test_set(native, tmp_path, capsys):
    """450 inferences (0.098 s of simulated time, 7.3 M cycles) through the simulated UART."""
    from onnx2hw.cli import main

    design = onnx2hw.compile(str(DIGITS), target_cycles=256)
    write_build_info(tmp_path, design.pipeline, "ulx3s", CLK, BAUD, model=str(DIGITS))
    with np.load(EXAMPLES / "digits_test.npz") as f:
        x = f["input"].astype(np.float32)
    assert len(x) == 450
    np.savez(tmp_path / "x.npz", input=x)
    assert main(["run", str(tmp_path), "--port", "sim", "--inputs", str(tmp_path / "x.npz"),
                 "-o", str(tmp_path / "y.npz")]) == 0
    out = capsys.readouterr().out
    assert "450 inferences" in out and "0 resent" in out
    want = spec_session(str(DIGITS)).run(None, {"input": x})[0]
    with np.load(tmp_path / "y.npz") as f:
        np.testing.assert_array_equal(f["logits"], want)


@pytest.fixture(scope="module")
def top():
    p = compile_pipeline(models.mlp(seed=1), budget=Budget(6000, 12, 20, "small"))
    return p, BoardTop(AcceleratorCore(p), link_format_of(p), CLK, CLK / 4)


def test_native_unless_a_waveform_or_monitors(native, top, tmp_path):
    _p, t = top
    link = board_transport(t)
    assert isinstance(link, NativeTransport)
    link.close()

    async def idle(ctx):
        pass
    for kw in ({"vcd": str(tmp_path / "w.vcd")}, {"monitors": [idle]}):
        link = board_transport(t, **kw)
        assert isinstance(link, SimTransport)
        link.close()


def test_stopped_simulator_is_a_link_error(native, top):
    p, t = top
    info = build_info(p, "ulx3s-85f", CLK, 3e6)
    with Accelerator.open(info, "sim", baud=CLK / 4, pipeline=p, retries=1) as acc:
        assert isinstance(acc.transport, NativeTransport)
        acc.transport._proc.kill()
        with pytest.raises(LinkError, match=r"^sim: the native board simulator stopped \(exit -9\)"):
            acc.run(np.zeros((1,) + acc.input_shape, np.int64), raw=True)
