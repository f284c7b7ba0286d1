"""Every ONNX backend conformance model (valid ONNX) loads."""
from __future__ import annotations

import warnings

import pytest
from onnx.backend.test.case import model as model_cases
from onnx.backend.test.case import node as node_cases

from onnx2hw.ir import Graph, hardware_issues, load


@pytest.fixture(scope="module")
def node_testcases():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return node_cases.collect_testcases()


@pytest.mark.slow
def test_every_node_testcase_loads(node_testcases, summary):
    assert len(node_testcases) > 1800
    failures = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for case in node_testcases:
            try:
                g = load(case.model)
                assert isinstance(g, Graph) and len(g.outputs) == len(case.model.graph.output)
                hardware_issues(g)
            except Exception as exc:  # noqa: BLE001 - collect them all
                failures.append(f"{case.name}: {type(exc).__name__}: {exc}")
    assert not failures, f"{len(failures)} failed:\n" + "\n".join(failures[:20])
    summary("ir_conformance", f"ir: {len(node_testcases)} ONNX node conformance models load")


def test_model_testcases_load(summary):
    cases = model_cases.collect_testcases()
    loaded, downloads = [], []
    for case in cases:
        if case.model is None:
            downloads.append(case.name)
            continue
        g = load(case.model)
        assert len(g.nodes) >= 1
        loaded.append(case.name)
    print(f"skipped {len(downloads)} model test cases that need downloads: {', '.join(downloads)}")
    assert loaded
    summary("ir_model_cases", f"ir: {len(loaded)} in-memory ONNX model tests load; "
                              f"{len(downloads)} need downloads (not run)")
