"""An elementwise function between QONNX quantizers, in the two forms Brevitas writes, against
the qonnx executor (``qonnx.core.onnx_exec.execute_onnx``: the models and its outputs are written
by ``tests/data/make_qonnx_functions_expect.py``):

* of a quantized tensor, ``Quant -> f -> Quant`` (QuantSigmoid / QuantTanh / QuantHardSigmoid
  after a QuantIdentity): one Lookup table of ``f`` then the second Quant, in its rounding mode;
* of a layer's unquantized output, ``Conv -> f -> Quant`` (a QuantConv2d then a QuantSigmoid or
  QuantHardSwish without an input quantizer): exact thresholds of the composite where it is
  non-decreasing over the accumulator's range, refused in one line where it is not.
"""
from __future__ import annotations

import pathlib

import numpy as np
import onnx
import pytest

import onnx2hw
from onnx2hw import golden
from onnx2hw import layers as ig
from onnx2hw.ir import ModelError, load
from onnx2hw.layers.lookup import Lookup
from onnx2hw.layers.types import Thresholds
from onnx2hw.quant.convert import to_integer_graph

DATA = pathlib.Path(__file__).parent / "data"
EXPECT = np.load(DATA / "qonnx_functions_expect.npz")
TENSOR = sorted(k.split("/")[0] for k in EXPECT if k.startswith("tensor_") and k.endswith("/output"))
LAYER = sorted(k.split("/")[0] for k in EXPECT if k.startswith("layer_") and k.endswith("/output"))


def _model(name):
    return onnx.load(DATA / f"qonnx_fn_{name}.onnx")


def _integer(g, x):
    return ig.dequantize_outputs(g, golden.execute(g, ig.quantize_inputs(g, {"x": x})))["y"]


def _layer(g, name):
    found = [lay for lay in g.layers if lay.name == name]
    assert len(found) == 1, [lay.name for lay in g.layers]
    return found[0]


def _check(name, g):
    x, want = EXPECT[f"{name}/input"], EXPECT[f"{name}/output"]
    assert np.unique(want).size > 20           # the samples span many output levels
    np.testing.assert_array_equal(_integer(g, x), want)
    graph = load(_model(name))   # the golden float executor, one sample at a time (the model's batch is 1)
    np.testing.assert_array_equal(np.concatenate([golden.execute(graph, {"x": x[i:i + 1]})["y"]
                                                  for i in range(len(x))]), want)


def test_the_data_covers_every_form():
    assert len(TENSOR) == 10 and len(LAYER) == 4


@pytest.mark.parametrize("name", TENSOR)
def test_function_of_a_quantized_tensor_is_a_table_equal_to_qonnx(name):
    g = to_integer_graph(load(_model(name)))
    assert isinstance(_layer(g, "f"), Lookup)
    _check(name, g)


@pytest.mark.parametrize("name", LAYER)
def test_function_of_a_layer_output_is_thresholds_equal_to_qonnx(name):
    g = to_integer_graph(load(_model(name)))
    assert isinstance(_layer(g, "conv").act, Thresholds)
    _check(name, g)


def test_a_function_whose_quantized_levels_decrease_is_refused():
    """HardSwish onto a signed grid keeps its dip below zero (decreasing for inputs below -1.5):
    no thresholds give it."""
    with pytest.raises(ModelError, match=r"^node 'qout' \(Quant\): the function before this quantizer gives levels "
                                         r"that decrease \(channel \d+, accumulator -?\d+ -> -?\d+\): thresholds "
                                         r"cannot give it$"):
        to_integer_graph(load(_model("layer_hardswish_signed")))


def test_a_wide_quantizer_of_a_function_of_a_layer_output_is_refused():
    with pytest.raises(ModelError, match=r"^node 'qout' \(Quant\): a 12-bit quantizer of a function of a layer's "
                                         r"output is not supported \(exact thresholds: at most 8 bits\)$"):
        to_integer_graph(load(_model("layer_sigmoid_12bit")))


def test_a_function_of_a_layer_output_read_by_another_op_is_refused():
    with pytest.raises(ModelError, match=r"^node 'f' \(Sigmoid\): Sigmoid of a layer's unquantized output must be "
                                         r"read only by QONNX quantizers"):
        to_integer_graph(load(_model("layer_sigmoid_relu")))


@pytest.mark.sim
@pytest.mark.parametrize("name", ["tensor_sigmoid_conv", "layer_hardswish"])
def test_functions_simulate_bit_exact(name):
    x, want = EXPECT[f"{name}/input"][:3], EXPECT[f"{name}/output"][:3]
    design = onnx2hw.compile(_model(name), board="ulx3s")
    np.testing.assert_array_equal(design.golden({"x": x})["y"], want)
    np.testing.assert_array_equal(design.simulate({"x": x})["y"], want)   # MismatchError unless bit-exact
