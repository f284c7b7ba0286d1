"""Writes ort_unet_qdq.onnx and ort_unet_qop.onnx (committed): torch_unet.onnx quantized by onnxruntime's
quantize_static (uint8 activations, int8 weights, 32 calibration samples), in QDQ and QOperator format
(QLinearConv, QLinearConcat, Resize on uint8). Rerun: ``.venv/bin/python tests/data/make_ort_unet.py``."""
from pathlib import Path

import numpy as np
from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

HERE = Path(__file__).parent


class _Reader(CalibrationDataReader):
    def __init__(self):
        self.data = iter([{"x": np.random.default_rng(i).normal(0, 1, (1, 2, 8, 8)).astype(np.float32)}
                          for i in range(32)])

    def get_next(self):
        return next(self.data, None)


if __name__ == "__main__":
    for fmt, name in ((QuantFormat.QDQ, "ort_unet_qdq.onnx"), (QuantFormat.QOperator, "ort_unet_qop.onnx")):
        quantize_static(str(HERE / "torch_unet.onnx"), str(HERE / name), _Reader(), quant_format=fmt,
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
