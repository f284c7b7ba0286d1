"""Write the four MLPerf Tiny reference networks as float ONNX, the way a Keras user has them.

Run in the exporters' virtual environment (TensorFlow + Keras 3 + tf2onnx), never the project's .venv:

    /work/exporters-venv/bin/python benchmarks/mlperf_tiny/make_models.py

For each network (AD, KWS, IC, VWW; topologies in README.md) it writes next to this file:

- ``<name>.onnx``: the Keras model exported by tf2onnx (opset 13, batch dynamic, channels last
  as Keras has them, the Softmax head kept);
- ``<name>.npz``: ``input`` (64 samples of plausible inputs, float32: the calibration data, as
  ``onnx2hw synth --calib`` takes it);
- ``<name>_keras.npz``: ``output`` (the Keras model's outputs for them);

and ``manifest.json`` (shapes, Keras parameter counts, how the inputs were drawn, SHA-256 of
every file). Weights are random (He-normal, seeded), biases small and random; every
BatchNormalization gets a random gain and offset and the mean and variance of its own input
over the 64 samples (computed layer by layer in order), so activations stay near unit range as
in a trained network. Seeds are fixed and files are written byte-for-byte deterministically
(.npz members carry a fixed timestamp). ``make test`` never needs these exporters.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import sys
import warnings
import zipfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
SEED = 13
N = 64

sys.path.insert(0, str(ROOT))
from corpus.make_corpus import quiet, tidy  # noqa: E402  (repeatable tf2onnx names, quiet exporters)


# --------------------------------------------------------------------------------------------
# the reference topologies (Keras functional API; see README.md for the sources)

def ad_autoencoder(keras):
    """AD: ToyADMOS FC autoencoder, 640 -> 4 x (Dense 128, BN, ReLU) -> (Dense 8, BN, ReLU)
    -> 4 x (Dense 128, BN, ReLU) -> Dense 640 (linear)."""
    L = keras.layers
    inp = keras.Input((640,), name="input")
    h = inp
    for units in (128, 128, 128, 128, 8, 128, 128, 128, 128):
        h = L.Activation("relu")(L.BatchNormalization()(L.Dense(units)(h)))
    return keras.Model(inp, L.Dense(640)(h), name="ad_autoencoder")


def kws_dscnn(keras):
    """KWS: DS-CNN (small) on 49x10 MFCC: Conv2D 64 (10x4, stride 2, same), BN, ReLU, Dropout 0.2;
    4 x (DepthwiseConv2D 3x3 same, BN, ReLU, Conv2D 64 1x1, BN, ReLU); Dropout 0.4;
    AveragePooling2D (24, 5) (int(49/2), int(10/2)) on the 25x5 map; Flatten; Dense 12 softmax."""
    L = keras.layers
    inp = keras.Input((49, 10, 1), name="input")
    h = L.Conv2D(64, (10, 4), strides=(2, 2), padding="same", kernel_regularizer=keras.regularizers.l2(1e-4))(inp)
    h = L.Dropout(0.2)(L.Activation("relu")(L.BatchNormalization()(h)))
    for _ in range(4):
        h = L.Activation("relu")(L.BatchNormalization()(L.DepthwiseConv2D((3, 3), padding="same")(h)))
        h = L.Activation("relu")(L.BatchNormalization()(L.Conv2D(64, (1, 1), padding="same")(h)))
    h = L.AveragePooling2D(pool_size=(24, 5))(L.Dropout(0.4)(h))
    return keras.Model(inp, L.Dense(12, activation="softmax")(L.Flatten()(h)), name="kws_dscnn")


def ic_resnet8(keras):
    """IC: ResNet-8 (EEMBC resnet_v1, 16 filters) on 32x32x3: Conv2D 16 3x3, BN, ReLU; three stacks
    of (Conv 3x3 [stride 2 from the second], BN, ReLU, Conv 3x3, BN) + shortcut (identity, or a 1x1
    stride-2 Conv without BN), Add, ReLU, with 16, 32, 64 filters; AveragePooling2D 8; Flatten;
    Dense 10 softmax."""
    L = keras.layers

    def conv(f, k, s):
        return L.Conv2D(f, k, strides=s, padding="same", kernel_regularizer=keras.regularizers.l2(1e-4))

    inp = keras.Input((32, 32, 3), name="input")
    x = L.Activation("relu")(L.BatchNormalization()(conv(16, 3, 1)(inp)))
    for filters, stride in ((16, 1), (32, 2), (64, 2)):
        y = L.Activation("relu")(L.BatchNormalization()(conv(filters, 3, stride)(x)))
        y = L.BatchNormalization()(conv(filters, 3, 1)(y))
        if stride != 1:
            x = conv(filters, 1, stride)(x)
        x = L.Activation("relu")(L.Add()([x, y]))
    x = L.Flatten()(L.AveragePooling2D(pool_size=8)(x))
    return keras.Model(inp, L.Dense(10, activation="softmax")(x), name="ic_resnet8")


def vww_mobilenet(keras):
    """VWW: MobileNetV1 alpha=0.25 on 96x96x3: Conv2D 8 3x3 stride 2, BN, ReLU; 13 x (DepthwiseConv2D
    3x3, BN, ReLU, Conv2D 1x1, BN, ReLU) with 16, 32/s2, 32, 64/s2, 64, 128/s2, 5 x 128, 256/s2, 256
    filters; AveragePooling2D 3; Flatten; Dense 2 softmax."""
    L = keras.layers

    def bn_relu(t):
        return L.Activation("relu")(L.BatchNormalization()(t))

    reg = keras.regularizers.l2(1e-4)
    inp = keras.Input((96, 96, 3), name="input")
    x = bn_relu(L.Conv2D(8, 3, strides=2, padding="same", kernel_regularizer=reg)(inp))
    for filters, stride in ((16, 1), (32, 2), (32, 1), (64, 2), (64, 1), (128, 2), (128, 1), (128, 1),
                            (128, 1), (128, 1), (128, 1), (256, 2), (256, 1)):
        x = bn_relu(L.DepthwiseConv2D(3, strides=stride, padding="same", depthwise_regularizer=reg)(x))
        x = bn_relu(L.Conv2D(filters, 1, padding="same", kernel_regularizer=reg)(x))
    x = L.Flatten()(L.AveragePooling2D(pool_size=3)(x))
    return keras.Model(inp, L.Dense(2, activation="softmax")(x), name="vww_mobilenet")


# --------------------------------------------------------------------------------------------
# plausible inputs (what the reference front ends produce), 64 samples each

def ad_inputs(rng):
    """5 frames x 128 log-mel bands in dB (the reference's 640 features): a spectral tilt from
    about +10 dB (low bands) to -20 dB (high bands) plus a per-sample level and noise."""
    tilt = np.linspace(10.0, -20.0, 128)
    level = rng.normal(0.0, 4.0, (N, 1, 1))
    frames = tilt[None, None, :] + level + rng.normal(0.0, 3.0, (N, 5, 128))
    return frames.reshape(N, 640).astype(np.float32)


def kws_inputs(rng):
    """49 frames x 10 MFCCs: coefficient 0 (log energy) around -60 (range about -120..-10), the
    others zero-mean with spread falling from about 15 to 5, smooth over time."""
    spread = np.linspace(15.0, 5.0, 9)
    c0 = rng.normal(-60.0, 20.0, (N, 1, 1)) + rng.normal(0.0, 8.0, (N, 49, 1))
    rest = rng.normal(0.0, 1.0, (N, 49, 9)) * spread
    rest = 0.5 * rest + 0.5 * np.roll(rest, 1, axis=1)  # neighbouring frames correlate
    return np.concatenate([c0, rest], axis=2)[..., None].astype(np.float32)


def images(rng, size, block):
    """8-bit images scaled to [0, 1] as the references feed them (pixel / 255): random colour
    blocks of ``block`` pixels, smoothed, plus a little pixel noise."""
    coarse = rng.random((N, size // block, size // block, 3))
    img = np.repeat(np.repeat(coarse, block, axis=1), block, axis=2)
    img = (img + np.roll(img, 1, axis=1) + np.roll(img, 1, axis=2) + np.roll(img, (1, 1), axis=(1, 2))) / 4
    pixels = np.clip(np.round(255 * img + rng.normal(0.0, 2.0, img.shape)), 0, 255)
    return (pixels / 255).astype(np.float32)


NETWORKS = {
    "ad_autoencoder": (ad_autoencoder, ad_inputs, "AD", "ToyADMOS ToyCar anomaly detection"),
    "kws_dscnn": (kws_dscnn, kws_inputs, "KWS", "Speech Commands keyword spotting, 12 classes"),
    "ic_resnet8": (ic_resnet8, lambda rng: images(rng, 32, 4), "IC", "CIFAR-10 image classification"),
    "vww_mobilenet": (vww_mobilenet, lambda rng: images(rng, 96, 8), "VWW", "Visual Wake Words, person / no person"),
}


# --------------------------------------------------------------------------------------------
# weights

def randomize(keras, model, x, rng) -> None:
    """He-normal kernels, small random biases, then every BatchNormalization (in layer order, so each
    sees its predecessors' final weights) set to a random gain/offset and its input's statistics."""
    L = keras.layers
    for layer in model.layers:
        if isinstance(layer, (L.Conv2D, L.DepthwiseConv2D, L.Dense)):
            w = layer.get_weights()
            k = w[0]
            fan_in = k.shape[0] * k.shape[1] if isinstance(layer, L.DepthwiseConv2D) else int(np.prod(k.shape[:-1]))
            w[0] = rng.normal(0.0, np.sqrt(2.0 / fan_in), k.shape).astype(np.float32)
            if len(w) > 1:
                w[1] = rng.normal(0.0, 0.05, w[1].shape).astype(np.float32)
            layer.set_weights(w)
    for layer in model.layers:
        if isinstance(layer, L.BatchNormalization):
            t = keras.Model(model.inputs, layer.input)([x], training=False).numpy()
            axes = tuple(range(t.ndim - 1))
            c = t.shape[-1]
            layer.set_weights([rng.uniform(0.6, 1.4, c).astype(np.float32),
                               rng.uniform(-0.2, 0.5, c).astype(np.float32),
                               t.mean(axis=axes).astype(np.float32), t.var(axis=axes).astype(np.float32)])


# --------------------------------------------------------------------------------------------
# files

def save_npz(path: Path, **arrays) -> None:
    """np.savez_compressed with a fixed member timestamp (byte-for-byte repeatable)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name, a in arrays.items():
            member = io.BytesIO()
            np.lib.format.write_array(member, np.ascontiguousarray(a), allow_pickle=False)
            info = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            z.writestr(info, member.getvalue())
    path.write_bytes(buf.getvalue())


def canonical(path: Path) -> None:
    """What tidy() leaves run-dependent in these graphs: the dynamic batch dimension is named from a
    global counter (``unk__365``, another number the next run): call it ``batch``; and the nodes of
    parallel branches (a residual's shortcut and body) come in either order: sort the nodes
    topologically, ready nodes by name."""
    import heapq

    import onnx
    model = onnx.load(path)
    nodes = list(model.graph.node)
    made = {o: k for k, n in enumerate(nodes) for o in n.output}
    deps = [{made[i] for i in n.input if i in made} for n in nodes]
    users: dict[int, list[int]] = {}
    for k, d in enumerate(deps):
        for j in d:
            users.setdefault(j, []).append(k)
    waiting = [len(d) for d in deps]
    ready = [(n.name, k) for k, n in enumerate(nodes) if not deps[k]]
    heapq.heapify(ready)
    order = []
    while ready:
        _, k = heapq.heappop(ready)
        order.append(nodes[k])
        for u in users.get(k, []):
            waiting[u] -= 1
            if not waiting[u]:
                heapq.heappush(ready, (nodes[u].name, u))
    assert len(order) == len(nodes)
    del model.graph.node[:]
    model.graph.node.extend(order)
    for v in list(model.graph.input) + list(model.graph.output) + list(model.graph.value_info):
        for d in v.type.tensor_type.shape.dim:
            if d.HasField("dim_param") and d.dim_param.startswith("unk__"):
                d.dim_param = "batch"
    path.write_bytes(model.SerializeToString(deterministic=True))


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def main() -> int:
    if os.environ.get("PYTHONHASHSEED") != "0":
        # tf2onnx's graph rewrites iterate over sets of names: fix the hash seed so that a
        # second run writes the same graphs (another seed can fold a different set of constants)
        os.environ["PYTHONHASHSEED"] = "0"
        os.execv(sys.executable, [sys.executable, *sys.argv])
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    os.environ["TF_ENABLE_ONEDNN_OPTS"] = "0"  # oneDNN's threaded kernels round differently from run to run
    import keras
    import tensorflow as tf
    import tf2onnx

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)

    warnings.filterwarnings("ignore", message="The structure of `inputs`")  # Keras 3 input naming chatter
    tf.config.experimental.enable_op_determinism()
    versions = f"tf2onnx {tf2onnx.__version__} (TensorFlow {tf.__version__}, Keras {keras.__version__})"
    print(versions)
    entries = []
    for k, (name, (build, draw, task, what)) in enumerate(NETWORKS.items()):
        keras.utils.set_random_seed(SEED + k)
        rng = np.random.default_rng(SEED + k)
        model = build(keras)
        x = draw(rng)
        randomize(keras, model, x, rng)
        y = model([x], training=False).numpy()
        save_npz(HERE / f"{name}.npz", input=x)
        save_npz(HERE / f"{name}_keras.npz", output=y)
        spec = (tf.TensorSpec((None, *x.shape[1:]), tf.float32, name="input"),)

        @tf.function(input_signature=spec)
        def fn(inp, model=model):
            return {"output": model(inp, training=False)}

        path = HERE / f"{name}.onnx"
        with quiet():  # Keras 3 models go through tf.function (from_keras needs tf_keras)
            tf2onnx.convert.from_function(fn, input_signature=spec, opset=13, output_path=str(path))
        tidy(path, tf2onnx=True)
        canonical(path)
        params = int(model.count_params())
        trainable = int(sum(int(np.prod(w.shape)) for w in model.trainable_weights))
        entries.append({"name": name, "task": task, "what": what, "file": path.name, "data": f"{name}.npz",
                        "keras_outputs": f"{name}_keras.npz",
                        "input_shape": list(x.shape[1:]), "output_shape": list(y.shape[1:]),
                        "keras_params": params, "keras_trainable_params": trainable,
                        "inputs": " ".join(draw.__doc__.split()) if draw.__doc__ else
                        " ".join(images.__doc__.split()),
                        "topology": " ".join(build.__doc__.split()),
                        "onnx_sha256": sha256(path), "npz_sha256": sha256(HERE / f"{name}.npz"),
                        "keras_npz_sha256": sha256(HERE / f"{name}_keras.npz"),
                        "onnx_bytes": path.stat().st_size})
        print(f"{name:16} {task:4} params {params:>7,} (trainable {trainable:,}) "
              f"{path.stat().st_size / 1e3:7.1f} kB onnx, input {list(x.shape[1:])} "
              f"range [{x.min():.2f}, {x.max():.2f}], output {list(y.shape[1:])}")
    manifest = {"generator": "benchmarks/mlperf_tiny/make_models.py", "exporter": versions,
                "exporter_call": "tf2onnx.convert.from_function on a tf.function calling the Keras 3 model, "
                                 "opset=13, batch dynamic", "seed": SEED, "samples": N, "networks": entries}
    (HERE / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
