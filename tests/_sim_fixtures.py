"""Small helpers shared by the RTL block tests (test-only: not part of the installed package)."""
from __future__ import annotations

import numpy as np

from onnx2hw.sim.toolchain import simulator_available

__all__ = ["random_transfers", "PAUSE_PAIRS", "require_simulator"]

#: (src_pause, sink_pause) pairs covering free-running, regular and random stalls
PAUSE_PAIRS = [("none", "none"), ("3of4", "random"), ("random", "3of4"), ("random", "random")]


def random_transfers(shape, lanes: int, n: int, seed: int = 0) -> np.ndarray:
    """``(n, lanes)`` int64 array uniformly covering the full range of an Amaranth shape."""
    from amaranth.hdl import Shape
    shape = Shape.cast(shape)
    if shape.signed:
        lo, hi = -(1 << (shape.width - 1)), 1 << (shape.width - 1)
    else:
        lo, hi = 0, 1 << shape.width
    return np.random.default_rng(seed).integers(lo, hi, size=(n, lanes), dtype=np.int64)


def require_simulator(name: str = "verilator") -> None:
    """``pytest.skip`` with the reason when an HDL simulator cannot run here."""
    reason = simulator_available(name)
    if reason:
        import pytest
        pytest.skip(f"{name} unavailable: {reason}")
