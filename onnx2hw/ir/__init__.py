"""IR front end: ONNX file or ``ModelProto`` -> validated :class:`Graph`."""
from .dims import bind_dims
from .errors import ModelError, UnsupportedError
from .graph import Dim, Graph, Node, ValueInfo
from .hardware import hardware_issues
from .load import load
from .names import Sanitizer, is_c90_identifier, sanitize

__all__ = ["load", "bind_dims", "hardware_issues", "sanitize", "Sanitizer", "is_c90_identifier",
           "Graph", "Node", "ValueInfo", "Dim", "ModelError", "UnsupportedError"]
