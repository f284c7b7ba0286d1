"""Hand-built ONNX models and helpers for the IR front-end tests."""
from __future__ import annotations

import contextlib
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F = TensorProto.FLOAT


def vi(name, elem=F, shape=(2, 3)):
    return helper.make_tensor_value_info(name, elem, shape)


def model(nodes, inputs, outputs, inits=(), *, opset=18, ir=None, opsets=None, functions=(),
          name="g", sparse=(), value_info=()) -> onnx.ModelProto:
    """Unchecked model; ``opsets`` maps extra domains -> versions."""
    g = helper.make_graph(list(nodes), name, list(inputs), list(outputs), list(inits),
                          sparse_initializer=list(sparse), value_info=list(value_info))
    imports = [helper.make_opsetid("", opset)] if opset else []
    imports += [helper.make_opsetid(d, v) for d, v in (opsets or {}).items()]
    m = helper.make_model(g, opset_imports=imports, functions=list(functions))
    if ir is not None:
        m.ir_version = ir
    return m


def relu_chain(n=2) -> onnx.ModelProto:
    """x -> Relu -> ... -> y with a weight: Add(x, w) first."""
    w = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "w")
    nodes = [helper.make_node("Add", ["x", "w"], ["t0"], name="add")]
    for i in range(n):
        nodes.append(helper.make_node("Relu", [f"t{i}"], [f"t{i + 1}" if i < n - 1 else "y"], name=f"relu{i}"))
    return model(nodes, [vi("x")], [vi("y")], [w])


class OpenWatch:
    """Records every path opened (Python ``open``/``os.open`` audit events) while active."""

    _installed = False
    _active: list["OpenWatch"] = []

    def __init__(self):
        self.paths: list[str] = []
        if not OpenWatch._installed:
            sys.addaudithook(OpenWatch._hook)
            OpenWatch._installed = True

    @staticmethod
    def _hook(event, args):
        if event == "open" and OpenWatch._active:
            path = args[0]
            if isinstance(path, int):
                return
            if isinstance(path, bytes):
                path = os.fsdecode(path)
            for w in OpenWatch._active:
                w.paths.append(os.path.realpath(os.fspath(path)))

    @contextlib.contextmanager
    def watching(self):
        OpenWatch._active.append(self)
        try:
            yield self
        finally:
            OpenWatch._active.remove(self)

    def outside(self, folder) -> list[str]:
        base = os.path.realpath(folder)
        return [p for p in self.paths if os.path.commonpath([p, base]) != base]
