"""Optional: train a 4-bit Brevitas MLP on the digits set and export it to QONNX.

Needs PyTorch (CPU) and Brevitas, which the project does not depend on::

    pip install torch==2.13.0 brevitas      # the CPU build of torch
    python examples/brevitas_export.py

Writes ``digits_mlp_brevitas_w4a4.onnx`` next to this file: a 64-64-32-10 MLP with 4-bit
per-channel weights, 4-bit unsigned ReLU activations and an 8-bit input quantizer, trained with
quantization-aware training (a few seconds on a CPU) and exported with
``brevitas.export.export_qonnx`` (QONNX ``Quant`` nodes, domain ``qonnx.custom_op.general``).
"""
from __future__ import annotations

import pathlib

import numpy as np
import torch
from brevitas import nn as qnn
from brevitas.export import export_qonnx
from brevitas.quant import Int8ActPerTensorFloat, Uint8ActPerTensorFloat

HERE = pathlib.Path(__file__).resolve().parent
SEED = 0


def digits_split():
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32)
    return train_test_split(x, y.astype(np.int64), test_size=0.25, random_state=SEED, stratify=y)


class QuantMLP(torch.nn.Module):
    def __init__(self, bits: int = 4):
        super().__init__()
        self.inp = qnn.QuantIdentity(act_quant=Uint8ActPerTensorFloat, return_quant_tensor=True)
        layers = []
        for i, (n_in, n_out) in enumerate(((64, 64), (64, 32), (32, 10))):
            layers.append(qnn.QuantLinear(n_in, n_out, bias=True, weight_bit_width=bits,
                                          weight_scaling_per_output_channel=True, return_quant_tensor=True))
            if i < 2:
                layers.append(qnn.QuantReLU(bit_width=bits, return_quant_tensor=True))
        self.body = torch.nn.Sequential(*layers)
        self.out = qnn.QuantIdentity(act_quant=Int8ActPerTensorFloat, return_quant_tensor=False)

    def forward(self, x):
        return self.out(self.body(self.inp(x)))


def main():
    torch.manual_seed(SEED)
    torch.set_num_threads(1)  # tiny matrices: threads only add overhead
    xtr, xte, ytr, yte = digits_split()
    model = QuantMLP()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    xt, yt = torch.from_numpy(xtr), torch.from_numpy(ytr)
    for epoch in range(20):
        model.train()
        perm = torch.randperm(len(xt))
        for i in range(0, len(xt), 32):
            idx = perm[i:i + 32]
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(xt[idx]), yt[idx])
            loss.backward()
            opt.step()
    model.eval()
    with torch.no_grad():
        acc = (model(torch.from_numpy(xte)).argmax(1).numpy() == yte).mean()
    print(f"digits_mlp_brevitas_w4a4: quantized test accuracy {acc:.4f}")
    path = HERE / "digits_mlp_brevitas_w4a4.onnx"
    export_qonnx(model, torch.from_numpy(xte[:1]), str(path), input_names=["input"], output_names=["logits"],
                 dynamic_axes={"input": {0: "N"}, "logits": {0: "N"}})
    # one self-contained file; constants are initializers only (not also graph inputs)
    import onnx

    m = onnx.load(path)
    consts = {t.name for t in m.graph.initializer}
    inputs = [i for i in m.graph.input if i.name not in consts]
    del m.graph.input[:]
    m.graph.input.extend(inputs)
    onnx.save(m, path, save_as_external_data=False)
    data = path.with_name(path.name + ".data")
    if data.exists():
        data.unlink()


if __name__ == "__main__":
    main()
