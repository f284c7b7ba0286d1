"""MaxPoolUnit / AvgPoolUnit (window sum) / GlobalAvgPoolUnit (image sum) against NumPy and the golden ops."""
from __future__ import annotations

import math

import numpy as np
import pytest
from amaranth.hdl import signed, unsigned

from onnx2hw.rtl.cost import Cost
from onnx2hw.rtl.pool import AvgPoolUnit, GlobalAvgPoolUnit, MaxPoolUnit, bench_config, sum_shape
from onnx2hw.sim.pysim import run_stream


def elem_range(bits, is_signed):
    return (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if is_signed else (0, (1 << bits) - 1)


def pool_ref(x, kernel, stride, pads, pad_value, op):
    """Window max / sum of ``x`` (N, H, W, C) by plain NumPy slicing."""
    n, h, w, c = x.shape
    kh, kw = kernel
    sh, sw = stride
    top, left, bottom, right = pads
    xp = np.full((n, h + top + bottom, w + left + right, c), pad_value, dtype=np.int64)
    xp[:, top:top + h, left:left + w] = x
    oh_n = (h + top + bottom - kh) // sh + 1
    ow_n = (w + left + right - kw) // sw + 1
    y = np.empty((n, oh_n, ow_n, c), dtype=np.int64)
    for oh in range(oh_n):
        for ow in range(ow_n):
            win = xp[:, oh * sh:oh * sh + kh, ow * sw:ow * sw + kw, :]
            y[:, oh, ow] = win.max(axis=(1, 2)) if op == "max" else win.sum(axis=(1, 2))
    return y


# (H, W, C, kernel, stride, pads)
GEOMS = {
    "odd_3x3_s2_asym": (5, 7, 3, (3, 3), (2, 2), (1, 0, 0, 1)),
    "2x2_s2": (6, 8, 4, (2, 2), (2, 2), (0, 0, 0, 0)),
    "3x3_s1_p1": (5, 5, 2, (3, 3), (1, 1), (1, 1, 1, 1)),
    "3x2_s(1,2)_odd": (7, 5, 6, (3, 2), (1, 2), (0, 1, 2, 0)),
    "1d_k3_s2": (1, 11, 4, (1, 3), (1, 2), (0, 1, 0, 1)),
}
_axes = [(b, s) for b in (1, 2, 4, 8) for s in (False, True)]


def _cases():
    cases = []
    for op in ("max", "sum"):
        for k, name in enumerate(GEOMS):
            for j, pause in enumerate(("3of4", "random")):
                bits, sgn = _axes[(2 * k + j + (op == "sum")) % len(_axes)]
                simd = ("1", "2", "C")[(k + j) % 3]
                cases.append((op, name, bits, sgn, simd, pause))
    return cases


def _simd(choice, c):
    if choice == "C":
        return c
    s = int(choice)
    return s if c % s == 0 else 1


@pytest.mark.parametrize("op,name,bits,sgn,simd,pause", _cases())
def test_pool_matches_numpy(op, name, bits, sgn, simd, pause):
    h, w, c, kernel, stride, pads = GEOMS[name]
    simd = _simd(simd, c)
    shape = signed(bits) if sgn else unsigned(bits)
    lo, hi = elem_range(bits, sgn)
    rng = np.random.default_rng(11)
    cls = MaxPoolUnit if op == "max" else AvgPoolUnit
    kwargs = {}
    if op == "sum":
        kwargs["pad_value"] = int(rng.integers(lo, hi + 1))   # the input zero point
    dut = cls(h, w, c, kernel, stride=stride, pads=pads, elem_shape=shape, simd=simd, **kwargs)
    if op == "max":
        assert dut.pad_value == lo
        assert dut.o.payload.shape().elem_shape == shape
    else:
        assert dut.out_elem_shape == sum_shape(shape, kernel[0] * kernel[1])
    # several thousand transfers through the window generator
    n = max(2, math.ceil(2500 / (dut.geom.out_pixels * kernel[0] * kernel[1] * dut.geom.fold)))
    x = rng.integers(lo, hi + 1, size=(n, h, w, c))
    want = pool_ref(x, kernel, stride, pads, dut.pad_value, op).reshape(-1, simd)
    out, _ = run_stream(dut, {"i": x.reshape(-1, simd)}, {"o": want.shape[0]},
                        src_pause=pause, sink_pause=pause, seed=4)
    assert np.array_equal(out["o"], want)


def _onnx_pool(op_type, x_nhwc, **attrs):
    """Run one ONNX pooling node in onnx.reference on float-converted integers (NCHW)."""
    import onnx
    from onnx import TensorProto, helper
    from onnx.reference import ReferenceEvaluator
    node = helper.make_node(op_type, ["x"], ["y"], **attrs)
    graph = helper.make_graph([node], "g",
                              [helper.make_tensor_value_info("x", TensorProto.DOUBLE, None)],
                              [helper.make_tensor_value_info("y", TensorProto.DOUBLE, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    (y,) = ReferenceEvaluator(model).run(None, {"x": x_nhwc.transpose(0, 3, 1, 2).astype(np.float64)})
    return y.transpose(0, 2, 3, 1)


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool", "GlobalAveragePool"])
def test_pool_matches_onnx_reference(op):
    """Exact on small integers: ONNX's own pooling on float-converted input agrees
    (average x count == our sum, padding included as zeros, ``count_include_pad=1``)."""
    h, w, c, kernel, stride, pads = GEOMS["odd_3x3_s2_asym"]
    shape = signed(8)
    rng = np.random.default_rng(21)
    if op == "GlobalAveragePool":
        dut = GlobalAvgPoolUnit(h, w, c, elem_shape=shape, simd=c)
        count = h * w
    else:
        cls = MaxPoolUnit if op == "MaxPool" else AvgPoolUnit
        dut = cls(h, w, c, kernel, stride=stride, pads=pads, elem_shape=shape, simd=c)
        count = kernel[0] * kernel[1]
    x = rng.integers(-128, 128, size=(3, h, w, c))
    out, _ = run_stream(dut, {"i": x.reshape(-1, c)}, {"o": 3 * dut.out_transfers},
                        src_pause="random", sink_pause="random")
    attrs = {}
    if op != "GlobalAveragePool":
        attrs = dict(kernel_shape=list(kernel), strides=list(stride), pads=list(pads))
        if op == "AveragePool":
            attrs["count_include_pad"] = 1
    y = _onnx_pool(op, x, **attrs)
    if op != "MaxPool":
        y = y * count
    want = np.rint(y).astype(np.int64)
    assert np.allclose(y, want, atol=1e-6)
    assert np.array_equal(out["o"], want.reshape(-1, c))


GAP_CASES = [
    ((3, 5, 4), 8, True, "2", "random"),
    ((2, 2, 3), 4, False, "1", "3of4"),
    ((1, 5, 4), 2, True, "C", "random"),
    ((7, 7, 8), 1, False, "C", "3of4"),
    ((4, 3, 6), 8, False, "2", "none"),
    ((1, 1, 3), 4, True, "1", "random"),
    ((3, 3, 256), 8, False, "1", "random"),   # partial sums in block RAM: the landing stage
    ((2, 2, 256), 8, True, "2", "none"),
    ((2, 2, 128), 8, True, "1", "3of4"),
]


@pytest.mark.parametrize("hwc,bits,sgn,simd,pause", GAP_CASES)
def test_global_avgpool_sum(hwc, bits, sgn, simd, pause):
    h, w, c = hwc
    simd = _simd(simd, c)
    shape = signed(bits) if sgn else unsigned(bits)
    lo, hi = elem_range(bits, sgn)
    dut = GlobalAvgPoolUnit(h, w, c, elem_shape=shape, simd=simd)
    assert dut.out_elem_shape == sum_shape(shape, h * w)
    n = max(3, math.ceil(2500 / dut.in_transfers))
    rng = np.random.default_rng(12)
    x = rng.integers(lo, hi + 1, size=(n, h, w, c))
    x[0] = hi     # extreme images: the widened sum must not overflow
    x[1] = lo
    want = x.sum(axis=(1, 2)).reshape(-1, simd)
    out, cycles = run_stream(dut, {"i": x.reshape(-1, simd)}, {"o": want.shape[0]},
                             src_pause=pause, sink_pause=pause, seed=2)
    assert np.array_equal(out["o"], want)
    if pause == "none":   # one input transfer per cycle, output 2 cycles after the last input
        est = GlobalAvgPoolUnit.estimate(h, w, c, elem_shape=shape, simd=simd)
        assert cycles == n * dut.in_transfers + est.latency - dut.in_transfers == n * dut.in_transfers + 2 + dut._lands("ecp5")


def test_sum_shape_never_overflows():
    for bits in (1, 2, 4, 8):
        for sgn in (False, True):
            shape = signed(bits) if sgn else unsigned(bits)
            lo, hi = elem_range(bits, sgn)
            for count in (1, 2, 4, 9, 49, 50):
                s = sum_shape(shape, count)
                slo, shi = elem_range(s.width, s.signed)
                assert s.signed == sgn and slo <= lo * count and hi * count <= shi
                # and it is the narrowest such shape
                nlo, nhi = elem_range(s.width - 1, s.signed) if s.width > 1 else (0, -1)
                assert not (nlo <= lo * count and hi * count <= nhi)


@pytest.mark.parametrize("cls", [MaxPoolUnit, AvgPoolUnit])
def test_pool_throughput_matches_estimate(cls):
    h, w, c = 8, 8, 4
    dut = cls(h, w, c, 2, simd=2)
    n = 4
    x = np.random.default_rng(0).integers(0, 256, size=(n, h, w, c))
    want = pool_ref(x, (2, 2), (2, 2), (0,) * 4, dut.pad_value, "max" if cls is MaxPoolUnit else "sum")
    out, cycles = run_stream(dut, {"i": x.reshape(-1, 2)}, {"o": want.size // 2})
    assert np.array_equal(out["o"], want.reshape(-1, 2))
    est = cls.estimate(h, w, c, 2, simd=2)
    assert isinstance(est, Cost) and est.dsp == 0
    assert abs(cycles / n - est.cycles) <= 0.15 * est.cycles, (cycles / n, est)


def test_global_avgpool_estimate():
    est = GlobalAvgPoolUnit.estimate(7, 7, 16, elem_shape=signed(8), simd=4)
    assert est.cycles == 7 * 7 * 4 and est.dsp == 0
    with pytest.raises(ValueError, match="family"):
        GlobalAvgPoolUnit.estimate(7, 7, 16, family="gowin")


@pytest.mark.parametrize("cls,kwargs,exc,text", [
    (MaxPoolUnit, dict(pads=(2, 0, 0, 0), kernel=2), ValueError, "smaller than the kernel"),
    (MaxPoolUnit, dict(channels=5, simd=2), ValueError, "simd 2"),
    (AvgPoolUnit, dict(pad_value=-1), ValueError, "-1"),
    (AvgPoolUnit, dict(stride=(1, 0)), ValueError, "stride"),
    (MaxPoolUnit, dict(stride=0), ValueError, "stride"),
    (GlobalAvgPoolUnit, dict(height=0), ValueError, "height"),
    (GlobalAvgPoolUnit, dict(channels=6, simd=4), ValueError, "simd 4"),
    (GlobalAvgPoolUnit, dict(elem_shape=8.0), TypeError, "elem_shape"),
])
def test_pool_rejects_bad_parameters(cls, kwargs, exc, text):
    args = dict(height=4, width=4, channels=4, elem_shape=unsigned(8))
    if cls is not GlobalAvgPoolUnit:
        args["kernel"] = 2
    args.update(kwargs)
    pos = [args.pop("height"), args.pop("width"), args.pop("channels")]
    if cls is not GlobalAvgPoolUnit:
        pos.append(args.pop("kernel"))
    with pytest.raises(exc, match=text):
        cls(*pos, **args)


def test_pool_bench_config_runs():
    for name, factory, feeds, expect in bench_config():
        dut = factory()
        out, _ = run_stream(dut, feeds, expect)
        g = dut.geom
        x = feeds["i"].reshape(-1, g.height, g.width, g.channels)
        if isinstance(dut, GlobalAvgPoolUnit):
            want = x.sum(axis=(1, 2))
        else:
            want = pool_ref(x, (g.kh, g.kw), (g.sh, g.sw), g.pads, dut.pad_value,
                            "max" if isinstance(dut, MaxPoolUnit) else "sum")
        assert np.array_equal(out["o"], want.reshape(-1, g.simd)), name


# ------------------------------------------------------------------ cocotb + Verilator
@pytest.mark.sim
@pytest.mark.parametrize("which", ["max", "sum", "gap"])
def test_pool_verilator(which):
    from onnx2hw.sim.cocotb_run import run_cocotb
    rng = np.random.default_rng(8)
    if which == "gap":
        h, w, c, simd, shape = 3, 5, 4, 2, signed(8)

        def factory():
            return GlobalAvgPoolUnit(h, w, c, elem_shape=shape, simd=simd)
    else:
        h, w, c, kernel, stride, pads = GEOMS["odd_3x3_s2_asym"]
        simd, shape = 3, (signed(4) if which == "max" else unsigned(8))
        cls = MaxPoolUnit if which == "max" else AvgPoolUnit

        def factory():
            return cls(h, w, c, kernel, stride=stride, pads=pads, elem_shape=shape, simd=simd)
    dut = factory()
    lo, hi = elem_range(shape.width, shape.signed)
    n = max(2, math.ceil(2000 / dut.in_transfers))
    x = rng.integers(lo, hi + 1, size=(n, h, w, c))
    if which == "gap":
        want = x.sum(axis=(1, 2))
    else:
        want = pool_ref(x, kernel, stride, pads, dut.pad_value, which)
    out, _ = run_cocotb(factory, {"i": x.reshape(-1, simd)}, {"o": want.size // simd},
                        src_pause="random", sink_pause="random", seed=6)
    assert np.array_equal(out["o"], want.reshape(-1, simd))


# ------------------------------------------------------------------ synthesis (Yosys)
SYNTH_CASES = [
    (MaxPoolUnit, (16, 16, 8, 2), dict(simd=2, elem_shape=signed(8))),
    (AvgPoolUnit, (7, 7, 3, 3), dict(stride=2, pads=1, simd=3, elem_shape=signed(8))),
    (GlobalAvgPoolUnit, (7, 7, 16), dict(simd=4, elem_shape=signed(8))),
    (GlobalAvgPoolUnit, (8, 8, 256), dict(simd=2, elem_shape=unsigned(8))),
]


@pytest.mark.synth
@pytest.mark.parametrize("cls,args,kwargs", SYNTH_CASES)
def test_pool_synth_matches_estimate(cls, args, kwargs):
    """synth_ecp5 succeeds; LUT (LUT4 + 6 per DPR16X4 cell), FF and EBR within 30 % of the model."""
    from onnx2hw.rtl.synth_check import yosys_stat
    stat = yosys_stat(cls(*args, **kwargs))
    est = cls.estimate(*args, **kwargs)
    lut = stat["lut"]   # LUT4 + 6 per TRELLIS_DPR16X4 (synth_check convention)
    assert stat["dsp"] == 0 and est.dsp == 0
    assert stat["ebr"] == est.ebr, (stat, est)
    assert abs(est.lut - lut) <= 0.3 * lut, (stat, est)
    assert abs(est.ff - stat["ff"]) <= 0.3 * stat["ff"], (stat, est)
