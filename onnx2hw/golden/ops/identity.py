"""Identity (tensors, sequences and optionals pass through unchanged)."""

__all__ = ["run"]


def run(node, x):
    return x
