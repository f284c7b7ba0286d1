"""Write the two bench networks of issue #36 as float ONNX, the way a PyTorch user has them.

Run in the exporters' virtual environment (PyTorch), never the project's .venv:

    /work/exporters-venv/bin/python benchmarks/cnn_blocks/make_models.py

For each network (topologies in README.md) it writes next to this file:

- ``<name>.onnx``: the PyTorch model exported by the TorchScript exporter (``dynamo=False``,
  opset 13, batch dynamic; input ``input``, output ``output``: logits, no Softmax);
- ``<name>.npz``: ``input`` (64 samples of the synthetic task, float32: the calibration data, as
  ``onnx2hw synth --calib`` takes it);
- ``<name>_torch.npz``: ``output`` (the PyTorch model's logits for them);
- ``<name>_test.npz``: ``input`` and ``labels`` (128 held-out samples of the synthetic task, as
  ``onnx2hw accuracy --data`` takes them);

and ``manifest.json`` (shapes, parameters, MACs, the float model's accuracy on the test samples,
how the data were drawn, SHA-256 of every file). Each network is trained briefly (Adam, a few
epochs, seconds on a CPU) on a synthetic task from fixed seeds: noisy, shifted copies of one
random template per class (described in ``image_task`` / ``kws_task``), so that weights, BatchNorm
statistics and logits have the ranges of a trained network. Files are written byte-for-byte
deterministically (single-threaded training, .npz members with a fixed timestamp).
"""
from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
SEED = 36
N_CALIB = 64
N_TEST = 128
N_TRAIN = 4096

sys.path[:0] = [str(ROOT), str(ROOT / "corpus")]
from benchmarks.mlperf_tiny.make_models import save_npz  # noqa: E402  (fixed member timestamps)
from corpus.make_corpus import quiet, tidy  # noqa: E402


# --------------------------------------------------------------------------------------------
# networks


def _networks():
    import torch
    from torch import nn

    def make_divisible(v, d=8):
        return max(d, int(v + d / 2) // d * d)

    class SqueezeExcite(nn.Module):
        """torchvision's MobileNetV3 SE: AdaptiveAvgPool2d(1), Conv 1x1 (C -> C/4 rounded to 8),
        ReLU, Conv 1x1 back to C, Hardsigmoid; the input times the gate."""

        def __init__(self, c):
            super().__init__()
            s = make_divisible(c // 4)
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.fc1, self.relu, self.fc2 = nn.Conv2d(c, s, 1), nn.ReLU(), nn.Conv2d(s, c, 1)
            self.gate = nn.Hardsigmoid()

        def forward(self, x):
            return x * self.gate(self.fc2(self.relu(self.fc1(self.pool(x)))))

    def cba(cin, cout, k=1, s=1, groups=1, act=None):
        layers = [nn.Conv2d(cin, cout, k, s, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
        return nn.Sequential(*layers, act()) if act else nn.Sequential(*layers)

    class InvertedResidual(nn.Module):
        """MobileNetV3 bneck: Conv 1x1 expand-BN-act (omitted when exp == in), depthwise kxk
        stride s-BN-act, SE (optional), Conv 1x1 project-BN; the input added when s == 1 and
        in == out."""

        def __init__(self, cin, k, exp, cout, se, act, s):
            super().__init__()
            layers = [] if exp == cin else [cba(cin, exp, act=act)]
            layers += [cba(exp, exp, k, s, groups=exp, act=act)]
            layers += [SqueezeExcite(exp)] if se else []
            layers += [cba(exp, cout)]
            self.block = nn.Sequential(*layers)
            self.residual = s == 1 and cin == cout

        def forward(self, x):
            y = self.block(x)
            return x + y if self.residual else y

    class MobileNetV3Small(nn.Module):
        """MobileNetV3-small-style CNN for 32x32x3, 10 classes (torchvision's block structure, widths
        and depth cut down): Conv 3x3 stride 2-BN-Hardswish (16); bnecks (kernel, expansion, out, SE,
        activation, stride): (3, 16, 16, SE, ReLU, 2), (3, 48, 24, -, ReLU, 1), (3, 56, 24, -, ReLU, 1),
        (5, 64, 32, SE, Hardswish, 2), (5, 96, 32, SE, Hardswish, 1); Conv 1x1-BN-Hardswish (96);
        AdaptiveAvgPool2d(1); Flatten; Linear 128-Hardswish; Linear 10 (logits)."""

        def __init__(self):
            super().__init__()
            hs, re = nn.Hardswish, nn.ReLU
            cfg = [(3, 16, 16, True, re, 2), (3, 48, 24, False, re, 1), (3, 56, 24, False, re, 1),
                   (5, 64, 32, True, hs, 2), (5, 96, 32, True, hs, 1)]
            layers, c = [cba(3, 16, 3, 2, act=hs)], 16
            for k, exp, out, se, act, s in cfg:
                layers.append(InvertedResidual(c, k, exp, out, se, act, s))
                c = out
            layers.append(cba(c, 96, act=hs))
            self.features = nn.Sequential(*layers)
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.classifier = nn.Sequential(nn.Linear(96, 128), nn.Hardswish(), nn.Linear(128, 10))

        def forward(self, x):
            return self.classifier(torch.flatten(self.pool(self.features(x)), 1))

    class CausalBlock(nn.Module):
        """Residual TCN block: twice nn.ConstantPad1d(((k-1)d, 0), 0), Conv1d(kernel k, dilation d,
        no padding)-BN-ReLU; the input added (Conv1d 1x1 where the channels change), ReLU."""

        def __init__(self, cin, cout, k, d):
            super().__init__()
            pad = (k - 1) * d
            self.net = nn.Sequential(
                nn.ConstantPad1d((pad, 0), 0.0), nn.Conv1d(cin, cout, k, dilation=d, bias=False),
                nn.BatchNorm1d(cout), nn.ReLU(),
                nn.ConstantPad1d((pad, 0), 0.0), nn.Conv1d(cout, cout, k, dilation=d, bias=False),
                nn.BatchNorm1d(cout))
            self.down = nn.Conv1d(cin, cout, 1) if cin != cout else None
            self.relu = nn.ReLU()

        def forward(self, x):
            return self.relu(self.net(x) + (x if self.down is None else self.down(x)))

    class TCNKWS(nn.Module):
        """TCN keyword spotter on 10 MFCC x 49 frames (channels = coefficients, time along the
        signal), 12 classes: Conv1d 10 -> 24 (kernel 1)-BN-ReLU; residual causal blocks (kernel 3) with
        dilations 1, 2, 4, 8 (24, 24, 32, 32 channels; receptive field 61 frames >= 49); AdaptiveAvgPool1d(1);
        Flatten; Linear 12 (logits)."""

        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv1d(10, 24, 1, bias=False), nn.BatchNorm1d(24), nn.ReLU())
            self.tcn = nn.Sequential(CausalBlock(24, 24, 3, 1), CausalBlock(24, 24, 3, 2), CausalBlock(24, 32, 3, 4),
                                     CausalBlock(32, 32, 3, 8))
            self.head = nn.Sequential(nn.AdaptiveAvgPool1d(1), nn.Flatten(), nn.Linear(32, 12))

        def forward(self, x):
            return self.head(self.tcn(self.stem(x)))

    return MobileNetV3Small, TCNKWS


# --------------------------------------------------------------------------------------------
# synthetic tasks


def image_task(rng, n):
    """10 classes of 32x32x3 images in [0, 1] on an 8-bit grid (pixel / 255), channels first: one
    template per class (a random 4x4 colour pattern, upsampled and smoothed); a sample is its
    template times a gain in [0.7, 1.1] plus an offset in [-0.1, 0.1], rolled by up to 3 pixels each
    way, plus pixel noise (sigma 0.3)."""
    t = np.random.default_rng(SEED).random((10, 3, 4, 4))
    t = np.repeat(np.repeat(t, 8, axis=2), 8, axis=3)
    for _ in range(3):
        t = (t + np.roll(t, 1, axis=2) + np.roll(t, 1, axis=3) + np.roll(t, (1, 1), axis=(2, 3))) / 4
    y = rng.integers(0, 10, n)
    x = t[y] * rng.uniform(0.7, 1.1, (n, 1, 1, 1)) + rng.uniform(-0.1, 0.1, (n, 1, 1, 1))
    for i in range(n):
        x[i] = np.roll(x[i], tuple(rng.integers(-3, 4, 2)), axis=(1, 2))
    x = x + rng.normal(0, 0.3, x.shape)
    return (np.clip(np.round(x * 255), 0, 255) / 255).astype(np.float32), y.astype(np.int64)


def kws_task(rng, n):
    """12 keywords as 10 MFCC x 49 frames, normalized per coefficient (zero mean, unit spread, as
    a KWS front end with feature normalization feeds them): one template per class (a random
    trajectory per coefficient, smoothed over time, active over a random span of about 30 frames);
    a sample is its template shifted by up to 6 frames, times a gain in [0.8, 1.2], plus noise
    (sigma 1.2, correlated over neighbouring frames)."""
    g = np.random.default_rng(SEED + 1)
    t = g.normal(0, 1.0, (12, 10, 49))
    for _ in range(4):
        t = (t + np.roll(t, 1, axis=2) + np.roll(t, -1, axis=2)) / 3
    t /= t.std(axis=2, keepdims=True)
    span = np.zeros((12, 1, 49))
    for c in range(12):
        a = g.integers(5, 15)
        span[c, 0, a:a + 30] = 1
    t = t * span
    y = rng.integers(0, 12, n)
    x = np.stack([np.roll(t[c], rng.integers(-6, 7), axis=1) for c in y]) * rng.uniform(0.8, 1.2, (n, 1, 1))
    noise = rng.normal(0, 1.2, x.shape)
    x = x + (noise + np.roll(noise, 1, axis=2)) / np.sqrt(2)
    return x.astype(np.float32), y.astype(np.int64)


def train(model, task, seed: int, epochs: int = 4):
    """A brief fit (Adam 3e-3, batch 64, cross-entropy with label smoothing 0.1, N_TRAIN fresh
    samples per epoch), then eval mode."""
    import torch
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    model.train()
    for _ in range(epochs):
        x, y = task(rng, N_TRAIN)
        x, y = torch.from_numpy(x), torch.from_numpy(y)
        for i in range(0, N_TRAIN, 64):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x[i:i + 64]), y[i:i + 64], label_smoothing=0.1).backward()
            opt.step()
    return model.eval()


# --------------------------------------------------------------------------------------------


def macs_of(model, x) -> int:
    """Multiply-accumulates of one inference: every Conv1d/Conv2d/Linear, from the shapes PyTorch
    computes (output elements x inputs per output)."""
    import torch
    total = []

    def hook(m, inp, out):
        per = m.in_features if isinstance(m, torch.nn.Linear) else m.in_channels // m.groups * int(np.prod(m.kernel_size))
        total.append(out[0].numel() * per)
    hs = [m.register_forward_hook(hook) for m in model.modules()
          if isinstance(m, (torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Linear))]
    with torch.no_grad():
        model(torch.from_numpy(x[:1]))
    for h in hs:
        h.remove()
    return int(sum(total))


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def main() -> int:
    import torch
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    mobilenet, tcn = _networks()
    nets = {"ic_mobilenetv3_small": (mobilenet, image_task, "IC", "32x32x3 images, 10 classes (synthetic)"),
            "kws_tcn": (tcn, kws_task, "KWS", "10 MFCC x 49 frames, 12 keywords (synthetic)")}
    entries = []
    for k, (name, (cls, task, what_task, what)) in enumerate(nets.items()):
        torch.manual_seed(SEED + k)
        model = train(cls(), task, SEED + 10 * k)
        rng = np.random.default_rng(SEED + 100 + k)
        x, _ = task(rng, N_CALIB)
        xt, yt = task(rng, N_TEST)
        with torch.no_grad():
            y = model(torch.from_numpy(x)).numpy()
            acc = float((model(torch.from_numpy(xt)).argmax(1).numpy() == yt).mean())
        save_npz(HERE / f"{name}.npz", input=x)
        save_npz(HERE / f"{name}_torch.npz", output=y)
        save_npz(HERE / f"{name}_test.npz", input=xt, labels=yt)
        path = HERE / f"{name}.onnx"
        with quiet():
            torch.onnx.export(model, (torch.from_numpy(x[:2]),), str(path), dynamo=False, opset_version=13,
                              input_names=["input"], output_names=["output"],
                              dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}})
        tidy(path)
        params = int(sum(p.numel() for p in model.parameters()))
        macs = macs_of(model, x)
        entries.append({"name": name, "task": what_task, "what": what, "file": path.name, "data": f"{name}.npz",
                        "torch_outputs": f"{name}_torch.npz", "test": f"{name}_test.npz",
                        "input_shape": list(x.shape[1:]), "output_shape": list(y.shape[1:]),
                        "params": params, "macs": macs, "float_test_accuracy": acc,
                        "inputs": " ".join(task.__doc__.split()), "topology": " ".join(cls.__doc__.split()),
                        "onnx_sha256": sha256(path), "npz_sha256": sha256(HERE / f"{name}.npz"),
                        "torch_npz_sha256": sha256(HERE / f"{name}_torch.npz"),
                        "test_npz_sha256": sha256(HERE / f"{name}_test.npz"), "onnx_bytes": path.stat().st_size})
        print(f"{name:22} params {params:>7,} MACs {macs:>10,} {path.stat().st_size / 1e3:7.1f} kB onnx, "
              f"input {list(x.shape[1:])}, float accuracy on {N_TEST} test samples {acc:.3f}, "
              f"logits [{y.min():.2f}, {y.max():.2f}]")
    manifest = {"generator": "benchmarks/cnn_blocks/make_models.py", "exporter": f"torch {torch.__version__}",
                "exporter_call": "torch.onnx.export(dynamo=False, opset_version=13, dynamic_axes batch)",
                "seed": SEED, "calibration_samples": N_CALIB, "test_samples": N_TEST, "networks": entries}
    (HERE / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
