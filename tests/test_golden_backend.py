"""ONNX backend conformance of the golden executor, plus the Backend API.

onnx 1.23's ``onnx.backend.test.BackendTest`` does build node cases in memory
(``collect_testcases``), but it registers every one of its ~3800 case/device
pairs as a unittest method and skips the ones a backend cannot run. Instead this
module parametrizes only the cases :mod:`onnx2hw.golden.conformance` includes
(every op registered, not in ``EXCLUDED``) and compares with onnx's own
``Runner.assert_similar_outputs`` and each case's tolerances.
"""
from __future__ import annotations

import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.backend.test.runner import Runner

from onnx2hw.golden import GoldenBackend
from onnx2hw.golden import conformance as C
from onnx2hw.golden.registry import OPS
from onnx2hw.ir import ModelError, UnsupportedError

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # onnx's case generators overflow casts on purpose
    ALL = C.node_cases() + C.model_cases()
SUPPORTED = [c for c in ALL if C.is_supported(c.model)]
INCLUDED = [c for c in SUPPORTED if c.name not in C.EXCLUDED]
EXCLUDED = [c for c in SUPPORTED if c.name in C.EXCLUDED]
_passed: set[str] = set()


def _check(case: C.Case) -> None:
    rep = GoldenBackend.prepare(case.model, "CPU")
    for inputs, expected in case.load_data():
        Runner.assert_similar_outputs(expected, rep.run(inputs), rtol=case.rtol, atol=case.atol,
                                      model_dir=case.name)


@pytest.fixture(scope="module", autouse=True)
def _report(summary):
    yield
    kinds = sorted({c.kind for c in INCLUDED})
    per_kind = ", ".join(f"{k} {sum(c.kind == k for c in INCLUDED)}" for k in kinds)
    summary("conformance", f"ONNX conformance (golden): {len(INCLUDED)} included ({per_kind}), "
                           f"{len(_passed)} passed, {len(EXCLUDED)} excluded, "
                           f"{len(ALL) - len(SUPPORTED)} use unregistered ops")


@pytest.mark.parametrize("case", INCLUDED, ids=[c.name for c in INCLUDED])
def test_conformance(case):
    _check(case)
    _passed.add(case.name)


def test_selection_covers_core_ops():
    names = {c.name for c in INCLUDED}
    # one representative per op family this executor implements, and one per model kind
    for name in ("test_add", "test_div_int32_trunc", "test_cast_FLOAT_to_INT4", "test_reshape_zero_dim",
                 "test_slice_neg_steps", "test_reflect_pad", "test_argmax_keepdims_example_select_last_index",
                 "test_reduce_mean_keepdims_random", "test_softmax_axis_0", "test_constant",
                 "test_single_relu_model", "test_operator_pad", "test_ReflectionPad2d", "test_squeezenet"):
        assert name in names, name
    assert len(INCLUDED) >= 500


def test_selection_rule_is_all_ops_registered():
    for case in ALL:
        ops = C.model_ops(case.model)
        assert (case in SUPPORTED) == all(op in OPS for op in ops), case.name


def test_excluded_cases_exist_and_still_fail():
    """Every exclusion names a real, supported case that fails; a fixed one must be removed."""
    assert {c.name for c in EXCLUDED} == set(C.EXCLUDED)
    for case in EXCLUDED:
        with pytest.raises((AssertionError, ModelError)):
            _check(case)


def _model(nodes, inputs, outputs, opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def test_backend_device_and_outputs_order():
    assert GoldenBackend.supports_device("CPU")
    assert not GoldenBackend.supports_device("CUDA")
    model = _model([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Sub", ["x", "r"], ["d"])],
                   [_vi("x", TensorProto.FLOAT, ["N", 3])],
                   [_vi("d", TensorProto.FLOAT, ["N", 3]), _vi("r", TensorProto.FLOAT, ["N", 3])])
    x = np.array([[-1.0, 2.0, -3.0], [4.0, -5.0, 6.0]], np.float32)
    d, r = GoldenBackend.run_model(model, [x])
    np.testing.assert_array_equal(r, np.maximum(x, 0))
    np.testing.assert_array_equal(d, np.minimum(x, 0))
    out = GoldenBackend.prepare(model).run({"x": x[:1]})
    np.testing.assert_array_equal(out.r, np.maximum(x[:1], 0))


def test_backend_prepare_rejects_unregistered_op():
    model = _model([helper.make_node("Exp", ["x"], ["y"])], [_vi("x", TensorProto.FLOAT, [2])],
                   [_vi("y", TensorProto.FLOAT, [2])])
    with pytest.raises(UnsupportedError, match="Exp"):
        GoldenBackend.prepare(model)
    assert not GoldenBackend.is_compatible(model)
    with pytest.raises(ValueError, match="CUDA"):
        GoldenBackend.prepare(model, "CUDA")


def test_backend_feed_errors_are_one_line():
    model = _model([helper.make_node("Add", ["x", "y"], ["z"])],
                   [_vi("x", TensorProto.FLOAT, ["N", 2]), _vi("y", TensorProto.FLOAT, ["N", 2])],
                   [_vi("z", TensorProto.FLOAT, ["N", 2])])
    rep = GoldenBackend.prepare(model)
    a = np.zeros((3, 2), np.float32)
    with pytest.raises(ModelError, match=r"input 'x' is fed float64 data"):
        rep.run([a.astype(np.float64), a])
    with pytest.raises(ModelError, match=r"input 'x' is fed a rank-1 array"):
        rep.run([a[:, 0], a])
    with pytest.raises(ModelError, match=r"input 'y' dim 0 \('N'\) is 2, but 'N' = 3"):
        rep.run([a, a[:2]])
    with pytest.raises(ModelError, match=r"no value fed for model input 'y'"):
        rep.run({"x": a})
    with pytest.raises(ModelError, match=r"feed 'w' is not an input"):
        rep.run({"x": a, "y": a, "w": a})
    with pytest.raises(ValueError, match="got 3 inputs"):
        rep.run([a, a, a])


def test_backend_reads_model_file(tmp_path):
    model = _model([helper.make_node("Identity", ["x"], ["y"])], [_vi("x", TensorProto.INT64, [2])],
                   [_vi("y", TensorProto.INT64, [2])])
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    (y,) = GoldenBackend.prepare(str(path)).run([np.array([5, -7], np.int64)])
    np.testing.assert_array_equal(y, [5, -7])
