"""Quantization: float / QDQ / QOperator / QONNX graphs -> exact integer graphs."""
from .arith import acc_bits, int_range, multithreshold, requantize

__all__ = ["acc_bits", "int_range", "multithreshold", "requantize"]
