"""IR front end: ONNX file or ``ModelProto`` -> validated :class:`Graph`."""
from .errors import ModelError, UnsupportedError
from .graph import Dim, Graph, Node, ValueInfo
from .load import load

__all__ = ["load", "Graph", "Node", "ValueInfo", "Dim", "ModelError", "UnsupportedError"]
