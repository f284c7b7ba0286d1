"""Refit the matrix-vector unit's cost constants (``onnx2hw.rtl.mvu.COST``) to Yosys.

Synthesizes a grid of small MVUs with Yosys ``synth_ecp5`` (every product style: DSP, paired
DSP, LUT, XNOR, ±1 weights, ±1 inputs; several PE/SIMD foldings), then fits the constants of
:class:`~onnx2hw.rtl.mvu.CostConstants` by least squares on the relative error: the ``lut_*``
ones to the LUT4 equivalents Yosys counts (``lut + 2 * ccu2c``), the ``ff_*`` ones to its
flip-flops. The model's other terms (memories, LUT products, the output queue) are kept as
they are. Prints each constant in the code beside its fitted value and the fit's standard
error, then each configuration's estimate error with the code's and with the fitted constants.

Run: ``python -m bench mvu-cost`` (a few minutes; copy the fitted values into ``CostConstants``
when they estimate better).
"""
from __future__ import annotations

import dataclasses
import sys
import time
import warnings
from dataclasses import dataclass

import numpy as np

from onnx2hw.rtl.mvu import COST, MatrixVectorUnit
from onnx2hw.rtl.synth_check import yosys_stat

__all__ = ["bench_mvu_cost", "GRID", "fit"]


@dataclass(frozen=True)
class Case:
    """One MVU of the grid: ``n`` x ``k`` weights of ``wb`` bits, inputs of ``ib`` bits."""

    label: str
    n: int
    k: int
    pe: int
    simd: int
    wb: int
    ib: int
    in_signed: bool = True
    mode: str = "auto"    # mul_style, or "bipolar" / "weight_bipolar" / "input_bipolar"
    bias: bool = True


def _grid() -> list[Case]:
    folds = [(16, 16, 4, 4), (12, 24, 3, 8), (32, 16, 8, 2), (16, 32, 1, 16), (64, 16, 4, 4)]
    out = []
    for n, k, pe, simd in folds:
        shape = f"{n}x{k} pe{pe} simd{simd}"
        out += [Case(f"dsp 8x8 {shape}", n, k, pe, simd, 8, 8, in_signed=pe % 2 == 0),
                Case(f"lut 4x4 {shape}", n, k, pe, simd, 4, 4, mode="lut"),
                Case(f"xnor {shape}", n, k, pe, simd, 1, 1, in_signed=False, mode="bipolar"),
                Case(f"sign w1x8 {shape}", n, k, pe, simd, 1, 8, mode="weight_bipolar", bias=pe != 3),
                Case(f"negate w8x1 {shape}", n, k, pe, simd, 8, 1, in_signed=False, mode="input_bipolar")]
        if pe > 1:
            out.append(Case(f"paired w4x8 {shape}", n, k, pe, simd, 4, 8, in_signed=False, mode="dsp"))
    out += [Case("lut 8x8 16x16 pe2 simd4", 16, 16, 2, 4, 8, 8, mode="lut"),
            Case("lut 2x2 32x32 pe4 simd8", 32, 32, 4, 8, 2, 2, bias=False),
            Case("dsp 8x8 8x64 pe1 simd4", 8, 64, 1, 4, 8, 8, bias=False)]
    return out


#: the configurations synthesized
GRID = _grid()


def _arguments(case: Case, seed: int):
    """``(weights, bias, keyword arguments)`` of a random MVU of ``case``."""
    rng = np.random.default_rng(seed)
    kw = dict(in_bits=case.ib, in_signed=case.in_signed, weight_bits=case.wb, weight_signed=True,
              pe=case.pe, simd=case.simd)
    if case.mode in ("bipolar", "weight_bipolar"):
        w = rng.choice([-1, 1], size=(case.n, case.k))
    else:
        w = rng.integers(-(1 << (case.wb - 1)), 1 << (case.wb - 1), size=(case.n, case.k))
    if case.mode in ("bipolar", "weight_bipolar", "input_bipolar"):
        kw[case.mode] = True
    else:
        kw["mul_style"] = case.mode
    b = rng.integers(-100, 100, size=case.n) if case.bias else None
    return w, b, kw


@dataclass
class Measured:
    """A synthesized case: the unit (for its model), the estimate, Yosys' counts."""

    case: Case
    unit: object
    lut_queue: int     # the estimate's integer part the constants do not scale (output queue)
    ff_queue: int
    lut: int           # Yosys: LUT4 equivalents
    ff: int
    dsp_ok: bool       # Yosys' DSP and block RAM counts equal the estimate's


def measure(cases=GRID, out=sys.stdout) -> list[Measured]:
    """Synthesize every case (``synth_ecp5``) beside its estimate."""
    rows = []
    for i, case in enumerate(cases):
        w, b, kw = _arguments(case, seed=i)
        unit = MatrixVectorUnit(w, b, **kw)
        est = MatrixVectorUnit.estimate(w, b, **kw)
        lut, ff, _, _ = unit.resources("ecp5")
        st = yosys_stat(unit, "ecp5")
        rows.append(Measured(case, unit, est.lut - int(round(lut)), est.ff - int(ff),
                             st["lut"] + 2 * st["ccu2c"], st["ff"],
                             (st["dsp"], st["ebr"]) == (est.dsp, est.ebr)))
        print(f"  synthesized {i + 1}/{len(cases)}: {case.label}", file=out, flush=True)
    return rows


def predict(rows: list[Measured], consts, which: str) -> np.ndarray:
    """The estimates (``which``: ``"lut"`` or ``"ff"``) of ``rows`` with ``consts``, unrounded."""
    col = 0 if which == "lut" else 1
    return np.array([r.unit.resources("ecp5", consts)[col] + getattr(r, f"{which}_queue") for r in rows])


def fit(rows: list[Measured], which: str):
    """``(names, code values, fitted values, standard errors)`` of the ``which`` constants
    (``"lut"`` or ``"ff"``): Gauss-Newton on the relative errors, the Jacobian by finite
    differences of the model itself (the LUT constants enter linearly, the FF scale not)."""
    names = [f.name for f in dataclasses.fields(COST) if f.name.startswith(which + "_")]
    code = np.array([float(getattr(COST, n)) for n in names])
    y = np.array([getattr(r, which) for r in rows], dtype=float)
    x = code.copy()

    def model(v):
        return predict(rows, dataclasses.replace(COST, **dict(zip(names, v))), which)

    for _ in range(50):
        p = model(x)
        jac = np.empty((len(rows), len(names)))
        for j in range(len(names)):
            step = 1e-3 * max(1.0, abs(x[j]))
            jac[:, j] = (model(x + step * np.eye(len(names))[j]) - p) / step / y
        dx = np.linalg.lstsq(jac, (y - p) / y, rcond=None)[0]
        x = x + dx
        if np.all(np.abs(dx) <= 1e-9 * np.maximum(1.0, np.abs(x))):
            break
    res = (y - model(x)) / y
    dof = max(len(rows) - len(names), 1)
    cov = np.linalg.pinv(jac.T @ jac) * float(res @ res) / dof
    return names, code, x, np.sqrt(np.maximum(np.diag(cov), 0.0))


def _errors(rows, consts, which):
    y = np.array([getattr(r, which) for r in rows], dtype=float)
    return predict(rows, consts, which) / y - 1


def bench_mvu_cost(out=sys.stdout) -> dict:
    """Synthesize :data:`GRID`, fit the constants, print both tables; returns the fitted
    constants by name."""
    t0 = time.monotonic()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*created but never used")
        rows = measure(GRID, out)
    print(f"({len(rows)} MVUs synthesized in {time.monotonic() - t0:.0f} s)\n", file=out)
    fitted = {}
    print(f"{'constant':24s} {'in code':>9s} {'fitted':>9s} {'std err':>9s}", file=out)
    for which in ("lut", "ff"):
        names, code, x, se = fit(rows, which)
        for n, c, v, e in zip(names, code, x, se):
            print(f"{n:24s} {c:9.3f} {v:9.3f} {e:9.3f}", file=out)
        fitted.update(zip(names, x))
    print("(a constant whose standard error is near its value is not pinned down by this grid)", file=out)
    new = dataclasses.replace(COST, **fitted)
    errs = {(w, tag): _errors(rows, c, w) for w in ("lut", "ff") for tag, c in (("code", COST), ("fit", new))}
    print(f"\n{'configuration':32s} {'LUT':>6s} {'code':>7s} {'fit':>7s} {'FF':>6s} {'code':>7s} "
          f"{'fit':>7s}", file=out)
    for i, r in enumerate(rows):
        flag = "" if r.dsp_ok else "  (DSP/EBR differ from the estimate)"
        print(f"{r.case.label:32s} {r.lut:6d} {errs['lut', 'code'][i]:+7.1%} {errs['lut', 'fit'][i]:+7.1%} "
              f"{r.ff:6d} {errs['ff', 'code'][i]:+7.1%} {errs['ff', 'fit'][i]:+7.1%}{flag}", file=out)
    for stat, f in (("mean |error|", lambda e: np.mean(np.abs(e))), ("max |error|", lambda e: np.max(np.abs(e)))):
        print(f"{stat:32s} {'':6s} {f(errs['lut', 'code']):7.1%} {f(errs['lut', 'fit']):7.1%} {'':6s} "
              f"{f(errs['ff', 'code']):7.1%} {f(errs['ff', 'fit']):7.1%}", file=out)
    return fitted


if __name__ == "__main__":
    bench_mvu_cost()
