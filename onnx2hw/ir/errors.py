"""Errors of the front end. Every user-facing failure is a :class:`ModelError`
whose message is one line naming the file, node or value at fault."""

__all__ = ["ModelError", "UnsupportedError"]


class ModelError(ValueError):
    """The model violates the ONNX IR specification or cannot be read."""


class UnsupportedError(ModelError):
    """The model is valid ONNX but uses something onnx2hw does not support."""
