"""Models that fix their batch size (1, or an odd number: as exporters write them) calibrate on
any number of samples, one batch at a time, to the same quantization as the same model with a
symbolic batch; they then import and compile as usual."""
from types import SimpleNamespace

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from _paths import EXAMPLES
from onnx2hw.dataflow import compile_pipeline
from onnx2hw.ir import ModelError, load
from onnx2hw.quant import quantize, to_integer_graph
from onnx2hw.quant.calib import fixed_batch

FLOAT_MLP = str(EXAMPLES / "digits_mlp.onnx")


def _with_batch(batch) -> onnx.ModelProto:
    m = onnx.load(FLOAT_MLP)
    for vi in list(m.graph.input) + list(m.graph.output):
        d = vi.type.tensor_type.shape.dim[0]
        if isinstance(batch, int):
            d.dim_value = batch
        else:
            d.dim_param = batch
    return m


def _scales(q: onnx.ModelProto) -> dict:
    return {i.name: numpy_helper.to_array(i).tolist() for i in q.graph.initializer if i.name.endswith("_scale")}


@pytest.mark.parametrize("batch", [1, 3, 64])
def test_fixed_batch_calibrates_like_a_symbolic_batch(batch):
    with np.load(EXAMPLES / "digits_calib.npz") as f:
        calib = {"input": f["input"][:50]}          # 50: not a multiple of 3 or 64
    want = _scales(quantize(_with_batch("N"), calib))
    q = quantize(_with_batch(batch), calib)
    got = _scales(q)
    assert got.keys() == want.keys()
    for k in want:  # BLAS sums a batch of another size in another order: a few float32 ulps apart
        np.testing.assert_allclose(got[k], want[k], rtol=1e-6, err_msg=k)
    compile_pipeline(to_integer_graph(load(q)))


def test_inputs_fixing_different_batches_are_refused():
    def graph(*batches):
        return SimpleNamespace(inputs=[SimpleNamespace(shape=(b, 4)) for b in batches])
    assert fixed_batch(graph("N", 3)) == 3 and fixed_batch(graph("N")) is None
    with pytest.raises(ModelError, match="different batch sizes"):
        fixed_batch(graph(1, 2))
