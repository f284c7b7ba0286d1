"""The golden executor as an ``onnx.backend.base.Backend`` (CPU only).

``GoldenBackend.prepare(model)`` loads the model with :func:`onnx2hw.ir.load` and
raises :class:`~onnx2hw.ir.UnsupportedError` if any node has no golden op;
``rep.run(inputs)`` takes a list (in graph-input order) or a dict of arrays and
returns the outputs in graph order.
"""
from __future__ import annotations

from collections import namedtuple
from typing import Any, Mapping, Sequence

import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep, Device, DeviceType

from ..ir import load
from ..ir.errors import UnsupportedError
from ..ir.graph import Graph
from .execute import execute, unsupported_nodes

__all__ = ["GoldenBackend", "GoldenRep", "prepare", "run_model", "supports_device"]


class GoldenRep(BackendRep):
    """A prepared model: ``run(inputs)`` -> outputs in graph order (a namedtuple-like tuple)."""

    def __init__(self, graph: Graph, proto_inputs: Sequence[str] = ()):
        self.graph = graph
        #: every graph input in file order, initializer-backed ones included
        self.proto_inputs = tuple(proto_inputs) or graph.input_names

    def _feeds(self, inputs: Any) -> dict[str, Any]:
        if isinstance(inputs, Mapping):
            return dict(inputs)
        if isinstance(inputs, np.ndarray):
            inputs = [inputs]
        inputs = list(inputs)
        names = self.graph.input_names
        if len(inputs) != len(names):
            # older models list their weights as inputs too: match the file order
            if len(inputs) > len(self.proto_inputs):
                raise ValueError(f"got {len(inputs)} inputs, the model takes {len(names)} ({', '.join(names)})")
            names = self.proto_inputs[:len(inputs)]
        return dict(zip(names, inputs))

    def run(self, inputs: Any, **kwargs: Any) -> tuple:
        outputs = execute(self.graph, self._feeds(inputs))
        names = self.graph.output_names
        fields = [n if n.isidentifier() and not n.startswith("_") else f"output_{i}" for i, n in enumerate(names)]
        try:
            return namedtuple("Outputs", fields)(*(outputs[n] for n in names))
        except ValueError:  # duplicate or keyword field names
            return tuple(outputs[n] for n in names)


class GoldenBackend(Backend):
    """ONNX backend API over the golden NumPy executor (device ``"CPU"`` only)."""

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return Device(device).type == DeviceType.CPU

    @classmethod
    def is_compatible(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> bool:
        try:
            return cls.supports_device(device) and not unsupported_nodes(load(model))
        except Exception:
            return False

    @classmethod
    def prepare(cls, model: onnx.ModelProto | str | bytes, device: str = "CPU", **kwargs: Any) -> GoldenRep:
        if not cls.supports_device(device):
            raise ValueError(f"device {device!r} is not supported (only 'CPU')")
        if not isinstance(model, onnx.ModelProto):
            model = onnx.load_model_from_string(model) if isinstance(model, bytes) else onnx.load(model)
        graph = load(model)
        missing = unsupported_nodes(graph)
        if missing:
            raise UnsupportedError("golden executor has no implementation for: " + ", ".join(missing))
        return GoldenRep(graph, [vi.name for vi in model.graph.input])

    @classmethod
    def run_model(cls, model: onnx.ModelProto, inputs: Any, device: str = "CPU", **kwargs: Any) -> tuple:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(cls, node: onnx.NodeProto, inputs: Any, device: str = "CPU",
                 outputs_info=None, **kwargs: Any) -> tuple:
        raise NotImplementedError("GoldenBackend runs whole models; wrap the node in a model "
                                  "(onnx.helper.make_model) and use run_model")


prepare = GoldenBackend.prepare
run_model = GoldenBackend.run_model
supports_device = GoldenBackend.supports_device
