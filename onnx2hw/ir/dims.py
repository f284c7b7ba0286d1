"""Run-time binding of symbolic dimensions (``dim_param``) from feeds."""
from __future__ import annotations

from typing import Mapping

import numpy as np
from onnx import TensorProto

from .dtypes import elem_type_name, numpy_dtype
from .errors import ModelError
from .graph import Graph

__all__ = ["bind_dims"]


def bind_dims(graph: Graph, feeds: Mapping[str, object]) -> dict[str, int]:
    """Check ``feeds`` against the graph inputs and bind every ``dim_param``.

    A ``dim_param`` name has one size across all inputs (the ONNX scope of
    dimension variables is the whole model). Feeds for overridable
    initializers are checked against their declared input type.

    Returns
    -------
    dict
        ``dim_param`` name -> size.

    Raises
    ------
    ModelError
        Naming the input (and dimension) for an unknown feed, a missing input,
        a wrong element type or rank, a fixed dimension that differs, or a
        ``dim_param`` bound to two different sizes.
    """
    declared = {vi.name: vi for vi in graph.inputs}
    for name in graph.overridable:
        declared.setdefault(name, graph.value_info.get(name))
    for name in feeds:
        if name not in declared:
            raise ModelError(f"feed {name!r} is not an input of the model "
                             f"(inputs: {', '.join(graph.input_names) or 'none'})")
    for vi in graph.inputs:
        if vi.name not in feeds:
            raise ModelError(f"no value fed for model input {vi.name!r}")
    bound: dict[str, int] = {}
    origin: dict[str, str] = {}
    for name, value in feeds.items():
        vi = declared[name]
        if vi is None or vi.kind != "tensor":
            continue  # sequences, maps, optionals: no tensor dims to bind
        array = np.asarray(value)
        if vi.elem_type == TensorProto.STRING:
            ok = array.dtype.kind in "OUS"
        elif vi.elem_type:
            ok = array.dtype == numpy_dtype(vi.elem_type)
        else:
            ok = True
        if not ok:
            raise ModelError(f"input {name!r} is fed {array.dtype} data, the model expects "
                             f"{elem_type_name(vi.elem_type)}")
        if vi.shape is None:
            continue
        if array.ndim != len(vi.shape):
            raise ModelError(f"input {name!r} is fed a rank-{array.ndim} array of shape {array.shape}, "
                             f"the model expects rank {len(vi.shape)} {list(vi.shape)}")
        for axis, (want, got) in enumerate(zip(vi.shape, array.shape)):
            if isinstance(want, int) and want != got:
                raise ModelError(f"input {name!r} dim {axis} is {got}, the model fixes it to {want}")
            if isinstance(want, str):
                if want in bound and bound[want] != got:
                    raise ModelError(f"input {name!r} dim {axis} ({want!r}) is {got}, but {want!r} = "
                                     f"{bound[want]} from {origin[want]}")
                if want not in bound:
                    bound[want] = int(got)
                    origin[want] = f"input {name!r} dim {axis}"
    return bound
