"""bind_dims: dim_param names bound at run time, consistent across inputs."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnx2hw.ir import ModelError, bind_dims, load

from _ir_models import model


@pytest.fixture(scope="module")
def graph():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", None])
    k = helper.make_tensor_value_info("k", TensorProto.INT64, ["K"])
    w = helper.make_tensor_value_info("w", TensorProto.FLOAT, [3])
    out = helper.make_tensor_value_info("z", TensorProto.FLOAT, ["N", 3])
    nodes = [helper.make_node("Add", ["x", "y"], ["t"]), helper.make_node("Add", ["t", "w"], ["z"]),
             helper.make_node("Identity", ["k"], ["kk"])]
    kk = helper.make_tensor_value_info("kk", TensorProto.INT64, ["K"])
    return load(model(nodes, [x, y, k, w], [out, kk], [numpy_helper.from_array(np.ones(3, np.float32), "w")]))


def feeds(n=2, m=3, k=4, **over):
    f = {"x": np.zeros((n, 3), np.float32), "y": np.zeros((n, m), np.float32), "k": np.zeros(k, np.int64)}
    f.update(over)
    return f


def test_binding(graph):
    assert bind_dims(graph, feeds()) == {"N": 2, "K": 4}
    assert bind_dims(graph, feeds(n=5, m=1, k=0)) == {"N": 5, "K": 0}  # unknown dim: any size


def test_overridable_initializer_feed(graph):
    assert bind_dims(graph, feeds(w=np.zeros(3, np.float32))) == {"N": 2, "K": 4}
    with pytest.raises(ModelError, match="input 'w' dim 0 is 4, the model fixes it to 3"):
        bind_dims(graph, feeds(w=np.zeros(4, np.float32)))


def test_disagreeing_dim_param(graph):
    f = feeds()
    f["y"] = np.zeros((3, 3), np.float32)
    with pytest.raises(ModelError, match=r"input 'y' dim 0 \('N'\) is 3, but 'N' = 2 from input 'x' dim 0"):
        bind_dims(graph, f)


def test_wrong_rank_dtype_fixed_dim(graph):
    with pytest.raises(ModelError, match="input 'x' is fed a rank-3 array.*expects rank 2"):
        bind_dims(graph, feeds(x=np.zeros((2, 3, 1), np.float32)))
    with pytest.raises(ModelError, match="input 'x' is fed float64 data, the model expects FLOAT"):
        bind_dims(graph, feeds(x=np.zeros((2, 3))))
    with pytest.raises(ModelError, match="input 'x' dim 1 is 4, the model fixes it to 3"):
        bind_dims(graph, feeds(x=np.zeros((2, 4), np.float32)))


def test_missing_and_unknown_feeds(graph):
    f = feeds()
    del f["k"]
    with pytest.raises(ModelError, match="no value fed for model input 'k'"):
        bind_dims(graph, f)
    with pytest.raises(ModelError, match="feed 'q' is not an input"):
        bind_dims(graph, feeds(q=np.zeros(1)))
