"""QONNX models as exporters have written them: the older ``onnx.brevitas`` domain, FINN's
``finn.custom_op.general``, or the domain missing from opset_import are accepted, each with one
warning, and import to the same exact integer graph."""
import numpy as np
import onnx
import pytest

from _paths import EXAMPLES
from onnx2hw import golden
from onnx2hw.ir import load
from onnx2hw.quant import to_integer_graph

MODEL = str(EXAMPLES / "digits_mlp_qonnx_w4a4.onnx")
QONNX = "qonnx.custom_op.general"


def _variant(domain: str | None, imported: bool) -> onnx.ModelProto:
    m = onnx.load(MODEL)
    for n in m.graph.node:
        if n.domain == QONNX:
            n.domain = domain
    keep = [imp for imp in m.opset_import if imp.domain != QONNX]
    del m.opset_import[:]
    m.opset_import.extend(keep)
    if imported:
        m.opset_import.append(onnx.helper.make_opsetid(domain, 1))
    return m


@pytest.mark.parametrize("domain, imported, warning", [
    ("onnx.brevitas", True, "older domain 'onnx.brevitas'"),
    ("onnx.brevitas", False, "older domain 'onnx.brevitas'"),
    (QONNX, False, "missing from opset_import"),
    ("finn.custom_op.general", False, "missing from opset_import"),
    ("finn.custom_op.general", True, None),
])
def test_exported_domains_import_to_the_same_integer_graph(domain, imported, warning):
    base = load(MODEL)
    want = to_integer_graph(base)
    graph = load(_variant(domain, imported))
    new = [w for w in graph.warnings if w not in base.warnings]
    assert new == ([] if warning is None else [w for w in new if warning in w]) and len(new) <= 1, new
    assert (warning is None) == (not new)
    got = to_integer_graph(graph)
    assert [(type(a), a.name) for a in got.layers] == [(type(b), b.name) for b in want.layers]
    x = np.random.default_rng(0).random((16, 64), dtype=np.float32)
    spec = want.input_specs[0].name
    feeds = golden.execute(want, {spec: np.clip(np.rint(x * 15), 0, 15).astype(np.int64)})
    again = golden.execute(got, {spec: np.clip(np.rint(x * 15), 0, 15).astype(np.int64)})
    for k in feeds:
        np.testing.assert_array_equal(again[k], feeds[k])
    # the float golden executor runs the QONNX ops in any of these domains too
    name = graph.input_names[0]
    np.testing.assert_array_equal(golden.execute(graph, {name: x})[graph.output_names[0]],
                                  golden.execute(load(MODEL), {name: x})[graph.output_names[0]])
