"""Golden Split (onnx2hw/golden/ops/split.py) against onnx.reference on every opset form: the
``split`` attribute (11), the ``split`` input (13), equal parts, ``num_outputs`` with a smaller
last part (18); bad parts refused in one line."""
import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from onnx2hw.golden.ops.split import run
from onnx2hw.ir import ModelError, load

CASES = [
    # opset, axis, split (attribute below 13, input from 13, None: equal), outputs, num_outputs
    (11, 1, [2, 5, 1], 3, None),
    (11, -1, None, 2, None),
    (13, 1, [3, 0, 5], 3, None),
    (13, 0, None, 2, None),
    (18, 1, None, 3, 3),
    (18, 2, [1, 3], 2, None),
]


def _node_model(opset, axis, split, n, num_outputs, shape=(4, 8, 4)):
    outs = [f"y{k}" for k in range(n)]
    ins, inits, attrs = ["x"], [], {"axis": axis}
    if split is not None and opset < 13:
        attrs["split"] = split
    elif split is not None:
        ins.append("sp")
        inits.append(helper.make_tensor("sp", TensorProto.INT64, [len(split)], split))
    if num_outputs is not None:
        attrs["num_outputs"] = num_outputs
    node = helper.make_node("Split", ins, outs, name="split", **attrs)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                          [helper.make_tensor_value_info(o, TensorProto.FLOAT, ["a", "b", "c"]) for o in outs],
                          inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


@pytest.mark.parametrize("case", CASES, ids=[f"opset{c[0]}_{k}" for k, c in enumerate(CASES)])
def test_split_matches_onnx_reference(case):
    m = _node_model(*case)
    x = np.random.default_rng(0).standard_normal((4, 8, 4)).astype(np.float32)
    want = ReferenceEvaluator(m).run(None, {"x": x})
    g = load(m)
    node = g.nodes[0]
    split = np.asarray(g.initializers["sp"]) if "sp" in g.initializers else None
    got = run(node, x, split)
    assert len(got) == len(want)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)


def test_bad_parts_are_refused_in_one_line():
    node = load(_node_model(13, 1, [3, 4], 2, None)).nodes[0]
    with pytest.raises(ModelError, match=r"Split node 'split': split \[3, 4\] does not cut the 8 entries of "
                                         r"the axis into 2 parts"):
        run(node, np.zeros((4, 8, 4), np.float32), np.asarray([3, 4], np.int64))
    with pytest.raises(ModelError, match="do not split into 3 equal parts"):
        run(load(_node_model(11, 1, None, 3, None)).nodes[0], np.zeros((4, 8, 4), np.float32))
