"""QONNX/FINN conventions for model inputs (issue 32, classes 6 and 7): a graph input annotated
with a FINN datatype (``quantization_annotation``, key ``finn_datatype``: BIPOLAR, BINARY,
TERNARY, INTn, UINTn) is read as integers of scale 1; a float input that a layer reads directly
gets an 8-bit input quantizer chosen from calibration data, and without calibration data the
model is refused with one line that says so.

The models are written with ``onnx.helper`` as Brevitas / qonnx write them (``Quant`` nodes in
``qonnx.custom_op.general`` on the weights, float32 scalar scale / zero point / bit width
initializers; the annotation as ``ModelWrapper.set_tensor_datatype`` adds it). Expected outputs
come from an int64 / float64 NumPy formula in this file (the QONNX ``Quant`` definition:
``round_half_even(clip(x / scale, lo, hi)) * scale``, and the ONNX MatMul / Conv / Relu /
Flatten definitions); every scale but a calibrated one is a power of two, so the formula is
exact in float64. The simulated hardware is compared with the golden, bit for bit.
"""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnx2hw
from onnx2hw.cli import main
from onnx2hw.ir import ModelError, UnsupportedError, load
from onnx2hw.ir.simplify import to_model
from onnx2hw.quant.import_qonnx import float_reads, needs_calibration

QONNX = "qonnx.custom_op.general"
REFUSAL = ("the model's input 'X' feeds layer 'mm1' unquantized; pass --calib CALIB.npz to quantize it "
           "(or add an input quantizer to the model)")


# ---- the models ----------------------------------------------------------------------------------

class _Model:
    """Nodes and initializers of a QONNX graph, written as Brevitas' export writes them."""

    def __init__(self):
        self.nodes, self.inits = [], []

    def const(self, name: str, value) -> str:
        self.inits.append(numpy_helper.from_array(np.asarray(value, np.float32), name))
        return name

    def quant(self, x: str, out: str, scale: float, bits: int, signed: bool, narrow: bool = False) -> str:
        ins = [x, self.const(f"{out}_scale", scale), self.const(f"{out}_zeropt", 0.0),
               self.const(f"{out}_bitwidth", float(bits))]
        self.nodes.append(helper.make_node("Quant", ins, [out], name=f"{out}_Quant", domain=QONNX,
                                           signed=int(signed), narrow=int(narrow), rounding_mode="ROUND"))
        return out

    def node(self, op: str, ins, out: str, **attrs) -> str:
        self.nodes.append(helper.make_node(op, list(ins), [out], name=out, **attrs))
        return out

    def model(self, in_shape, out_shape, datatype: str | None = None):
        g = helper.make_graph(self.nodes, "qonnx_model",
                              [helper.make_tensor_value_info("X", TensorProto.FLOAT, list(in_shape))],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, list(out_shape))],
                              self.inits)
        if datatype is not None:   # as qonnx's ModelWrapper.set_tensor_datatype writes it
            ann = g.quantization_annotation.add(tensor_name="X")
            ann.quant_parameter_tensor_names.add(key="finn_datatype", value=datatype)
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid(QONNX, 1)])


#: MLP: weights (float, quantized by the model's Quant nodes) and the layers' quantizers
W1 = np.random.default_rng(1).normal(0, 0.6, (16, 8)).astype(np.float32)
W2 = np.random.default_rng(2).normal(0, 1.2, (8, 4)).astype(np.float32)
MLP = {"w1": (0.25, 4), "a1": (2.0, 4), "w2": (0.5, 4), "y": (0.25, 8)}


def mlp(datatype: str | None = None, pre: tuple = ()):
    """``X (N, 16) [-> pre steps] -> MatMul(Quant W1) -> Quant(4 bits) -> MatMul(Quant W2) -> Quant(8 bits)``."""
    m = _Model()
    x = "X"
    for i, (op, c) in enumerate(pre):
        x = m.node(op, [x, m.const(f"pre{i}_c", c)], f"pre{i}")
    w1 = m.quant(m.const("W1", W1), "W1_q", *MLP["w1"], signed=True, narrow=True)
    w2 = m.quant(m.const("W2", W2), "W2_q", *MLP["w2"], signed=True, narrow=True)
    a1 = m.quant(m.node("MatMul", [x, w1], "mm1"), "a1", *MLP["a1"], signed=True)
    m.quant(m.node("MatMul", [a1, w2], "mm2"), "Y", *MLP["y"], signed=True)
    return m.model(["N", 16], ["N", 4], datatype)


WC = np.random.default_rng(3).normal(0, 0.5, (4, 2, 3, 3)).astype(np.float32)
WD = np.random.default_rng(4).normal(0, 0.3, (4 * 5 * 5, 3)).astype(np.float32)
CNN = {"wc": (0.125, 4), "a1": (4.0, 4), "wd": (0.0625, 4), "y": (0.5, 8)}


def cnn(datatype: str | None = None, pads=(1, 1, 1, 1)):
    """``X (N, 2, 5, 5) -> Conv 3x3 (Quant W) -> Relu -> Quant(unsigned 4 bits) -> Flatten ->
    MatMul(Quant W) -> Quant(8 bits)``."""
    m = _Model()
    wc = m.quant(m.const("WC", WC), "WC_q", *CNN["wc"], signed=True, narrow=True)
    wd = m.quant(m.const("WD", WD if pads[0] else WD[:36]), "WD_q", *CNN["wd"], signed=True, narrow=True)
    conv = m.node("Conv", ["X", wc], "mm1", kernel_shape=[3, 3], pads=list(pads))
    a1 = m.quant(m.node("Relu", [conv], "relu"), "a1", *CNN["a1"], signed=False)
    m.quant(m.node("MatMul", [m.node("Flatten", [a1], "flat", axis=1), wd], "mm2"), "Y", *CNN["y"], signed=True)
    return m.model(["N", 2, 5, 5], ["N", 3], datatype)


# ---- the oracle: QONNX Quant and ONNX op definitions in int64 / float64 -------------------------------

def quant_codes(v, scale: float, bits: int, signed: bool, narrow: bool = False) -> np.ndarray:
    """QONNX ``Quant`` with zero point 0 (ROUND = half to even), as integer codes."""
    lo = -(1 << (bits - 1)) + int(narrow) if signed else 0
    hi = (1 << (bits - 1)) - 1 if signed else (1 << bits) - 1 - int(narrow)
    return np.round(np.clip(np.asarray(v, np.float64) / scale, lo, hi)).astype(np.int64)


def mlp_oracle(x_codes: np.ndarray, x_scale: float = 1.0) -> np.ndarray:
    """The MLP's output for an input ``x_codes * x_scale`` (codes int64)."""
    (s1, b1), (sa, ba), (s2, b2), (sy, by) = MLP["w1"], MLP["a1"], MLP["w2"], MLP["y"]
    acc1 = x_codes @ quant_codes(W1, s1, b1, True, True)
    a1 = quant_codes(acc1 * (x_scale * s1), sa, ba, True)
    acc2 = a1 @ quant_codes(W2, s2, b2, True, True)
    return (quant_codes(acc2 * (sa * s2), sy, by, True) * sy).astype(np.float32)


def conv_nchw(x: np.ndarray, w: np.ndarray, pads) -> np.ndarray:
    """ONNX Conv (stride 1, no bias) in int64: ``y[n, o, i, j] = sum x_pad[n, c, i + u, j + v] * w[o, c, u, v]``."""
    t, left, b, r = pads
    xp = np.pad(x, ((0, 0), (0, 0), (t, b), (left, r)))
    kh, kw = w.shape[2:]
    oh, ow = xp.shape[2] - kh + 1, xp.shape[3] - kw + 1
    y = np.zeros((x.shape[0], w.shape[0], oh, ow), np.int64)
    for u in range(kh):
        for v in range(kw):
            y += np.einsum("ncij,oc->noij", xp[:, :, u:u + oh, v:v + ow], w[:, :, u, v])
    return y


def cnn_oracle(x_codes: np.ndarray, x_scale: float = 1.0, pads=(1, 1, 1, 1)) -> np.ndarray:
    (sc, bc), (sa, ba), (sd, bd), (sy, by) = CNN["wc"], CNN["a1"], CNN["wd"], CNN["y"]
    acc = conv_nchw(x_codes, quant_codes(WC, sc, bc, True, True), pads)
    a1 = quant_codes(np.maximum(acc * (x_scale * sc), 0), sa, ba, False)      # Relu, then Quant
    wd = WD if pads[0] else WD[:36]
    acc2 = a1.reshape(len(a1), -1) @ quant_codes(wd, sd, bd, True, True)     # Flatten (NCHW order)
    return (quant_codes(acc2 * (sa * sd), sy, by, True) * sy).astype(np.float32)


#: FINN datatype -> (its codes, as the model takes them: float32)
RANGES = {"BIPOLAR": (-1, 1), "BINARY": (0, 1), "TERNARY": (-1, 1), "INT8": (-128, 127), "UINT4": (0, 15),
          "INT3": (-4, 3), "UINT1": (0, 1), "UINT16": (0, 65535)}


def codes(datatype: str, shape, seed: int = 0) -> np.ndarray:
    lo, hi = RANGES[datatype]
    rng = np.random.default_rng(seed)
    if datatype == "BIPOLAR":
        return np.where(rng.random(shape) < 0.5, -1, 1).astype(np.int64)
    x = rng.integers(lo, hi + 1, shape, dtype=np.int64)
    x.reshape(-1)[:2] = lo, hi   # both ends of the range
    return x


# ---- class 6: FINN datatype annotations -------------------------------------------------------------

def test_loader_keeps_annotations_and_to_model_writes_them():
    g = load(mlp("BIPOLAR"))
    assert dict(g.datatypes) == {"X": "BIPOLAR"}
    again = load(to_model(g))
    assert dict(again.datatypes) == {"X": "BIPOLAR"}
    assert dict(load(mlp()).datatypes) == {}


def test_a_tensor_annotated_twice_differently_is_refused():
    model = mlp("INT8")
    ann = model.graph.quantization_annotation.add(tensor_name="X")
    ann.quant_parameter_tensor_names.add(key="finn_datatype", value="UINT4")
    with pytest.raises(ModelError, match=r"tensor 'X' is annotated with two FINN datatypes \('INT8' and 'UINT4'\)"):
        load(model)


@pytest.mark.parametrize("datatype", ["BIPOLAR", "BINARY", "TERNARY", "INT8", "UINT4", "INT3", "UINT1", "UINT16"])
def test_annotated_input_is_read_as_its_integers(datatype):
    design = onnx2hw.compile(mlp(datatype))
    (q,) = design.integer.inputs
    lo, hi = RANGES[datatype]
    assert (q.scale, q.zero_point, q.pre) == (1.0, 0, ()) and q.clamp == (lo, hi)
    assert q.dtype.bipolar == (datatype == "BIPOLAR")
    x = codes(datatype, (40, 16))
    got = design.golden({"X": x.astype(np.float32)})["Y"]
    np.testing.assert_array_equal(got, mlp_oracle(x))


@pytest.mark.parametrize("datatype", ["INT8", "UINT4"])
def test_annotated_image_input_conv(datatype):
    design = onnx2hw.compile(cnn(datatype))
    x = codes(datatype, (20, 2, 5, 5), seed=5)
    np.testing.assert_array_equal(design.golden({"X": x.astype(np.float32)})["Y"], cnn_oracle(x))


def test_bipolar_image_input_conv_without_padding():
    design = onnx2hw.compile(cnn("BIPOLAR", pads=(0, 0, 0, 0)))
    x = codes("BIPOLAR", (20, 2, 5, 5), seed=6)
    np.testing.assert_array_equal(design.golden({"X": x.astype(np.float32)})["Y"], cnn_oracle(x, pads=(0, 0, 0, 0)))


def test_bipolar_image_input_of_a_padded_conv_reads_two_bit_codes():
    """The conv pads with 0, which no bipolar code is: the input is read as 2-bit signed codes."""
    design = onnx2hw.compile(cnn("BIPOLAR"))
    assert not design.integer.input_specs[0].dtype.bipolar and design.integer.input_specs[0].dtype.bits == 2
    x = codes("BIPOLAR", (20, 2, 5, 5), seed=8)
    np.testing.assert_array_equal(design.golden({"X": x.astype(np.float32)})["Y"], cnn_oracle(x))


@pytest.mark.sim
@pytest.mark.parametrize("model, datatype", [("mlp", "BIPOLAR"), ("cnn", "INT8"), ("cnn", "BIPOLAR")])
def test_annotated_input_simulates_bit_exact(model, datatype):
    shape = (6, 16) if model == "mlp" else (6, 2, 5, 5)
    design = onnx2hw.compile(mlp(datatype) if model == "mlp" else cnn(datatype))
    x = codes(datatype, shape, seed=7)
    got = design.simulate({"X": x.astype(np.float32)})["Y"]   # raises MismatchError unless bit-exact
    np.testing.assert_array_equal(got, mlp_oracle(x) if model == "mlp" else cnn_oracle(x))


def test_annotations_of_other_tensors_are_ignored():
    """FINN's datatype inference annotates every tensor; the graph's quantizers say the same."""
    model = mlp("UINT4")
    for name, datatype in (("W1_q", "INT4"), ("a1", "INT4"), ("Y", "INT8")):
        ann = model.graph.quantization_annotation.add(tensor_name=name)
        ann.quant_parameter_tensor_names.add(key="finn_datatype", value=datatype)
    design = onnx2hw.compile(model)
    x = codes("UINT4", (30, 16), seed=8)
    np.testing.assert_array_equal(design.golden({"X": x.astype(np.float32)})["Y"], mlp_oracle(x))


def cnn_nhwc(datatype: str | None = None):
    """:func:`cnn` with a channels-last input ``(N, 5, 5, 2)`` read through ``Transpose (0, 3, 1, 2)``
    (QKeras -> QONNX)."""
    m = _Model()
    x = m.node("Transpose", ["X"], "x_nchw", perm=[0, 3, 1, 2])
    wc = m.quant(m.const("WC", WC), "WC_q", *CNN["wc"], signed=True, narrow=True)
    wd = m.quant(m.const("WD", WD), "WD_q", *CNN["wd"], signed=True, narrow=True)
    a1 = m.quant(m.node("Relu", [m.node("Conv", [x, wc], "mm1", kernel_shape=[3, 3], pads=[1, 1, 1, 1])], "relu"),
                 "a1", *CNN["a1"], signed=False)
    m.quant(m.node("MatMul", [m.node("Flatten", [a1], "flat", axis=1), wd], "mm2"), "Y", *CNN["y"], signed=True)
    return m.model(["N", 5, 5, 2], ["N", 3], datatype)


def test_annotated_channels_last_input():
    design = onnx2hw.compile(cnn_nhwc("INT8"))
    x = codes("INT8", (20, 5, 5, 2), seed=9)
    np.testing.assert_array_equal(design.golden({"X": x.astype(np.float32)})["Y"], cnn_oracle(x.transpose(0, 3, 1, 2)))


def test_annotation_of_an_input_read_through_a_quantizer_is_not_needed():
    """The model's own input quantizer says what the hardware reads; the annotation changes nothing."""
    m = _Model()
    xq = m.quant("X", "Xq", 0.5, 8, signed=True)
    w1 = m.quant(m.const("W1", W1), "W1_q", *MLP["w1"], signed=True, narrow=True)
    m.quant(m.node("MatMul", [xq, w1], "mm1"), "Y", 1.0, 8, signed=True)
    (q,) = onnx2hw.compile(m.model(["N", 16], ["N", 8], "INT8")).integer.inputs
    assert (q.scale, q.dtype.bits, q.dtype.signed) == (0.5, 8, True)
    assert float_reads(load(m.model(["N", 16], ["N", 8], "INT8"))) == ()


@pytest.mark.parametrize("datatype", ["FIXED<8,4>", "SCALEDINT<8>", "INT32", "INT1", "FLOAT<5,10>"])
def test_unsupported_annotated_type_is_refused(datatype):
    with pytest.raises(UnsupportedError) as exc:
        onnx2hw.compile(mlp(datatype), calib={"X": np.ones((4, 16), np.float32)})
    assert str(exc.value) == (f"model input 'X' is annotated {datatype} (FINN datatype) and feeds layer 'mm1' "
                              f"directly; onnx2hw reads an annotated input as BIPOLAR, BINARY, TERNARY, INTn "
                              f"(n = 2..16) or UINTn (n = 1..16)")


def test_unsupported_annotated_type_is_one_error_line(tmp_path, capsys):
    path = tmp_path / "fixed.onnx"
    path.write_bytes(mlp("FIXED<8,4>").SerializeToString())
    assert main(["sim", str(path), "--count", "2"]) == 2
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    assert err.splitlines() == [err.strip()] and err.startswith("error: model input 'X' is annotated FIXED<8,4>")


# ---- class 7: a float input read by the first layer ---------------------------------------------------

def test_float_input_without_calib_is_refused_in_one_line():
    for datatype in (None, "FLOAT32"):   # FLOAT32 is what a float input is
        assert needs_calibration(load(mlp(datatype)))
        with pytest.raises(ModelError) as exc:
            onnx2hw.compile(mlp(datatype))
        assert str(exc.value) == REFUSAL


def test_float_input_refusal_in_the_cli(tmp_path, capsys):
    path = tmp_path / "float_input.onnx"
    path.write_bytes(mlp().SerializeToString())
    assert main(["sim", str(path), "--count", "2"]) == 2
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    assert err == f"error: {REFUSAL}\n"


def test_scaled_annotated_input_is_a_float_input():
    """``2x`` of INT8 codes are no longer the codes: the layer reads a float."""
    with pytest.raises(ModelError) as exc:
        onnx2hw.compile(mlp("INT8", pre=(("Mul", 2.0),)))
    assert str(exc.value) == REFUSAL


def _calib(shape, seed=11, lo=-3.0, hi=2.0):
    return {"X": np.random.default_rng(seed).uniform(lo, hi, (64,) + shape).astype(np.float32)}


def _input_scale(data: np.ndarray, after=lambda v: v) -> tuple[np.float32, bool]:
    """The post-training quantizer's activation rule (docs of onnx2hw.quant.ptq): signed symmetric
    ``max(|lo|, |hi|) / 127``, or unsigned ``hi / 255`` for a range that never goes negative."""
    v = after(np.asarray(data, np.float32))
    lo, hi = min(float(v.min()), 0.0), max(float(v.max()), 0.0)
    return (np.float32(hi / 255), False) if lo >= 0 else (np.float32(max(-lo, hi) / 127), True)


def _quantize_input(x: np.ndarray, scale: np.float32, signed: bool) -> np.ndarray:
    """QONNX ``Quant`` of the float32 tensor ``x`` (float32 ``x / scale``, half to even, clipped)."""
    lo, hi = (-128, 127) if signed else (0, 255)
    return np.clip(np.round(x.astype(np.float32) / scale), lo, hi).astype(np.int64)


@pytest.mark.parametrize("lo, hi", [(-3.0, 2.0), (0.0, 4.0)])
def test_float_input_is_quantized_from_calibration(lo, hi):
    calib = _calib((16,), lo=lo, hi=hi)
    design = onnx2hw.compile(mlp(), calib=calib)
    scale, signed = _input_scale(calib["X"])
    (q,) = design.integer.inputs
    assert (np.float32(q.scale), q.zero_point, q.dtype.bits, q.dtype.signed) == (scale, 0, 8, signed)
    x = np.random.default_rng(12).uniform(lo - 1, hi + 1, (40, 16)).astype(np.float32)   # some clip
    got = design.golden({"X": x})["Y"]
    np.testing.assert_array_equal(got, mlp_oracle(_quantize_input(x, scale, signed), float(scale)))


def test_float_input_scaled_before_the_layer_is_calibrated_after_the_scaling():
    """``2x - 1`` before the layer (host-side steps): the quantizer's range is that of ``2x - 1``."""
    calib = _calib((16,), lo=0.0, hi=1.0)
    design = onnx2hw.compile(mlp(pre=(("Mul", 2.0), ("Sub", 1.0))), calib=calib)
    def pre(v):
        return (v * np.float32(2.0) - np.float32(1.0)).astype(np.float32)
    scale, signed = _input_scale(calib["X"], pre)
    (q,) = design.integer.inputs
    assert np.float32(q.scale) == scale and q.pre == (("mul", 2.0), ("sub", 1.0))
    x = np.random.default_rng(13).uniform(0, 1, (30, 16)).astype(np.float32)
    np.testing.assert_array_equal(design.golden({"X": x})["Y"],
                                  mlp_oracle(_quantize_input(pre(x), scale, signed), float(scale)))


def test_float_image_input_is_quantized_from_calibration():
    calib = _calib((2, 5, 5))
    design = onnx2hw.compile(cnn(), calib=calib)
    scale, signed = _input_scale(calib["X"])
    x = np.random.default_rng(14).uniform(-3, 2, (20, 2, 5, 5)).astype(np.float32)
    np.testing.assert_array_equal(design.golden({"X": x})["Y"],
                                  cnn_oracle(_quantize_input(x, scale, signed), float(scale)))


def test_float_channels_last_input_is_quantized_from_calibration():
    calib = _calib((5, 5, 2))
    design = onnx2hw.compile(cnn_nhwc(), calib=calib)
    scale, signed = _input_scale(calib["X"])
    x = np.random.default_rng(16).uniform(-3, 2, (20, 5, 5, 2)).astype(np.float32)
    np.testing.assert_array_equal(design.golden({"X": x})["Y"],
                                  cnn_oracle(_quantize_input(x, scale, signed).transpose(0, 3, 1, 2), float(scale)))


@pytest.mark.sim
@pytest.mark.parametrize("model", ["mlp", "cnn"])
def test_float_input_with_calib_simulates_bit_exact(model):
    shape = (16,) if model == "mlp" else (2, 5, 5)
    design = onnx2hw.compile(mlp() if model == "mlp" else cnn(), calib=_calib(shape))
    x = np.random.default_rng(15).uniform(-3, 2, (6,) + shape).astype(np.float32)
    got = design.simulate({"X": x})["Y"]   # raises MismatchError unless bit-exact against the golden
    np.testing.assert_array_equal(got, design.golden({"X": x})["Y"])
