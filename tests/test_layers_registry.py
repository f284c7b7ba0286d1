"""The layer registry is the one answer to "is this op supported, and how?": the importers'
handler tables, the float quantizer's op sets, the pre-import check, inspect's column and the
README's table all come from it."""
import re

import pytest

from onnx2hw import layers
from onnx2hw.layers import PATTERNS, KINDS, LayerKind, handlers, ptq_ops, support
from onnx2hw.quant import _canonical, import_qdq, import_qonnx, import_qop
from onnx2hw.ir import load
from onnx2hw.summary import summarize

from _paths import ROOT


def test_importers_and_quantizer_use_exactly_the_registry():
    handled = set(import_qdq.HANDLERS) | set(import_qop.HANDLERS) | set(import_qonnx.HANDLERS)
    handled |= {("", op) for op in _canonical.SUPPORTED}
    assert set(PATTERNS) == handled, (sorted(handled - set(PATTERNS)), sorted(set(PATTERNS) - handled))
    for flavour, table in (("qdq", import_qdq.HANDLERS), ("qoperator", import_qop.HANDLERS),
                           ("qonnx", import_qonnx.HANDLERS)):
        assert table == handlers(flavour)


def test_unknown_op_has_no_mapping():
    assert support("", "Softmax") is None and support("", "Gemm")
    with pytest.raises(ValueError, match="flavour"):
        handlers("float")


def test_ptq_roles_partition_the_float_ops():
    roles = [ptq_ops(r) for r in ("layer", "pass", "fold")]
    assert set().union(*roles) == ptq_ops() == _canonical.SUPPORTED
    assert sum(len(r) for r in roles) == len(ptq_ops())
    assert {"Conv", "Gemm", "Add"} <= roles[0] and "MaxPool" in roles[1] and "BatchNormalization" in roles[2]


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.__name__)
def test_every_kind_declares_its_whole_interface(kind):
    assert issubclass(kind, LayerKind)
    for method in ("validate", "reference", "lower"):
        assert getattr(kind, method) is not getattr(LayerKind, method), f"{kind.__name__} lacks {method}"
    module = __import__(kind.__module__, fromlist=["PATTERNS"])
    assert module.PATTERNS, f"{kind.__module__} declares no ONNX pattern"


def test_readme_table_is_the_registry():
    readme = (ROOT / "README.md").read_text()
    m = re.search(r"<!-- ops:begin -->\n(.*?)<!-- ops:end -->", readme, re.S)
    assert m, "README lacks the generated supported-ops table"
    assert m.group(1) == layers.support_table(), "README's op table is stale: python -m onnx2hw.layers --readme"


def test_inspect_column_is_the_registry():
    graph = load(str(ROOT / "examples" / "digits_mlp.onnx"))
    rows = summarize(graph).hardware
    assert rows
    for node in graph.nodes:
        row = next(r for r in rows if r["op"] == (f"{node.domain}::{node.op_type}" if node.domain else node.op_type))
        assert row["supported"] == (support(node.domain, node.op_type) is not None)
        assert row["supported"] is False or row["mapping"] == support(node.domain, node.op_type)


def test_independence_contract_lists_every_kind_module():
    """pyproject.toml's "layer kinds stand alone" contract names every kind module and no other
    (a kind added to the registry without it would escape the check)."""
    import tomllib

    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    listed = next(c["modules"] for c in contracts if c["type"] == "independence")
    assert sorted(listed) == sorted(m.__name__ for m in layers.KIND_MODULES)


@pytest.mark.parametrize("model", ["digits_cnn_res_int8.onnx", "digits_mlp_int8.onnx"])
def test_stage_ports_match_its_links(model):
    """The accelerator wires a stage by its blocks' stream ports in signature order: the first
    block has one input port per input tensor, the last one output port per link leaving it
    (two for a fork)."""
    import onnx2hw
    from onnx2hw.rtl.stage import stream_ports

    p = onnx2hw.compile(str(ROOT / "examples" / model)).pipeline
    for stage in p.stages:
        first, last = (b.block(**b.params) for b in (stage.blocks[0], stage.blocks[-1]))
        assert len(stream_ports(first)[0]) == len(stage.inputs), stage.name
        assert len(stream_ports(last)[1]) == sum(link.src == stage.name for link in p.links), stage.name


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.__name__)
def test_every_kind_lowers_with_a_product_style_argument(kind):
    """The dataflow calls every kind's ``lower`` alike (``mul=None``: the blocks' choice)."""
    import inspect

    param = inspect.signature(kind.lower).parameters.get("mul")
    assert param is not None and param.default is None


def test_every_float_op_declares_what_the_quantizer_needs():
    """The post-training quantizer reads an op's handling from its pattern only: an op it removes
    has a canonical function, a linear layer and a fused op have their own quantizer when they
    stand alone (role layer), and the declarations are checked when a pattern is made."""
    from onnx2hw.layers.base import FUSES, Linear, Pattern

    floats = [p for p in PATTERNS.values() if p.ptq]
    for p in floats:
        assert p.ptq != "fold" or p.canonical is not None, f"{p.op_type} is removed but declares no canonical form"
        assert p.linear is None or p.ptq == "layer", p.op_type
        assert p.fuse is None or (p.fuse in FUSES and p.ptq == "layer"), p.op_type
    assert {p.fuse for p in floats} == {None, *FUSES} and any(p.linear for p in floats)
    for p in PATTERNS.values():
        if not p.ptq:
            assert (p.canonical, p.linear, p.fuse, p.const_inputs) == (None, None, None, None), p.op_type
    for bad in (dict(linear=Linear()), dict(fuse="clamp"), dict(ptq="pass", linear=Linear()),
                dict(ptq="layer", fuse="relu")):
        with pytest.raises(ValueError, match="'Op'"):
            Pattern("", "Op", "-", None, frozenset(), **bad)
    with pytest.raises(ValueError, match="gram or mean"):
        Linear(stat="max")


def test_the_quantizer_names_no_float_op():
    """quant/ptq.py and quant/_canonical.py branch on declarations, never on an op's name."""
    import ast

    for module in ("ptq.py", "_canonical.py"):
        tree = ast.parse((ROOT / "onnx2hw" / "quant" / module).read_text())
        strings = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
        assert not strings & ptq_ops(), (module, sorted(strings & ptq_ops()))


@pytest.mark.parametrize("op", sorted(p.op_type for p in PATTERNS.values() if p.linear))
def test_linear_declarations_match_the_canonical_forms(op):
    """The weight and bias inputs and the output-channel axis a linear op declares are where its
    canonical form puts them: 3 output channels from 4 input channels."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper
    from onnx2hw.quant._canonical import prepare

    rng = np.random.default_rng(0)
    weights = {"Gemm": (4, 3), "MatMul": (4, 3), "Conv": (3, 4, 1, 1), "ConvTranspose": (4, 3, 1, 1)}[op]
    x_shape = ["N", 4] if len(weights) == 2 else ["N", 4, 2, 2]
    y_shape = ["N", 3] if len(weights) == 2 else ["N", 3, 2, 2]
    nodes = [helper.make_node(op, ["x", "w"], ["h"], name="layer"), helper.make_node("Relu", ["h"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)],
                          [numpy_helper.from_array(rng.standard_normal(weights).astype(np.float32), "w")])
    prepared = prepare(load(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)))
    node, form = prepared.nodes[0], PATTERNS[("", op)].linear
    assert prepared.initializers[node.inputs[form.weight]].shape[form.axis] == 3
    if form.bias is not None:
        assert prepared.initializers[node.inputs[form.bias]].shape == (3,)
    else:
        assert len(node.inputs) == 2
