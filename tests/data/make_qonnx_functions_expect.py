"""Writes the QONNX models of an elementwise function between quantizers and what the qonnx
executor computes for them (read by ``tests/test_layers_qonnx_functions.py``).

Run with the exporters' environment (qonnx is never a dependency of the project)::

    /work/exporters-venv/bin/python tests/data/make_qonnx_functions_expect.py

Writes ``tests/data/qonnx_fn_<name>.onnx`` (built with ``onnx.helper`` in the forms Brevitas
writes) and ``tests/data/qonnx_functions_expect.npz`` with ``<name>/input`` and ``<name>/output``
(``qonnx.core.onnx_exec.execute_onnx``, one sample at a time) for each model that is accepted:

* ``tensor_<op>_<mode>``: Quant(8-bit input) -> op -> Quant(8 bits, rounding_mode);
* ``tensor_sigmoid_conv``: the Sigmoid one (HALF_UP) then Conv 3x3 -> Quant (a hardware layer reads
  the table's output);
* ``layer_<op>``: Quant(input) -> Quant(4-bit weights) -> Conv 3x3 -> op -> Quant(8 bits), on scales
  whose ratios put no accumulator on an exact rounding tie (qonnx rounds the float32 sum, the
  thresholds the exact one: they would break such a tie differently);
* refused forms (no outputs): ``layer_hardswish_signed`` (HardSwish onto a signed grid keeps its
  decreasing dip), ``layer_sigmoid_12bit`` (a 12-bit quantizer), ``layer_sigmoid_relu`` (the
  function read by a Relu before its quantizer).
"""
from __future__ import annotations

import pathlib

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = pathlib.Path(__file__).resolve().parent
QONNX = "qonnx.custom_op.general"
BATCH = 16
W = np.random.default_rng(37).integers(-7, 8, (4, 3, 3, 3))
#: op -> (attributes, output scale, output signed): the output grid covers the function's range
FUNCTIONS = {
    "Sigmoid": ({}, 1 / 255, False),
    "Tanh": ({}, 1 / 127, True),
    "HardSigmoid": ({"alpha": 0.25, "beta": 0.5}, 1 / 255, False),
    "HardSwish": ({}, 0.0293, False),   # unsigned: its negative dip is clamped to 0
}
MODES = ("ROUND", "HALF_UP", "FLOOR")


def _quant(ins, out, name, signed=1, narrow=0, rounding_mode="ROUND"):
    """A Quant node with the three attributes Brevitas writes (qonnx's executor requires them)."""
    return helper.make_node("Quant", ins, [out], domain=QONNX, name=name, signed=signed, narrow=narrow,
                            rounding_mode=rounding_mode)


def _model(nodes, inits, channels):
    g = helper.make_graph(nodes, "functions", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 6, 6])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, channels, 6, 6])],
                          [numpy_helper.from_array(np.asarray(v, np.float32), n) for n, v in inits.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 14), helper.make_opsetid(QONNX, 1)])


def of_tensor(op: str, mode: str, conv: bool = False) -> onnx.ModelProto:
    attrs, s_out, signed = FUNCTIONS[op]
    inits = {"s_in": 0.05, "s_out": s_out, "z": 0.0, "b8": 8.0, "b4": 4.0, "s_w": 0.1, "s_c": 0.0371,
             "w": W * 0.1}
    nodes = [_quant(["x", "s_in", "z", "b8"], "xq", "qin"),
             helper.make_node(op, ["xq"], ["f"], name="f", **attrs),
             _quant(["f", "s_out", "z", "b8"], "fq" if conv else "y", "qout", signed=int(signed), rounding_mode=mode)]
    if conv:
        nodes += [_quant(["w", "s_w", "z", "b4"], "wq", "qw", narrow=1),
                  helper.make_node("Conv", ["fq", "wq"], ["c"], name="conv", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
                  _quant(["c", "s_c", "z", "b8"], "y", "qc")]
    return _model(nodes, inits, 4 if conv else 3)


def of_layer(op: str, signed: bool | None = None, bits: int = 8, relu: bool = False) -> onnx.ModelProto:
    attrs, s_out, sgn = FUNCTIONS[op]
    inits = {"s_in": 0.0473, "s_w": 0.1, "s_out": s_out, "z": 0.0, "b8": 8.0, "b4": 4.0, "b_out": float(bits),
             "w": W * 0.1}
    nodes = [_quant(["x", "s_in", "z", "b8"], "xq", "qin"),
             _quant(["w", "s_w", "z", "b4"], "wq", "qw", narrow=1),
             helper.make_node("Conv", ["xq", "wq"], ["c"], name="conv", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node(op, ["c"], ["f"], name="f", **attrs)]
    if relu:
        nodes.append(helper.make_node("Relu", ["f"], ["r"], name="relu"))
    nodes.append(_quant(["r" if relu else "f", "s_out", "z", "b_out"], "y", "qout", signed=int(sgn if signed is None
                                                                                             else signed)))
    return _model(nodes, inits, 4)


def cases() -> tuple[dict, dict]:
    """(accepted models, refused models) by name."""
    ok = {f"tensor_{op.lower()}_{m.lower()}": of_tensor(op, m) for op in ("Sigmoid", "Tanh", "HardSigmoid")
          for m in MODES}
    ok["tensor_sigmoid_conv"] = of_tensor("Sigmoid", "HALF_UP", conv=True)
    ok.update({f"layer_{op.lower()}": of_layer(op) for op in FUNCTIONS})
    refused = {"layer_hardswish_signed": of_layer("HardSwish", signed=True),
               "layer_sigmoid_12bit": of_layer("Sigmoid", bits=12),
               "layer_sigmoid_relu": of_layer("Sigmoid", relu=True)}
    return ok, refused


def main():
    from qonnx.core.modelwrapper import ModelWrapper
    from qonnx.core.onnx_exec import execute_onnx
    from qonnx.transformation.infer_shapes import InferShapes

    ok, refused = cases()
    data = {}
    x = (np.random.default_rng(38).standard_normal((BATCH, 3, 6, 6)) * 2).astype(np.float32)
    for name, model in {**ok, **refused}.items():
        onnx.checker.check_model(model)
        onnx.save(model, HERE / f"qonnx_fn_{name}.onnx")
    for name, model in ok.items():
        mw = ModelWrapper(model).transform(InferShapes())
        data[f"{name}/input"] = x
        data[f"{name}/output"] = np.concatenate([execute_onnx(mw, {"x": x[i:i + 1]})["y"] for i in range(BATCH)])
    np.savez_compressed(HERE / "qonnx_functions_expect.npz", **data)
    for k, v in sorted(data.items()):
        if k.endswith("/output"):
            print(k, v.shape, np.unique(v).size, "levels")


if __name__ == "__main__":
    main()
