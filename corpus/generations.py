"""Models of older exporter generations and of QONNX/FINN conventions (issue #32, item 5).

Imported by ``make_corpus.py`` (the one script users run); each builder takes that module (``mc``)
for its helpers (``record``, ``save_npz``, ``tidy``, ``seed_all``, ``quiet``, ``qonnx_oracles``).

- ``build_old_exporters``: float models as older exporters wrote them. Real exporters with their
  own options where they install (PyTorch's TorchScript exporter at opset 9/11 with
  ``keep_initializers_as_inputs=True, do_constant_folding=False``; tf2onnx at opset 9). keras2onnx
  does not install on Python 3.11 with a current onnx/TensorFlow (see ``KERAS2ONNX_ERROR``), and
  no PyTorch that writes BatchNorm1d as ``Unsqueeze, BatchNormalization, Squeeze`` does: those
  graphs are written with ``onnx.helper`` in the form those exporters wrote (``_K2O``,
  ``torch_bn1d_unsqueeze``), with weights of a Keras / PyTorch model of the same architecture
  built here, whose outputs are the ``.npz`` ``output``.
- ``build_qonnx_conventions``: Brevitas exports as an older PyTorch wrote them, qonnx's
  channels-last form, FINN's datatype annotation on the graph input, and quantized models whose
  first layer reads the float input. Each ``.npz`` holds the qonnx executor's outputs as
  ``oracle`` (``make_corpus.qonnx_oracles``).

Every entry names the classes of issue #32 it exercises (``classes`` in the manifest):
1 MatMul + Add of a constant, 2 BatchNormalization not right after a Conv/Gemm, 3 Conv1D between
Transposes (NWC <-> NCW), 4 qonnx channels-last, 5 Brevitas export of an older PyTorch, 6 FINN
datatype annotation on the input, 7 quantized model whose first layer reads the float input.
"""
from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["FLOAT_FAMILIES", "QONNX_FAMILIES", "KERAS2ONNX_ERROR", "build_old_exporters",
           "build_qonnx_conventions"]

#: manifest families written by build_old_exporters / build_qonnx_conventions
FLOAT_FAMILIES = ("keras2onnx", "pytorch-old", "tf2onnx-old")
QONNX_FAMILIES = ("brevitas-old", "qonnx-chlast", "finn-annot", "qonnx-float-input")

#: what importing keras2onnx 1.7.0 (its last release) says in the exporters' venv (onnx 1.23,
#: TensorFlow 2.21); with a stand-in ``onnx.mapping`` it next fails on
#: ``tensorflow.python.keras`` (no attribute 'applications'), an API TensorFlow no longer has.
#: ``onnxmltools.convert_keras`` hands Keras models to keras2onnx.
KERAS2ONNX_ERROR = "ModuleNotFoundError: No module named 'onnx.mapping'"

SEED = 32
#: the seed of a second set of models in the same forms, kept out of the corpus to try the flow on
#: models its tests have not seen, except for a few written here: those draw from this seed (plus
#: their place in the set) as in the full set, so that they are the same graphs
SET2_SEED = 3232


# --------------------------------------------------------------------------------------------
# keras2onnx 1.7, written with onnx.helper


class _K2O:
    """A Keras Sequential model as keras2onnx 1.7 converted it, layer by layer, at opset 7 or 8.

    The form is keras2onnx's: per layer converter the op sequence and attributes it wrote
    (Dense: MatMul named after the layer, Add of the bias, the activation node, Identity for a
    linear one; BatchNormalization: gamma and beta folded into its scale and bias with mean 0 and
    variance 1, epsilon scaled by 1e-3, ``spatial=1``, Transpose to channels-first and back around
    it for a rank-3 input; Conv1D and MaxPooling1D: Transpose perm [0, 2, 1] before and after,
    explicit pads for ``same``; Flatten). Names: initializers from the Keras weight names
    (``dense/kernel:0``), converter temporaries from keras2onnx's seeds made unique by a numeric
    suffix (``biased_tensor_name1``), nodes without a name from their op type (``Relu1``), layer
    outputs and graph ends named as TensorFlow names the tensors, the batch dimension ``N``.
    Model: IR version 3 (opset 7 and 8), every initializer also a graph input, producer
    ``keras2onnx`` 1.7.0, domain ``onnxmltools``."""

    def __init__(self, opset: int):
        self.opset = opset
        self.nodes: list = []
        self.inits: list = []
        self.vars: set = set()
        self.ops: set = set()

    @staticmethod
    def _unique(seed: str, taken: set) -> str:
        name, i = seed, 1
        while name in taken:
            name, i = f"{seed}{i}", i + 1
        taken.add(name)
        return name

    def var(self, seed: str) -> str:
        return self._unique(seed, self.vars)

    def opname(self, seed: str) -> str:
        return self._unique(seed, self.ops)

    def init(self, name: str, value: np.ndarray) -> str:
        name = self.var(name)
        self.inits.append(numpy_helper.from_array(np.ascontiguousarray(value, dtype=np.float32), name))
        return name

    def node(self, op: str, ins: list, outs: list, name: str, **attrs) -> None:
        self.nodes.append(helper.make_node(op, ins, outs, name=name, **attrs))

    def activation(self, act: str, x: str, out: str) -> None:
        if act == "linear":
            self.node("Identity", [x], [out], self.opname("Identity"))
        elif act == "softmax":
            self.node("Softmax", [x], [out], self.opname("Softmax"), axis=-1)
        else:
            self.node({"relu": "Relu", "tanh": "Tanh", "sigmoid": "Sigmoid"}[act], [x], [out],
                      self.opname({"relu": "Relu", "tanh": "Tanh", "sigmoid": "Sigmoid"}[act]))

    def dense(self, layer, x: str, out: str) -> None:
        w, b = (v.numpy() for v in layer.weights)
        wn = self.init(f"{layer.name}/kernel:0", w)
        mm = self.var(f"{layer.name}0")
        self.node("MatMul", [x, wn], [mm], layer.name)
        bn = self.init(f"{layer.name}/bias:0", b)
        biased = self.var("biased_tensor_name")
        self.node("Add", [mm, bn], [biased], self.opname("Add"))
        self.activation(layer.activation.__name__, biased, out)

    def batch_norm(self, layer, x: str, out: str, rank: int) -> None:
        gamma, beta, mean, var = (v.numpy() for v in layer.weights)
        s = gamma / np.sqrt(var + layer.epsilon)
        inp = x
        if rank > 2:
            inp = self.var(f"{x}_transposed")
            self.node("Transpose", [x], [inp], self.opname("Transpose"), perm=[0, rank - 1, *range(1, rank - 1)])
        names = [inp, self.init("scale", s), self.init("bias", beta - gamma * mean / np.sqrt(var + layer.epsilon)),
                 self.init("mean", 0 * mean), self.init("var", 1 + 0 * var)]
        res = out if rank <= 2 else self.var("batch_norm_output_buffer")
        self.node("BatchNormalization", names, [res], layer.name, epsilon=layer.epsilon * 1e-3,
                  momentum=layer.momentum, spatial=1)
        if rank > 2:
            self.node("Transpose", [res], [out], self.opname("Transpose"), perm=[0, *range(2, rank), 1])

    def conv1d(self, layer, x: str, out: str) -> None:
        k, b = (v.numpy() for v in layer.weights)
        adj = self.var("adjusted_input")
        self.node("Transpose", [x], [adj], self.opname("Transpose"), perm=[0, 2, 1])
        wn = self.init(f"{layer.name}/kernel:0", k.transpose(2, 1, 0))
        bn = self.init(f"{layer.name}/bias:0", b)
        ks = k.shape[0]
        pads = {"valid": None, "same": [(ks - 1) // 2, ks // 2]}[layer.padding]
        conv = self.var("convolution_output")
        attrs = dict(dilations=list(layer.dilation_rate), strides=list(layer.strides), kernel_shape=[ks], group=1)
        if pads is None:
            attrs["auto_pad"] = "VALID"
        else:
            attrs.update(auto_pad="NOTSET", pads=pads)
        self.node("Conv", [adj, wn, bn], [conv], layer.name, **attrs)
        tr = self.var("transpose_output")
        self.node("Transpose", [conv], [tr], self.opname("Transpose"), perm=[0, 2, 1])
        self.activation(layer.activation.__name__, tr, out)

    def max_pool1d(self, layer, x: str, out: str) -> None:
        adj = self.var("input_transposed")
        self.node("Transpose", [x], [adj], self.opname("Transpose"), perm=[0, 2, 1])
        pooled = self.var(f"{x}_pooling0")
        self.node("MaxPool", [adj], [pooled], f"{x}_pooling", kernel_shape=list(layer.pool_size),
                  strides=list(layer.strides), auto_pad="VALID")
        back = self.var(f"{x}_transpose0")
        self.node("Transpose", [pooled], [back], f"{x}_transpose", perm=[0, 2, 1])
        self.node("Identity", [back], [out], self.opname("Identity"))

    def convert(self, model, input_name: str, tf_out: dict, graph_name: str) -> onnx.ModelProto:
        """``model`` (Keras Sequential) into ONNX; ``tf_out[layer.name]`` is the TensorFlow name of
        each layer's output tensor."""
        x = input_name
        self.vars.add(x)
        shape = list(model.inputs[0].shape)
        for layer in model.layers:
            out = tf_out[layer.name]
            self.vars.add(out)
            kind = type(layer).__name__
            rank = len(layer.input.shape)
            if kind == "Dense":
                self.dense(layer, x, out)
            elif kind == "BatchNormalization":
                self.batch_norm(layer, x, out, rank)
            elif kind == "Activation":
                self.activation(layer.activation.__name__, x, out)
            elif kind == "Conv1D":
                self.conv1d(layer, x, out)
            elif kind == "MaxPooling1D":
                self.max_pool1d(layer, x, out)
            elif kind == "Flatten":
                self.node("Flatten", [x], [out], layer.name)
            else:
                raise NotImplementedError(kind)
            x = out
        out_shape = list(model.outputs[0].shape)
        inputs = [helper.make_tensor_value_info(input_name, TensorProto.FLOAT, ["N", *shape[1:]])]
        # opset < 9: keras2onnx lists every initializer as a graph input too
        inputs += [helper.make_tensor_value_info(t.name, t.data_type, t.dims) for t in self.inits]
        graph = helper.make_graph(self.nodes, graph_name, inputs,
                                  [helper.make_tensor_value_info(x, TensorProto.FLOAT, ["N", *out_shape[1:]])],
                                  self.inits)
        model_proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)],
                                        producer_name="keras2onnx", producer_version="1.7.0")
        model_proto.ir_version = 3  # onnxconverter-common's table: opset 7 and 8 -> IR 3
        model_proto.domain = "onnxmltools"
        model_proto.model_version = 0
        return model_proto


# --------------------------------------------------------------------------------------------
# PyTorch's TorchScript exporter as PyTorch 1.x ran it


@contextlib.contextmanager
def torch1_exporter():
    """torch.onnx's TorchScript exporter without ONNX shape inference during export, as PyTorch
    ran it before 1.8 made that the default: tensor sizes read in ``forward`` (``x.size(0)``)
    stay ``Shape -> Gather`` instead of being folded to constants. The exporter's
    ``onnx_shape_inference`` flag is not an argument of ``torch.onnx.export``: it is set on the
    exporter's internal entry point for the duration of the block."""
    from torch.onnx._internal.torchscript_exporter import utils as tsu
    original = tsu._export

    def export_without_shape_inference(*args, **kwargs):
        kwargs["onnx_shape_inference"] = False
        return original(*args, **kwargs)
    tsu._export = export_without_shape_inference
    try:
        yield
    finally:
        tsu._export = original


OLD_TORCH_OPTS = dict(dynamo=False, keep_initializers_as_inputs=True, do_constant_folding=False)


def _old_torch_options(opset: int, dynamic: bool) -> str:
    return (f"dynamo=False (TorchScript), opset_version={opset}, keep_initializers_as_inputs=True, "
            f"do_constant_folding=False, ONNX shape inference during export off (as before PyTorch 1.8), "
            + ("batch dynamic (dynamic_axes)" if dynamic else "batch fixed 1"))


def torch_bn1d_unsqueeze(model, opset: int = 9) -> onnx.ModelProto:
    """``Linear -> BatchNorm1d -> ReLU -> Linear`` on a 2-D input as PyTorch 1.x's exporter wrote
    it: ONNX BatchNormalization then took N x C x D1..., so a 2-D input went through
    ``Unsqueeze(axes=[2])`` and ``Squeeze(axes=[2])`` around it. TorchScript naming: the graph
    input ``input``, parameters by their state-dict names and also listed as graph inputs,
    intermediate tensors numbered from after the last parameter, nodes ``<Op>_<n>``; IR version
    4 with opset 9."""
    sd = {k: v.detach().numpy() for k, v in model.state_dict().items() if not k.endswith("num_batches_tracked")}
    params = list(sd)
    counter = iter(range(len(params) + 1, 10 ** 6))
    nodes, k = [], iter(range(10 ** 6))

    def node(op, ins, **attrs):
        out = str(next(counter))
        nodes.append(helper.make_node(op, ins, [out], name=f"{op}_{next(k)}", **attrs))
        return out
    h = node("Gemm", ["input", "fc1.weight", "fc1.bias"], alpha=1.0, beta=1.0, transB=1)
    h = node("Unsqueeze", [h], axes=[2])
    h = node("BatchNormalization", [h, "bn.weight", "bn.bias", "bn.running_mean", "bn.running_var"],
             epsilon=float(model.bn.eps), momentum=float(1 - model.bn.momentum))
    h = node("Squeeze", [h], axes=[2])
    h = node("Relu", [h])
    nodes.append(helper.make_node("Gemm", [h, "fc2.weight", "fc2.bias"], ["output"], name=f"Gemm_{next(k)}",
                                  alpha=1.0, beta=1.0, transB=1))
    inits = [numpy_helper.from_array(sd[p], p) for p in params]
    inputs = [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", model.fc1.in_features])]
    inputs += [helper.make_tensor_value_info(p, TensorProto.FLOAT, list(sd[p].shape)) for p in params]
    graph = helper.make_graph(nodes, "torch-jit-export", inputs,
                              [helper.make_tensor_value_info("output", TensorProto.FLOAT,
                                                             ["batch", model.fc2.out_features])], inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="pytorch",
                          producer_version="1.4")
    m.ir_version = 4
    return m


# --------------------------------------------------------------------------------------------
# float models of older exporters: classes 1, 2, 3


def _ort_outputs(path, x: np.ndarray) -> np.ndarray:
    import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.log_severity_level = 3  # not the warning about initializers listed as graph inputs
    sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name
    batch = sess.get_inputs()[0].shape[0]
    if isinstance(batch, int):
        return np.concatenate([sess.run(None, {name: x[i:i + batch]})[0] for i in range(0, len(x), batch)])
    return sess.run(None, {name: x})[0]


def _check_float(mc, fname: str, x: np.ndarray, y: np.ndarray) -> None:
    """onnxruntime runs the written file and agrees with the framework's outputs."""
    got = _ort_outputs(mc.HERE / fname, x)
    err = float(np.abs(got - y).max())
    assert err <= 1e-4 * max(1.0, float(np.abs(y).max())), (fname, err)
    print(f"  {fname:42s} onnxruntime vs framework: max |diff| {err:.2g}")


def build_old_exporters(mc):
    """Classes 1-3: keras2onnx form (written), PyTorch TorchScript at opset 9/11, tf2onnx opset 9."""
    _build_keras_old(mc)
    _build_torch_old(mc)


def _keras_models(keras):
    L = keras.layers
    return {
        "mlp": (lambda: keras.Sequential([
            keras.Input((64,), name="input_1"), L.Dense(32, activation="relu"), L.Dense(16, activation="relu"),
            L.Dense(10, activation="softmax")]), (64,),
            "Dense 64-32-16-10 (ReLU, ReLU, softmax): MatMul + Add of the bias per layer"),
        "dense_bn": (lambda: keras.Sequential([
            keras.Input((64,), name="input_1"), L.Dense(32), L.BatchNormalization(), L.Activation("relu"),
            L.Dense(10, activation="softmax")]), (64,),
            "Dense, BatchNormalization, ReLU, Dense softmax on 64 features"),
        "seq_dense_bn": (lambda: keras.Sequential([
            keras.Input((4, 16), name="input_1"), L.Dense(24), L.BatchNormalization(), L.Activation("relu"),
            L.Flatten(), L.Dense(10, activation="softmax")]), (4, 16),
            "Dense on a 4 x 16 sequence, BatchNormalization (channels last), ReLU, Flatten, Dense softmax"),
        "conv1d": (lambda: keras.Sequential([
            keras.Input((32, 10), name="input_1"), L.Conv1D(16, 3, padding="same", activation="relu"),
            L.MaxPooling1D(2), L.Conv1D(8, 3, padding="same", activation="relu"), L.Flatten(),
            L.Dense(8, activation="softmax")]), (32, 10),
            "Conv1D-ReLU, MaxPooling1D, Conv1D-ReLU, Flatten, Dense softmax on 32 frames x 10 MFCC (NWC)"),
        "conv1d_bn_stride": (lambda: keras.Sequential([
            keras.Input((40, 8), name="input_1"), L.Conv1D(12, 5, strides=2, padding="valid"), L.BatchNormalization(),
            L.Activation("relu"), L.Conv1D(16, 3, strides=2, padding="same", activation="relu"),
            L.BatchNormalization(), L.Flatten(), L.Dense(6, activation="softmax")]), (40, 8),
            "Conv1D stride 2 (valid), BatchNormalization, ReLU, Conv1D-ReLU stride 2 (same), BatchNormalization, "
            "Flatten, Dense softmax on 40 frames x 8 features (NWC)"),
        "seq_dense_gap": (lambda: keras.Sequential([
            keras.Input((10, 12), name="input_1"), L.Dense(16, activation="relu"), L.Dense(16, activation="tanh"),
            L.GlobalAveragePooling1D(), L.Dense(4, activation="softmax")]), (10, 12),
            "Dense-ReLU and Dense-tanh on a 10 x 12 sequence, GlobalAveragePooling1D, Dense softmax"),
    }


#: the Keras models by the seed of their generator, in the order they draw from it (samples,
#: labels, BatchNormalization statistics); a model of SET2_SEED's set that the corpus does not hold
#: is given by what it draws (input shape, classes, BatchNormalization channels)
_KERAS_SETS = {SEED: ("mlp", "dense_bn", "seq_dense_bn", "conv1d"),
               SET2_SEED: (((16, 16, 3), 10, (8,)), ((40,), 5, (48, 24)), "conv1d_bn_stride",
                      ((16, 16, 3), 10, (8, 16)), "seq_dense_gap")}


def _bn_stats(rng, c: int) -> list:
    """Random BatchNormalization statistics of ``c`` channels: mean, variance, gamma, beta."""
    return [rng.uniform(lo, hi, c).astype(np.float32) for lo, hi in ((-0.5, 0.5), (0.5, 2.0), (0.5, 1.5), (-0.2, 0.2))]


def _keras_trained(keras, tf, build, shape, seed: int, rng):
    """The model of ``build`` trained two epochs on 32 random samples and labels from ``rng``,
    with random BatchNormalization statistics; returns (model, samples, Keras' outputs)."""
    keras.backend.clear_session()  # layer names from dense, as in a fresh session
    tf.keras.utils.set_random_seed(seed)
    model = build()
    x = rng.random((32, *shape), dtype=np.float32)
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    model.fit(x, rng.integers(0, model.output_shape[-1], 32), epochs=2, verbose=0)
    for layer in model.layers:  # statistics that are not the initial identity
        if type(layer).__name__ == "BatchNormalization":
            for var, value in zip((layer.moving_mean, layer.moving_variance, layer.gamma, layer.beta),
                                  _bn_stats(rng, layer.moving_mean.shape[0])):
                var.assign(value)
    return model, x, model.predict(x, verbose=0)


def _keras_draws(rng, shape, classes: int, bn_channels) -> None:
    """What _keras_trained draws from ``rng`` for a model not built here."""
    rng.random((32, *shape), dtype=np.float32)
    rng.integers(0, classes, 32)
    for c in bn_channels:
        _bn_stats(rng, c)


def _tf_names(model) -> dict:
    """The TensorFlow name of each layer's output tensor, as keras2onnx read them from the graph."""
    last_op = {"Dense": lambda l: {"relu": "Relu", "softmax": "Softmax", "linear": "BiasAdd"}[l.activation.__name__],
               "BatchNormalization": lambda l: "batchnorm/add_1", "Activation": lambda l: "Relu",
               "Conv1D": lambda l: "Relu", "MaxPooling1D": lambda l: "Squeeze", "Flatten": lambda l: "Reshape"}
    return {l.name: f"{l.name}/{last_op[type(l).__name__](l)}:0" for l in model.layers}


def _build_keras_old(mc):
    import os
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf
    import keras
    models = _keras_models(keras)
    for seed, names in _KERAS_SETS.items():
        rng = np.random.default_rng(seed)
        for name in names:
            if isinstance(name, tuple):
                _keras_draws(rng, *name)
            else:
                build, shape, doc = models[name]
                _write_keras_old(mc, name, *_keras_trained(keras, tf, build, shape, seed, rng), doc)


#: per Keras model: (opset of the keras2onnx form, the forms written)
_KERAS_PLAN = {"mlp": (8, ("keras2onnx", "tf2onnx")), "dense_bn": (7, ("keras2onnx", "tf2onnx")),
               "seq_dense_bn": (8, ("keras2onnx",)), "conv1d": (8, ("keras2onnx", "tf2onnx")),
               "conv1d_bn_stride": (None, ("tf2onnx",)), "seq_dense_gap": (None, ("tf2onnx",))}
#: classes of the keras2onnx-form files (written here, so known by construction)
_K2O_CLASSES = {"mlp": [1], "dense_bn": [1, 2], "seq_dense_bn": [1, 2], "conv1d": [1, 3]}


def _write_keras_old(mc, name: str, model, x: np.ndarray, y: np.ndarray, doc: str) -> None:
    """The forms of _KERAS_PLAN of one trained Keras model, with its samples and outputs."""
    import tensorflow as tf
    import tf2onnx
    import keras
    tv = f"tf2onnx {tf2onnx.__version__} (TensorFlow {tf.__version__}, Keras {keras.__version__})"
    kv = f"written as keras2onnx 1.7.0 wrote it (weights: Keras {keras.__version__}, TensorFlow {tf.__version__})"
    data = mc.save_npz(f"keras_old_{name}.npz", input=x, output=y)
    opset, variants = _KERAS_PLAN[name]
    if "keras2onnx" in variants:
        fname = f"keras2onnx_{name}_opset{opset}.onnx"
        proto = _K2O(opset).convert(model, "input_1", _tf_names(model), model.name)
        (mc.HERE / fname).write_bytes(proto.SerializeToString(deterministic=True))
        _check_float(mc, fname, x, y)
        mc.record(fname, "keras2onnx", "float", "onnx.helper in keras2onnx's form", kv,
                  f"keras2onnx.convert_keras(model, target_opset={opset}) as its converters write it "
                  f"(keras2onnx does not install: {KERAS2ONNX_ERROR}); IR 3, initializers also graph inputs",
                  data=data, notes=doc, classes=_K2O_CLASSES[name])
    if "tf2onnx" in variants:
        fname = f"tf2onnx_{name}_opset9.onnx"
        spec = (tf.TensorSpec((None, *x.shape[1:]), tf.float32, name="input"),)

        @tf.function(input_signature=spec)
        def fn(inp):
            return {"output": model(inp)}
        with mc.quiet():
            tf2onnx.convert.from_function(fn, input_signature=spec, opset=9, output_path=str(mc.HERE / fname))
        mc.tidy(mc.HERE / fname, tf2onnx=True)
        _check_float(mc, fname, x, y)
        mc.record(fname, "tf2onnx-old", "float", "tf2onnx.convert.from_function", tv,
                  "Keras 3 model called in a tf.function, opset=9 (as `python -m tf2onnx.convert --opset 9`), "
                  "batch dynamic", data=data, notes=doc, classes=_classes_of(mc.HERE / fname))


def _classes_of(path) -> list[int]:
    """Classes 1-3 found by rule in a float graph (for the real exporters' files, whose form is
    theirs): 1 MatMul whose output gets a constant added, 2 BatchNormalization whose input is not
    a Conv/Gemm output, 3 a 3-D activation turned NWC <-> NCW by Transpose perm [0, 2, 1] or by
    Unsqueeze + Transpose into a convolution."""
    m = onnx.load(path)
    g = m.graph
    consts = {t.name for t in g.initializer} | {o for n in g.node if n.op_type == "Constant" for o in n.output}
    prod = {o: n for n in g.node for o in n.output}
    found = set()
    for n in g.node:
        if n.op_type == "Add" and any(i in consts for i in n.input) and any(
                prod.get(i) is not None and prod[i].op_type == "MatMul" for i in n.input):
            found.add(1)
        if n.op_type == "BatchNormalization" and (prod.get(n.input[0]) is None
                                                  or prod[n.input[0]].op_type not in ("Conv", "Gemm")):
            found.add(2)
        if n.op_type == "Transpose":
            perm = list(next(a.ints for a in n.attribute if a.name == "perm"))
            if perm == [0, 2, 1] or (perm == [0, 3, 1, 2] and prod.get(n.input[0]) is not None
                                     and prod[n.input[0]].op_type == "Unsqueeze"):
                if any(c.op_type == "Conv" for c in g.node):
                    found.add(3)
    return sorted(found)


def _torch_old_models():
    import torch
    from torch import nn

    class MatMulAdd(nn.Module):
        """``x @ W + b`` (a parameter matrix and bias), ReLU, then Linear on the 3-D
        ``h.unsqueeze(1)`` (MatMul + Add), squeeze(1): 16 -> 24 -> 10."""
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.randn(16, 24) * 0.25)
            self.b = nn.Parameter(torch.randn(24) * 0.1)
            self.fc = nn.Linear(24, 10)

        def forward(self, x):
            h = torch.relu(x @ self.w + self.b)
            return self.fc(h.unsqueeze(1)).squeeze(1)

    class SeqLinearBN(nn.Module):
        """Linear on an 8 x 12 sequence (MatMul + Add), BatchNorm1d over the features via
        ``transpose(1, 2)`` and back, ReLU, flatten with ``view(x.size(0), -1)``, Linear."""
        def __init__(self):
            super().__init__()
            self.fc1 = nn.Linear(12, 16)
            self.bn = nn.BatchNorm1d(16)
            self.fc2 = nn.Linear(8 * 16, 10)

        def forward(self, x):
            h = self.bn(self.fc1(x).transpose(1, 2)).transpose(1, 2)
            h = torch.relu(h)
            return self.fc2(h.reshape(h.size(0), -1))

    class BN1d(nn.Module):
        """Linear 32 -> 24, BatchNorm1d on the 2-D output, ReLU, Linear 24 -> 10."""
        def __init__(self):
            super().__init__()
            self.fc1 = nn.Linear(32, 24)
            self.bn = nn.BatchNorm1d(24)
            self.fc2 = nn.Linear(24, 10)

        def forward(self, x):
            return self.fc2(torch.relu(self.bn(self.fc1(x))))

    class SeluBN(nn.Module):
        """Conv -> SELU -> BatchNorm2d -> Conv -> ReLU -> MaxPool -> flatten -> Linear on 3x16x16:
        the batch norm follows a non-linear activation, not the convolution."""
        def __init__(self):
            super().__init__()
            self.c1 = nn.Conv2d(3, 8, 3, padding=1)
            self.bn = nn.BatchNorm2d(8)
            self.c2 = nn.Conv2d(8, 8, 3, padding=1)
            self.fc = nn.Linear(8 * 8 * 8, 10)

        def forward(self, x):
            h = torch.max_pool2d(torch.relu(self.c2(self.bn(torch.selu(self.c1(x))))), 2)
            return self.fc(h.view(h.size(0), -1))

    class ReluBN(nn.Module):
        """Linear -> ReLU -> BatchNorm1d -> Linear on 20 features (batch norm after the activation)."""
        def __init__(self):
            super().__init__()
            self.fc1 = nn.Linear(20, 32)
            self.bn = nn.BatchNorm1d(32)
            self.fc2 = nn.Linear(32, 6)

        def forward(self, x):
            return self.fc2(self.bn(torch.relu(self.fc1(x))))

    class Conv1dNWC(nn.Module):
        """Keras-style input (batch, 32 frames, 10 features): ``transpose(1, 2)`` to NCW, Conv1d-ReLU,
        MaxPool1d, Conv1d-ReLU, ``transpose(1, 2)`` back to NWC, flatten, Linear."""
        def __init__(self):
            super().__init__()
            self.c1 = nn.Conv1d(10, 16, 3, padding=1)
            self.c2 = nn.Conv1d(16, 8, 3, padding=1)
            self.fc = nn.Linear(16 * 8, 8)

        def forward(self, x):
            h = torch.relu(self.c1(x.transpose(1, 2)))
            h = torch.relu(self.c2(torch.max_pool1d(h, 2))).transpose(1, 2)
            return self.fc(h.reshape(h.size(0), -1))

    class Conv1dEach(nn.Module):
        """Input (batch, 24, 6) channels last; every Conv1d between ``transpose(1, 2)`` pairs (NWC
        kept between layers, as a Keras-converted model has it), ReLU, global mean over time, Linear."""
        def __init__(self):
            super().__init__()
            self.c1 = nn.Conv1d(6, 12, 5, padding=2)
            self.c2 = nn.Conv1d(12, 12, 3, padding=1)
            self.fc = nn.Linear(12, 4)

        def forward(self, x):
            h = torch.relu(self.c1(x.transpose(1, 2)).transpose(1, 2))
            h = torch.relu(self.c2(h.transpose(1, 2)).transpose(1, 2))
            return self.fc(h.mean(dim=1))

    class CnnReluBN(nn.Module):
        """Conv-ReLU-BatchNorm2d-MaxPool, Conv-ReLU-BatchNorm2d-AvgPool, flatten with
        ``view(h.size(0), -1)``, Linear on 3x16x16 (each batch norm after the activation)."""
        def __init__(self):
            super().__init__()
            self.c1, self.b1 = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8)
            self.c2, self.b2 = nn.Conv2d(8, 12, 3, padding=1), nn.BatchNorm2d(12)
            self.fc = nn.Linear(12 * 4 * 4, 10)

        def forward(self, x):
            h = torch.max_pool2d(self.b1(torch.relu(self.c1(x))), 2)
            h = torch.nn.functional.avg_pool2d(self.b2(torch.relu(self.c2(h))), 2)
            return self.fc(h.view(h.size(0), -1))

    class BNFirstMLP(nn.Module):
        """BatchNorm1d on the 30 input features (a normalization layer), Linear-ReLU, Dropout,
        Linear."""
        def __init__(self):
            super().__init__()
            self.bn0, self.fc1, self.fc2 = nn.BatchNorm1d(30), nn.Linear(30, 20), nn.Linear(20, 4)
            self.drop = nn.Dropout(0.3)

        def forward(self, x):
            return self.fc2(self.drop(torch.relu(self.fc1(self.bn0(x)))))

    return {"matmul_add": (MatMulAdd, (16,)), "seq_linear_bn": (SeqLinearBN, (8, 12)), "bn1d": (BN1d, (32,)),
            "selu_bn": (SeluBN, (3, 16, 16)), "relu_bn": (ReluBN, (20,)), "conv1d_nwc": (Conv1dNWC, (32, 10)),
            "conv1d_each": (Conv1dEach, (24, 6)), "cnn_relu_bn": (CnnReluBN, (3, 16, 16)),
            "bn_first_mlp": (BNFirstMLP, (30,))}


def _build_torch_old(mc):
    import torch
    ver = torch.__version__
    # name: (opset, dynamic batch, classes, seed); bn1d is written in the old exporter's form; the
    # last two are models of SET2_SEED's set (seeded by their place in it)
    plan = {"matmul_add": (9, True, [1], SEED), "seq_linear_bn": (11, True, [1, 2], SEED + 1),
            "bn1d": (9, True, [2], SEED + 2), "selu_bn": (11, False, [2], SEED + 3),
            "relu_bn": (9, True, [2], SEED + 4), "conv1d_nwc": (11, True, [3], SEED + 5),
            "conv1d_each": (9, False, [3], SEED + 6), "cnn_relu_bn": (9, True, [2], SET2_SEED),
            "bn_first_mlp": (9, True, [2], SET2_SEED + 5)}
    for name, (cls, shape) in _torch_old_models().items():
        opset, dynamic, classes, seed = plan[name]
        mc.seed_all(seed)
        model = mc.randomize_stats(cls())
        x = torch.rand(32, *shape)
        with torch.no_grad():
            y = model(x).numpy()
        data = mc.save_npz(f"torch_old_{name}.npz", input=x.numpy(), output=y)
        fname = f"torch_opset{opset}_{name}.onnx"
        if name == "bn1d":
            (mc.HERE / fname).write_bytes(torch_bn1d_unsqueeze(model, opset).SerializeToString(deterministic=True))
            _check_float(mc, fname, x.numpy(), y)
            mc.record(fname, "pytorch-old", "float", "onnx.helper in PyTorch 1.x's form",
                      f"written (weights: torch {ver})",
                      "torch.onnx.export(opset_version=9) of BatchNorm1d on a 2-D input as PyTorch 1.x wrote it: "
                      "Unsqueeze(axes=[2]), BatchNormalization, Squeeze(axes=[2]) (no PyTorch that writes it "
                      "installs on Python 3.11); parameters also graph inputs, batch dynamic",
                      data=data, notes=cls.__doc__ or "", classes=classes)
            continue
        kwargs = dict(OLD_TORCH_OPTS, opset_version=opset, input_names=["input"], output_names=["output"])
        if dynamic:
            kwargs["dynamic_axes"] = {"input": {0: "batch"}, "output": {0: "batch"}}
        example = torch.rand(2 if dynamic else 1, *shape)
        with mc.quiet(), torch1_exporter():
            torch.onnx.export(model, (example,), str(mc.HERE / fname), **kwargs)
        mc.tidy(mc.HERE / fname)
        _check_float(mc, fname, x.numpy(), y)
        found = _classes_of(mc.HERE / fname)
        assert set(classes) <= set(found), (fname, classes, found)
        mc.record(fname, "pytorch-old", "float", "torch.onnx.export", ver, _old_torch_options(opset, dynamic),
                  data=data, notes=cls.__doc__ or "", classes=classes)


# --------------------------------------------------------------------------------------------
# QONNX and FINN conventions: classes 4-7


def _brevitas_nets():
    import torch
    import brevitas.nn as qnn
    from torch import nn

    def relu(bits=4):
        return qnn.QuantReLU(bit_width=bits, return_quant_tensor=True)

    def ident(bits=4):
        return qnn.QuantIdentity(bit_width=bits, return_quant_tensor=True)

    class Branched(nn.Module):
        """QuantIdentity 8-bit; QuantConv2d 4-bit + QuantReLU, MaxPool; two branches (3x3 conv and
        1x1 conv, each through one shared 4-bit QuantIdentity) joined by Add, QuantReLU, MaxPool; QuantLinear
        (float output) on 3x16x16."""
        def __init__(self):
            super().__init__()
            self.inp = ident(8)
            self.c0, self.r0 = qnn.QuantConv2d(3, 8, 3, padding=1, weight_bit_width=4), relu()
            self.a = qnn.QuantConv2d(8, 8, 3, padding=1, weight_bit_width=4)
            self.b = qnn.QuantConv2d(8, 8, 1, weight_bit_width=4)
            self.q = ident()  # one quantizer for both branches: the Add needs one scale
            self.r = relu()
            self.fc = qnn.QuantLinear(8 * 4 * 4, 10, bias=True, weight_bit_width=4)

        def forward(self, x):
            h = torch.max_pool2d(self.r0(self.c0(self.inp(x))), 2)
            h = torch.max_pool2d(self.r(self.q(self.a(h)) + self.q(self.b(h))), 2)
            return self.fc(torch.flatten(h, 1))

    class Separable(nn.Module):
        """QuantIdentity 8-bit; QuantConv2d 3x3 (1 -> 8) + QuantReLU; depthwise QuantConv2d
        (groups=8) + QuantReLU, pointwise 1x1 QuantConv2d + QuantReLU, MaxPool; again depthwise
        stride 2 + pointwise; global average pool, QuantLinear on 1x16x10 (keyword-spotting size)."""
        def __init__(self):
            super().__init__()
            self.inp = ident(8)
            self.c0, self.r0 = qnn.QuantConv2d(1, 8, 3, padding=1, weight_bit_width=4), relu()
            self.d1, self.rd1 = qnn.QuantConv2d(8, 8, 3, padding=1, groups=8, weight_bit_width=4), relu()
            self.p1, self.rp1 = qnn.QuantConv2d(8, 16, 1, weight_bit_width=4), relu()
            self.d2, self.rd2 = qnn.QuantConv2d(16, 16, 3, padding=1, stride=2, groups=16, weight_bit_width=4), relu()
            self.p2, self.rp2 = qnn.QuantConv2d(16, 16, 1, weight_bit_width=4), relu()
            self.fc = qnn.QuantLinear(16, 6, bias=True, weight_bit_width=4)

        def forward(self, x):
            h = self.r0(self.c0(self.inp(x)))
            h = torch.max_pool2d(self.rp1(self.p1(self.rd1(self.d1(h)))), 2)
            h = self.rp2(self.p2(self.rd2(self.d2(h))))
            return self.fc(torch.flatten(torch.nn.functional.adaptive_avg_pool2d(h, 1), 1))

    class UNet(nn.Module):
        """One-level U-Net on 1x16x16: QuantIdentity 8-bit, QuantConv2d + QuantReLU, MaxPool,
        QuantConv2d + the same QuantReLU, nearest Upsample x2, Concat with the encoder, QuantConv2d +
        QuantReLU, 1x1 QuantConv2d to one map (float output)."""
        def __init__(self):
            super().__init__()
            self.inp = ident(8)
            self.e = qnn.QuantConv2d(1, 4, 3, padding=1, weight_bit_width=4)
            self.m = qnn.QuantConv2d(4, 4, 3, padding=1, weight_bit_width=4)
            self.r = relu()  # one quantizer for both Concat inputs: the Concat needs one scale
            self.d, self.rd = qnn.QuantConv2d(8, 4, 3, padding=1, weight_bit_width=4), relu()
            self.o = qnn.QuantConv2d(4, 1, 1, weight_bit_width=4)

        def forward(self, x):
            e = self.r(self.e(self.inp(x)))
            m = nn.functional.interpolate(self.r(self.m(torch.max_pool2d(e, 2))), scale_factor=2, mode="nearest")
            return self.o(self.rd(self.d(torch.cat([m, e], dim=1))))

    class QCNN(nn.Module):
        """QuantIdentity 4-bit, QuantConv2d 4-bit + QuantReLU 4-bit, MaxPool, QuantConv2d +
        QuantReLU, MaxPool, ``h.view(h.size(0), -1)``, QuantLinear (float output) on 1x8x8."""
        def __init__(self):
            super().__init__()
            self.inp = ident(4)
            self.c1, self.r1 = qnn.QuantConv2d(1, 8, 3, padding=1, weight_bit_width=4), relu()
            self.c2, self.r2 = qnn.QuantConv2d(8, 8, 3, padding=1, weight_bit_width=4), relu()
            self.fc = qnn.QuantLinear(8 * 2 * 2, 10, bias=True, weight_bit_width=4)

        def forward(self, x):
            h = torch.max_pool2d(self.r1(self.c1(self.inp(x))), 2)
            h = torch.max_pool2d(self.r2(self.c2(h)), 2)
            return self.fc(h.view(h.size(0), -1))

    class MLPNoInputQuant(nn.Module):
        """First QuantLinear (weights ``wbits``) reads the input as it is (``input_quant=None``, the
        default): QuantLinear in -> hidden, QuantReLU ``abits``, QuantLinear hidden -> hidden,
        QuantReLU, QuantLinear -> out (float output)."""
        def __init__(self, n_in, hidden, n_out, wbits, abits):
            super().__init__()
            self.fc1, self.r1 = qnn.QuantLinear(n_in, hidden, bias=True, weight_bit_width=wbits), relu(abits)
            self.fc2, self.r2 = qnn.QuantLinear(hidden, hidden, bias=True, weight_bit_width=wbits), relu(abits)
            self.fc3 = qnn.QuantLinear(hidden, n_out, bias=True, weight_bit_width=wbits)

        def forward(self, x):
            return self.fc3(self.r2(self.fc2(self.r1(self.fc1(torch.flatten(x, 1))))))

    class CNNNoInputQuant(nn.Module):
        """First QuantConv2d (4-bit weights) reads the input as it is (``input_quant=None``):
        QuantConv2d + QuantReLU 4-bit, MaxPool, QuantConv2d + QuantReLU, MaxPool, QuantLinear."""
        def __init__(self, c_in, hw):
            super().__init__()
            self.c1, self.r1 = qnn.QuantConv2d(c_in, 8, 3, padding=1, weight_bit_width=4), relu()
            self.c2, self.r2 = qnn.QuantConv2d(8, 8, 3, padding=1, weight_bit_width=4), relu()
            self.fc = qnn.QuantLinear(8 * (hw // 4) ** 2, 10, bias=True, weight_bit_width=4)

        def forward(self, x):
            h = torch.max_pool2d(self.r1(self.c1(x)), 2)
            h = torch.max_pool2d(self.r2(self.c2(h)), 2)
            return self.fc(torch.flatten(h, 1))

    class AnnotCNN(nn.Module):
        """First QuantConv2d (4-bit weights) reads the input as it is: QuantConv2d + QuantReLU
        4-bit, MaxPool, QuantConv2d stride 2 + QuantReLU, 1x1 QuantConv2d + QuantReLU 2-bit,
        QuantLinear (float output)."""
        def __init__(self, c_in, hw):
            super().__init__()
            self.c1, self.r1 = qnn.QuantConv2d(c_in, 8, 3, padding=1, weight_bit_width=4), relu()
            self.c2, self.r2 = qnn.QuantConv2d(8, 12, 3, stride=2, padding=1, weight_bit_width=4), relu()
            self.c3, self.r3 = qnn.QuantConv2d(12, 8, 1, weight_bit_width=4), relu(2)
            self.fc = qnn.QuantLinear(8 * (hw // 4) ** 2, 5, bias=True, weight_bit_width=4)

        def forward(self, x):
            h = torch.max_pool2d(self.r1(self.c1(x)), 2)
            h = self.r3(self.c3(self.r2(self.c2(h))))
            return self.fc(torch.flatten(h, 1))

    return dict(Branched=Branched, Separable=Separable, UNet=UNet, QCNN=QCNN, MLP=MLPNoInputQuant,
                CNN=CNNNoInputQuant, AnnotCNN=AnnotCNN)


#: the interpreter of a venv with QKeras and qonnx's Keras converter (qonnx <= 0.4 ships it;
#: its ``qkeras`` extra needs TensorFlow <= 2.14.1): tensorflow-cpu 2.14.1, QKeras 0.9.0,
#: tf2onnx 1.16.1, qonnx 0.4.0, numpy < 2, pyparsing
QKERAS_PYTHON = os.environ.get("QKERAS_PYTHON", "/work/qkeras-venv/bin/python")

#: run by QKERAS_PYTHON with the corpus folder, SEED and SET2_SEED as arguments: QKeras models
#: whose first layer reads the float input, trained briefly, through
#: ``qonnx.converters.from_keras(opset=9)``; writes ``qkeras_<name>.onnx`` / ``.npz`` and prints
#: the versions as JSON. ``SETS``: per seed, the samples per model and the models in the order
#: they draw samples and labels from its generator; a model of SET2_SEED's set that the corpus
#: does not hold is given by what it draws (input shape, classes).
_QKERAS_CHILD = r"""
import importlib.metadata, json, os, sys
import numpy as np
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import tensorflow as tf
from tensorflow import keras
from qkeras import QActivation, QConv1D, QConv2D, QDense, quantized_bits, quantized_relu
from qonnx.converters import from_keras
import onnx
out, seed1, seed2 = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
L = keras.layers
def q(bits):
    return quantized_bits(bits, 0, alpha=1)
def mlp():
    return keras.Sequential([keras.Input((64,), name="input"),
        QDense(32, kernel_quantizer=q(4), bias_quantizer=q(4), name="fc1"),
        QActivation(quantized_relu(4), name="relu1"),
        QDense(16, kernel_quantizer=q(4), bias_quantizer=q(4), name="fc2"),
        QActivation(quantized_relu(4), name="relu2"),
        QDense(10, kernel_quantizer=q(4), bias_quantizer=q(4), name="fc3")])
def cnn():
    return keras.Sequential([keras.Input((8, 8, 3), name="input"),
        QConv2D(8, 3, padding="same", kernel_quantizer=q(4), bias_quantizer=q(4), name="conv1"),
        QActivation(quantized_relu(4), name="relu1"), L.MaxPooling2D(2, name="pool1"),
        QConv2D(8, 3, padding="same", kernel_quantizer=q(4), bias_quantizer=q(4), name="conv2"),
        QActivation(quantized_relu(4), name="relu2"), L.MaxPooling2D(2, name="pool2"),
        L.Flatten(name="flatten"), QDense(10, kernel_quantizer=q(4), bias_quantizer=q(4), name="fc")])
def conv1d():
    return keras.Sequential([keras.Input((32, 4), name="input"),
        QConv1D(8, 5, padding="same", kernel_quantizer=q(4), bias_quantizer=q(4), name="conv1"),
        QActivation(quantized_relu(4), name="relu1"), L.MaxPooling1D(2, name="pool"),
        QConv1D(8, 3, strides=2, padding="same", kernel_quantizer=q(4), bias_quantizer=q(4), name="conv2"),
        QActivation(quantized_relu(4), name="relu2"), L.Flatten(name="flatten"),
        QDense(3, kernel_quantizer=q(4), bias_quantizer=q(4), name="fc")])
SETS = {seed1: (16, (("mlp", mlp, (64,)), ("cnn", cnn, (8, 8, 3)))),
        seed2: (32, (((12, 12, 3), 6), ((48,), 5), ((16, 16, 1), 4), ("conv1d_noqin", conv1d, (32, 4))))}
for seed, (n, models) in SETS.items():
    rng = np.random.default_rng(seed)
    for item in models:
        if len(item) == 2:
            rng.random((n, *item[0]), dtype=np.float32)
            rng.integers(0, item[1], n)
            continue
        name, build, shape = item
        keras.backend.clear_session()
        tf.keras.utils.set_random_seed(seed)
        model = build()
        x = rng.random((n, *shape), dtype=np.float32)
        model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        model.fit(x, rng.integers(0, model.output_shape[-1], n), epochs=2, verbose=0)
        y = model.predict(x, verbose=0)
        proto, _ = from_keras(model, f"qkeras_{name}", opset=9)
        onnx.save(proto, os.path.join(out, f"qkeras_{name}.onnx"))
        np.savez_compressed(os.path.join(out, f"qkeras_{name}.npz"), input=x, output=y)
print(json.dumps({p: importlib.metadata.version(p) for p in ("tensorflow-cpu", "QKeras", "qonnx", "tf2onnx")}))
"""


def _build_qkeras(mc) -> None:
    """QKeras through qonnx's Keras converter (class 7, and 1: QDense is MatMul + Add; 3: the
    converter writes Conv1D between Transposes), run in the QKeras venv (``QKERAS_PYTHON``); the
    qonnx executor's oracle comes later, as for the other QONNX files."""
    if not Path(QKERAS_PYTHON).exists():
        raise ImportError(f"no QKeras interpreter at {QKERAS_PYTHON} (set QKERAS_PYTHON)")
    env = dict(os.environ, PYTHONHASHSEED="0", TF_CPP_MIN_LOG_LEVEL="3")
    done = subprocess.run([QKERAS_PYTHON, "-c", _QKERAS_CHILD, str(mc.HERE), str(SEED), str(SET2_SEED)],
                          capture_output=True, text=True, env=env)
    if done.returncode:
        sys.stderr.write(done.stderr[-3000:])
        raise RuntimeError(f"the QKeras export failed ({QKERAS_PYTHON})")
    v = json.loads(done.stdout.strip().splitlines()[-1])
    ver = f"QKeras {v['QKeras']}, qonnx {v['qonnx']}, tf2onnx {v['tf2onnx']}, TensorFlow {v['tensorflow-cpu']}"
    for name, classes, doc in (
            ("mlp", [1, 7], "QDense 64-32-16-10, 4-bit weights and biases (quantized_bits(4, 0, alpha=1)), "
                            "quantized_relu(4); the first QDense reads the float input"),
            ("cnn", [1, 7], "QConv2D 3x3 x2 (4-bit) + quantized_relu(4) + MaxPooling2D on 8x8x3 (NHWC), "
                            "Flatten, QDense 10; the first QConv2D reads the float input"),
            ("conv1d_noqin", [1, 3, 7], "QConv1D k5 (same) + quantized_relu(4), MaxPooling1D, QConv1D k3 stride 2 "
                                        "(same) + quantized_relu(4), Flatten, QDense 3 (4-bit) on 32 frames x 4 (NWC: "
                                        "the converter writes each Conv1D between Transposes); the first QConv1D "
                                        "reads the float input; 32 samples")):
        fname = f"qkeras_{name}.onnx"
        mc.tidy(mc.HERE / fname, tf2onnx=True)
        mc.record(fname, "qonnx-float-input", "quantized", "qonnx.converters.from_keras", ver,
                  "QKeras 0.9 model (trained 2 epochs on random labels) through qonnx's Keras converter, opset=9, "
                  "batch dynamic; no input quantizer", data=f"qkeras_{name}.npz", notes=doc,
                  classes=classes, check=False)


def build_qonnx_conventions(mc):
    import importlib.metadata
    import torch
    import brevitas
    from brevitas.export import export_qonnx
    from brevitas_examples.bnn_pynq.models import CNV as cnv_mod
    from brevitas_examples.bnn_pynq.models.FC import FC
    from qonnx.core.datatype import DataType
    from qonnx.core.modelwrapper import ModelWrapper
    from qonnx.transformation.channels_last import ConvertToChannelsLastAndClean
    from qonnx.transformation.gemm_to_matmul import GemmToMatMul
    from qonnx.util.cleanup import cleanup_model

    bver, qver = brevitas.__version__, importlib.metadata.version("qonnx")
    both = f"brevitas {bver}, qonnx {qver}"
    nets = _brevitas_nets()

    def sample(model, shape, n=16, codes=None):
        """Inputs (uniform [0, 1), or integer ``codes`` (low, high) as float32) and outputs."""
        if codes is None:
            x = torch.rand(n, *shape[1:])
        elif codes == "bipolar":
            x = torch.randint(0, 2, (n, *shape[1:])).float() * 2 - 1
        else:
            x = torch.randint(codes[0], codes[1] + 1, (n, *shape[1:])).float()
        with torch.no_grad():
            return x, model(x)

    def settle(model, shape, codes=None):
        """Training-mode passes so the activation quantizers' statistics are not the initial ones."""
        model.train()
        with torch.no_grad():
            for _ in range(4):
                model(sample(model, shape, 8, codes)[0])
        return model.eval()

    # ---- class 4: hls4ml's documented QONNX preparation, then export
    def chlast(stem, model, shape, notes, input_last=False, classes=(4,)):
        x, y = sample(model, shape)
        raw = mc.HERE / f"{stem}.onnx"
        with mc.quiet():
            export_qonnx(model, torch.rand(*shape), export_path=str(raw))
            m = cleanup_model(ModelWrapper(str(raw)))
            m = m.transform(ConvertToChannelsLastAndClean(make_input_channels_last=input_last))
            m = m.transform(GemmToMatMul())
            m = cleanup_model(m)
        m.save(str(raw))
        mc.tidy(raw)
        xin, yout = x.numpy(), y.numpy()
        if input_last:
            xin = xin.transpose(0, 2, 3, 1)
        if len(m.get_tensor_shape(m.graph.output[0].name)) == 4 and list(
                m.get_tensor_shape(m.graph.output[0].name))[1:] != list(yout.shape[1:]):
            yout = yout.transpose(0, 2, 3, 1)
        data = mc.save_npz(f"{stem}.npz", input=xin, output=yout)
        mc.record(raw.name, "qonnx-chlast", "quantized",
                  "brevitas export_qonnx + qonnx cleanup_model, ConvertToChannelsLastAndClean, GemmToMatMul", both,
                  "export_qonnx default (dynamo), then as hls4ml's QONNX guide prepares a model: cleanup_model, "
                  f"ConvertToChannelsLastAndClean(make_input_channels_last={input_last}), GemmToMatMul, "
                  "cleanup_model; batch fixed 1" + ("; input NHWC (the .npz input too)" if input_last else ""),
                  data=data, notes=notes, classes=list(classes))

    torch.manual_seed(SEED + 40)
    model = settle(nets["Branched"](), (1, 3, 16, 16))
    chlast("qonnx_chlast_branched", model, (1, 3, 16, 16), nets["Branched"].__doc__, classes=(1, 4))
    torch.manual_seed(SEED + 41)
    model = settle(nets["Separable"](), (1, 1, 16, 10))
    chlast("qonnx_chlast_separable", model, (1, 1, 16, 10), nets["Separable"].__doc__, input_last=True,
           classes=(1, 4))
    torch.manual_seed(SEED + 42)
    model = settle(nets["UNet"](), (1, 1, 16, 16))
    chlast("qonnx_chlast_unet", model, (1, 1, 16, 16), nets["UNet"].__doc__)

    # ---- class 5: Brevitas through the TorchScript exporter as PyTorch 1.x ran it
    def old(stem, model, shape, opset, notes):
        x, y = sample(model, shape)
        data = mc.save_npz(f"{stem}.npz", input=x.numpy(), output=y.numpy())
        path = mc.HERE / f"{stem}.onnx"
        with mc.quiet(), torch1_exporter():
            export_qonnx(model, torch.rand(*shape), export_path=str(path), opset_version=opset,
                         **OLD_TORCH_OPTS)
        m = onnx.load(path)
        del m.graph.value_info[:]  # the old exporter wrote no value_info
        onnx.save(m, path)
        mc.tidy(path)
        mc.record(path.name, "brevitas-old", "quantized", "brevitas.export.export_qonnx", f"brevitas {bver}",
                  f"export_qonnx(opset_version={opset}, dynamo=False, keep_initializers_as_inputs=True, "
                  "do_constant_folding=False) with the TorchScript exporter's ONNX shape inference off "
                  "(as before PyTorch 1.8); graph.value_info removed (the old exporter wrote none); batch fixed 1",
                  data=data, notes=notes, classes=[5])

    cnv_mod.CNV_OUT_CH_POOL = [(16, False), (16, True), (32, False), (32, True)]
    cnv_mod.INTERMEDIATE_FC_FEATURES = [(32, 64), (64, 64)]
    cnv_mod.LAST_FC_IN_FEATURES = 64
    torch.manual_seed(SEED + 50)
    model = FC(num_classes=10, weight_bit_width=2, act_bit_width=2, in_bit_width=2, in_channels=1,
               out_features=[64, 64, 64], in_features=(8, 8))
    old("brevitas_old_tfc_w2a2_opset9", mc.randomize_stats(model), (1, 1, 8, 8), 9,
        "brevitas_examples.bnn_pynq FC (TFC) w2a2 on 1x8x8, flatten x.view(x.shape[0], -1)")
    torch.manual_seed(SEED + 51)
    model = cnv_mod.CNV(num_classes=10, weight_bit_width=1, act_bit_width=1, in_bit_width=8, in_ch=3)
    old("brevitas_old_cnv_w1a1_opset11", mc.randomize_stats(model), (1, 3, 16, 16), 11,
        "brevitas_examples.bnn_pynq CNV (shrunk as in the brevitas family) w1a1 on 3x16x16")
    torch.manual_seed(SEED + 52)
    model = settle(nets["QCNN"](), (1, 1, 8, 8))
    old("brevitas_old_qcnn_opset9", model, (1, 1, 8, 8), 9, nets["QCNN"].__doc__)

    # ---- class 6: FINN's datatype annotation on the graph input, no Quant on it
    def annotated(stem, model, shape, dtype, codes, notes):
        x, y = sample(model, shape, codes=codes)
        data = mc.save_npz(f"{stem}.npz", input=x.numpy(), output=y.numpy())
        path = mc.HERE / f"{stem}.onnx"
        with mc.quiet():
            export_qonnx(model, torch.rand(*shape), export_path=str(path))
            m = cleanup_model(ModelWrapper(str(path)))
        m.set_tensor_datatype(m.graph.input[0].name, DataType[dtype])
        m.save(str(path))
        mc.tidy(path)
        mc.record(path.name, "finn-annot", "quantized",
                  "brevitas export_qonnx + qonnx cleanup_model + ModelWrapper.set_tensor_datatype", both,
                  f"export_qonnx default (dynamo), cleanup_model, set_tensor_datatype(input, DataType[{dtype!r}]) "
                  f"(graph.quantization_annotation finn_datatype); the .npz input holds {dtype} codes as float32; "
                  "batch fixed 1", data=data, notes=notes, classes=[6])

    torch.manual_seed(SEED + 60)
    model = settle(nets["MLP"](64, 64, 10, 2, 2), (1, 64), codes="bipolar")
    annotated("finn_annot_tfc_bipolar", model, (1, 64), "BIPOLAR", "bipolar",
              "TFC-like MLP 64-64-64-10, 2-bit weights and activations; the input is +-1 (BIPOLAR). "
              + nets["MLP"].__doc__)
    torch.manual_seed(SEED + 61)
    model = settle(nets["MLP"](32, 24, 5, 4, 4), (1, 32), codes=(-128, 127))
    annotated("finn_annot_mlp_int8", model, (1, 32), "INT8", (-128, 127),
              "MLP 32-24-24-5, 4-bit weights and activations; the input is INT8. " + nets["MLP"].__doc__)
    torch.manual_seed(SEED + 62)
    model = settle(nets["CNN"](3, 8), (1, 3, 8, 8), codes=(0, 255))
    annotated("finn_annot_cnn_uint8", model, (1, 3, 8, 8), "UINT8", (0, 255),
              "CNN on 3x8x8 UINT8 pixels. " + nets["CNN"].__doc__)
    torch.manual_seed(SEED + 63)
    model = settle(nets["CNN"](1, 16), (1, 1, 16, 16), codes=(0, 15))
    annotated("finn_annot_cnn_uint4", model, (1, 1, 16, 16), "UINT4", (0, 15),
              "CNN on 1x16x16 UINT4 pixels. " + nets["CNN"].__doc__)
    torch.manual_seed(SET2_SEED + 22)  # a model of SET2_SEED's set
    model = settle(nets["AnnotCNN"](1, 8), (1, 1, 8, 8), codes="bipolar")
    annotated("finn_annot_cnn_bipolar", model, (1, 1, 8, 8), "BIPOLAR", "bipolar",
              "CNN on 1x8x8 +-1 pixels (BIPOLAR). " + nets["AnnotCNN"].__doc__)

    # ---- class 7: quantized model whose first layer reads the float input
    def float_input(stem, model, shape, notes, clean):
        x, y = sample(model, shape)
        data = mc.save_npz(f"{stem}.npz", input=x.numpy(), output=y.numpy())
        path = mc.HERE / f"{stem}.onnx"
        with mc.quiet():
            export_qonnx(model, torch.rand(*shape), export_path=str(path), dynamo=not clean)
            if clean:
                cleanup_model(ModelWrapper(str(path))).save(str(path))
        mc.tidy(path)
        mc.record(path.name, "qonnx-float-input", "quantized",
                  "brevitas export_qonnx" + (" + qonnx cleanup_model" if clean else ""),
                  both if clean else f"brevitas {bver}",
                  ("export_qonnx(dynamo=False) (TorchScript), cleanup_model" if clean else
                   "export_qonnx default (dynamo), raw") + "; the first layer has no input quantizer; batch fixed 1",
                  data=data, notes=notes, classes=[7])

    torch.manual_seed(SEED + 70)
    model = settle(nets["MLP"](64, 32, 10, 4, 4), (1, 64))
    float_input("qonnx_float_input_mlp", model, (1, 64), "MLP 64-32-32-10, 4-bit. " + nets["MLP"].__doc__, True)
    torch.manual_seed(SEED + 71)
    model = settle(nets["CNN"](3, 16), (1, 3, 16, 16))
    float_input("qonnx_float_input_cnn", model, (1, 3, 16, 16), "CNN on 3x16x16. " + nets["CNN"].__doc__, False)

    try:
        _build_qkeras(mc)
    except (ImportError, RuntimeError) as exc:
        mc.SKIPPED.append({"family": "qkeras", "reason": str(exc)})
        print(f"skipped qkeras: {exc}")
    for p in mc.HERE.glob("*.data"):
        p.unlink()
    mc.qonnx_oracles(QONNX_FAMILIES)


