"""NumPy golden executor: the reference every hardware result is compared with."""
from .backend import GoldenBackend, GoldenRep
from .execute import execute, unsupported_nodes
from .registry import OPS, is_registered

__all__ = ["execute", "unsupported_nodes", "OPS", "is_registered", "GoldenBackend", "GoldenRep"]
