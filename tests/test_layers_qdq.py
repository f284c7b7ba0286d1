"""QuantizeLinear / DequantizeLinear import (:mod:`onnx2hw.layers.qdq`): a constant quantized in
the graph, and the ``axis`` of the quantization parameters -- ignored for per-tensor ones, as the
ONNX spec says, and checked against the tensor's rank for per-axis ones (one ``ModelError``
naming the node, never an ``IndexError``)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from _paths import EXAMPLES
from _quant_models import compare_with_ort
from onnx2hw.ir import ModelError, load
from onnx2hw.quant.import_qdq import import_qdq

MLP = EXAMPLES / "digits_mlp_int8.onnx"


def _model() -> onnx.ModelProto:
    return onnx.load(str(MLP))


def _node(m: onnx.ModelProto, name: str) -> onnx.NodeProto:
    return next(n for n in m.graph.node if n.name == name)


def _init(m: onnx.ModelProto, name: str) -> np.ndarray:
    return numpy_helper.to_array(next(i for i in m.graph.initializer if i.name == name))


def _set_init(m: onnx.ModelProto, name: str, value: np.ndarray) -> None:
    init = next(i for i in m.graph.initializer if i.name == name)
    init.CopyFrom(numpy_helper.from_array(np.asarray(value), name))


def _set_axis(node: onnx.NodeProto, axis: int) -> None:
    for a in node.attribute:
        if a.name == "axis":
            a.i = axis
            return
    node.attribute.append(helper.make_attribute("axis", axis))


def _per_tensor_bias(m: onnx.ModelProto, layer: str) -> None:
    """Make ``layer``'s bias DequantizeLinear per tensor (a scalar scale and zero point)."""
    real = (_init(m, f"{layer}.bias_1_quantized") - _init(m, f"{layer}.bias_1_zero_point")) \
        * _init(m, f"{layer}.bias_1_scale").astype(np.float64)
    scale = np.float32(np.abs(real).max() / 1000)
    _set_init(m, f"{layer}.bias_1_quantized", np.rint(real / scale).astype(np.int32))
    _set_init(m, f"{layer}.bias_1_scale", np.array(scale, np.float32))
    _set_init(m, f"{layer}.bias_1_zero_point", np.array(0, np.int32))


def _layers(m: onnx.ModelProto):
    return import_qdq(load(m.SerializeToString())).layers


def _same_layers(a, b) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.name == y.name
        np.testing.assert_array_equal(x.weights, y.weights)
        np.testing.assert_array_equal(x.bias, y.bias)


@pytest.mark.parametrize("axis", [0, 1, 5, -7, 1 << 40, -(1 << 40)])
def test_per_tensor_dequantize_ignores_axis(axis):
    base = _model()
    _per_tensor_bias(base, "fc0")
    m = onnx.ModelProto()
    m.CopyFrom(base)
    _set_axis(_node(m, "fc0.bias_1_DequantizeLinear"), axis)
    _same_layers(_layers(m), _layers(base))


@pytest.mark.parametrize("axis", [1 << 40, -(1 << 40), 1, -2])
def test_per_axis_dequantize_out_of_range_axis_is_one_error(axis):
    m = _model()
    _set_axis(_node(m, "fc0.bias_1_DequantizeLinear"), axis)   # the bias is 1-D, its scale per axis
    with pytest.raises(ModelError, match=r"fc0\.bias_1_DequantizeLinear.*axis .* out of range .* rank 1"):
        _layers(m)


def test_dequantize_zero_point_shape_must_match_scale():
    m = _model()
    _node(m, "fc0.bias_1_DequantizeLinear").input[1] = "input_scale"      # a scalar scale, 64 zero points
    _set_axis(_node(m, "fc0.bias_1_DequantizeLinear"), 1 << 40)
    with pytest.raises(ModelError, match=r"fc0\.bias_1_DequantizeLinear.*zero point of shape \(64,\).*scale "
                                         r"of shape \(\)"):
        _layers(m)


def _float_weight_quantized_in_graph(m: onnx.ModelProto, layer: str, axis: int | None) -> None:
    """Replace ``layer``'s int8 weight initializer by its float values and a QuantizeLinear with
    the weight's own parameters (per tensor when ``axis`` is None)."""
    q = _init(m, f"{layer}.weight_1_quantized").astype(np.float64)
    scale, zp = _init(m, f"{layer}.weight_1_scale"), _init(m, f"{layer}.weight_1_zero_point")
    if axis is None:
        scale, zp = np.float32(scale.max()), np.int8(0)
        _set_init(m, f"{layer}.weight_1_scale", np.array(scale))
        _set_init(m, f"{layer}.weight_1_zero_point", np.array(zp))
        real = q * _init(_model(), f"{layer}.weight_1_scale")[:, None]
    else:
        real = (q - zp[:, None]) * scale[:, None]
    m.graph.initializer.append(numpy_helper.from_array(real.astype(np.float32), f"{layer}.weight_float"))
    m.graph.initializer.remove(next(i for i in m.graph.initializer if i.name == f"{layer}.weight_1_quantized"))
    ql = helper.make_node("QuantizeLinear", [f"{layer}.weight_float", f"{layer}.weight_1_scale",
                                             f"{layer}.weight_1_zero_point"], [f"{layer}.weight_1_quantized"],
                          name=f"{layer}.weight_QuantizeLinear", **({} if axis is None else {"axis": axis}))
    m.graph.node.insert(0, ql)


@pytest.mark.parametrize("axis", [0, -2, None])
def test_quantize_linear_of_a_constant_matches_onnxruntime(axis, tmp_path):
    """A float weight quantized in the graph is quantized at import, as onnxruntime computes it."""
    m = _model()
    _float_weight_quantized_in_graph(m, "fc1", axis)
    path = tmp_path / "m.onnx"
    onnx.save(m, str(path))
    g = import_qdq(load(str(path)))
    if axis is not None:   # the same integers as the original int8 initializer
        _same_layers(g.layers, _layers(_model()))
    x = np.random.default_rng(3).random((64, 64), dtype=np.float32)
    frac, lsb = compare_with_ort(str(path), g, x, "input")
    assert frac == 1.0 and lsb == 0


def test_quantize_linear_of_a_scalar_constant_is_folded():
    """A per-tensor QuantizeLinear of a rank-0 constant (its default axis 1 ignored) gives a
    quantized constant; used as a layer's input it is one error naming that layer."""
    m = _model()
    _node(m, "relu0_out_QuantizeLinear").input[0] = "input_scale"
    with pytest.raises(ModelError, match=r"node 'fc1' \(Gemm\): input A must be a dequantized integer tensor"):
        _layers(m)


def test_quantize_linear_of_a_constant_holding_nan():
    m = _model()
    _float_weight_quantized_in_graph(m, "fc1", 0)
    w = _init(m, "fc1.weight_float").copy()
    w[3, 5] = np.nan
    _set_init(m, "fc1.weight_float", w)
    with pytest.raises(ModelError, match=r"fc1\.weight_QuantizeLinear.*NaN"):
        _layers(m)

