"""Parametrized Amaranth streaming operator blocks."""
from .cost import Cost

__all__ = ["Cost"]
