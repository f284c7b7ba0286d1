"""Selection of the ONNX backend conformance cases the golden executor must pass.

A case is *included* when every op it uses (in the main graph and any sub-graph)
is in :data:`onnx2hw.golden.registry.OPS` and it is not in :data:`EXCLUDED`, the one
list of known exclusions with their reasons. Node cases come from
``onnx.backend.test.case.node.collect_testcases()`` (built in memory, with inputs
and expected outputs); model cases from the data shipped in the onnx wheel
(``simple``, ``pytorch-operator``, ``pytorch-converted``, ``light``).
"""
from __future__ import annotations

import glob
import os
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import onnx
from onnx import numpy_helper

from .registry import is_registered

__all__ = ["EXCLUDED", "Case", "model_ops", "is_supported", "node_cases", "model_cases"]

#: conformance case name -> why the golden executor does not (have to) pass it
EXCLUDED: dict[str, str] = {
    **{name: "training-mode Dropout with ratio > 0: the expected output is a random mask drawn "
             "with NumPy's legacy RNG (np.random.seed(0)); the golden executor is for inference "
             "and rejects training mode with a ModelError"
       for name in ("test_training_dropout", "test_training_dropout_mask",
                    "test_training_dropout_default", "test_training_dropout_default_mask")},
    **{f"test_resize_{name}": "Resize with mode linear or cubic: the golden executor (and the hardware "
                              "path) implement mode nearest only and refuse the others with an error naming the node"
       for name in ("upsample_scales_linear", "upsample_scales_linear_align_corners", "downsample_scales_linear",
                    "downsample_scales_linear_align_corners", "upsample_scales_cubic",
                    "upsample_scales_cubic_align_corners", "downsample_scales_cubic",
                    "downsample_scales_cubic_align_corners", "upsample_sizes_cubic", "downsample_sizes_cubic",
                    "upsample_scales_cubic_A_n0p5_exclude_outside", "downsample_scales_cubic_A_n0p5_exclude_outside",
                    "upsample_scales_cubic_asymmetric", "tf_crop_and_resize", "tf_crop_and_resize_extrapolation_value",
                    "downsample_sizes_linear_pytorch_half_pixel", "downsample_scales_linear_antialias",
                    "downsample_sizes_linear_antialias", "downsample_scales_cubic_antialias",
                    "downsample_sizes_cubic_antialias", "tf_crop_and_resize_axes_2_3", "tf_crop_and_resize_axes_3_2",
                    "downsample_scales_linear_half_pixel_symmetric", "upsample_scales_linear_half_pixel_symmetric")},
}

_DATA = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data")


@dataclass
class Case:
    """One conformance case: a model and its ``(inputs, expected outputs)`` data sets."""

    name: str
    kind: str  # "node", "simple", "pytorch-operator", "pytorch-converted", "light"
    model: onnx.ModelProto
    load_data: Callable[[], list[tuple[list, list]]] = field(repr=False)
    rtol: float = 1e-3
    atol: float = 1e-7


def _graph_ops(graph: onnx.GraphProto, out: set) -> set:
    for node in graph.node:
        out.add(("" if node.domain == "ai.onnx" else node.domain, node.op_type))
        for a in node.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                _graph_ops(a.g, out)
            for g in a.graphs:
                _graph_ops(g, out)
    return out


def model_ops(model: onnx.ModelProto) -> set[tuple[str, str]]:
    """Every ``(domain, op_type)`` the model's graph and sub-graphs use."""
    return _graph_ops(model.graph, set())


def is_supported(model: onnx.ModelProto) -> bool:
    """True when every op of ``model`` has a golden implementation."""
    return all(is_registered(d, op) for d, op in model_ops(model))


def _to_array(value):
    if isinstance(value, onnx.TensorProto):
        return numpy_helper.to_array(value)
    if isinstance(value, onnx.SequenceProto):
        return numpy_helper.to_list(value)
    if isinstance(value, onnx.OptionalProto):
        return numpy_helper.to_optional(value)
    return value


def node_cases() -> list[Case]:
    """All node conformance cases (slow: builds ~1900 models, ~15 s)."""
    from onnx.backend.test.loader import load_model_tests

    cases = []
    for tc in load_model_tests(kind="node"):
        def data(tc=tc):
            return [([_to_array(v) for v in ins], [_to_array(v) for v in outs]) for ins, outs in tc.data_sets]
        cases.append(Case(tc.name, "node", tc.model, data, tc.rtol, tc.atol))
    return cases


def _read_pb(path: str, type_proto: onnx.TypeProto):
    with open(path, "rb") as f:
        raw = f.read()
    if type_proto.HasField("sequence_type"):
        proto = onnx.SequenceProto()
    elif type_proto.HasField("optional_type"):
        proto = onnx.OptionalProto()
    else:
        proto = onnx.TensorProto()
    proto.ParseFromString(raw)
    return _to_array(proto)


def _dir_data(case_dir: str, model: onnx.ModelProto):
    sets = []
    for d in sorted(glob.glob(os.path.join(case_dir, "test_data_set_*"))):
        ins = [_read_pb(os.path.join(d, f"input_{i}.pb"), model.graph.input[i].type)
               for i in range(len(glob.glob(os.path.join(d, "input_*.pb"))))]
        outs = [_read_pb(os.path.join(d, f"output_{i}.pb"), model.graph.output[i].type)
                for i in range(len(glob.glob(os.path.join(d, "output_*.pb"))))]
        sets.append((ins, outs))
    return sets


def _light_data(path: str, model: onnx.ModelProto):
    # onnx's runner feeds arange(n)/n (Runner.generate_dummy_data) to each real input
    from onnx.backend.test.runner import Runner

    inits = {t.name for t in model.graph.initializer}
    ins = [Runner.generate_dummy_data(x, random=False) for x in model.graph.input if x.name not in inits]
    outs = [_read_pb(os.path.splitext(path)[0] + f"_output_{i}.pb", model.graph.output[i].type)
            for i in range(len(model.graph.output))]
    return [(ins, outs)]


def model_cases(data_dir: str = _DATA) -> list[Case]:
    """The ``simple``, ``pytorch-operator``, ``pytorch-converted`` and ``light`` model
    cases shipped with onnx (the ``light`` models get onnx's dummy inputs)."""
    import json

    cases = []
    for kind in ("simple", "pytorch-operator", "pytorch-converted"):
        for case_dir in sorted(glob.glob(os.path.join(data_dir, kind, "test_*"))):
            model_path = os.path.join(case_dir, "model.onnx")
            if not os.path.exists(model_path):
                continue
            model = onnx.load(model_path)
            tol = {}
            if os.path.exists(os.path.join(case_dir, "data.json")):
                with open(os.path.join(case_dir, "data.json")) as f:
                    tol = json.load(f)
            cases.append(Case(os.path.basename(case_dir), kind, model,
                              lambda d=case_dir, m=model: _dir_data(d, m),
                              tol.get("rtol", 1e-3), tol.get("atol", 1e-7)))
    for real_dir in sorted(glob.glob(os.path.join(data_dir, "real", "test_*"))):
        with open(os.path.join(real_dir, "data.json")) as f:
            info = json.load(f)
        path = os.path.join(data_dir, "light", os.path.basename(info["url"]))
        if not info["url"].startswith("onnx/backend/test/data/light/") or not os.path.exists(path):
            continue
        model = onnx.load(path)
        cases.append(Case(os.path.basename(real_dir), "light", model,
                          lambda p=path, m=model: _light_data(p, m), info.get("rtol", 1e-3), info.get("atol", 1e-7)))
    return cases
