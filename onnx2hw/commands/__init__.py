"""One module per CLI verb (see onnx2hw.cli)."""

__all__ = ["UsageError"]


class UsageError(Exception):
    """A bad option or input file detected by a command (printed as ``error: ...``).

    Defined here rather than in ``onnx2hw.cli`` so that ``python -m onnx2hw.cli`` (which loads
    the CLI module a second time as ``__main__``) still catches it.
    """
