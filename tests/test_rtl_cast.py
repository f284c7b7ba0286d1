"""Cast (lane-wise value-preserving widen + constant offset) under random backpressure."""
import numpy as np
import pytest
from amaranth.hdl import signed, unsigned

from onnx2hw.rtl.cast import Cast
from onnx2hw.sim.pysim import run_stream


@pytest.mark.parametrize("in_shape, bits, offset, lanes", [
    (unsigned(8), 12, -300, 3), (signed(6), 10, 17, 2), (unsigned(4), 5, 0, 1)])
@pytest.mark.parametrize("pause", ["random", "3of4"])
def test_cast_adds_offset_losslessly(in_shape, bits, offset, lanes, pause):
    rng = np.random.default_rng(bits + lanes)
    lo, hi = (-(1 << (in_shape.width - 1)), (1 << (in_shape.width - 1)) - 1) if in_shape.signed \
        else (0, (1 << in_shape.width) - 1)
    x = rng.integers(lo, hi + 1, (2000, lanes))
    out, _ = run_stream(Cast(bits=bits, signed=True, offset=offset, in_shape=in_shape, lanes=lanes),
                        {"i": x}, {"o": len(x)}, src_pause=pause, sink_pause=pause, seed=3)
    np.testing.assert_array_equal(out["o"], x + offset)


def test_cast_rejects_bad_width():
    with pytest.raises(ValueError, match="bits must be a positive int"):
        Cast(bits=0, signed=True, in_shape=unsigned(8), lanes=1)
