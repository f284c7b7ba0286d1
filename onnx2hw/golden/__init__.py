"""NumPy golden executor: the reference every hardware result is compared with."""
from .backend import GoldenBackend, GoldenRep
from .execute import execute, run_node, unsupported_nodes
from .registry import OPS, is_registered

__all__ = ["execute", "run_node", "unsupported_nodes", "OPS", "is_registered", "GoldenBackend", "GoldenRep"]
