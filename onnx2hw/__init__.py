"""onnx2hw: ONNX models compiled into streaming dataflow accelerators for Lattice FPGA boards.

The Python API (the CLI verbs are thin wrappers over it)::

    import onnx2hw
    design = onnx2hw.compile("examples/digits_mlp.onnx", calib="examples/digits_calib.npz")
    y = design.simulate(x)                  # float outputs by name, bit-exact against the golden model
    result = design.build("build/mlp")      # -> BuildResult (bitstream, resources, Fmax, inferences/s)
    with onnx2hw.driver.Accelerator.open(result, port="/dev/ttyUSB0") as acc:
        y = acc.run(x)

The names below load on first use (PEP 562): importing a subpackage (``onnx2hw.ir``, or
``onnx2hw.sim._stream`` in every cocotb simulator process) must not pull in the whole compiler.
"""
from __future__ import annotations

import importlib

__all__ = ["compile", "Design", "BuildResult", "Resource", "open_build", "MismatchError", "ModelError", "driver"]

#: public name -> module that defines it (``None``: the name is a subpackage)
_HOME = {"compile": ".design", "Design": ".design", "MismatchError": ".design", "BuildResult": ".build",
         "Resource": ".build", "open_build": ".build", "ModelError": ".ir.errors", "driver": None}


def __getattr__(name: str):
    if name not in _HOME:
        raise AttributeError(f"module 'onnx2hw' has no attribute {name!r}")
    home = _HOME[name]
    value = importlib.import_module(f".{name}" if home is None else home, __name__)
    if home is not None:
        value = getattr(value, name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
