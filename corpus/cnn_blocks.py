"""Models of the CNN building blocks deployed tinyML networks use (issue #36, item 6).

Imported by ``make_corpus.py`` (group ``cnn-blocks``); ``build_cnn_blocks`` takes that module
(``mc``) for its helpers (``record``, ``save_npz``, ``tidy``, ``seed_all``, ``quiet``,
``qonnx_oracles``).

Each block in small networks (inputs 1x8x8 .. 3x16x16 images, 4..8 x 32..64 signals), written by
the exporters people use:

- PyTorch (``torch_blk_<name>_{ts,dynamo}_<batch>.onnx``, family ``pytorch-blocks``): the
  TorchScript exporter (``dynamo=False``) at opset 13 and the dynamo exporter at its default
  opset, batch dynamic (a few also batch fixed 1, where the fixed batch changes the graph: a
  ``view`` with ``x.size(0)`` becomes a constant shape);
- onnxruntime ``quantize_static`` QDQ (``ort_blk_<name>_qdq.onnx``, family ``onnxruntime-blocks``)
  of the TorchScript export, calibrated on the model's 32 inputs;
- Keras 3 through tf2onnx (``keras_blk_<name>_tf2onnx.onnx``, family ``keras-blocks``), opset 13,
  channels last;
- Brevitas QONNX (``brevitas_blk_<name>_{raw,clean}.onnx``, family ``brevitas-blocks``) for the
  layers Brevitas has (QuantConvTranspose1d/2d, dilated QuantConv1d/2d, QuantSigmoid and
  QuantHardSwish in an SE net; channel split and shuffle of quantized tensors); their ``.npz``
  holds the qonnx executor's outputs as ``oracle``.

Weights are random from fixed seeds; every BatchNorm gets a random gain in [0.6, 1.4] and offset in
[-0.2, 0.5] and the mean and variance of its own input over the model's 32 inputs (so activations
stay near unit range, as in a trained network). Every entry names in ``blocks`` the issue-36
blocks the file exercises (see ``BLOCKS``).
"""
from __future__ import annotations

import contextlib
import importlib.metadata
import tempfile
from pathlib import Path

import numpy as np
import onnx

__all__ = ["FAMILIES", "BLOCKS", "build_cnn_blocks"]

#: manifest families this group writes
FAMILIES = ("pytorch-blocks", "onnxruntime-blocks", "keras-blocks", "brevitas-blocks")

#: the block tags of the manifest's ``blocks`` field (issue #36's items)
BLOCKS = {
    "conv_transpose": "transposed convolution, 1-D or 2-D (item 1)",
    "dilated_conv": "convolution with dilations > 1, 1-D or 2-D (item 2)",
    "causal_conv": "causal 1-D convolution: a Pad before it or a Slice after it (item 2)",
    "avgpool_ceil": "AveragePool with ceil_mode and a partial last window (item 3)",
    "avgpool_exclude_pad": "AveragePool over padding that the divisor leaves out (item 3)",
    "maxpool_ceil": "MaxPool with a partial last window: ceil_mode or SAME padding (item 3)",
    "se_gate": "squeeze-and-excitation: a per-channel gate times the feature map (item 4)",
    "silu": "x * sigmoid(x) (item 4)",
    "hardswish": "x * hardsigmoid(x), or the HardSwish op (item 4)",
    "channel_split": "channels split into branches: Split or Slice on the channel axis (item 5)",
    "channel_shuffle": "Reshape, Transpose, Reshape of the channels (item 5)",
}

SEED = 36
N = 32  # inputs per model: the sample data and a float model's calibration data


# --------------------------------------------------------------------------------------------
# PyTorch networks


def _torch_models():
    import torch
    from torch import nn
    import torch.nn.functional as F

    def cbr(cin, cout, k=3, s=1, p=None, d=1, act=nn.ReLU, groups=1, dim=2):
        conv = (nn.Conv2d if dim == 2 else nn.Conv1d)(cin, cout, k, s, (k // 2) * d if p is None else p,
                                                     dilation=d, groups=groups, bias=False)
        bn = (nn.BatchNorm2d if dim == 2 else nn.BatchNorm1d)(cout)
        return nn.Sequential(conv, bn, act()) if act else nn.Sequential(conv, bn)

    class ConvT2d(nn.Module):
        """Decoder stage on 3x8x8: Conv 3x3-BN-ReLU (8), ConvTranspose2d(8, 8, {k}, stride 2,
        padding {p}, output_padding {op})-BN-ReLU, Conv 1x1 to 3 maps."""

        def __init__(self, k, p, op):
            super().__init__()
            self.enc = cbr(3, 8)
            self.up = nn.Sequential(nn.ConvTranspose2d(8, 8, k, 2, p, op), nn.BatchNorm2d(8), nn.ReLU())
            self.out = nn.Conv2d(8, 3, 1)

        def forward(self, x):
            return self.out(self.up(self.enc(x)))

    class ConvT1d(nn.Module):
        """1-D decoder on 8x32: Conv1d 3-BN-ReLU (16), ConvTranspose1d(16, 8, 4, stride 2,
        padding 1)-BN-ReLU, ConvTranspose1d(8, 4, 2, stride 2), Conv1d 1 to 4 channels (8x32 -> 4x128)."""

        def __init__(self):
            super().__init__()
            self.enc = cbr(8, 16, dim=1)
            self.up = nn.Sequential(nn.ConvTranspose1d(16, 8, 4, 2, 1), nn.BatchNorm1d(8), nn.ReLU(),
                                    nn.ConvTranspose1d(8, 4, 2, 2))
            self.out = nn.Conv1d(4, 4, 1)

        def forward(self, x):
            return self.out(self.up(self.enc(x)))

    class AutoEncoder(nn.Module):
        """Convolutional autoencoder on 1x16x16: Conv 3x3 stride 2 (8)-ReLU, Conv 3x3 stride 2
        (16)-ReLU; ConvTranspose2d(16, 8, 3, stride 2, padding 1, output_padding 1)-ReLU,
        ConvTranspose2d(8, 1, 2, stride 2), Sigmoid."""

        def __init__(self):
            super().__init__()
            self.enc = nn.Sequential(nn.Conv2d(1, 8, 3, 2, 1), nn.ReLU(), nn.Conv2d(8, 16, 3, 2, 1), nn.ReLU())
            self.dec = nn.Sequential(nn.ConvTranspose2d(16, 8, 3, 2, 1, 1), nn.ReLU(),
                                     nn.ConvTranspose2d(8, 1, 2, 2), nn.Sigmoid())

        def forward(self, x):
            return self.dec(self.enc(x))

    class Atrous(nn.Module):
        """Atrous (dilated) CNN on 3x16x16 as in DeepLab heads: Conv 3x3-BN-ReLU (8), Conv 3x3
        dilation 2 padding 2-BN-ReLU (16), Conv 3x3 dilation 4 padding 4-BN-ReLU (16), Conv 1x1 to
        4 class maps (per-pixel logits)."""

        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(cbr(3, 8), cbr(8, 16, d=2), cbr(16, 16, d=4), nn.Conv2d(16, 4, 1))

        def forward(self, x):
            return self.net(x)

    class Chomp1d(nn.Module):
        def __init__(self, n):
            super().__init__()
            self.n = n

        def forward(self, x):
            return x[:, :, :-self.n].contiguous()

    class TemporalBlock(nn.Module):
        def __init__(self, cin, cout, k, d):
            super().__init__()
            p = (k - 1) * d
            self.net = nn.Sequential(nn.Conv1d(cin, cout, k, padding=p, dilation=d), Chomp1d(p), nn.ReLU(),
                                     nn.Conv1d(cout, cout, k, padding=p, dilation=d), Chomp1d(p), nn.ReLU())
            self.down = nn.Conv1d(cin, cout, 1) if cin != cout else None

        def forward(self, x):
            res = x if self.down is None else self.down(x)
            return torch.relu(self.net(x) + res)

    class TCNChomp(nn.Module):
        """TCN as in the reference implementation of Bai et al. (locuslab/TCN) on 4x64: three
        TemporalBlocks (dilations 1, 2, 4, kernel 3, 8 channels): Conv1d with padding (k-1)d on both
        sides, Chomp1d (x[:, :, :-(k-1)d], a Slice) for causality, ReLU, twice, residual Add (1x1
        Conv where the channels change), ReLU; AdaptiveAvgPool1d(1), Linear to 5 classes."""

        def __init__(self):
            super().__init__()
            self.tcn = nn.Sequential(TemporalBlock(4, 8, 3, 1), TemporalBlock(8, 8, 3, 2), TemporalBlock(8, 8, 3, 4))
            self.head = nn.Sequential(nn.AdaptiveAvgPool1d(1), nn.Flatten(), nn.Linear(8, 5))

        def forward(self, x):
            return self.head(self.tcn(x))

    class TCNPad(nn.Module):
        """Causal dilated 1-D CNN on 8x64 (WaveNet-style keyword spotter): three times
        nn.ConstantPad1d(((k-1)d, 0), 0), Conv1d(kernel 3, dilation 1, 2, 4, no padding)-BN-ReLU
        (16 channels); AdaptiveAvgPool1d(1), Linear to 6 classes."""

        def __init__(self):
            super().__init__()
            layers, c = [], 8
            for d in (1, 2, 4):
                layers += [nn.ConstantPad1d((2 * d, 0), 0.0), cbr(c, 16, p=0, d=d, dim=1)]
                c = 16
            self.tcn = nn.Sequential(*layers)
            self.head = nn.Sequential(nn.AdaptiveAvgPool1d(1), nn.Flatten(), nn.Linear(16, 6))

        def forward(self, x):
            return self.head(self.tcn(x))

    class AvgPoolCeil(nn.Module):
        """CNN on 3x9x9 (odd maps): Conv 3x3-BN-ReLU (8), AvgPool2d(2, ceil_mode=True) (9 -> 5, a
        partial last window), Conv 3x3-BN-ReLU (16), AvgPool2d(2, ceil_mode=True) (5 -> 3), Flatten,
        Linear to 10 classes."""

        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(cbr(3, 8), nn.AvgPool2d(2, ceil_mode=True), cbr(8, 16),
                                     nn.AvgPool2d(2, ceil_mode=True), nn.Flatten(), nn.Linear(144, 10))

        def forward(self, x):
            return self.net(x)

    class AvgPoolExclude(nn.Module):
        """CNN on 3x10x10: Conv 3x3-BN-ReLU (8), AvgPool2d(3, stride 1, padding 1,
        count_include_pad=False) (Inception's pool branch), Conv 3x3-BN-ReLU (16), AvgPool2d(3,
        stride 2, padding 1, count_include_pad=False) (10 -> 5), Flatten, Linear to 10 classes."""

        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(cbr(3, 8), nn.AvgPool2d(3, 1, 1, count_include_pad=False), cbr(8, 16),
                                     nn.AvgPool2d(3, 2, 1, count_include_pad=False), nn.Flatten(),
                                     nn.Linear(400, 10))

        def forward(self, x):
            return self.net(x)

    class MaxPoolCeil(nn.Module):
        """CNN on 3x11x11 (odd maps): Conv 3x3-BN-ReLU (8), MaxPool2d(2, ceil_mode=True) (11 -> 6),
        Conv 3x3-BN-ReLU (16), MaxPool2d(3, stride 2, ceil_mode=True) (6 -> 3, SqueezeNet's pool),
        Flatten, Linear to 10 classes."""

        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(cbr(3, 8), nn.MaxPool2d(2, ceil_mode=True), cbr(8, 16),
                                     nn.MaxPool2d(3, 2, ceil_mode=True), nn.Flatten(), nn.Linear(144, 10))

        def forward(self, x):
            return self.net(x)

    class SEHard(nn.Module):
        """MobileNetV3-style squeeze-and-excitation: AdaptiveAvgPool2d(1), Conv 1x1 (C -> C/4),
        ReLU, Conv 1x1 (C/4 -> C), Hardsigmoid; the input times the gate."""

        def __init__(self, c):
            super().__init__()
            self.fc = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(c, c // 4, 1), nn.ReLU(),
                                    nn.Conv2d(c // 4, c, 1), nn.Hardsigmoid())

        def forward(self, x):
            return x * self.fc(x)

    class SESigmoid(nn.Module):
        """SENet's squeeze-and-excitation: AdaptiveAvgPool2d(1), view(b, c), Linear (C -> C/4),
        ReLU, Linear (C/4 -> C), Sigmoid, view(b, c, 1, 1); the input times the gate."""

        def __init__(self, c):
            super().__init__()
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Sequential(nn.Linear(c, c // 4), nn.ReLU(), nn.Linear(c // 4, c), nn.Sigmoid())

        def forward(self, x):
            b, c, _, _ = x.size()
            return x * self.fc(self.pool(x).view(b, c)).view(b, c, 1, 1)

    class SENet(nn.Module):
        """Inverted-residual-style CNN on 3x16x16 with a squeeze-and-excitation block: Conv 3x3
        stride 2-BN-{act} (16), depthwise Conv 3x3-BN-{act}, SE ({gate} gate, reduction 4), Conv 1x1-BN
        (16), AdaptiveAvgPool2d(1), Flatten, Linear to 10 classes."""

        def __init__(self, se, act):
            super().__init__()
            self.net = nn.Sequential(cbr(3, 16, s=2, act=act), cbr(16, 16, groups=16, act=act), se(16),
                                     cbr(16, 16, 1, act=None), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                                     nn.Linear(16, 10))

        def forward(self, x):
            return self.net(x)

    class ActNet(nn.Module):
        """EfficientNet/MobileNetV3-style CNN on 3x12x12 with {act}: Conv 3x3-BN-{act} (8), Conv 3x3
        stride 2-BN-{act} (16), Conv 1x1-BN-{act} (16), AdaptiveAvgPool2d(1), Flatten, Linear to 10."""

        def __init__(self, act):
            super().__init__()
            self.net = nn.Sequential(cbr(3, 8, act=act), cbr(8, 16, s=2, act=act), cbr(16, 16, 1, act=act),
                                     nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10))

        def forward(self, x):
            return self.net(x)

    def channel_shuffle(x, groups):
        b, c, h, w = x.size()
        x = x.view(b, groups, c // groups, h, w)
        x = torch.transpose(x, 1, 2).contiguous()
        return x.view(b, -1, h, w)

    class ShuffleUnit(nn.Module):
        """ShuffleNetV2 unit as torchvision writes it: stride 1: x.chunk(2, dim=1), the second half
        through Conv 1x1-BN-ReLU, depthwise 3x3-BN, Conv 1x1-BN-ReLU, concatenated with the first
        half; stride 2: both branches read x (depthwise 3x3 stride 2-BN, Conv 1x1-BN-ReLU on the
        left); then channel_shuffle(x, 2): view(b, 2, c/2, h, w), transpose(1, 2), view(b, c, h, w)."""

        def __init__(self, cin, cout, stride):
            super().__init__()
            self.stride = stride
            half = cout // 2
            if stride > 1:
                self.left = nn.Sequential(cbr(cin, cin, s=2, groups=cin, act=None), cbr(cin, half, 1))
            src = cin if stride > 1 else half
            self.right = nn.Sequential(cbr(src, half, 1), cbr(half, half, s=stride, groups=half, act=None),
                                       cbr(half, half, 1))

        def forward(self, x):
            if self.stride == 1:
                x1, x2 = x.chunk(2, dim=1)
                out = torch.cat((x1, self.right(x2)), dim=1)
            else:
                out = torch.cat((self.left(x), self.right(x)), dim=1)
            return channel_shuffle(out, 2)

    class ShuffleNet(nn.Module):
        """ShuffleNetV2-style CNN on 3x16x16: Conv 3x3-BN-ReLU (8), a stride-2 unit (8 -> 16) and
        a stride-1 unit (channel split, shuffle), Conv 1x1-BN-ReLU (32), AdaptiveAvgPool2d(1),
        Flatten, Linear to 10 classes."""

        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(cbr(3, 8), ShuffleUnit(8, 16, 2), ShuffleUnit(16, 16, 1), cbr(16, 32, 1),
                                     nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10))

        def forward(self, x):
            return self.net(x)

    class MultiBlock(nn.Module):
        """Tiny segmentation net on 3x16x16 combining the blocks: Conv 3x3-BN-Hardswish (16),
        MaxPool2d(3, stride 2, ceil_mode=True) (16 -> 8, a partial last window), depthwise 3x3-BN-SiLU,
        SE (Hardsigmoid gate), Conv 1x1-BN (16), a ShuffleNetV2 stride-1 unit (split, shuffle), Conv
        3x3 dilation 2-BN-ReLU, AvgPool2d(3, stride 2, padding 1, count_include_pad=False) (8 -> 4),
        ConvTranspose2d(16, 8, 4, stride 2, padding 1)-BN-ReLU (4 -> 8), ConvTranspose2d(8, 3, 2,
        stride 2) (8 -> 16): 3 class maps of 16x16 (per-pixel logits)."""

        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(
                cbr(3, 16, act=nn.Hardswish), nn.MaxPool2d(3, 2, ceil_mode=True),
                cbr(16, 16, groups=16, act=nn.SiLU), SEHard(16), cbr(16, 16, 1, act=None),
                ShuffleUnit(16, 16, 1), cbr(16, 16, d=2), nn.AvgPool2d(3, 2, 1, count_include_pad=False),
                nn.ConvTranspose2d(16, 8, 4, 2, 1), nn.BatchNorm2d(8), nn.ReLU(), nn.ConvTranspose2d(8, 3, 2, 2))

        def forward(self, x):
            return self.net(x)

    def doc(cls, **fmt):
        return " ".join((cls.__doc__ or "").format(**fmt).split())

    def make(cls, *args, doc_text=None):
        m = cls(*args)
        m.__doc__ = doc_text or doc(cls)
        return m

    # name -> (constructor, input shape (no batch), blocks, extra batch variants of the TorchScript export, QDQ)
    return {
        "convt2d_k2s2": (lambda: make(ConvT2d, 2, 0, 0, doc_text=doc(ConvT2d, k=2, p=0, op=0)), (3, 8, 8),
                         ["conv_transpose"], (), False),
        "convt2d_k3s2p1op1": (lambda: make(ConvT2d, 3, 1, 1, doc_text=doc(ConvT2d, k=3, p=1, op=1)), (3, 8, 8),
                              ["conv_transpose"], (), True),
        "convt2d_k4s2p1": (lambda: make(ConvT2d, 4, 1, 0, doc_text=doc(ConvT2d, k=4, p=1, op=0)), (3, 8, 8),
                           ["conv_transpose"], (), False),
        "convt1d": (lambda: make(ConvT1d), (8, 32), ["conv_transpose"], (), True),
        "autoencoder": (lambda: make(AutoEncoder), (1, 16, 16), ["conv_transpose"], (), True),
        "atrous2d": (lambda: make(Atrous), (3, 16, 16), ["dilated_conv"], (), True),
        "tcn_chomp": (lambda: make(TCNChomp), (4, 64), ["dilated_conv", "causal_conv"], (), True),
        "tcn_pad": (lambda: make(TCNPad), (8, 64), ["dilated_conv", "causal_conv"], (), True),
        "avgpool_ceil": (lambda: make(AvgPoolCeil), (3, 9, 9), ["avgpool_ceil"], (), True),
        "avgpool_exclude_pad": (lambda: make(AvgPoolExclude), (3, 10, 10), ["avgpool_exclude_pad"], (), True),
        "maxpool_ceil": (lambda: make(MaxPoolCeil), (3, 11, 11), ["maxpool_ceil"], (), True),
        "se_hardsigmoid": (lambda: make(SENet, SEHard, nn.Hardswish,
                                        doc_text=doc(SENet, act="Hardswish", gate="Hardsigmoid")),
                           (3, 16, 16), ["se_gate", "hardswish"], (), True),
        "se_sigmoid": (lambda: make(SENet, SESigmoid, nn.ReLU, doc_text=doc(SENet, act="ReLU", gate="Sigmoid")),
                       (3, 16, 16), ["se_gate"], (1,), True),
        "silu": (lambda: make(ActNet, nn.SiLU, doc_text=doc(ActNet, act="SiLU")), (3, 12, 12), ["silu"], (), True),
        "hardswish": (lambda: make(ActNet, nn.Hardswish, doc_text=doc(ActNet, act="Hardswish")), (3, 12, 12),
                      ["hardswish"], (), True),
        "shufflenet": (lambda: make(ShuffleNet), (3, 16, 16), ["channel_split", "channel_shuffle"], (1,), True),
        "multiblock": (lambda: make(MultiBlock), (3, 16, 16),
                       ["maxpool_ceil", "silu", "se_gate", "hardswish", "channel_split", "channel_shuffle",
                        "dilated_conv", "avgpool_exclude_pad", "conv_transpose"], (1,), True),
    }


def calibrate_bn(model, x, gen):
    """``model`` in eval mode, every BatchNorm with a random gain in [0.6, 1.4] and offset in
    [-0.2, 0.5] and the mean and variance of its own input over ``x`` (one training-mode pass with
    a cumulative average)."""
    import torch
    bns = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    for m in bns:
        m.reset_running_stats()
        m.momentum = None
        with torch.no_grad():
            m.weight.copy_(torch.rand(m.num_features, generator=gen) * 0.8 + 0.6)
            m.bias.copy_(torch.rand(m.num_features, generator=gen) * 0.7 - 0.2)
    model.train()
    with torch.no_grad():
        model(x)
    return model.eval()


def _build_torch(mc) -> dict:
    """The PyTorch float exports; returns name -> (data file, blocks, docs) for the QDQ step."""
    import torch
    ver = torch.__version__
    print(f"PyTorch {ver} (cnn-blocks)")
    built = {}
    for k, (name, (ctor, shape, blocks, batches, qdq)) in enumerate(_torch_models().items()):
        mc.seed_all(SEED + k)
        gen = torch.Generator().manual_seed(SEED + k)
        model = ctor()
        x = torch.rand(N, *shape, generator=gen)
        calibrate_bn(model, x, gen)
        with torch.no_grad():
            y = model(x)
        data = mc.save_npz(f"torch_blk_{name}.npz", input=x.numpy(), output=y.numpy())
        built[name] = (data, blocks, model.__doc__, qdq)
        for dynamo in (False, True):
            for batch in ("dynamic", *(batches if not dynamo else ())):
                tag = "dynamo" if dynamo else "ts"
                btag = "dyn" if batch == "dynamic" else f"b{batch}"
                fname = f"torch_blk_{name}_{tag}_{btag}.onnx"
                example = torch.rand(2 if batch == "dynamic" else batch, *shape, generator=gen)
                kwargs = dict(input_names=["input"], output_names=["output"], dynamo=dynamo)
                if dynamo:
                    kwargs["external_data"] = False
                    kwargs["dynamic_shapes"] = ({0: torch.export.Dim("batch")},)
                else:
                    kwargs["opset_version"] = 13
                    if batch == "dynamic":
                        kwargs["dynamic_axes"] = {"input": {0: "batch"}, "output": {0: "batch"}}
                with mc.quiet():
                    torch.onnx.export(model, (example,), str(mc.HERE / fname), **kwargs)
                mc.tidy(mc.HERE / fname)
                _check_float(mc, fname, x.numpy(), y.numpy())
                opts = (f"dynamo=True (default opset), batch dynamic, dynamic_shapes Dim('batch')" if dynamo else
                        "dynamo=False (TorchScript), opset_version=13, "
                        + ("batch dynamic, dynamic_axes" if batch == "dynamic" else f"batch fixed {batch}"))
                mc.record(fname, "pytorch-blocks", "float", "torch.onnx.export", ver, opts, data=data,
                          notes=model.__doc__ or "", blocks=blocks)
    return built


def _ort_outputs(path, x: np.ndarray) -> np.ndarray:
    import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name
    batch = sess.get_inputs()[0].shape[0]
    if isinstance(batch, int):
        return np.concatenate([sess.run(None, {name: x[i:i + batch]})[0] for i in range(0, len(x), batch)])
    return sess.run(None, {name: x})[0]


def _check_float(mc, fname: str, x: np.ndarray, y: np.ndarray) -> None:
    """onnxruntime runs the written file and agrees with the framework's outputs."""
    err = float(np.abs(_ort_outputs(mc.HERE / fname, x) - y).max())
    assert err <= 1e-4 * max(1.0, float(np.abs(y).max())), (fname, err)


def _build_ort(mc, built: dict) -> None:
    """onnxruntime quantize_static (QDQ, uint8 activations, int8 weights, MinMax on the model's
    32 inputs) of the TorchScript export of each model marked for it."""
    import onnxruntime as ort
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process
    print(f"onnxruntime {ort.__version__} (cnn-blocks)")

    class Reader(CalibrationDataReader):
        def __init__(self, x):
            self.it = iter([{"input": x[i:i + 1]} for i in range(len(x))])

        def get_next(self):
            return next(self.it, None)

    for name, (data, blocks, doc, qdq) in built.items():
        if not qdq:
            continue
        src = mc.HERE / f"torch_blk_{name}_ts_dyn.onnx"
        calib = np.load(mc.HERE / data)["input"]
        fname = f"ort_blk_{name}_qdq.onnx"
        skip_symbolic = False
        with tempfile.TemporaryDirectory() as tmp, contextlib.chdir(tmp), mc.quiet():
            pre = Path(tmp) / "pre.onnx"
            try:
                quant_pre_process(str(src), str(pre))
            except Exception:  # noqa: BLE001 - symbolic shape inference that cannot follow the graph
                skip_symbolic = True
                quant_pre_process(str(src), str(pre), skip_symbolic_shape=True)
            quantize_static(str(pre), str(mc.HERE / fname), Reader(calib), quant_format=QuantFormat.QDQ,
                            activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8, per_channel=False)
        mc.tidy(mc.HERE / fname)
        opts = ("quantize_static(quant_format=QDQ, activation QUInt8, weight QInt8, per_channel=False, MinMax, "
                f"{len(calib)} random samples) after quant_pre_process"
                f"{'(skip_symbolic_shape=True)' if skip_symbolic else ''}, from torch_blk_{name}_ts_dyn.onnx")
        mc.record(fname, "onnxruntime-blocks", "quantized", "onnxruntime.quantization", ort.__version__, opts,
                  data=data, notes=doc or "", blocks=blocks)


# --------------------------------------------------------------------------------------------
# Keras 3 through tf2onnx


def _keras_models(keras):
    import tensorflow as tf
    L = keras.layers

    def conv_bn(h, f, k=3, s=1, d=1, act="relu", dw=False):
        conv = (L.DepthwiseConv2D(k, strides=s, padding="same", use_bias=False) if dw else
                L.Conv2D(f, k, strides=s, padding="same", dilation_rate=d, use_bias=False))
        h = L.BatchNormalization()(conv(h))
        return L.Activation(act)(h) if act else h

    def convt():
        """Decoder on 8x8x3 (channels last): Conv2D 3x3 same-BN-ReLU (8), Conv2DTranspose(8, 3,
        strides 2, padding same)-BN-ReLU (8 -> 16), Conv2DTranspose(8, 2, strides 2, padding valid)
        (16 -> 32), Conv2D 1x1 to 3 maps."""
        inp = keras.Input((8, 8, 3), name="input")
        h = conv_bn(inp, 8)
        h = L.Activation("relu")(L.BatchNormalization()(L.Conv2DTranspose(8, 3, strides=2, padding="same")(h)))
        h = L.Conv2DTranspose(8, 2, strides=2, padding="valid")(h)
        return keras.Model(inp, L.Conv2D(3, 1)(h))

    def convt1d():
        """1-D decoder on 32x8 (steps x channels): Conv1D 3 same-ReLU (16), Conv1DTranspose(8, 4,
        strides 2, padding same)-ReLU (32 -> 64), Conv1D 1 to 4 channels."""
        inp = keras.Input((32, 8), name="input")
        h = L.Conv1D(16, 3, padding="same", activation="relu")(inp)
        h = L.Conv1DTranspose(8, 4, strides=2, padding="same", activation="relu")(h)
        return keras.Model(inp, L.Conv1D(4, 1)(h))

    def dilated2d():
        """Atrous CNN on 16x16x3: Conv2D 3x3-BN-ReLU (8), Conv2D 3x3 dilation_rate 2 same-BN-ReLU
        (16), Conv2D 3x3 dilation_rate 4 same-BN-ReLU (16), Conv2D 1x1 to 4 class maps."""
        inp = keras.Input((16, 16, 3), name="input")
        h = conv_bn(conv_bn(conv_bn(inp, 8), 16, d=2), 16, d=4)
        return keras.Model(inp, L.Conv2D(4, 1)(h))

    def tcn():
        """Causal TCN on 64x8 (steps x channels): three Conv1D(16, 3, padding="causal",
        dilation_rate 1, 2, 4)-BN-ReLU, GlobalAveragePooling1D, Dense 6 (logits)."""
        inp = keras.Input((64, 8), name="input")
        h = inp
        for d in (1, 2, 4):
            h = L.Activation("relu")(L.BatchNormalization()(L.Conv1D(16, 3, padding="causal", dilation_rate=d)(h)))
        return keras.Model(inp, L.Dense(6)(L.GlobalAveragePooling1D()(h)))

    def avgpool():
        """CNN on 9x9x3 (odd maps): Conv2D 3x3-BN-ReLU (8), AveragePooling2D(2, padding="same")
        (9 -> 5: TensorFlow leaves the padding out of the divisor), Conv2D 3x3-BN-ReLU (16),
        AveragePooling2D(3, strides 2, padding="same") (5 -> 3), Flatten, Dense 10."""
        inp = keras.Input((9, 9, 3), name="input")
        h = L.AveragePooling2D(2, padding="same")(conv_bn(inp, 8))
        h = L.AveragePooling2D(3, strides=2, padding="same")(conv_bn(h, 16))
        return keras.Model(inp, L.Dense(10)(L.Flatten()(h)))

    def maxpool():
        """CNN on 11x11x3 (odd maps): Conv2D 3x3-BN-ReLU (8), MaxPooling2D(2, padding="same")
        (11 -> 6), Conv2D 3x3-BN-ReLU (16), MaxPooling2D(3, strides 2, padding="same") (6 -> 3),
        Flatten, Dense 10."""
        inp = keras.Input((11, 11, 3), name="input")
        h = L.MaxPooling2D(2, padding="same")(conv_bn(inp, 8))
        h = L.MaxPooling2D(3, strides=2, padding="same")(conv_bn(h, 16))
        return keras.Model(inp, L.Dense(10)(L.Flatten()(h)))

    def se_hsig():
        """keras.applications.MobileNetV3's blocks on 16x16x3, its helpers as that file writes them:
        Conv2D 3x3 stride 2-BN-hard_swish (16) (Activation("hard_swish")), DepthwiseConv2D 3x3-BN-
        hard_swish, _se_block (GlobalAveragePooling2D(keepdims=True), Conv2D 1x1 (8)-ReLU, Conv2D 1x1
        (16), hard_sigmoid = layers.ReLU(6.0)(x + 3.0) * (1.0 / 6.0), Multiply), Conv2D 1x1-BN (16),
        GlobalAveragePooling2D, Dense 10."""
        def hard_sigmoid(x):
            return L.ReLU(6.0)(x + 3.0) * (1.0 / 6.0)

        inp = keras.Input((16, 16, 3), name="input")
        h = conv_bn(inp, 16, s=2, act="hard_swish")
        h = conv_bn(h, 16, dw=True, act="hard_swish")
        s = L.GlobalAveragePooling2D(keepdims=True)(h)
        s = L.Conv2D(16, 1, padding="same")(L.ReLU()(L.Conv2D(8, 1, padding="same")(s)))
        h = L.Multiply()([h, hard_sigmoid(s)])
        h = conv_bn(h, 16, k=1, act=None)
        return keras.Model(inp, L.Dense(10)(L.GlobalAveragePooling2D()(h)))

    def se_sigmoid():
        """Squeeze-and-excitation as Keras SENet implementations write it, on 16x16x3: Conv2D 3x3
        stride 2-BN-ReLU (16), DepthwiseConv2D 3x3-BN-ReLU; GlobalAveragePooling2D, Dense 4 relu,
        Dense 16 sigmoid, Reshape((1, 1, 16)), Multiply with the feature map; Conv2D 1x1-BN (16),
        GlobalAveragePooling2D, Dense 10. (The Dense layers on the pooled vector: on a (1, 1, C)
        tensor tf2onnx writes their Tensordot with a constant it shares between the two layers under
        either name from run to run.)"""
        inp = keras.Input((16, 16, 3), name="input")
        h = conv_bn(conv_bn(inp, 16, s=2), 16, dw=True)
        s = L.Dense(16, activation="sigmoid")(L.Dense(4, activation="relu")(L.GlobalAveragePooling2D()(h)))
        h = conv_bn(L.Multiply()([h, L.Reshape((1, 1, 16))(s)]), 16, k=1, act=None)
        return keras.Model(inp, L.Dense(10)(L.GlobalAveragePooling2D()(h)))

    def act(name):
        def build():
            inp = keras.Input((12, 12, 3), name="input")
            h = conv_bn(conv_bn(conv_bn(inp, 8, act=name), 16, s=2, act=name), 16, k=1, act=name)
            return keras.Model(inp, L.Dense(10)(L.GlobalAveragePooling2D()(h)))
        build.__doc__ = (f"CNN on 12x12x3 with Activation({name!r}): Conv2D 3x3-BN-{name} (8), Conv2D 3x3 "
                         f"stride 2-BN-{name} (16), Conv2D 1x1-BN-{name} (16), GlobalAveragePooling2D, Dense 10.")
        return build

    def shuffle():
        """ShuffleNetV2 stride-1 unit as Keras implementations write it, on 16x16x3: Conv2D 3x3-BN-ReLU
        (16); channel split with tf.split (Lambda); the second half through Conv2D 1x1-BN-ReLU,
        DepthwiseConv2D 3x3-BN, Conv2D 1x1-BN-ReLU; Concatenate; channel shuffle with Reshape((16,
        16, 2, 8)), Permute((1, 2, 4, 3)), Reshape((16, 16, 16)); Conv2D 1x1-BN-ReLU (32),
        GlobalAveragePooling2D, Dense 10."""
        inp = keras.Input((16, 16, 3), name="input")
        h = conv_bn(inp, 16)
        a, b = L.Lambda(lambda t: tf.split(t, 2, axis=-1))(h)
        b = conv_bn(conv_bn(conv_bn(b, 8, k=1), 8, dw=True, act=None), 8, k=1)
        h = L.Concatenate()([a, b])
        h = L.Reshape((16, 16, 16))(L.Permute((1, 2, 4, 3))(L.Reshape((16, 16, 2, 8))(h)))
        h = conv_bn(h, 32, k=1)
        return keras.Model(inp, L.Dense(10)(L.GlobalAveragePooling2D()(h)))

    return {
        "convt2d": (convt, (8, 8, 3), ["conv_transpose"]),
        "convt1d": (convt1d, (32, 8), ["conv_transpose"]),
        "dilated2d": (dilated2d, (16, 16, 3), ["dilated_conv"]),
        "tcn_causal": (tcn, (64, 8), ["dilated_conv", "causal_conv"]),
        "avgpool_same": (avgpool, (9, 9, 3), ["avgpool_exclude_pad"]),
        "maxpool_same": (maxpool, (11, 11, 3), ["maxpool_ceil"]),
        "se_hardsigmoid": (se_hsig, (16, 16, 3), ["se_gate", "hardswish"]),
        "se_sigmoid": (se_sigmoid, (16, 16, 3), ["se_gate"]),
        "swish": (act("swish"), (12, 12, 3), ["silu"]),
        "hard_swish": (act("hard_swish"), (12, 12, 3), ["hardswish"]),
        "shufflenet": (shuffle, (16, 16, 3), ["channel_split", "channel_shuffle"]),
    }


def _keras_bn(keras, model, x, rng) -> None:
    """Every BatchNormalization (in layer order) gets a random gain and offset and the mean and
    variance of its own input over ``x``."""
    for layer in model.layers:
        if isinstance(layer, keras.layers.BatchNormalization):
            t = keras.Model(model.inputs, layer.input)([x], training=False).numpy()
            axes = tuple(range(t.ndim - 1))
            c = t.shape[-1]
            layer.set_weights([rng.uniform(0.6, 1.4, c).astype(np.float32), rng.uniform(-0.2, 0.5, c).astype(np.float32),
                               t.mean(axis=axes).astype(np.float32), t.var(axis=axes).astype(np.float32)])


def _stable(path: Path) -> None:
    """What ``tidy`` leaves run-dependent in these tf2onnx graphs, made repeatable: the nodes of
    parallel branches come in either order, with tf2onnx's global name counters (``__N``) given in
    that order; the nodes are sorted topologically (ready nodes by their name without the counters,
    then op type), the counters renumbered in the new order, and the dynamic batch dimension,
    named from a counter too (``unk__N``), called ``batch``."""
    import heapq
    import re
    model = onnx.load(path)
    g = model.graph
    nodes = list(g.node)
    made = {o: k for k, n in enumerate(nodes) for o in n.output}
    deps = [{made[i] for i in n.input if i in made} for n in nodes]
    users: dict[int, list[int]] = {}
    for k, d in enumerate(deps):
        for j in d:
            users.setdefault(j, []).append(k)

    def key(k):
        return re.sub(r"__\d+", "", nodes[k].name), nodes[k].op_type, k

    waiting = [len(d) for d in deps]
    ready = [key(k) for k in range(len(nodes)) if not deps[k]]
    heapq.heapify(ready)
    order = []
    while ready:
        k = heapq.heappop(ready)[-1]
        order.append(nodes[k])
        for u in users.get(k, []):
            waiting[u] -= 1
            if not waiting[u]:
                heapq.heappush(ready, key(u))
    assert len(order) == len(nodes), path
    numbers: dict[str, str] = {}
    ends = {v.name for v in list(g.input) + list(g.output)}

    def canon(name: str) -> str:
        if name in ends:
            return name
        return re.sub(r"__(\d+)", lambda m: "__" + numbers.setdefault(m.group(1), str(len(numbers))), name)
    for n in order:
        n.name = canon(n.name)
        n.input[:] = [canon(i) for i in n.input]
        n.output[:] = [canon(o) for o in n.output]
    for t in g.initializer:
        t.name = canon(t.name)
    for v in g.value_info:
        v.name = canon(v.name)
    del g.node[:]
    g.node.extend(order)
    inits = sorted(g.initializer, key=lambda t: t.name)
    del g.initializer[:]
    g.initializer.extend(inits)
    for v in list(g.input) + list(g.output) + list(g.value_info):
        for d in v.type.tensor_type.shape.dim:
            if d.HasField("dim_param") and d.dim_param.startswith("unk__"):
                d.dim_param = "batch"
    path.write_bytes(model.SerializeToString(deterministic=True))


def _build_keras(mc) -> None:
    import os
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    # oneDNN's threaded kernels and reductions round differently from run to run, and the BatchNorm
    # statistics come from forward passes: one thread, no oneDNN (where TensorFlow is not yet
    # running), deterministic ops, so that a second run writes the same weights
    os.environ["TF_ENABLE_ONEDNN_OPTS"] = "0"
    import tensorflow as tf
    import tf2onnx
    import keras
    with contextlib.suppress(RuntimeError):  # TensorFlow already initialized by another group
        tf.config.threading.set_intra_op_parallelism_threads(1)
        tf.config.threading.set_inter_op_parallelism_threads(1)
    tf.config.experimental.enable_op_determinism()
    tv = f"tf2onnx {tf2onnx.__version__} (TensorFlow {tf.__version__}, Keras {keras.__version__})"
    print(tv + " (cnn-blocks)")
    for k, (name, (build, shape, blocks)) in enumerate(_keras_models(keras).items()):
        keras.utils.set_random_seed(SEED + 50 + k)
        rng = np.random.default_rng(SEED + 50 + k)
        model = build()
        x = rng.random((N, *shape), dtype=np.float32)
        _keras_bn(keras, model, x, rng)
        y = model([x], training=False).numpy()
        data = mc.save_npz(f"keras_blk_{name}.npz", input=x, output=y)
        spec = (tf.TensorSpec((None, *shape), tf.float32, name="input"),)

        @tf.function(input_signature=spec)
        def fn(inp, model=model):
            return {"output": model(inp, training=False)}

        fname = f"keras_blk_{name}_tf2onnx.onnx"
        with mc.quiet():
            tf2onnx.convert.from_function(fn, input_signature=spec, opset=13, output_path=str(mc.HERE / fname))
        mc.tidy(mc.HERE / fname, tf2onnx=True)
        _stable(mc.HERE / fname)
        _check_float(mc, fname, x, y)
        mc.record(fname, "keras-blocks", "float", "tf2onnx.convert.from_function", tv,
                  "Keras 3 model called in a tf.function, opset=13, batch dynamic (named 'batch'); nodes in a "
                  "stable topological order", data=data,
                  notes=" ".join((build.__doc__ or "").split()), blocks=blocks)


# --------------------------------------------------------------------------------------------
# Brevitas QONNX


def _brevitas_nets():
    import torch
    import brevitas.nn as qnn
    from torch import nn

    def relu(bits=4):
        return qnn.QuantReLU(bit_width=bits, return_quant_tensor=True)

    class ConvT2d(nn.Module):
        """QuantIdentity (int8 input), QuantConv2d 3x3 (8) 4-bit + QuantReLU 4-bit, QuantConvTranspose2d(8,
        8, 3, stride 2, padding 1, output_padding 1) 4-bit + QuantReLU 4-bit (8x8 -> 16x16),
        QuantConvTranspose2d(8, 4, 2, stride 2) 4-bit (-> 32x32), float output; on 3x8x8."""

        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(
                qnn.QuantIdentity(bit_width=8, return_quant_tensor=True),
                qnn.QuantConv2d(3, 8, 3, padding=1, weight_bit_width=4), relu(),
                qnn.QuantConvTranspose2d(8, 8, 3, stride=2, padding=1, output_padding=1, weight_bit_width=4), relu(),
                qnn.QuantConvTranspose2d(8, 4, 2, stride=2, weight_bit_width=4))

        def forward(self, x):
            return self.net(x)

    class ConvT1d(nn.Module):
        """QuantIdentity (int8 input), QuantConv1d 3 (16) 4-bit + QuantReLU 4-bit, QuantConvTranspose1d(16,
        8, 4, stride 2, padding 1) 4-bit + QuantReLU 4-bit (32 -> 64), QuantConv1d 1 (4) 4-bit, float
        output; on 8x32."""

        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(
                qnn.QuantIdentity(bit_width=8, return_quant_tensor=True),
                qnn.QuantConv1d(8, 16, 3, padding=1, weight_bit_width=4), relu(),
                qnn.QuantConvTranspose1d(16, 8, 4, stride=2, padding=1, weight_bit_width=4), relu(),
                qnn.QuantConv1d(8, 4, 1, weight_bit_width=4))

        def forward(self, x):
            return self.net(x)

    class Atrous(nn.Module):
        """QuantIdentity (int8 input), QuantConv2d 3x3 (8) + QuantReLU, QuantConv2d 3x3 dilation 2
        padding 2 (16) + QuantReLU, QuantConv2d 3x3 dilation 4 padding 4 (16) + QuantReLU, QuantConv2d 1x1
        (4), 4-bit weights and activations, float output; on 3x16x16."""

        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(
                qnn.QuantIdentity(bit_width=8, return_quant_tensor=True),
                qnn.QuantConv2d(3, 8, 3, padding=1, weight_bit_width=4), relu(),
                qnn.QuantConv2d(8, 16, 3, padding=2, dilation=2, weight_bit_width=4), relu(),
                qnn.QuantConv2d(16, 16, 3, padding=4, dilation=4, weight_bit_width=4), relu(),
                qnn.QuantConv2d(16, 4, 1, weight_bit_width=4))

        def forward(self, x):
            return self.net(x)

    class TCN(nn.Module):
        """QuantIdentity (int8 input), three QuantConv1d(kernel 3, dilation 1, 2, 4, padding (k-1)d)
        4-bit, each followed by the TCN's chomp (x[:, :, :-(k-1)d], a Slice) and QuantReLU 4-bit (16
        channels), AdaptiveAvgPool1d(1) + QuantIdentity 8-bit, QuantLinear 4-bit to 6 classes (float
        output); on 8x64."""

        def __init__(self):
            super().__init__()
            self.inp = qnn.QuantIdentity(bit_width=8, return_quant_tensor=True)
            self.convs = nn.ModuleList(qnn.QuantConv1d(8 if d == 1 else 16, 16, 3, padding=2 * d, dilation=d,
                                                       weight_bit_width=4) for d in (1, 2, 4))
            self.acts = nn.ModuleList(relu() for _ in range(3))
            self.pool = nn.AdaptiveAvgPool1d(1)
            self.q = qnn.QuantIdentity(bit_width=8, return_quant_tensor=True)
            self.fc = qnn.QuantLinear(16, 6, bias=True, weight_bit_width=4)

        def forward(self, x):
            h = self.inp(x)
            for conv, act, d in zip(self.convs, self.acts, (1, 2, 4)):
                h = act(conv(h)[:, :, :-2 * d])
            return self.fc(torch.flatten(self.q(self.pool(h)), 1))

    class SE(nn.Module):
        """QuantIdentity (int8 input), QuantConv2d 3x3 stride 2 (16) 4-bit + QuantReLU 4-bit; a
        squeeze-and-excitation gate: AdaptiveAvgPool2d(1) + QuantIdentity 8-bit, QuantConv2d 1x1
        (4) + QuantReLU, QuantConv2d 1x1 (16), QuantSigmoid 8-bit; the feature map times the gate (a
        product of two quantized tensors) requantized by a QuantIdentity 8-bit; QuantConv2d 1x1 (16)
        4-bit + QuantHardSwish 8-bit; AdaptiveAvgPool2d(1) + QuantIdentity, QuantLinear 4-bit to 10
        classes (float output); on 3x16x16."""

        def __init__(self):
            super().__init__()
            self.inp = qnn.QuantIdentity(bit_width=8, return_quant_tensor=True)
            self.c1, self.r1 = qnn.QuantConv2d(3, 16, 3, stride=2, padding=1, weight_bit_width=4), relu()
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.q = qnn.QuantIdentity(bit_width=8, return_quant_tensor=True)
            self.f1, self.r2 = qnn.QuantConv2d(16, 4, 1, weight_bit_width=4), relu()
            self.f2 = qnn.QuantConv2d(4, 16, 1, weight_bit_width=4)
            self.gate = qnn.QuantSigmoid(bit_width=8, return_quant_tensor=True)
            self.mulq = qnn.QuantIdentity(bit_width=8, return_quant_tensor=True)
            self.c2 = qnn.QuantConv2d(16, 16, 1, weight_bit_width=4)
            self.hs = qnn.QuantHardSwish(bit_width=8, return_quant_tensor=True)
            self.fc = qnn.QuantLinear(16, 10, bias=True, weight_bit_width=4)

        def forward(self, x):
            h = self.r1(self.c1(self.inp(x)))
            g = self.gate(self.f2(self.r2(self.f1(self.q(self.pool(h))))))
            h = self.hs(self.c2(self.mulq(h * g)))
            return self.fc(torch.flatten(self.q(self.pool(h)), 1))

    class Shuffle(nn.Module):
        """QuantIdentity (int8 input), QuantConv2d 3x3 (16) 4-bit + QuantReLU 4-bit (a float tensor
        out, return_quant_tensor=False, so that it can be sliced); channel split h[:, :8], h[:, 8:];
        the second half through QuantConv2d 1x1 4-bit + QuantReLU 4-bit; both halves through one
        QuantIdentity 4-bit, torch.cat; channel shuffle view(n, 2, 8, h, w), transpose(1, 2),
        reshape(n, 16, h, w); MaxPool2d(3, stride 2, ceil_mode=True) (9 -> 4, a partial last
        window); QuantConv2d 1x1 (16) 4-bit, float output; on 3x9x9."""

        def __init__(self):
            super().__init__()
            self.inp = qnn.QuantIdentity(bit_width=8, return_quant_tensor=True)
            self.c1, self.r1 = qnn.QuantConv2d(3, 16, 3, padding=1, weight_bit_width=4), qnn.QuantReLU(bit_width=4)
            self.b1, self.rb = qnn.QuantConv2d(8, 8, 1, weight_bit_width=4), relu()
            self.cat = qnn.QuantIdentity(bit_width=4, return_quant_tensor=True)
            self.pool = nn.MaxPool2d(3, 2, ceil_mode=True)
            self.c2 = qnn.QuantConv2d(16, 16, 1, weight_bit_width=4)

        def forward(self, x):
            h = self.r1(self.c1(self.inp(x)))
            a, b = h[:, :8], self.rb(self.b1(h[:, 8:]))
            h = torch.cat([self.cat(a), self.cat(b)], dim=1)
            n, c, hh, ww = h.shape
            h = h.view(n, 2, c // 2, hh, ww).transpose(1, 2).reshape(n, c, hh, ww)
            return self.c2(self.pool(h))

    return {"convt2d": (ConvT2d, (1, 3, 8, 8), ["conv_transpose"]),
            "convt1d": (ConvT1d, (1, 8, 32), ["conv_transpose"]),
            "atrous2d": (Atrous, (1, 3, 16, 16), ["dilated_conv"]),
            "tcn": (TCN, (1, 8, 64), ["dilated_conv", "causal_conv"]),
            "se": (SE, (1, 3, 16, 16), ["se_gate", "hardswish"]),
            "shufflenet": (Shuffle, (1, 3, 9, 9), ["channel_split", "channel_shuffle", "maxpool_ceil"])}


def _build_brevitas(mc) -> None:
    import torch
    import brevitas
    from brevitas.export import export_qonnx
    from qonnx.util.cleanup import cleanup
    bver, qver = brevitas.__version__, importlib.metadata.version("qonnx")
    print(f"Brevitas {bver}, qonnx {qver} (cnn-blocks)")
    for k, (name, (cls, shape, blocks)) in enumerate(_brevitas_nets().items()):
        mc.seed_all(SEED + 100 + k)
        model = cls()
        model.train()  # the activation quantizers' statistics from data, not their initial values
        with torch.no_grad():
            for _ in range(4):
                model(torch.rand(8, *shape[1:]))
        model.eval()
        x = torch.rand(16, *shape[1:])
        with torch.no_grad():
            y = model(x)
        stem = f"brevitas_blk_{name}"
        data = mc.save_npz(f"{stem}.npz", input=x.numpy(), output=y.numpy())
        notes = " ".join((cls.__doc__ or "").split())
        raw = f"{stem}_raw.onnx"
        with mc.quiet():
            export_qonnx(model, torch.rand(*shape), export_path=str(mc.HERE / raw))
        mc.tidy(mc.HERE / raw)
        mc.record(raw, "brevitas-blocks", "quantized", "brevitas.export.export_qonnx", bver,
                  "export_qonnx default (dynamo exporter under torch 2.13), batch fixed 1", data=data, notes=notes,
                  blocks=blocks)
        clean = f"{stem}_clean.onnx"
        with mc.quiet():
            cleanup(str(mc.HERE / raw), out_file=str(mc.HERE / clean))
        mc.tidy(mc.HERE / clean)
        mc.record(clean, "brevitas-blocks", "quantized", "brevitas export_qonnx + qonnx.util.cleanup",
                  f"brevitas {bver}, qonnx {qver}", f"qonnx cleanup of {raw}", data=data, blocks=blocks)
    for p in mc.HERE.glob("*.data"):
        p.unlink()
    mc.qonnx_oracles(("brevitas-blocks",))


# --------------------------------------------------------------------------------------------


def build_cnn_blocks(mc) -> None:
    """Every family of the group; a family whose exporter is not importable is skipped with its reason."""
    built = _build_torch(mc)
    _build_ort(mc, built)
    for family, fn in (("keras-blocks", _build_keras), ("brevitas-blocks", _build_brevitas)):
        try:
            fn(mc)
        except ImportError as exc:
            mc.SKIPPED.append({"family": family, "reason": f"exporter not importable: {exc}"})
            print(f"skipped {family}: {exc}")
