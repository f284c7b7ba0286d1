"""The QONNX quantizers (``Quant``, ``BipolarQuant``, ``Trunc`` as Brevitas exports them, and
FINN's ``MultiThreshold``), under the domains ``qonnx.custom_op.general`` and
``finn.custom_op.general``.

* A ``Quant`` on an initializer quantizes weights (any width 1..16, signed/unsigned, narrow,
  every rounding mode, per tensor or per output channel); a signed 1-bit ``Quant`` or a
  ``BipolarQuant`` gives bipolar (+-1) weights, stored as one bit each in hardware. A ``Quant`` on
  a wider initializer (a 32-bit bias) is folded as a float constant.
* A ``Quant`` (or ``BipolarQuant``) on the model input is the host-side input quantizer (ROUND
  mode, integer zero point; bipolar: the sign of ``x / scale + zp``). A model input that a layer
  reads without one (a FINN datatype annotation such as ``BIPOLAR`` or ``INT8``, or a float
  input with calibration data) is given one first (:mod:`onnx2hw.quant.import_qonnx`).
* A ``Quant`` after a layer (Gemm / MatMul / Conv [+ Relu / Clip / constant Mul / Add /
  BatchNormalization]) is its output quantizer: outputs of at most 4 bits become exact integer
  multi-thresholds (:class:`Thresholds`, derived from the QONNX semantics
  ``round_mode(clamp(y / scale + zp))`` for every integer accumulator value, so any rounding mode
  and a float bias are exact). 5..8-bit outputs also use thresholds unless the requantization is
  exact too (a bias on the accumulator grid, HALF_UP rounding and no negative value to round);
  wider outputs (and Add / AveragePool outputs) use a :class:`Requant` (ROUND / HALF_EVEN /
  HALF_UP only: half to even for ROUND / HALF_EVEN where the multiplier is the scale ratio
  exactly, else round half up, so ties may differ by one LSB). Per-channel scales / zero points are
  taken when the quantized tensor is a model output (dequantized per channel on the host).
* ``BipolarQuant`` (or a signed 1-bit ``Quant``) after a layer is a one-threshold bipolar
  activation (``Thresholds.bipolar``: +1 where ``y / scale >= 0``); the next layer's bipolar x
  bipolar products are XNOR-popcount. A BatchNormalization with negative scales is folded too
  (those channels threshold ``-acc``), but only into threshold activations.
* ``MultiThreshold`` after a layer (``out_scale * count(y >= T) + out_bias``, as FINN's
  streamlining writes it) becomes exact integer thresholds on the accumulator (one step with
  ``out_bias = -out_scale / 2`` is bipolar).
* A ``Quant`` of a tensor already quantized onto another grid (Brevitas' ``QuantIdentity`` after a
  ``QuantReLU`` before a concatenation) requantizes it: a Requantize (a Mul by one) where its
  multiply-and-shift equals QONNX's rounding for every input code, else the exact table
  (:class:`~onnx2hw.layers.lookup.Lookup`, inputs of at most 8 bits).
* (Global)AveragePool followed by a ``Quant`` of at most 8 bits becomes a depthwise :class:`Conv`
  with all-one weights and thresholds (exact); MaxPool / Flatten / Reshape and the Add of two
  quantized tensors work as in the QDQ importer (Add requantizes: round half up).
* ``Trunc`` after a layer (Brevitas' TruncAvgPool: AveragePool -> Mul(area) -> Trunc) becomes
  exact thresholds too (outputs of at most 8 bits).
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from .. import arith
from ..arith import qonnx_round
from ..ir.errors import ModelError, UnsupportedError
from ..ir.graph import Node
from ..ir.load import FINN_DOMAIN, QONNX_DOMAIN
from ..rtl.lookup import MAX_IN_BITS
from . import conv, lookup, mul
from ._scale import ratio_to_multiplier_shift, ties_for
from .builder import Acc, Builder, Const, FloatIn, QConst, QT, Target, check_only_outputs, node_error
from .base import Pattern
from .types import IntType, Thresholds, accumulator_bounds, int_type_for

__all__ = ["PATTERNS", "DOMAINS", "threshold_table"]

DOMAINS = (QONNX_DOMAIN, FINN_DOMAIN)
_NEAREST = ("ROUND", "HALF_EVEN", "HALF_UP")
#: the rounding modes that take ties to even
_HALF_EVEN = ("ROUND", "HALF_EVEN")


def _params(b: Builder, node: Node):
    scale = np.asarray(b.const(node.inputs[1], node, "scale"), np.float64)
    zp = np.asarray(b.const(node.inputs[2], node, "zero point"), np.float64)
    bw = np.asarray(b.const(node.inputs[3], node, "bit width"), np.float64)
    if bw.size != 1 or bw.reshape(()) != np.round(bw.reshape(())) or not 1 <= float(bw.reshape(())) <= 64:
        raise node_error(node, f"bit width {bw.tolist()!r} must be one integer in 1..64", UnsupportedError)
    if np.any(~np.isfinite(zp)) or np.any(zp != np.round(zp)) or np.any(np.abs(zp) >= 2.0 ** 31):
        raise node_error(node, f"zero point {zp.reshape(-1)[0]!r} is not an integer of at most 31 bits",
                         UnsupportedError)
    if np.any(~np.isfinite(scale)) or np.any(scale <= 0):
        raise ModelError(f"node {node.name!r} (Quant): scale {scale.reshape(-1)[0]!r} is not a positive finite number")
    return (scale, zp, int(bw.reshape(())), bool(node.attr("signed", 1)), bool(node.attr("narrow", 0)),
            str(node.attr("rounding_mode", "ROUND")).upper())


def _channel_axis(node: Node, p: np.ndarray, ndim: int) -> tuple[int, np.ndarray]:
    """(axis, 1-D values) of a per-channel parameter broadcast against a rank-``ndim`` tensor."""
    if p.size == 1:
        return 0, p.reshape(-1)
    shape = (1,) * (ndim - p.ndim) + p.shape
    axes = [i for i, d in enumerate(shape) if d > 1]
    if len(axes) != 1:
        raise node_error(node, f"quantization parameter of shape {p.shape!r} is not per tensor or per channel",
                         UnsupportedError)
    return axes[0], p.reshape(-1)


def _fold_const(b: Builder, node: Node, x: np.ndarray):
    scale, zp, bits, signed, narrow, mode = _params(b, node)
    x = np.asarray(x, np.float64)
    y = x / scale + zp
    if signed and bits == 1:
        q = np.where(y >= 0, 1, -1).astype(np.int64)
        t = IntType(1, False, bipolar=True)
    else:
        lo, hi = arith.int_range(bits, signed, narrow)
        q = _round(np.clip(y, lo, hi), mode, node).astype(np.int64)
        t = IntType(bits, signed) if bits <= 16 else None
    if t is None:
        return Const(((q - zp) * scale).astype(np.float64))
    ax_s, s1 = _channel_axis(node, scale, x.ndim)
    ax_z, z1 = _channel_axis(node, zp, x.ndim)
    if s1.size > 1 and z1.size > 1 and ax_s != ax_z:
        raise node_error(node, "scale and zero point vary along different axes", UnsupportedError)
    axis = ax_s if s1.size > 1 else ax_z
    q = np.broadcast_to(q, x.shape)
    return QConst(q.astype(np.int64), s1.astype(np.float64), z1.astype(np.int64), axis, t)


def threshold_table(acc_lo: np.ndarray, acc_hi: np.ndarray, q, qlo: int, qhi: int) -> np.ndarray:
    """Exact integer thresholds of a non-decreasing map ``q`` from accumulators to ``[qlo, qhi]``.

    ``q(a)`` takes a float64 ``(C, L)`` array of integer accumulator values (row ``c`` = channel
    ``c``) and returns the output integers. ``T[c, i]`` is the smallest ``a`` in
    ``[acc_lo[c], acc_hi[c]]`` with ``q(a) >= qlo + 1 + i`` (``acc_hi[c] + 1`` when never reached),
    found by a vectorized bisection.
    """
    c = len(acc_lo)
    levels = np.arange(qlo + 1, qhi + 1, dtype=np.int64)[None, :]
    lo = np.broadcast_to(np.asarray(acc_lo, np.int64)[:, None], (c, levels.shape[1])).copy()
    hi = np.broadcast_to(np.asarray(acc_hi, np.int64)[:, None] + 1, (c, levels.shape[1])).copy()
    while np.any(lo < hi):  # first a in [lo, hi) with q(a) >= level; hi is the "never" sentinel
        mid = lo + (hi - lo) // 2
        ok = q(mid.astype(np.float64)) >= levels
        active = lo < hi
        hi = np.where(ok & active, mid, hi)
        lo = np.where(~ok & active, mid + 1, lo)
    return lo


def _real(v: Acc):
    """``a -> fn(clip(scale * a + bias_real, lo_real, hi_real))`` per channel (rows), float64
    (``fn``: a pending elementwise function, :attr:`Acc.fn`)."""
    scale = np.asarray(v.scale, np.float64)[:, None]
    bias = np.asarray(v.bias_real, np.float64)[:, None]
    if v.fn is None:
        return lambda a: np.clip(scale * a + bias, v.lo_real, v.hi_real)
    return lambda a: v.fn(np.clip(scale * a + bias, v.lo_real, v.hi_real))


#: accumulator values (channels x range) evaluated to check that a function's thresholds are exact
_CHECK_LIMIT = 1 << 24
#: a level below / above every level (finite, so that differences stay numbers)
_FAR = 1e300


def _check_non_decreasing(node: Node, q, acc_lo: np.ndarray, acc_hi: np.ndarray) -> None:
    """Refuse a map ``q`` (as in :func:`threshold_table`) that decreases somewhere in a channel's
    accumulator range: thresholds give it exactly only where it is non-decreasing. Checked on every
    accumulator value (a function such as HardSwish decreases where the quantizer may clamp it to
    one level, or may not)."""
    lo, hi = int(np.min(acc_lo)), int(np.max(acc_hi))
    c = len(acc_lo)
    if c * (hi - lo + 1) > _CHECK_LIMIT:
        raise node_error(node, f"the accumulator range [{lo}, {hi}] of {c} channels is too wide to check that the "
                         f"function before this quantizer gives non-decreasing levels (at most {_CHECK_LIMIT} "
                         f"values)", UnsupportedError)
    col_lo, col_hi = np.asarray(acc_lo, np.int64)[:, None], np.asarray(acc_hi, np.int64)[:, None]
    step = max(1, (1 << 20) // c)
    last = np.full((c, 1), -_FAR)
    for start in range(lo, hi + 1, step):
        a = np.arange(start, min(start + step, hi + 1), dtype=np.int64)[None, :]
        y = np.asarray(q(np.broadcast_to(a, (c, a.shape[1])).astype(np.float64)), np.float64)
        y = np.where(a < col_lo, -_FAR, np.where(a > col_hi, _FAR, y))   # outside the channel's range
        y = np.concatenate([last, y], axis=1)
        bad = np.argwhere(np.diff(y, axis=1) < 0)
        if bad.size:
            ch, i = (int(v) for v in bad[0])
            raise node_error(node, f"the function before this quantizer gives levels that decrease (channel {ch}, "
                             f"accumulator {start + i - 1} -> {start + i}): thresholds cannot give it",
                             UnsupportedError)
        last = y[:, -1:]


def _emit_thresholds(b: Builder, node: Node, v: Acc, q, qlo: int, qhi: int, t: IntType, s: float,
                     z: int) -> QT:
    """Emit ``v`` (dense/conv; an average pool becomes a depthwise conv) with thresholds of ``q``;
    a bipolar ``t`` takes ``q`` in {0, 1} (1 = +1) and gives a one-threshold bipolar activation."""
    if v.kind == "avgpool":
        v = _pool_as_depthwise_conv(v)
    sign = np.where(np.asarray(v.scale) < 0, -1, 1).astype(np.int64)
    if np.any(sign < 0):   # a negative rescale (BatchNormalization): threshold -acc, increasing there
        w = v.weights * sign.reshape((-1,) + (1,) * (v.weights.ndim - 1))
        wt = v.w_type if v.w_type.bipolar else int_type_for(min(0, int(w.min())), max(0, int(w.max())))
        v = replace(v, weights=w, bias=v.bias * sign, scale=v.scale * sign, w_type=wt)
        q0 = q

        def q(a):
            return q0(a * sign[:, None])
    in_spec = b.specs[v.inputs[0].tensor]
    acc_lo, acc_hi = accumulator_bounds(v.weights, v.bias, in_spec.dtype.lo, in_spec.dtype.hi)
    if v.fn is not None:
        _check_non_decreasing(node, q, acc_lo, acc_hi)
    table = threshold_table(np.array(acc_lo, dtype=np.int64), np.array(acc_hi, dtype=np.int64), q, qlo, qhi)
    if np.all(table == table[:1]):
        table = table[:1]
    if t.bipolar:
        target, act = Target(node.outputs[0], s, 0, t, -1, 1), Thresholds(table, -1, bipolar=True)
    else:
        target, act = Target(node.outputs[0], s, z, t, qlo, qhi), Thresholds(table, qlo)
    return replace(v.emit(b, v, target, act=act), real=True)


_BIPOLAR = IntType(1, False, bipolar=True)


def _bipolar_acc(b: Builder, node: Node, v: Acc, scale: np.ndarray, zp: np.ndarray) -> QT:
    """A layer output quantized to +-``scale``: ``+1`` where ``y / scale + zp >= 0`` (QONNX
    BipolarQuant, and Quant with ``signed=1, bitwidth=1``), as one threshold per channel."""
    if v.kind not in ("dense", "conv", "avgpool"):
        raise node_error(node, f"a bipolar quantizer after {v.kind} is not supported", UnsupportedError)
    c = v.onnx_shape[0]
    sc = np.broadcast_to(_per_output(node, scale, v), (c,))
    z = np.broadcast_to(_per_output(node, zp, v), (c,))
    if np.any(z != 0):
        raise node_error(node, f"a bipolar activation with zero point {z[np.nonzero(z)[0][0]]!r} is not supported "
                         f"(its values would not be +-scale)", UnsupportedError)
    if not np.all(sc == sc[0]):
        raise node_error(node, "a bipolar activation with per-channel scales is not supported (the next layer "
                         "needs one input scale)", UnsupportedError)
    real = _real(v)
    s_col, z_col = sc[:, None], z[:, None]
    return _emit_thresholds(b, node, v, lambda a: (real(a) / s_col + z_col >= 0).astype(np.int64), 0, 1,
                            _BIPOLAR, float(sc[0]), 0)


def _per_output(node: Node, p: np.ndarray, v: Acc) -> np.ndarray:
    """A quantizer parameter of a layer output as a scalar or ``(C,)`` (per output channel)."""
    if p.size == 1:
        return p.reshape(())
    axis, p1 = _channel_axis(node, p, len(v.onnx_shape) + 1)
    if axis != 1 or p1.size != v.onnx_shape[0]:
        raise node_error(node, f"quantization parameter of shape {p.shape!r} is not per output channel (axis 1)",
                         UnsupportedError)
    return p1


def _pool_as_depthwise_conv(v: Acc) -> Acc:
    """An average pool as a depthwise convolution with all-one weights (so that its output
    quantizer can be exact thresholds); the pad value is the input zero point."""
    c = v.onnx_shape[0]
    kh, kw = v.params["kernel"]
    return replace(v, kind="conv", emit=conv.emit, weights=np.ones((c, kh, kw, 1), np.int64), w_type=IntType(1, False),
                   params={"stride": v.params["stride"], "pads": v.params["pads"], "group": c})


def _quantize_acc(b: Builder, node: Node, v: Acc) -> QT:
    scale, zp, bits, signed, narrow, mode = _params(b, node)
    if bits > 16:
        raise node_error(node, f"activation bit width {bits} is above 16", UnsupportedError)
    if signed and bits == 1:
        return _bipolar_acc(b, node, v, scale, zp)
    if v.kind == "lookup":
        return _quantize_table(b, node, v, scale, zp, IntType(bits, signed), narrow)
    if v.fn is not None and bits > 8:
        raise node_error(node, f"a {bits}-bit quantizer of a function of a layer's output is not supported "
                         f"(exact thresholds: at most 8 bits)", UnsupportedError)
    s, z = _per_output(node, scale, v), _per_output(node, zp, v)
    if s.ndim and np.all(s == s[0]):
        s = s[0]
    if z.ndim and np.all(z == z[0]):
        z = z[0]
    if s.ndim or z.ndim:   # per-channel: only as a model output (the host dequantizes per channel)
        check_only_outputs(b.graph, node.outputs[0], node)
        s = np.broadcast_to(s, (v.onnx_shape[0],)).astype(np.float64)
        z = np.broadcast_to(z, (v.onnx_shape[0],)).astype(np.int64)
        s_col, z_col = s[:, None], z[:, None]
    else:
        s, z = float(s), int(z)
        s_col, z_col = s, z
    t = IntType(bits, signed)
    qlo, qhi = arith.int_range(bits, signed, narrow)
    frac = np.asarray(v.bias_real, np.float64) / np.asarray(v.scale, np.float64)
    off_grid = bool(np.any(np.abs(frac - np.rint(frac)) > 1e-6))
    # the Requant rounds ties towards +inf: QONNX's HALF_UP (ties away from zero) only where the
    # clamped value y / scale + zp is never negative
    exact_requant = not off_grid and mode == "HALF_UP" and qlo >= 0 and v.fn is None
    if (v.kind in ("dense", "conv") and (bits <= 4 or (bits <= 8 and not exact_requant))) or \
            (v.kind == "avgpool" and bits <= 8):
        real = _real(v)
        return _emit_thresholds(b, node, v, lambda a: _round(np.clip(real(a) / s_col + z_col, qlo, qhi), mode, node),
                                qlo, qhi, t, s, z)
    if mode not in _NEAREST:
        raise node_error(node, f"rounding_mode {mode!r} on a {bits}-bit output is only supported with thresholds "
                         f"(outputs of at most 8 bits after Gemm/MatMul/Conv/AveragePool)", UnsupportedError)
    return replace(b.quantize(node, v, s, z, t, narrow=narrow, half_even=mode in _HALF_EVEN), real=True)


def _quantize_table(b: Builder, node: Node, v: Acc, scale: np.ndarray, zp: np.ndarray, t: IntType,
                    narrow: bool) -> QT:
    """An elementwise function of a quantized tensor (``v``, a pending :mod:`.lookup` table) read
    by this Quant: one table of the composite, this Quant evaluated after the function for every
    input code by the QONNX semantics (any rounding mode)."""
    if scale.size != 1 or zp.size != 1:
        raise node_error(node, "a per-channel quantizer of an elementwise function is not supported",
                         UnsupportedError)
    consts = tuple(np.asarray(b.const(n, node, "parameter"), np.float32).reshape(()) for n in node.inputs[1:4])
    v = replace(v, params={**v.params, "after": (*v.params.get("after", ()), (node, consts))})
    return replace(b.quantize(node, v, float(scale.reshape(())), int(zp.reshape(())), t, narrow=narrow), real=True)


def _quant(b: Builder, node: Node):
    x = b.get(node.inputs[0], node)
    if isinstance(x, Const):
        b.set(node, _fold_const(b, node, x.value))
        return
    if isinstance(x, Acc):
        b.set(node, _quantize_acc(b, node, x))
        return
    scale, zp, bits, signed, narrow, mode = _params(b, node)
    if scale.size != 1 or zp.size != 1:
        raise node_error(node, "per-channel activation quantization is not supported", UnsupportedError)
    if signed and bits == 1 and isinstance(x, FloatIn) and scale.size == 1 and zp.size == 1:
        b.set(node, replace(b.input_tensor(x, float(scale.reshape(())), int(zp.reshape(())), _BIPOLAR, node),
                            real=True))
        return
    if bits > 16 or (signed and bits == 1):
        raise node_error(node, f"{'bipolar' if bits == 1 else f'{bits}-bit'} activations are not supported",
                         UnsupportedError)
    s, z = float(scale.reshape(())), int(zp.reshape(()))
    t = IntType(bits, signed)
    if isinstance(x, FloatIn):
        if mode not in ("ROUND", "HALF_EVEN"):
            raise node_error(node, f"the input quantizer must round half to even (ROUND), not {mode}",
                             UnsupportedError)
        b.set(node, replace(b.input_tensor(x, s, z, t, node, narrow=narrow), real=True))
        return
    if isinstance(x, QT) and x.real and np.isclose(x.scale, s, rtol=1e-6) and x.zp == z:
        lo, hi = arith.int_range(bits, signed, narrow)
        have = b.specs[x.tensor].dtype
        if have.lo >= lo and have.hi <= hi:   # already on this grid and inside its range
            b.set(node, x)
            return
    if isinstance(x, QT) and x.real:
        b.set(node, _requantize(b, node, x, s, z, t, narrow, mode))
        return
    raise node_error(node, "quantizes a value that is not a layer output, a model input or a tensor already on "
                     "its grid", UnsupportedError)


def _requantize(b: Builder, node: Node, x: QT, s: float, z: int, t: IntType, narrow: bool, mode: str) -> QT:
    """A Quant of a tensor already quantized onto another grid (Brevitas' QuantIdentity after a
    QuantReLU): ``clamp(round_mode((q - zi) * si / s + z))`` for every input code ``q``, with
    QONNX's float32 arithmetic (the golden Quant, evaluated once per code).

    A Requantize (a Mul by one: ``x.scale / s`` as a 31-bit multiplier and shift, ties as
    :func:`~._scale.ties_for` gives them)
    where it gives that result for every input code (no tie that its rounding breaks otherwise,
    no multiplier error that crosses a rounding boundary); else the exact table (a LookupUnit,
    inputs of at most 8 bits)."""
    have = b.specs[x.tensor].dtype
    if have.bipolar:
        raise node_error(node, "requantizing a bipolar tensor is not supported", UnsupportedError)
    if x.perm is not None:
        raise node_error(node, "requantizing a flattened image is not supported (quantize it before the flatten)",
                         UnsupportedError)
    if b.evaluate is None:
        raise node_error(node, "no float evaluator to requantize with", UnsupportedError)
    lo, hi = arith.int_range(t.bits, t.signed, narrow)
    codes = np.arange(have.lo, have.hi + 1, dtype=np.int64)
    real = (codes - x.zp).astype(np.float32) * np.float32(x.scale)
    consts = tuple(np.asarray(b.const(n, node, "parameter"), np.float32).reshape(()) for n in node.inputs[1:4])
    y = np.asarray(b.evaluate(node, real, *consts)[0], np.float64)
    want = np.clip(np.rint(y / s).astype(np.int64) + z, lo, hi)
    m, sh = ratio_to_multiplier_shift(np.array([x.scale / s]), f"node {node.name!r} requantization")
    half_even = mode in _HALF_EVEN
    ties = ties_for(x.scale, s, m, sh, half_even)    # the ties mul.emit gives the Requantize
    if np.array_equal(arith.requantize(codes - x.zp, m[0], sh[0], z, lo, hi, ties), want):
        acc = Acc("mul", mul.emit, node, (x,), x.onnx_shape, scale=np.array([x.scale]))
    elif have.bits <= MAX_IN_BITS and not x.hwc:
        acc = Acc("lookup", lookup.emit, node, (x,), x.onnx_shape, params={"consts": consts})
    else:
        n = int(np.count_nonzero(arith.requantize(codes - x.zp, m[0], sh[0], z, lo, hi, ties) != want))
        raise node_error(node, f"requantizing this {have.bits}-bit tensor: a multiply-and-shift (round "
                         f"{'half up' if ties == 'up' else 'half to even'}) differs from rounding_mode {mode} on {n} "
                         f"of {codes.size} input codes, and a table "
                         f"takes natural tensors of at most {MAX_IN_BITS} bits", UnsupportedError)
    return replace(b.quantize(node, acc, s, z, t, narrow=narrow, half_even=half_even), real=True)


def _trunc(b: Builder, node: Node):
    """QONNX Trunc on a layer output (e.g. Brevitas' TruncAvgPool: AveragePool -> Mul(area) -> Trunc):
    exact thresholds of ``rnd(round(y / scale + zp) / 2**k)`` (version 1) or of the clamped
    version-2 form with ``out_scale``; see :mod:`onnx2hw.golden.ops.qonnx_trunc`."""
    x = b.get(node.inputs[0], node)
    if not isinstance(x, Acc) or x.kind not in ("dense", "conv", "avgpool"):
        raise node_error(node, "Trunc must directly follow a Gemm/MatMul/Conv/AveragePool (+ constant Mul)",
                         UnsupportedError)
    c = lambda i, what: np.asarray(b.const(node.inputs[i], node, what), np.float64)  # noqa: E731
    scale, zp, in_bw = c(1, "scale"), c(2, "zero point"), c(3, "input bit width")
    mode = str(node.attr("rounding_mode", "FLOOR")).upper()
    if scale.size != 1 or zp.size != 1 or np.any(scale <= 0) or not np.all(np.isfinite(scale)):
        raise node_error(node, f"scale {scale.tolist()!r} / zero point must be one positive finite number each",
                         UnsupportedError)
    s, z = float(scale.reshape(())), float(zp.reshape(()))
    real = _real(x)
    rest = len(node.inputs) - 4
    if rest == 1:  # version 1: no clamp, output scale = scale
        out_bw = float(c(4, "output bit width").reshape(()))
        div = 2.0 ** (float(in_bw.reshape(())) - out_bw)

        def q(a):
            return _round(np.round(real(a) / s + z) / div, mode, node)
        out_scale, out_zp = s, z
        in_spec = b.specs[x.inputs[0].tensor]
        v = _pool_as_depthwise_conv(x) if x.kind == "avgpool" else x
        lo, hi = accumulator_bounds(v.weights, v.bias, in_spec.dtype.lo, in_spec.dtype.hi)
        ends = q(np.array([[float(min(lo)), float(max(hi))]]))
        qlo, qhi = int(ends.min()), int(ends.max())
    elif rest in (2, 3):  # version 2: clamp to signed/narrow out_bitwidth, output scale out_scale
        out_scale = float(c(4, "output scale").reshape(()))
        out_bw = int(c(4 + rest - 1, "output bit width").reshape(()))
        div = 2.0 ** np.round(np.log2(out_scale / s))
        qlo, qhi = arith.int_range(out_bw, bool(node.attr("signed", 1)), bool(node.attr("narrow", 0)))

        def q(a):
            return _round(np.clip(np.round(real(a) / s + z) / div, qlo, qhi), mode, node)
        out_zp = z / div
    else:
        raise node_error(node, f"Trunc takes 5, 6 or 7 inputs, not {len(node.inputs)}")
    if out_zp != round(out_zp):
        raise node_error(node, f"output zero point {out_zp!r} is not an integer", UnsupportedError)
    t = int_type_for(qlo, qhi)
    if t.bits > 8:
        raise node_error(node, f"Trunc output of {t.bits} bits is above the 8-bit threshold limit", UnsupportedError)
    b.set(node, _emit_thresholds(b, node, x, q, qlo, qhi, t, out_scale, int(out_zp)))


def _bipolar_quant(b: Builder, node: Node):
    """BipolarQuant of weights (a bipolar constant), of a layer output (one threshold per channel,
    after folding a BatchNormalization) or of the model input (on the host)."""
    x = b.get(node.inputs[0], node)
    scale = np.asarray(b.const(node.inputs[1], node, "scale"), np.float64)
    if np.any(~np.isfinite(scale)) or np.any(scale <= 0):
        raise ModelError(f"node {node.name!r} (BipolarQuant): scale {scale.reshape(-1)[0]!r} is not a positive "
                         f"finite number")
    if isinstance(x, Acc):
        b.set(node, replace(_bipolar_acc(b, node, x, scale, np.zeros(1)), real=True))
        return
    if isinstance(x, FloatIn):
        if scale.size != 1:
            raise node_error(node, "a per-channel scale on the model input is not supported", UnsupportedError)
        b.set(node, replace(b.input_tensor(x, float(scale.reshape(())), 0, _BIPOLAR, node), real=True))
        return
    if isinstance(x, QT) and x.real and b.specs[x.tensor].dtype.bipolar and scale.size == 1 \
            and np.isclose(x.scale, float(scale.reshape(())), rtol=1e-6):
        b.set(node, x)     # already bipolar on this scale (e.g. after a MaxPool)
        return
    if not isinstance(x, Const):
        raise node_error(node, "BipolarQuant must quantize weights, a Gemm/MatMul/Conv output (after an optional "
                         "BatchNormalization) or the model input", UnsupportedError)
    v = np.asarray(x.value, np.float64)
    axis, s1 = _channel_axis(node, scale, v.ndim)
    q = np.where(v >= 0, 1, -1).astype(np.int64)
    b.set(node, QConst(q, s1, np.zeros_like(s1, dtype=np.int64), axis, IntType(1, False, bipolar=True)))


def _multithreshold(b: Builder, node: Node):
    """FINN's MultiThreshold on a layer output: ``out_scale * count(y >= T[c]) + out_bias`` with
    ``y`` the layer's real value (see :mod:`onnx2hw.golden.ops.qonnx_multithreshold`), as exact
    integer thresholds on the accumulator. The output is on the grid ``out_scale`` with the
    integers ``out_bias / out_scale + count``; one step with ``out_bias = -out_scale / 2`` is a
    bipolar activation of scale ``out_scale / 2``."""
    x = b.get(node.inputs[0], node)
    if not isinstance(x, Acc) or x.kind not in ("dense", "conv", "avgpool"):
        raise node_error(node, "MultiThreshold must directly follow a Gemm/MatMul/Conv/AveragePool (+ constant "
                         "Mul / BatchNormalization)", UnsupportedError)
    layout = node.attr("data_layout", "")
    layout = layout.decode() if isinstance(layout, bytes) else str(layout)
    want = "NCHW" if len(x.onnx_shape) == 3 else "NC"
    if layout not in ("", want):
        raise node_error(node, f"data_layout {layout!r} is not supported on this {want} tensor", UnsupportedError)
    t = np.asarray(b.const(node.inputs[1], node, "thresholds"), np.float64)
    c = x.onnx_shape[0]
    if t.ndim != 2 or t.shape[0] not in (1, c) or t.shape[1] < 1 or np.any(np.isnan(t)):
        raise node_error(node, f"thresholds of shape {t.shape!r} must be ({c} or 1, steps) numbers")
    out_scale, out_bias = float(node.attr("out_scale", 1.0)), float(node.attr("out_bias", 0.0))
    if not (np.isfinite(out_scale) and out_scale > 0 and np.isfinite(out_bias)):
        raise node_error(node, f"out_scale {out_scale!r} must be positive and out_bias {out_bias!r} finite",
                         UnsupportedError)
    steps = t.shape[1]
    real = _real(x)
    tt = np.broadcast_to(t, (c, steps))[:, None, :]

    def count(a):
        return np.sum(real(a)[..., None] >= tt, axis=-1)
    if steps == 1 and out_bias == -out_scale / 2:
        b.set(node, _emit_thresholds(b, node, x, count, 0, 1, _BIPOLAR, out_scale / 2, 0))
        return
    k = out_bias / out_scale
    if k != round(k):
        raise node_error(node, f"out_bias / out_scale = {k!r} is not an integer (the output is not on a grid)",
                         UnsupportedError)
    qlo, qhi = int(round(k)), int(round(k)) + steps
    ot = int_type_for(qlo, qhi)
    if ot.bits > 8:
        raise node_error(node, f"{steps} thresholds need a {ot.bits}-bit output, above the 8-bit threshold limit",
                         UnsupportedError)
    b.set(node, _emit_thresholds(b, node, x, lambda a: count(a) + qlo, qlo, qhi, ot, out_scale, 0))


def _round(y, mode: str, node: Node):
    try:
        return qonnx_round(y, mode)
    except ValueError as exc:
        raise node_error(node, str(exc)) from None


PATTERNS = tuple(p for d in DOMAINS for p in (
    Pattern(d, "Quant", "quantization parameters / thresholds", _quant, {"qonnx"}),
    Pattern(d, "BipolarQuant", "1-bit bipolar quantization", _bipolar_quant, {"qonnx"}),
    Pattern(d, "Trunc", "requantization shift", _trunc, {"qonnx"}),
    Pattern(d, "MultiThreshold", "multi-threshold activation (Thresholds)", _multithreshold, {"qonnx"}),
))
