"""A seeded mutation fuzzer over the example models (attributes, initializers, shapes, wiring, op and
element types, and the quantizers' inputs and axes): every mutant goes through load, inspect,
import or quantize, and compile (no simulation), and must either succeed or raise one
``ModelError`` naming what is wrong -- never another exception (a traceback for the user)."""
from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, numpy_helper

from _paths import EXAMPLES
from onnx2hw.dataflow import compile_pipeline
from onnx2hw.flow import check_ops, integer_graph_of
from onnx2hw.ir import ModelError, load
from onnx2hw.summary import summarize

#: model -> calibration data (float models)
MODELS = {"digits_mlp_int8.onnx": None, "digits_cnn_int8.onnx": None, "digits_cnn_res_int8.onnx": None,
          "digits_mlp_qonnx_w2a2.onnx": None, "digits_mlp.onnx": "digits_calib.npz",
          "digits_cnn.onnx": "digits_img_calib.npz"}
MUTANTS_PER_MODEL = 80

_INT_VALUES = (0, -1, 1, 2, 3, 7, 1 << 20, -(1 << 31), 1 << 40)
#: axis values a quantizer may be given: in range, negative, just past the rank, far past it
_AXES = (1, -1, 4, -5, 1 << 40, -(1 << 40))
_QDQ = ("QuantizeLinear", "DequantizeLinear")


def _calib(name: str | None) -> dict | None:
    if name is None:
        return None
    with np.load(EXAMPLES / name) as f:
        return {k: f[k][:8] for k in f.files}


def _mutate(model: onnx.ModelProto, rng: np.random.Generator) -> str:
    """Apply one random mutation in place; returns what was done (for the failure message)."""
    g = model.graph
    qdq = [n for n in g.node if n.op_type in _QDQ]
    kind = rng.integers(10 if qdq else 8)   # the quantizers' own mutations twice as likely as the others
    if kind == 0 and g.node:  # an int / ints attribute
        node = g.node[rng.integers(len(g.node))]
        ints = [a for a in node.attribute if a.type in (onnx.AttributeProto.INT, onnx.AttributeProto.INTS)]
        if ints:
            a = ints[rng.integers(len(ints))]
            v = int(_INT_VALUES[rng.integers(len(_INT_VALUES))])
            if a.type == onnx.AttributeProto.INT:
                a.i = v
            elif a.ints:
                a.ints[rng.integers(len(a.ints))] = v
            return f"attribute {a.name} of {node.name} -> {v}"
    if kind == 1 and g.initializer:  # initializer values: NaN, inf, zero, huge
        init = g.initializer[rng.integers(len(g.initializer))]
        arr = numpy_helper.to_array(init).copy()
        if arr.size:
            if arr.dtype.kind == "f":
                special = [0, -1, 127, np.nan, np.inf, 1e30]
            else:
                info = np.iinfo(arr.dtype)
                special = [0, 1, info.min, info.max]
            flat = arr.reshape(-1)
            flat[rng.integers(flat.size)] = special[rng.integers(len(special))]
            init.CopyFrom(numpy_helper.from_array(arr, init.name))
            return f"a value of initializer {init.name}"
    if kind == 2 and g.initializer:  # initializer shape
        init = g.initializer[rng.integers(len(g.initializer))]
        arr = numpy_helper.to_array(init)
        new = arr.reshape(-1)[: max(0, arr.size - int(rng.integers(1, 3)))] if rng.random() < 0.5 else arr.reshape(-1)
        init.CopyFrom(numpy_helper.from_array(np.ascontiguousarray(new), init.name))
        return f"shape of initializer {init.name} -> {new.shape}"
    if kind == 3:  # a graph input dimension
        dims = g.input[0].type.tensor_type.shape.dim
        if len(dims):
            d = dims[rng.integers(len(dims))]
            choice = rng.integers(4)
            if choice == 0:
                d.dim_value = 0
            elif choice == 1:
                d.dim_value = int(rng.integers(1, 5))
            elif choice == 2:
                d.dim_param = "M"
            else:
                d.dim_value = 3
            return f"an input dimension -> {d}"
    if kind == 4 and len(g.node) > 1:  # drop a node
        i = int(rng.integers(len(g.node)))
        name = g.node[i].name
        del g.node[i]
        return f"node {name} removed"
    if kind == 5 and g.node:  # rewire an input
        node = g.node[rng.integers(len(g.node))]
        values = [o for n in g.node for o in n.output] + [i.name for i in g.input] + [i.name for i in g.initializer]
        if node.input:
            k = int(rng.integers(len(node.input)))
            node.input[k] = values[rng.integers(len(values))]
            return f"input {k} of {node.name} rewired to {node.input[k]}"
    if kind == 6 and g.node:  # another op type
        node = g.node[rng.integers(len(g.node))]
        ops = ["Relu", "MaxPool", "Add", "Gemm", "Conv", "Flatten", "Identity", "Sigmoid", "Mul", "Reshape",
               "QuantizeLinear", "DequantizeLinear", "AveragePool", "GlobalMaxPool"]
        old, node.op_type = node.op_type, ops[rng.integers(len(ops))]
        return f"{node.name}: {old} -> {node.op_type}"
    if kind == 7:  # element type of the input or output
        vi = (g.input if rng.random() < 0.5 else g.output)[0]
        vi.type.tensor_type.elem_type = int(rng.choice([TensorProto.DOUBLE, TensorProto.INT8, TensorProto.FLOAT16,
                                                        TensorProto.STRING]))
        return f"elem type of {vi.name}"
    if kind >= 8:  # a quantizer, half the time one of a constant (weights, biases)
        consts = {i.name for i in g.initializer}
        if rng.random() < 0.5:
            qdq = [n for n in qdq if n.input and n.input[0] in consts] or qdq
        node = qdq[rng.integers(len(qdq))]
        return "; ".join(_mutate_quantizer(node, g, rng) for _ in range(int(rng.integers(1, 3))))
    return "unchanged"


def _mutate_quantizer(node: onnx.NodeProto, g: onnx.GraphProto, rng: np.random.Generator) -> str:
    """One change to a QuantizeLinear / DequantizeLinear: a constant as its input, another
    constant as its scale or zero point (per tensor where it was per axis, or the reverse),
    or an ``axis`` in or out of range (ignored by the spec for a per-tensor scale)."""
    choice = rng.integers(3)
    if choice < 2 and g.initializer:
        k = 0 if choice == 0 else int(rng.integers(1, 3))
        while len(node.input) <= k:
            node.input.append("")
        node.input[k] = g.initializer[rng.integers(len(g.initializer))].name
        return f"input {k} of {node.name} -> constant {node.input[k]}"
    v = int(_AXES[rng.integers(len(_AXES))])
    for a in node.attribute:
        if a.name == "axis":
            a.i = v
            break
    else:
        node.attribute.append(onnx.helper.make_attribute("axis", v))
    return f"axis of {node.name} -> {v}"


def _through_the_flow(data: bytes, calib) -> None:
    graph = load(data)
    summarize(graph)
    check_ops(graph)
    compile_pipeline(integer_graph_of(graph, calib))


@pytest.mark.slow
@pytest.mark.parametrize("model", list(MODELS))
def test_mutants_fail_cleanly(model):
    base = onnx.load(str(EXAMPLES / model))
    calib = _calib(MODELS[model])
    rng = np.random.default_rng(sum(map(ord, model)) + int(os.environ.get("ONNX2HW_FUZZ_SEED", 0)))
    bad = []
    for i in range(MUTANTS_PER_MODEL):
        m = onnx.ModelProto()
        m.CopyFrom(base)
        what = [_mutate(m, rng) for _ in range(int(rng.integers(1, 3)))]
        try:
            _through_the_flow(m.SerializeToString(), calib)
        except ModelError as exc:
            assert str(exc) and "\n" not in str(exc)
        except Exception as exc:  # noqa: BLE001 - the point: nothing else may escape
            bad.append(f"#{i} ({'; '.join(what)}): {type(exc).__name__}: {exc}")
    assert not bad, f"{len(bad)} mutants escaped as tracebacks:\n" + "\n".join(bad[:15])
