"""Train the bundled example models on real data and export them as float ONNX.

Data: scikit-learn's bundled digits set (8x8 images, 1,797 samples, no download).
Runs on a CPU in seconds:  ``.venv/bin/python examples/make_examples.py``

Writes, next to this file:
- ``digits_mlp.onnx``   — MLP 64-64-32-10 (Gemm/Relu), input ``input`` [N, 64] in [0, 1]
- ``digits_calib.npz``  — 200 training images keyed by the model's input name (calibration)
- ``digits_test.npz``   — the held-out test split: ``input`` [n, 64] float32, ``label`` [n] int64
"""
from __future__ import annotations

import pathlib

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = pathlib.Path(__file__).resolve().parent
SEED = 0


def digits_split():
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32)
    return train_test_split(x, y.astype(np.int64), test_size=0.25, random_state=SEED, stratify=y)


def mlp_onnx(weights, biases, name: str, in_name="input", out_name="logits") -> onnx.ModelProto:
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
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              producer_name="onnx2hw-examples", producer_version="0.1")
    model.ir_version = 8
    helper.set_model_props(model, {"dataset": "sklearn digits", "license": "BSD-3-Clause (data)"})
    onnx.checker.check_model(model, full_check=True)
    return model


def make_digits_mlp(xtr, ytr, xte, yte):
    from sklearn.neural_network import MLPClassifier

    clf = MLPClassifier(hidden_layer_sizes=(64, 32), activation="relu", max_iter=600,
                        random_state=SEED, alpha=1e-3)
    clf.fit(xtr, ytr)
    print(f"digits_mlp: float test accuracy {clf.score(xte, yte):.4f}")
    model = mlp_onnx(clf.coefs_, clf.intercepts_, "digits_mlp")
    onnx.save(model, HERE / "digits_mlp.onnx")


def main():
    xtr, xte, ytr, yte = digits_split()
    make_digits_mlp(xtr, ytr, xte, yte)
    rng = np.random.default_rng(SEED)
    np.savez(HERE / "digits_calib.npz", input=xtr[rng.choice(len(xtr), 200, replace=False)])
    np.savez(HERE / "digits_test.npz", input=xte, label=yte)


if __name__ == "__main__":
    main()
