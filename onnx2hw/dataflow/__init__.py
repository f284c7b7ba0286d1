"""Dataflow compiler: IntegerGraph + board budget -> Pipeline."""
from .support import HW_SUPPORT, hw_support

__all__ = ["HW_SUPPORT", "hw_support"]
