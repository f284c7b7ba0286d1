"""Writes the QONNX test models and what the qonnx executor computes for them.

Run with the exporters' environment (qonnx is never a dependency of the project)::

    /work/exporters-venv/bin/python tests/data/make_qonnx_expect.py

Writes ``tests/data/qonnx_<name>.onnx`` (small models built with ``onnx.helper``) and
``tests/data/qonnx_expect.npz`` with ``<name>/input`` and ``<name>/output`` for each, the output
computed by ``qonnx.core.onnx_exec.execute_onnx``; also the expected outputs of the Brevitas
corpus models cut before their float last layer (``corpus/<file>`` is only read). The tests
(``tests/test_layers_qonnx_*.py``) read these files with the project's own environment.
"""
from __future__ import annotations

import pathlib

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = pathlib.Path(__file__).resolve().parent
CORPUS = HERE.parents[1] / "corpus"
QONNX = "qonnx.custom_op.general"
FINN = "finn.custom_op.general"
BATCH = 64

#: Brevitas corpus models cut at the last quantizer before the float last layer
CUTS = {"tfc_w1a1": ("brevitas_tfc_w1a1_clean.onnx", "BipolarQuant_7_out0", "brevitas_tfc_w1a1.npz"),
        "cnv_w1a1": ("brevitas_cnv_w1a1_clean.onnx", "BipolarQuant_12_out0", "brevitas_cnv_w1a1.npz"),
        "cnv_w1a2": ("brevitas_cnv_w1a2_clean.onnx", "Quant_6_out0", "brevitas_cnv_w1a2.npz")}

#: the rounding modes the qonnx executor defines (resolve_rounding_mode)
MODES = ("ROUND", "HALF_EVEN", "CEIL", "FLOOR", "UP", "DOWN", "HALF_UP", "HALF_DOWN")


def cut(model: onnx.ModelProto, tensor: str) -> onnx.ModelProto:
    """``model`` from its input to ``tensor`` (the same cut the tests make)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    del m.graph.quantization_annotation[:]
    out = onnx.utils.Extractor(m).extract_model([m.graph.input[0].name], [tensor])
    io = {v.name for v in list(out.graph.input) + list(out.graph.output)}
    keep = [v for v in out.graph.value_info if v.name not in io]
    del out.graph.value_info[:]
    out.graph.value_info.extend(keep)
    return out


class _G:
    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits, self.n = [], [], 0

    def const(self, v):
        self.n += 1
        name = f"c{self.n}"
        self.inits.append(numpy_helper.from_array(np.asarray(v, np.float32), name))
        return name

    def node(self, op, ins, domain="", **attrs):
        self.n += 1
        out = f"t{self.n}"
        self.nodes.append(helper.make_node(op, ins, [out], name=f"{op.lower()}{self.n}", domain=domain, **attrs))
        return out

    def quant(self, x, scale, bits, signed=True, narrow=False, mode="ROUND", zp=0.0, domain=QONNX):
        return self.node("Quant", [x, self.const(scale), self.const(zp), self.const(bits)], domain=domain,
                         signed=int(signed), narrow=int(narrow), rounding_mode=mode)

    def bipolar(self, x, scale=1.0, domain=QONNX):
        return self.node("BipolarQuant", [x, self.const(scale)], domain=domain)

    def bipolar_w(self, shape, scale=0.5):
        return self.bipolar(self.const(self.rng.normal(0, 1, shape)), scale)

    def bn(self, x, c, neg=False):
        gamma = self.rng.uniform(0.5, 1.5, c) * (np.where(self.rng.random(c) < 0.5, -1, 1) if neg else 1)
        return self.node("BatchNormalization", [x, self.const(gamma), self.const(self.rng.normal(0, 2, c)),
                                                self.const(self.rng.normal(0, 2, c)),
                                                self.const(self.rng.uniform(0.5, 2, c))])

    def model(self, out, x_shape, y_shape, qonnx_version=1):
        g = helper.make_graph(self.nodes, "qonnx_test",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [BATCH, *x_shape])],
                              [helper.make_tensor_value_info(out, TensorProto.FLOAT, [BATCH, *y_shape])], self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid(QONNX, qonnx_version),
                                                helper.make_opsetid(FINN, 1)])
        m.ir_version = 8
        return m


def bnn_mlp():
    """FINN's TFC-w1a1 shape: bipolar input, XNOR Gemms, BatchNorm + BipolarQuant activations."""
    g = _G(1)
    x = g.bipolar(g.node("Sub", [g.node("Mul", ["x", g.const(2.0)]), g.const(1.0)]))
    for a, b in ((24, 16), (16, 12)):
        x = g.bipolar(g.bn(g.node("Gemm", [x, g.bipolar_w((b, a))], transB=1), b))
    return g.model(x, [24], [12]), np.random.default_rng(11).random((BATCH, 24), dtype=np.float32)


def negative_bn():
    """BatchNormalizations with negative scales (as trained BNNs have): before a BipolarQuant (bipolar
    weights and inputs) and before a 2-bit Quant (4-bit weights, whose negation needs 5 bits)."""
    g = _G(7)
    x = g.bipolar(g.node("Sub", [g.node("Mul", ["x", g.const(2.0)]), g.const(1.0)]))
    x = g.bipolar(g.bn(g.node("Gemm", [x, g.bipolar_w((16, 20))], transB=1), 16, neg=True))
    w = g.quant(g.const(g.rng.normal(0, 0.5, (10, 16))), 0.125, 4)
    x = g.quant(g.bn(g.node("Gemm", [x, w], transB=1), 10, neg=True), 0.5, 2, signed=False)
    return g.model(x, [20], [10]), np.random.default_rng(18).random((BATCH, 20), dtype=np.float32)


def bnn_cnn():
    """CNV-w1a1 shape: 8-bit input, bipolar-weight Conv, then XNOR Conv, MaxPool, XNOR Gemm."""
    g = _G(2)
    x = g.quant("x", 1 / 128, 8)
    x = g.bipolar(g.bn(g.node("Conv", [x, g.bipolar_w((8, 3, 3, 3))], kernel_shape=[3, 3]), 8))
    x = g.bipolar(g.bn(g.node("Conv", [x, g.bipolar_w((8, 8, 3, 3))], kernel_shape=[3, 3]), 8))
    x = g.node("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])
    x = g.node("Flatten", [x])
    x = g.bipolar(g.bn(g.node("Gemm", [x, g.bipolar_w((10, 8 * 2 * 2))], transB=1), 10))
    return g.model(x, [3, 8, 8], [10]), np.random.default_rng(12).uniform(-1, 1, (BATCH, 3, 8, 8)).astype(np.float32)


def w1a2_quant1():
    """1-bit weights written as ``Quant(signed=1, bitwidth=1)`` (BipolarQuant's twin), 2-bit narrow
    activations, and a bipolar activation written as a 1-bit signed Quant."""
    g = _G(3)
    x = g.quant("x", 1 / 64, 8)
    w = g.quant(g.const(g.rng.normal(0, 1, (12, 20))), 0.25, 1)
    x = g.quant(g.bn(g.node("Gemm", [x, w], transB=1), 12), 0.5, 2, narrow=True)
    w = g.quant(g.const(g.rng.normal(0, 1, (8, 12))), 0.25, 1)
    x = g.quant(g.node("Gemm", [x, w, g.const(g.rng.normal(0, 0.3, 8))], transB=1), 0.5, 1)
    return g.model(x, [20], [8]), np.random.default_rng(13).normal(0, 1, (BATCH, 20)).astype(np.float32)


def multithreshold(domain):
    """FINN streamlining's form: a Gemm on an integer-valued input, then MultiThreshold with
    out_scale / out_bias (per-channel thresholds on the accumulator's real value)."""
    g = _G(4)
    x = g.quant("x", 1.0, 4, signed=False)
    w = g.quant(g.const(g.rng.integers(-3, 4, (10, 6)).astype(np.float32)), 1.0, 3)
    acc = g.node("MatMul", [x, w])
    t = np.sort(g.rng.integers(-40, 40, (6, 3)), axis=1).astype(np.float32) + 0.5
    t[2, 1] = t[2, 0]          # a repeated threshold
    y = g.node("MultiThreshold", [acc, g.const(t)], domain=domain, out_dtype="INT2", out_scale=0.5, out_bias=-0.5)
    return g.model(y, [10], [6]), np.random.default_rng(14).integers(0, 16, (BATCH, 10)).astype(np.float32)


def rounding(mode, signed=True):
    """A Gemm whose real outputs are multiples of 1/2 output LSB: every rounding mode's ties
    (unsigned: after a Relu, where HALF_UP is an exact multiply-and-shift requantization)."""
    g = _G(5)
    x = g.quant("x", 1 / 16, 8)
    w = g.quant(g.const(g.rng.integers(-7, 8, (6, 8)) / 16), 1 / 16, 4)
    y = g.node("Gemm", [x, w], transB=1)
    y = y if signed else g.node("Relu", [y])
    y = g.quant(y, 1 / 128, 5, signed=signed, narrow=mode in ("CEIL", "UP"), mode=mode)
    return g.model(y, [8], [6]), (np.random.default_rng(15).integers(-128, 128, (BATCH, 8)) / 16).astype(np.float32)


def per_channel(kind):
    """A layer output quantized with one scale (and zero point) per output channel, as the model
    output: thresholds (``thresholds``: Gemm, 4-bit, per-channel zero points; ``conv``: Conv,
    3-bit signed narrow) or a per-channel multiply-and-shift (``requant``: Relu, 6-bit HALF_UP)."""
    g = _G(6)
    x = g.quant("x", 1 / 16, 8)
    if kind == "conv":
        w = g.quant(g.const(g.rng.normal(0, 0.3, (5, 2, 3, 3))), 1 / 8, 4)
        y = g.node("Conv", [x, w, g.const(g.rng.normal(0, 0.2, 5))], kernel_shape=[3, 3], pads=[1, 1, 1, 1])
        s = (np.linspace(0.05, 0.3, 5)).reshape(1, 5, 1, 1)
        y = g.quant(y, s, 3, narrow=True)
        return g.model(y, [2, 5, 5], [5, 5, 5]), np.random.default_rng(16).normal(0, 1, (BATCH, 2, 5, 5)).astype(
            np.float32)
    w = g.quant(g.const(g.rng.normal(0, 0.3, (6, 8))), 1 / 8, 4)
    if kind == "thresholds":
        y = g.node("Gemm", [x, w, g.const(g.rng.normal(0, 0.2, 6))], transB=1)
        y = g.quant(y, np.linspace(0.05, 0.4, 6).reshape(1, 6), 4, signed=False, zp=np.arange(6.0).reshape(1, 6))
    else:
        y = g.node("Relu", [g.node("Gemm", [x, w, g.const(g.rng.integers(-20, 20, 6) / 128)], transB=1)])
        y = g.quant(y, (2.0 ** -np.arange(3, 9)).reshape(1, 6), 6, signed=False, mode="HALF_UP")
    return g.model(y, [8], [6]), np.random.default_rng(17).normal(0, 1, (BATCH, 8)).astype(np.float32)


def trunc(version, mode):
    """Brevitas' TruncAvgPool: AveragePool -> Mul(kernel area) -> Trunc (version 1: 5 inputs, no
    clamp; version 2: 6 inputs with out_scale and a clamp to the signed/narrow output range)."""
    g = _G(8)
    x = g.quant("x", 1 / 64, 8)
    y = g.node("Conv", [x, g.quant(g.const(g.rng.normal(0, 0.3, (4, 1, 3, 3))), 1 / 8, 4),
                        g.const(g.rng.normal(0, 0.1, 4))], kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    a = g.quant(g.node("Relu", [y]), 0.125, 4, signed=False)
    s = g.node("Mul", [g.node("AveragePool", [a], kernel_shape=[2, 2], strides=[2, 2]), g.const(4.0)])
    ins = [s, g.const(0.125), g.const(0.0), g.const(6.0)]
    ins += [g.const(4.0)] if version == 1 else [g.const(0.5), g.const(3.0)]
    attrs = dict(rounding_mode=mode) if version == 1 else dict(rounding_mode=mode, signed=0, narrow=0)
    t = g.node("Trunc", ins, domain=QONNX, **attrs)
    return g.model(t, [1, 6, 6], [4, 3, 3], qonnx_version=version), \
        np.random.default_rng(19).random((BATCH, 1, 6, 6), dtype=np.float32)


def main():
    from qonnx.core.modelwrapper import ModelWrapper
    from qonnx.core.onnx_exec import execute_onnx
    from qonnx.transformation.infer_shapes import InferShapes

    def run(model, x):
        mw = ModelWrapper(model).transform(InferShapes())
        return execute_onnx(mw, {mw.graph.input[0].name: x})[mw.graph.output[0].name]

    cases = {"bnn_mlp": bnn_mlp(), "bnn_cnn": bnn_cnn(), "w1a2_quant1": w1a2_quant1(), "negative_bn": negative_bn(),
             "multithreshold_finn": multithreshold(FINN), "multithreshold_qonnx": multithreshold(QONNX)}
    cases.update({f"round_{m.lower()}": rounding(m) for m in MODES})
    cases["round_half_up_unsigned"] = rounding("HALF_UP", signed=False)
    cases.update({"trunc_v1_floor": trunc(1, "FLOOR"), "trunc_v1_round": trunc(1, "ROUND"),
                  "trunc_v2_floor": trunc(2, "FLOOR"), "trunc_v2_ceil": trunc(2, "CEIL")})
    cases.update({f"per_channel_{k}": per_channel(k) for k in ("thresholds", "requant", "conv")})
    data = {}
    for name, (model, x) in cases.items():
        onnx.save(model, HERE / f"qonnx_{name}.onnx")
        data[f"{name}/input"] = x
        data[f"{name}/output"] = np.asarray(run(model, x), np.float32)
    for name, (fname, tensor, npz) in CUTS.items():
        model = cut(onnx.load(CORPUS / fname), tensor)
        xs = np.load(CORPUS / npz)["input"].astype(np.float32)
        data[f"{name}/output"] = np.concatenate([run(model, x[None]) for x in xs]).astype(np.float32)
    np.savez_compressed(HERE / "qonnx_expect.npz", **data)
    for k, v in sorted(data.items()):
        if k.endswith("/output"):
            print(k, v.shape, np.unique(v)[:6])


if __name__ == "__main__":
    main()
