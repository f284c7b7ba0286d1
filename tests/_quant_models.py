"""Small float models and onnxruntime quantization helpers shared by the quantization tests.

Oracle (see ``_oracle``): a QDQ model is run by onnxruntime with graph optimizations off, which
is the spec's DequantizeLinear -> float op -> QuantizeLinear on every CPU. A QOperator model can
only run on onnxruntime's integer kernels; ``quantize(fmt="qop")`` therefore uses 7-bit weights
(``reduce_range``), so no u8 x s8 pair sum can reach the 16-bit saturation of CPUs without VNNI
(2 * 255 * 64 < 32767), and the comparison still allows 1 LSB.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from _oracle import kernel_session, lsb_apart, spec_session
from onnx2hw import golden
from onnx2hw.layers import dequantize_outputs, quantize_inputs


def _model(nodes, inits, x_shape, y_shape, opset=17):
    g = helper.make_graph(nodes, "net", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", *x_shape])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", *y_shape])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10 if opset >= 21 else 8
    onnx.checker.check_model(m, full_check=True)
    return m


class _Inits:
    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.list = []

    def __call__(self, name, shape, std):
        self.list.append(numpy_helper.from_array(self.rng.normal(0, std, shape).astype(np.float32), name))
        return name


def mlp(seed=0, sizes=(16, 32, 24, 5), opset=17):
    """Gemm+Relu MLP, input (N, sizes[0])."""
    w = _Inits(seed)
    nodes, x = [], "x"
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        last = i == len(sizes) - 2
        y = "y" if last else f"h{i}"
        nodes.append(helper.make_node("Gemm", [x, w(f"w{i}", (b, a), 1 / np.sqrt(a)), w(f"b{i}", (b,), 0.1)], [y],
                                      transB=1, name=f"fc{i}"))
        if not last:
            nodes.append(helper.make_node("Relu", [y], [f"r{i}"], name=f"relu{i}"))
            y = f"r{i}"
        x = y
    return _model(nodes, w.list, [sizes[0]], [sizes[-1]], opset)


def cnn(seed=0, residual=False, flatten_image=False, opset=17):
    """Conv+Relu+MaxPool+Conv+Relu(+Add residual)+GlobalAveragePool+Flatten+Gemm on (N, 1, 8, 8).

    ``flatten_image`` replaces the global pool by a Flatten of the (8, 4, 4) image (exercises
    the NHWC flatten permutation of the dense weights).
    """
    w = _Inits(seed)
    n = [helper.make_node("Conv", ["x", w("w1", (8, 1, 3, 3), 0.4), w("b1", (8,), 0.1)], ["c1"], pads=[1, 1, 1, 1],
                          name="conv1"),
         helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
         helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2], name="pool1"),
         helper.make_node("Conv", ["p1", w("w2", (8, 8, 3, 3), 0.15), w("b2", (8,), 0.1)], ["c2"], pads=[1, 1, 1, 1],
                          name="conv2"),
         helper.make_node("Relu", ["c2"], ["r2"], name="relu2")]
    last = "r2"
    if residual:
        n.append(helper.make_node("Add", ["r2", "p1"], ["s"], name="add"))
        last = "s"
    if flatten_image:
        n.append(helper.make_node("Flatten", [last], ["f"], name="flat"))
        k = 8 * 4 * 4
    else:
        n.append(helper.make_node("GlobalAveragePool", [last], ["g"], name="gap"))
        n.append(helper.make_node("Flatten", ["g"], ["f"], name="flat"))
        k = 8
    n.append(helper.make_node("Gemm", ["f", w("w3", (10, k), 1 / np.sqrt(k)), w("b3", (10,), 0.1)], ["y"], transB=1,
                              name="fc"))
    return _model(n, w.list, [1, 8, 8], [10], opset)


def random_inputs(model: onnx.ModelProto, n: int, seed: int) -> np.ndarray:
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim[1:]]
    return np.random.default_rng(seed).random((n, *shape), dtype=np.float32)


def quantize(model: onnx.ModelProto, tmp_path, *, fmt="qdq", per_channel=False, act="uint8", weight="int8",
             name="q.onnx", calib_n=32, extra=None, calib: np.ndarray | None = None) -> str:
    """``onnxruntime.quantization.quantize_static`` on random calibration data; returns the output path."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    types = {"uint8": QuantType.QUInt8, "int8": QuantType.QInt8, "int4": QuantType.QInt4,
             "uint4": QuantType.QUInt4, "uint16": QuantType.QUInt16, "int16": QuantType.QInt16}
    src = tmp_path / ("float_" + name)
    onnx.save(model, src)
    data = random_inputs(model, calib_n, 1234) if calib is None else calib
    in_name = model.graph.input[0].name

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter([{in_name: data[i:i + 1]} for i in range(len(data))])

        def get_next(self):
            return next(self.it, None)

    out = tmp_path / name
    quantize_static(str(src), str(out), Reader(), quant_format=QuantFormat.QDQ if fmt == "qdq" else QuantFormat.QOperator,
                    per_channel=per_channel, activation_type=types[act], weight_type=types[weight],
                    reduce_range=fmt == "qop", extra_options=extra or {})
    return str(out)


def compare_with_ort(path: str, igraph, x: np.ndarray, name: str = "x", got_out: dict | None = None):
    """``(fraction of identical output elements, max difference in LSBs)`` of the integer graph
    (golden) vs onnxruntime on the same quantized model, measured on the output's integer grid.
    ``got_out`` (a dict) receives the dequantized golden outputs. QDQ: the spec-exact session;
    QOperator: onnxruntime's integer kernels (see the module docstring)."""
    sess = kernel_session(path) if igraph.source == "qoperator" else spec_session(path)
    ref = sess.run(None, {name: x})
    got = dequantize_outputs(igraph, golden.execute(igraph, quantize_inputs(igraph, {name: x})))
    if got_out is not None:
        got_out.update(got)
    fracs, worst = [], 0.0
    for d, r in zip(igraph.outputs, ref):
        g = got[d.name]
        if d.integer_output:
            diff = np.abs(g.astype(np.int64) - r.astype(np.int64))
        else:
            diff = lsb_apart(g, r, d.scale)
        fracs.append(float(np.mean(diff == 0)))
        worst = max(worst, float(diff.max()))
    return min(fracs), worst
