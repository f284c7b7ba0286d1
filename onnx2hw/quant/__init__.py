"""Quantization: float / QDQ / QOperator / QONNX graphs -> exact integer graphs.

:func:`to_integer_graph` imports a quantized model (the flavour is detected); :func:`quantize`
is the post-training quantizer (float model + calibration data -> QDQ model).
"""
from .convert import flavour, to_integer_graph
from .ptq import load_calibration, quantize

__all__ = ["flavour", "to_integer_graph", "quantize", "load_calibration"]
