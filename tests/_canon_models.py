"""Small graphs in the forms exporters of several generations write, for the canonicalization
tests (tests/test_canon_*.py), and the check those tests share: the canonical graph computes
what the original computes, both run by onnxruntime with every optimization off (the rules are
exact in real arithmetic; float32 rounding of folded constants allows 1e-5 of the output's
magnitude). onnxruntime, not onnx.reference: onnx.reference's BatchNormalization of opsets
before 14 does not compute the inference formula."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto as T, helper as h, numpy_helper as nh
from _oracle import run_spec

from onnx2hw.ir import load
from onnx2hw.ir.simplify import to_model

_rng = np.random.default_rng(0)


def w(*shape) -> np.ndarray:
    return (_rng.standard_normal(shape) * 0.3).astype(np.float32)


def model(nodes, x, y, inits, opset=13, ir=7, as_inputs=False, domains=()) -> onnx.ModelProto:
    """``x``, ``y``: (name, shape) of the one input and output; ``as_inputs``: the initializers
    also listed as graph inputs (IR 3 files, ``keep_initializers_as_inputs``)."""
    ins = [h.make_tensor_value_info(x[0], T.FLOAT, x[1])]
    if as_inputs:
        ins += [h.make_tensor_value_info(k, h.np_dtype_to_tensor_dtype(v.dtype), v.shape) for k, v in inits.items()]
    g = h.make_graph(nodes, "g", ins, [h.make_tensor_value_info(y[0], T.FLOAT, y[1])],
                     [nh.from_array(np.asarray(v), k) for k, v in inits.items()])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)] + [h.make_opsetid(d, 1) for d in domains])
    m.ir_version = ir
    return m


def run(m: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    return run_spec(m, {m.graph.input[0].name: x})[0]


def assert_same_function(original: onnx.ModelProto, canonical, batch: int = 3) -> None:
    """``canonical`` (a Graph) computes what ``original`` does, on random inputs of ``batch``."""
    g = load(original)
    x = _rng.standard_normal((batch,) + tuple(g.inputs[0].shape[1:])).astype(np.float32)
    want = run(original, x)
    got = run(to_model(canonical), x)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * max(1.0, float(np.max(np.abs(want)))))


def ops(graph) -> list[str]:
    return [n.op_type for n in graph.nodes]
