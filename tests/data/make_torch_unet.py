"""Writes torch_unet.onnx (committed): a tiny U-Net (conv -> maxpool -> conv -> nn.Upsample x2 nearest ->
torch.cat with the skip -> conv) exported by torch.onnx.export (TorchScript exporter, opset 13, dynamic
batch), as users export it. Needs torch: ``/work/exporters-venv/bin/python tests/data/make_torch_unet.py``."""
from pathlib import Path

import torch


class TinyUNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = torch.nn.Conv2d(2, 4, 3, padding=1)
        self.mid = torch.nn.Conv2d(4, 6, 3, padding=1)
        self.up = torch.nn.Upsample(scale_factor=2, mode="nearest")
        self.dec = torch.nn.Conv2d(10, 3, 3, padding=1)

    def forward(self, x):
        skip = torch.relu(self.enc(x))
        m = torch.relu(self.mid(torch.nn.functional.max_pool2d(skip, 2)))
        return self.dec(torch.cat([self.up(m), skip], dim=1))


if __name__ == "__main__":
    torch.manual_seed(3)
    torch.onnx.export(TinyUNet().eval(), (torch.randn(1, 2, 8, 8),), str(Path(__file__).with_name("torch_unet.onnx")),
                      dynamo=False, opset_version=13, input_names=["x"], output_names=["y"],
                      dynamic_axes={"x": {0: "N"}, "y": {0: "N"}})
