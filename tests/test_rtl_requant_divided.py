"""Requantization by a ratio with a divisor (``acc * M / (d * 2**s)``, :mod:`onnx2hw.rtl.requant_divided`):
``arith.requantize`` against the rounding rule written here with Python's ``Fraction``, the divided
form's constants against it on whole ranges, and the Requantize and DivisorRequantize blocks under
random valid/ready stalls against it (an average pool's divisor 6 on its input's own grid: real
ties every six sums)."""
from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from onnx2hw import arith
from onnx2hw.rtl.pool_divisor import DivisorRequantize
from onnx2hw.rtl.requant import Requantize
from onnx2hw.rtl.requant_divided import divided_form
from onnx2hw.sim.pysim import run_stream

pytestmark = pytest.mark.filterwarnings("ignore:.*created but never used")


def _nearest(acc, m: int, s: int, d: int, ties: str, z: int = 0, lo: int = -(1 << 40), hi: int = 1 << 40):
    """``zp + acc * m / (d * 2**s)`` to the nearest integer (ties half to even or half up), clamped."""
    out = []
    for a in np.asarray(acc).reshape(-1):
        v = Fraction(int(a) * m, d << s)
        q = v.numerator // v.denominator
        frac = v - q
        up = frac > Fraction(1, 2) or frac == Fraction(1, 2) and (ties == "up" or q % 2 == 1)
        out.append(min(max(q + up + z, lo), hi))
    return np.array(out, np.int64).reshape(np.shape(acc))


@pytest.mark.parametrize("ties", ["even", "up"])
def test_arith_divided_equals_the_rule(ties):
    acc = np.arange(-700, 700)
    for m, s, d in [(1, 1, 3), (5, 3, 7), (3, 2, 5), (1, 4, 9)]:
        np.testing.assert_array_equal(arith.requantize(acc, m, s, 2, -100, 100, ties, d),
                                      _nearest(acc, m, s, d, ties, 2, -100, 100))
    big = np.array([(1 << 45) + 3, -(1 << 45) - 9])      # products beyond int64: Python integers
    np.testing.assert_array_equal(arith.requantize(big, (1 << 30) + 1, 40, 0, -(1 << 50), 1 << 50, ties, 3),
                                  _nearest(big, (1 << 30) + 1, 40, 3, ties))


@pytest.mark.parametrize("ratios,rng", [
    ([(1, 1, 3)], (-3000, 3000)),                        # / 6
    ([(1, 1, 3), (1, 2, 1), (477218588, 32, 1)], (-40000, 40000)),   # / 6, / 4, ~ / 9 as one shift
    ([(-3, 1, 5), (7, 4, 3)], (-(1 << 15), (1 << 15) - 1)),
])
@pytest.mark.parametrize("ties", ["even", "up"])
def test_divided_form_exact_on_the_whole_range(ratios, rng, ties):
    form = divided_form(ratios, *rng, ties)
    acc = np.arange(rng[0], rng[1] + 1)
    for c, (m, s, d) in enumerate(ratios):
        np.testing.assert_array_equal(form.apply(acc, c), _nearest(acc, m, s, d, ties))


def test_requantize_divided_under_backpressure():
    """acc / 6 for every 10-bit accumulator, both rules; each tie 6k + 3 goes to its even neighbour."""
    x = np.arange(-512, 512, dtype=np.int64).reshape(-1, 2)
    for ties in ("even", "up"):
        dut = Requantize(channels=2, pe=2, acc_bits=10, multiplier=1, shift=1, divisor=3, zero_point=3,
                         out_bits=8, out_signed=True, ties=ties)
        assert dut.divided is not None and dut.plan is None
        out, _ = run_stream(dut, {"i": x}, {"o": len(x)}, src_pause="random", sink_pause="random", seed=5)
        np.testing.assert_array_equal(out["o"], _nearest(x, 1, 1, 3, ties, 3, -128, 127))
    assert [out["o"][x == v].item() - 3 for v in (-9, -3, 3, 9)] == [-1, 0, 1, 2]   # half up
    even = _nearest(np.array([-9, -3, 3, 9]), 1, 1, 3, "even")
    assert even.tolist() == [-2, 0, 0, 2]


def test_requantize_divided_narrow_range_and_refusals():
    """With a reachable range the form is sized to it (no narrow plan: half to even of real ties
    is no floor of a line); a divisor needs one multiplier and shift."""
    kw = dict(channels=4, pe=2, acc_bits=16, out_bits=8, out_signed=True, ties="even")
    dut = Requantize(**kw, multiplier=5, shift=3, divisor=7, acc_lo=-900, acc_hi=1500)
    assert dut.plan is None and dut.divided is not None
    x = np.random.default_rng(1).integers(-900, 1501, size=(600, 2))
    out, _ = run_stream(dut, {"i": x}, {"o": len(x)}, src_pause="3of4", sink_pause="random", seed=1)
    np.testing.assert_array_equal(out["o"], _nearest(x, 5, 3, 7, "even", 0, -128, 127))
    with pytest.raises(ValueError, match="needs one non-zero multiplier"):
        Requantize(**kw, multiplier=np.array([1, 2, 1, 1]), shift=1, divisor=3)
    with pytest.raises(ValueError, match="divisor must be a positive int"):
        Requantize(**kw, multiplier=1, shift=1, divisor=0)
    up = Requantize.estimate(**kw, multiplier=1, shift=1)
    div = Requantize.estimate(**kw, multiplier=1, shift=1, divisor=3)
    assert div.lut > up.lut and div.latency > up.latency     # the tie stage (and a wider product)


def test_divisor_requantize_divided_classes_under_backpressure():
    """A 3x3 stride-1 pool with count_include_pad=0 on a 4x4 image: divisors 4 (corners), 6
    (edges) and 9 (inside) on the input's own grid, each class rounded half to even exactly."""
    rows = (0, 1, 1, 0)                                  # row counts 2, 3, 3, 2
    counts = np.array([2, 3])
    div = np.multiply.outer(counts, counts)              # 4, 6 / 6, 9
    ratios = {4: (1, 2, 1), 6: (1, 1, 3), 9: (1, 0, 9)}
    mult = np.vectorize(lambda v: ratios[v][0])(div)
    shift = np.vectorize(lambda v: ratios[v][1])(div)
    divisor = np.vectorize(lambda v: ratios[v][2])(div)
    dut = DivisorRequantize(channels=2, pe=2, acc_bits=12, rows=rows, cols=rows, multiplier=mult, shift=shift,
                            divisor=divisor, zero_point=-1, out_bits=8, out_signed=True, ties="even")
    assert dut.divided is not None
    rng = np.random.default_rng(4)
    images = 12
    x = rng.integers(-600, 600, size=(images * 16, 2))
    out, _ = run_stream(dut, {"i": x}, {"o": len(x)}, src_pause="random", sink_pause="random", seed=2)
    pix = np.arange(len(x)) % 16
    d_el = div[np.array(rows)[pix // 4], np.array(rows)[pix % 4]]
    want = np.stack([np.concatenate([_nearest(x[i:i + 1, ch], *ratios[int(d_el[i])], "even", -1, -128, 127)
                                     for i in range(len(x))]) for ch in range(2)], axis=1)
    np.testing.assert_array_equal(out["o"], want)
    assert np.count_nonzero((x % 6 == 3) & (d_el == 6)[:, None]) > 20     # real ties of / 6 met
