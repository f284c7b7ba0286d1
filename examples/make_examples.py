"""Train the bundled example models on real data and export them as ONNX.

Data: scikit-learn's bundled digits set (8x8 images, 1,797 samples, no download) and a
synthetic jet-tagging-shaped set (``make_classification``, fixed seed). Everything trains
on a CPU in well under a minute (scikit-learn, plus a small hand-written NumPy backprop
for the CNNs and the quantization-aware QONNX fixtures)::

    .venv/bin/python examples/make_examples.py

Writes, next to this file (see README.md for the list).
"""
from __future__ import annotations

import os
import pathlib
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # tiny matrices: threads only add overhead
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import onnx  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

HERE = pathlib.Path(__file__).resolve().parent
SEED = 0
QONNX_DOMAIN = "qonnx.custom_op.general"


def digits_split():
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32)
    return train_test_split(x, y.astype(np.int64), test_size=0.25, random_state=SEED, stratify=y)


def _finish(graph, name: str, dataset: str, opset: int = 17, extra_opsets=()) -> onnx.ModelProto:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset), *extra_opsets],
                              producer_name="onnx2hw-examples", producer_version="0.1")
    model.ir_version = 8
    helper.set_model_props(model, {"dataset": dataset, "license": "BSD-3-Clause (data)"})
    onnx.checker.check_model(model, full_check=not extra_opsets)
    return model


def mlp_onnx(weights, biases, name: str, in_name="input", out_name="logits",
             dataset="sklearn digits") -> onnx.ModelProto:
    """Gemm(+Relu) chain for sklearn-style weights (W of shape (in, out))."""
    nodes, inits = [], []
    x = in_name
    for i, (w, b) in enumerate(zip(weights, biases)):
        last = i == len(weights) - 1
        wn, bn, y = f"fc{i}.weight", f"fc{i}.bias", (out_name if last else f"fc{i}_out")
        inits += [numpy_helper.from_array(np.ascontiguousarray(w.T, np.float32), wn),
                  numpy_helper.from_array(b.astype(np.float32), bn)]
        nodes.append(helper.make_node("Gemm", [x, wn, bn], [y], name=f"fc{i}", transB=1))
        if not last:
            nodes.append(helper.make_node("Relu", [y], [f"relu{i}_out"], name=f"relu{i}"))
            y = f"relu{i}_out"
        x = y
    n_in, n_out = weights[0].shape[0], weights[-1].shape[1]
    graph = helper.make_graph(
        nodes, name,
        [helper.make_tensor_value_info(in_name, TensorProto.FLOAT, ["N", n_in])],
        [helper.make_tensor_value_info(out_name, TensorProto.FLOAT, ["N", n_out])],
        inits)
    return _finish(graph, name, dataset)


def make_digits_mlp(xtr, ytr, xte, yte):
    from sklearn.neural_network import MLPClassifier

    clf = MLPClassifier(hidden_layer_sizes=(64, 32), activation="relu", max_iter=600,
                        random_state=SEED, alpha=1e-3)
    clf.fit(xtr, ytr)
    print(f"digits_mlp: float test accuracy {clf.score(xte, yte):.4f}")
    model = mlp_onnx(clf.coefs_, clf.intercepts_, "digits_mlp")
    onnx.save(model, HERE / "digits_mlp.onnx")


def make_jet_mlp():
    """Jet-tagging-shaped MLP 16-64-32-32-5 on synthetic data (hls4ml benchmark shape)."""
    import warnings

    from sklearn.datasets import make_classification
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.model_selection import train_test_split
    from sklearn.neural_network import MLPClassifier

    x, y = make_classification(n_samples=4000, n_features=16, n_informative=10, n_redundant=4,
                               n_classes=5, n_clusters_per_class=2, class_sep=1.5, random_state=SEED)
    x = x.astype(np.float32)
    xtr, xte, ytr, yte = train_test_split(x, y.astype(np.int64), test_size=0.25,
                                          random_state=SEED, stratify=y)
    clf = MLPClassifier(hidden_layer_sizes=(64, 32, 32), activation="relu", max_iter=150,
                        random_state=SEED, alpha=1e-3)
    with warnings.catch_warnings():  # 150 epochs are enough here; no need to converge fully
        warnings.simplefilter("ignore", ConvergenceWarning)
        clf.fit(xtr, ytr)
    print(f"jet_mlp: float test accuracy {clf.score(xte, yte):.4f}")
    onnx.save(mlp_onnx(clf.coefs_, clf.intercepts_, "jet_mlp", dataset="synthetic (make_classification)"),
              HERE / "jet_mlp.onnx")
    rng = np.random.default_rng(SEED)
    np.savez(HERE / "jet_calib.npz", input=xtr[rng.choice(len(xtr), 500, replace=False)])
    np.savez(HERE / "jet_test.npz", input=xte, label=yte)


# --------------------------------------------------------------------------------------
# A small NumPy backprop (NCHW, 3x3 'same' convs via im2col) for the digits CNNs.

def _im2col(x):
    """(N, C, H, W) -> (N*H*W, C*9) for a 3x3 kernel, stride 1, pad 1."""
    n, c, h, w = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    win = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))  # N,C,H,W,3,3
    return win.transpose(0, 2, 3, 1, 4, 5).reshape(n * h * w, c * 9)


def _col2im(dcols, shape):
    n, c, h, w = shape
    d = dcols.reshape(n, h, w, c, 3, 3)
    dxp = np.zeros((n, c, h + 2, w + 2), dcols.dtype)
    for i in range(3):
        for j in range(3):
            dxp[:, :, i:i + h, j:j + w] += d[:, :, :, :, i, j].transpose(0, 3, 1, 2)
    return dxp[:, :, 1:-1, 1:-1]


def conv_fwd(x, w, b):
    n, _, h, wd = x.shape
    cols = _im2col(x)
    y = cols @ w.reshape(w.shape[0], -1).T + b
    return y.reshape(n, h, wd, -1).transpose(0, 3, 1, 2), cols


def conv_bwd(dy, cols, w, xshape):
    d2 = dy.transpose(0, 2, 3, 1).reshape(-1, w.shape[0])
    dw = (d2.T @ cols).reshape(w.shape)
    db = d2.sum(0)
    dx = _col2im(d2 @ w.reshape(w.shape[0], -1), xshape)
    return dx, dw, db


def pool_fwd(x):
    n, c, h, w = x.shape
    r = x.reshape(n, c, h // 2, 2, w // 2, 2).transpose(0, 1, 2, 4, 3, 5).reshape(n, c, h // 2, w // 2, 4)
    arg = r.argmax(-1)
    return np.take_along_axis(r, arg[..., None], -1)[..., 0], arg


def pool_bwd(dy, arg, xshape):
    n, c, h, w = xshape
    d = np.zeros((n, c, h // 2, w // 2, 4), dy.dtype)
    np.put_along_axis(d, arg[..., None], dy[..., None], -1)
    return d.reshape(n, c, h // 2, w // 2, 2, 2).transpose(0, 1, 2, 4, 3, 5).reshape(xshape)


def softmax_xent(logits, y):
    z = logits - logits.max(1, keepdims=True)
    p = np.exp(z)
    p /= p.sum(1, keepdims=True)
    loss = -np.log(p[np.arange(len(y)), y] + 1e-12).mean()
    p[np.arange(len(y)), y] -= 1
    return loss, p / len(y)


class Adam:
    def __init__(self, params, lr=3e-3, b1=0.9, b2=0.999):
        self.p, self.lr, self.b1, self.b2, self.t = params, lr, b1, b2, 0
        self.m = {k: np.zeros_like(v) for k, v in params.items()}
        self.v = {k: np.zeros_like(v) for k, v in params.items()}

    def step(self, grads):
        self.t += 1
        for k, g in grads.items():
            self.m[k] = self.b1 * self.m[k] + (1 - self.b1) * g
            self.v[k] = self.b2 * self.v[k] + (1 - self.b2) * g * g
            mh = self.m[k] / (1 - self.b1 ** self.t)
            vh = self.v[k] / (1 - self.b2 ** self.t)
            self.p[k] -= self.lr * mh / (np.sqrt(vh) + 1e-8)


def _he(rng, shape, fan_in):
    return (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float64)


def cnn_init(rng, residual: bool):
    p = {"c1.w": _he(rng, (8, 1, 3, 3), 9), "c1.b": np.zeros(8),
         "c2.w": _he(rng, (16, 8, 3, 3), 72), "c2.b": np.zeros(16),
         "fc.w": _he(rng, (10, 16), 16), "fc.b": np.zeros(10)}
    if residual:
        p["r.w"] = _he(rng, (8, 8, 3, 3), 72) * 0.5
        p["r.b"] = np.zeros(8)
    return p


def cnn_forward(p, x, residual: bool):
    """Returns logits and the cache for backprop. x: (N, 1, 8, 8)."""
    c = {}
    a1, c["cols1"] = conv_fwd(x, p["c1.w"], p["c1.b"])
    r1 = np.maximum(a1, 0)
    m1, c["arg1"] = pool_fwd(r1)
    c.update(a1=a1, r1=r1, m1=m1)
    h = m1
    if residual:
        ar, c["colsr"] = conv_fwd(m1, p["r.w"], p["r.b"])
        s = ar + m1
        h = np.maximum(s, 0)
        c["s"] = s
    c["h"] = h
    a2, c["cols2"] = conv_fwd(h, p["c2.w"], p["c2.b"])
    r2 = np.maximum(a2, 0)
    g = r2.mean((2, 3))
    c.update(a2=a2, g=g)
    return g @ p["fc.w"].T + p["fc.b"], c


def cnn_backward(p, x, c, dlogits, residual: bool):
    gr = {"fc.w": dlogits.T @ c["g"], "fc.b": dlogits.sum(0)}
    dg = dlogits @ p["fc.w"]
    dr2 = np.broadcast_to(dg[:, :, None, None] / 16.0, c["a2"].shape) * (c["a2"] > 0)
    dh, gr["c2.w"], gr["c2.b"] = conv_bwd(dr2, c["cols2"], p["c2.w"], c["h"].shape)
    if residual:
        ds = dh * (c["s"] > 0)
        dm1, gr["r.w"], gr["r.b"] = conv_bwd(ds, c["colsr"], p["r.w"], c["m1"].shape)
        dm1 = dm1 + ds
    else:
        dm1 = dh
    dr1 = pool_bwd(dm1, c["arg1"], c["r1"].shape) * (c["a1"] > 0)
    _, gr["c1.w"], gr["c1.b"] = conv_bwd(dr1, c["cols1"], p["c1.w"], x.shape)
    return gr


def train_cnn(xtr, ytr, xte, yte, residual: bool, epochs=40, batch=32):
    rng = np.random.default_rng(SEED + int(residual))
    p = cnn_init(rng, residual)
    p = {k: v.astype(np.float32) for k, v in p.items()}
    opt = Adam(p, lr=3e-3)
    xtr4 = xtr.reshape(-1, 1, 8, 8).astype(np.float32)
    for epoch in range(epochs):
        if epoch == int(epochs * 0.75):
            opt.lr = 1e-3
        order = rng.permutation(len(xtr4))
        for i in range(0, len(order), batch):
            idx = order[i:i + batch]
            logits, cache = cnn_forward(p, xtr4[idx], residual)
            _, dl = softmax_xent(logits, ytr[idx])
            opt.step(cnn_backward(p, xtr4[idx], cache, dl, residual))
    logits, _ = cnn_forward(p, xte.reshape(-1, 1, 8, 8).astype(np.float64), residual)
    return p, float((logits.argmax(1) == yte).mean())


def cnn_onnx(p, name: str, residual: bool) -> onnx.ModelProto:
    f32 = lambda a, n: numpy_helper.from_array(np.asarray(a, np.float32), n)  # noqa: E731
    inits = [f32(p[k], k) for k in sorted(p)]
    conv = lambda x, w, y, n: helper.make_node(  # noqa: E731
        "Conv", [x, w + ".w", w + ".b"], [y], name=n, kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    nodes = [conv("image", "c1", "conv1_out", "conv1"),
             helper.make_node("Relu", ["conv1_out"], ["relu1_out"], name="relu1"),
             helper.make_node("MaxPool", ["relu1_out"], ["pool1_out"], name="pool1",
                              kernel_shape=[2, 2], strides=[2, 2])]
    h = "pool1_out"
    if residual:
        nodes += [conv("pool1_out", "r", "res_conv_out", "res_conv"),
                  helper.make_node("Add", ["res_conv_out", "pool1_out"], ["res_add_out"], name="res_add"),
                  helper.make_node("Relu", ["res_add_out"], ["res_relu_out"], name="res_relu")]
        h = "res_relu_out"
    nodes += [conv(h, "c2", "conv2_out", "conv2"),
              helper.make_node("Relu", ["conv2_out"], ["relu2_out"], name="relu2"),
              helper.make_node("GlobalAveragePool", ["relu2_out"], ["gap_out"], name="gap"),
              helper.make_node("Flatten", ["gap_out"], ["flat_out"], name="flatten"),
              helper.make_node("Gemm", ["flat_out", "fc.w", "fc.b"], ["logits"], name="fc", transB=1)]
    graph = helper.make_graph(
        nodes, name, [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["N", 1, 8, 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10])], inits)
    return _finish(graph, name, "sklearn digits")


def make_digits_cnns(xtr, ytr, xte, yte):
    for residual, name in ((False, "digits_cnn"), (True, "digits_cnn_res")):
        p, acc = train_cnn(xtr, ytr, xte, yte, residual)
        print(f"{name}: float test accuracy {acc:.4f}")
        onnx.save(cnn_onnx(p, name, residual), HERE / f"{name}.onnx")


# --------------------------------------------------------------------------------------
# Hand-built QONNX fixtures: a digits MLP 64-64-32-10 trained with quantization-aware
# fine-tuning (straight-through estimator) so that 2- and 4-bit weights/activations
# still classify; exported with QONNX ``Quant`` nodes on weights and activations.

def _fake_quant(x, scale, bits, signed, narrow):
    lo = -(1 << (bits - 1)) + int(narrow) if signed else 0
    hi = (1 << (bits - 1)) - 1 if signed else (1 << bits) - 1
    q = np.clip(np.round(x / scale), lo, hi)  # np.round: half to even = QONNX "ROUND"
    return q * scale, (x / scale >= lo - 0.5) & (x / scale <= hi + 0.5)


def _wscale(w, bits):
    """Per-output-channel symmetric scale for W of shape (out, in), narrow range."""
    qmax = (1 << (bits - 1)) - 1
    return np.maximum(np.abs(w).max(1, keepdims=True), 1e-8) / qmax


def train_qmlp(xtr, ytr, xte, yte, bits, epochs=40, batch=32):
    """Float pre-training then QAT with fake-quantized weights and activations."""
    rng = np.random.default_rng(SEED + bits)
    sizes = (64, 64, 32, 10)
    p = {}
    for i in range(3):
        p[f"fc{i}.w"] = _he(rng, (sizes[i + 1], sizes[i]), sizes[i])
        p[f"fc{i}.b"] = np.zeros(sizes[i + 1])
    ascale = [None, None]
    in_scale = 1.0 / 16.0  # digits pixels are k/16, k = 0..16: exact in 8 unsigned bits
    abits = bits

    def forward(x, quant):
        cache, h = [], x
        for i in range(3):
            w = p[f"fc{i}.w"]
            wq, _ = _fake_quant(w, _wscale(w, bits), bits, True, True) if quant else (w, None)
            a = h @ wq.T + p[f"fc{i}.b"]
            if i < 2:
                r = np.maximum(a, 0)
                mask = a > 0
                if quant:
                    r, inr = _fake_quant(r, ascale[i], abits, False, False)
                    mask = mask & inr
                cache.append((h, wq, mask))
                h = r
            else:
                cache.append((h, wq, None))
                h = a
        return h, cache

    def backward(cache, dl):
        g = {}
        for i in reversed(range(3)):
            h, wq, mask = cache[i]
            if mask is not None:
                dl = dl * mask
            g[f"fc{i}.w"], g[f"fc{i}.b"] = dl.T @ h, dl.sum(0)
            dl = dl @ wq
        return g

    opt = Adam(p, lr=3e-3)
    for phase, n_ep in (("float", epochs // 2), ("qat", epochs)):
        quant = phase == "qat"
        if quant:
            # activation scales from the float model's 99.9th percentile (then fixed)
            _, cache = forward(xtr, False)
            for i in range(2):
                a = np.maximum(cache[i + 1][0], 0)
                ascale[i] = float(np.percentile(a[a > 0], 99.9)) / ((1 << abits) - 1)
            opt = Adam(p, lr=1e-3)
        for epoch in range(n_ep):
            order = rng.permutation(len(xtr))
            for j in range(0, len(order), batch):
                idx = order[j:j + batch]
                logits, cache = forward(xtr[idx], quant)
                _, dl = softmax_xent(logits, ytr[idx])
                opt.step(backward(cache, dl))
    logits, _ = forward(xte, True)
    out_scale = float(np.abs(forward(xtr, True)[0]).max()) / 127.0
    return p, ascale, in_scale, out_scale, float((logits.argmax(1) == yte).mean())


def qonnx_mlp(p, ascale, in_scale, out_scale, bits, name) -> onnx.ModelProto:
    """QONNX graph: Quant(input, 8b unsigned) -> [Gemm(Quant(W)) -> Relu -> Quant(act)]* -> Quant(logits)."""
    nodes, inits = [], []
    f32 = lambda a, n: inits.append(numpy_helper.from_array(np.asarray(a, np.float32), n))  # noqa: E731

    def quant(x, y, scale, nbits, signed, narrow, nm):
        f32(scale, nm + ".scale")
        f32(np.zeros_like(np.asarray(scale, np.float32)), nm + ".zeropt")
        f32(float(nbits), nm + ".bitwidth")
        nodes.append(helper.make_node("Quant", [x, nm + ".scale", nm + ".zeropt", nm + ".bitwidth"], [y],
                                      name=nm, domain=QONNX_DOMAIN, signed=int(signed),
                                      narrow=int(narrow), rounding_mode="ROUND"))

    quant("input", "input_q", in_scale, 8, False, False, "input_quant")
    x = "input_q"
    for i in range(3):
        w = np.asarray(p[f"fc{i}.w"], np.float32)
        f32(w, f"fc{i}.weight")
        quant(f"fc{i}.weight", f"fc{i}.weight_q", _wscale(w, bits).astype(np.float32), bits, True, True,
              f"fc{i}.weight_quant")
        f32(p[f"fc{i}.b"], f"fc{i}.bias")
        y = f"fc{i}_out"
        nodes.append(helper.make_node("Gemm", [x, f"fc{i}.weight_q", f"fc{i}.bias"], [y], name=f"fc{i}", transB=1))
        if i < 2:
            nodes.append(helper.make_node("Relu", [y], [f"relu{i}_out"], name=f"relu{i}"))
            quant(f"relu{i}_out", f"act{i}_q", ascale[i], bits, False, False, f"act{i}_quant")
            x = f"act{i}_q"
        else:
            quant(y, "logits", out_scale, 8, True, False, "logits_quant")
    graph = helper.make_graph(
        nodes, name, [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 64])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10])], inits)
    return _finish(graph, name, "sklearn digits", extra_opsets=[helper.make_opsetid(QONNX_DOMAIN, 1)])


def make_qonnx(xtr, ytr, xte, yte):
    for bits in (4, 2):
        p, ascale, in_scale, out_scale, acc = train_qmlp(xtr, ytr, xte, yte, bits)
        name = f"digits_mlp_qonnx_w{bits}a{bits}"
        print(f"{name}: quantized test accuracy {acc:.4f}")
        onnx.save(qonnx_mlp(p, ascale, in_scale, out_scale, bits, name), HERE / f"{name}.onnx")


def make_qdq():
    """The committed outputs of ``onnx2hw quantize`` for the digits models."""
    from onnx2hw.quant.ptq import quantize

    for model, calib in (("digits_mlp", "digits_calib"), ("digits_cnn", "digits_img_calib"),
                         ("digits_cnn_res", "digits_img_calib")):
        feeds = dict(np.load(HERE / f"{calib}.npz"))
        for tag, wbits in (("int8", 8), ("w4a8", 4)):
            q = quantize(str(HERE / f"{model}.onnx"), feeds, weight_bits=wbits, act_bits=8,
                         per_channel=True)
            onnx.save(q, HERE / f"{model}_{tag}.onnx")


def main():
    t0 = time.perf_counter()
    xtr, xte, ytr, yte = digits_split()
    rng = np.random.default_rng(SEED)
    calib = xtr[rng.choice(len(xtr), 200, replace=False)]
    np.savez(HERE / "digits_calib.npz", input=calib)
    np.savez(HERE / "digits_test.npz", input=xte, label=yte)
    np.savez(HERE / "digits_img_calib.npz", image=calib.reshape(-1, 1, 8, 8))
    np.savez(HERE / "digits_img_test.npz", image=xte.reshape(-1, 1, 8, 8), label=yte)
    make_digits_mlp(xtr, ytr, xte, yte)
    make_digits_cnns(xtr, ytr, xte, yte)
    make_jet_mlp()
    make_qonnx(xtr, ytr, xte, yte)
    make_qdq()
    print(f"done in {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
