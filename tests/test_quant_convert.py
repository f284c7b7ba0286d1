"""``onnx2hw.quant.convert``: a quantized model's format is detected and its importer chosen; a
float model is refused with the way to quantize it."""
from __future__ import annotations

import pytest

from _quant_models import cnn, mlp, quantize
from onnx2hw.ir import ModelError, load
from onnx2hw.quant.convert import flavour, to_integer_graph


def test_to_integer_graph_dispatch(tmp_path):
    m = mlp(30)
    with pytest.raises(ModelError, match="onnx2hw quantize"):
        to_integer_graph(load(m))
    qdq = load(quantize(m, tmp_path, name="a.onnx"))
    qop = load(quantize(cnn(31), tmp_path, fmt="qop", name="b.onnx"))
    assert flavour(qdq) == "qdq" and to_integer_graph(qdq).source == "qdq"
    assert flavour(qop) == "qoperator" and to_integer_graph(qop).source == "qoperator"
