"""Errors of the front end. Every user-facing failure is a :class:`ModelError`
whose message is one line naming the file, node or value at fault."""

__all__ = ["ModelError", "UnsupportedError"]


class ModelError(ValueError):
    """The model violates the ONNX IR specification or cannot be read.

    The message is always a single line: embedded newlines (for example from
    ``onnx.checker``) are folded into ``" | "``.
    """

    def __init__(self, message: object = ""):
        text = " | ".join(part.strip() for part in str(message).splitlines() if part.strip())
        super().__init__(text)


class UnsupportedError(ModelError):
    """The model is valid ONNX but uses something onnx2hw does not support."""
