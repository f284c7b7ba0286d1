"""Float-graph clean-up before post-training quantization (private to :mod:`onnx2hw.quant.ptq`).

:func:`prepare` returns an equivalent float :class:`~onnx2hw.ir.Graph` in a canonical form:

* ``Constant`` nodes become initializers; ``Identity`` and inference ``Dropout`` are removed
  (kept as ``Identity`` only where their output is a graph output);
* ``BatchNormalization`` is folded into the ``Conv``/``Gemm`` that feeds it, and so is a
  ``Mul`` or ``Add`` of a per-channel (or scalar) constant that follows one (the form tf2onnx
  gives Keras' BatchNormalization after a Dense or a Conv: ``Mul(scale)``, ``Add(shift)``);
* every ``Gemm`` is ``A @ W.T + c`` (``transB=1``, ``alpha=beta=1``, constant ``W`` of shape
  (N, K) and a 1-D constant bias of N elements); every ``Conv`` has a constant bias;
* ``Clip`` carries its bounds as constant inputs (opset >= 11 form).

Anything outside :data:`SUPPORTED` raises :class:`~onnx2hw.ir.UnsupportedError` naming the node.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ..ir.errors import ModelError, UnsupportedError
from ..ir.graph import Graph, Node
from ..ir.names import FreshNames
from ..layers import ptq_ops

__all__ = ["prepare", "SUPPORTED", "QUANT_OPS"]

#: float ops the post-training quantizer accepts (default domain; declared in :mod:`onnx2hw.layers`)
SUPPORTED = ptq_ops()

#: ops that mean the model is already quantized
QUANT_OPS = frozenset({
    "QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "QLinearConv", "QLinearMatMul",
    "MatMulInteger", "ConvInteger", "Quant", "BipolarQuant", "Trunc", "MultiThreshold", "QGemm",
    "QLinearAdd", "QLinearAveragePool", "QLinearGlobalAveragePool",
})


def _label(node: Node) -> str:
    return f"node {node.name!r} ({node.op_type})"


def _constant_value(node: Node) -> np.ndarray:
    for key in ("value", "value_float", "value_floats", "value_int", "value_ints"):
        v = node.attr(key)
        if v is not None:
            if key == "value":
                return np.asarray(v)
            dtype = np.float32 if "float" in key else np.int64
            return np.asarray(v, dtype=dtype)
    raise UnsupportedError(f"{_label(node)}: only tensor/float/int constants are supported")


def check_float_model(graph: Graph, check_ops: bool = True) -> None:
    """Reject models that are not plain float models (of supported ops, with ``check_ops``)."""
    for node in graph.nodes:
        if node.op_type in QUANT_OPS:
            raise ModelError(f"{_label(node)}: the model is already quantized; "
                             "onnx2hw quantize takes float models only")
    for vi in graph.inputs:
        if vi.kind != "tensor" or vi.elem_type != 1:
            raise ModelError(f"model input {vi.name!r} is not a float32 tensor (elem_type {vi.elem_type}); "
                             "onnx2hw quantize takes float32 models only")
    if not check_ops:
        return
    for vi in graph.outputs:
        if vi.kind != "tensor" or vi.elem_type not in (0, 1):
            raise ModelError(f"model output {vi.name!r} is not a float32 tensor (elem_type {vi.elem_type})")
    for node in graph.nodes:
        if node.domain or node.op_type not in SUPPORTED:
            op = f"{node.domain}::{node.op_type}" if node.domain else node.op_type
            raise UnsupportedError(f"node {node.name!r} ({op}) is not supported by onnx2hw quantize "
                                   f"(supported: {', '.join(sorted(SUPPORTED))})")


def prepare(graph: Graph) -> Graph:
    """Canonical float graph (see module docstring); raises on unsupported content."""
    check_float_model(graph)
    names = FreshNames(graph)
    inits = {k: np.asarray(v) for k, v in graph.initializers.items()}
    outputs = set(graph.output_names)
    alias: dict[str, str] = {}
    nodes: list[Node] = []

    def src(name: str) -> str:
        while name in alias:
            name = alias[name]
        return name

    for node in graph.nodes:
        node = dataclasses.replace(node, inputs=tuple(src(i) if i else i for i in node.inputs))
        op = node.op_type
        if op == "Constant":
            inits[node.outputs[0]] = _constant_value(node)
            continue
        if op in ("Identity", "Dropout"):
            if op == "Dropout":
                if len(node.outputs) > 1 and node.outputs[1]:
                    raise UnsupportedError(f"{_label(node)}: the mask output is not supported")
                if node.attr("training_mode") is not None or (len(node.inputs) > 2 and node.inputs[2]):
                    raise UnsupportedError(f"{_label(node)}: training_mode is not supported")
            if node.outputs[0] in outputs:
                nodes.append(Node(node.name, "Identity", "", node.inputs[:1], node.outputs[:1],
                                  since_version=node.since_version))
            else:
                alias[node.outputs[0]] = node.inputs[0]
            continue
        if op == "MaxPool" and len(node.outputs) > 1 and node.outputs[1]:
            raise UnsupportedError(f"{_label(node)}: the Indices output is not supported")
        if op == "Gemm":
            node = _canonical_gemm(node, inits, names)
        elif op == "Conv":
            node = _canonical_conv(node, inits, names)
        elif op == "MatMul":
            w = inits.get(node.inputs[1])
            if w is None or w.ndim != 2 or node.inputs[0] in inits:
                raise UnsupportedError(f"{_label(node)}: only activation @ constant 2-D weight is supported")
        elif op == "Clip":
            node = _canonical_clip(node, inits, names)
        elif op in ("Mul", "Add") and _fold_affine(node, nodes, inits, names, outputs):
            continue
        elif op == "Add":
            for i in node.inputs:
                if i in inits:
                    raise UnsupportedError(f"{_label(node)}: Add of a constant is not supported "
                                           "(only the sum of two activations)")
        elif op == "Reshape":
            if node.inputs[1] not in inits:
                raise UnsupportedError(f"{_label(node)}: Reshape needs a constant shape")
        elif op == "BatchNormalization":
            _fold_bn(node, nodes, inits, names, outputs)
            continue
        nodes.append(node)
    for vi in graph.outputs:
        if src(vi.name) != vi.name:  # pragma: no cover - outputs keep an Identity above
            raise ModelError(f"model output {vi.name!r} lost its producer")
    used = {i for n in nodes for i in n.inputs if i}
    inits = {k: v for k, v in inits.items() if k in used}
    for name, value in inits.items():
        if value.dtype.kind == "f" and not np.all(np.isfinite(value)):
            raise ModelError(f"initializer {name!r} holds NaN or infinite values")
    return dataclasses.replace(graph, nodes=tuple(nodes), initializers=inits,
                               overridable=frozenset(graph.overridable & set(inits)))


def _const(node: Node, index: int, inits, what: str) -> np.ndarray:
    name = node.inputs[index] if len(node.inputs) > index else ""
    if not name:
        return None
    if name not in inits:
        raise UnsupportedError(f"{_label(node)}: {what} {name!r} must be a constant initializer")
    return inits[name]


def _canonical_gemm(node: Node, inits, names: FreshNames) -> Node:
    if node.attr("transA", 0):
        raise UnsupportedError(f"{_label(node)}: transA=1 is not supported")
    w = _const(node, 1, inits, "weight")
    if w.ndim != 2:
        raise UnsupportedError(f"{_label(node)}: weight must be 2-D, not shape {w.shape!r}")
    w = w.astype(np.float32)
    if not node.attr("transB", 0):
        w = w.T
    alpha, beta = float(node.attr("alpha", 1.0)), float(node.attr("beta", 1.0))
    n = w.shape[0]
    c = _const(node, 2, inits, "bias")
    c = np.zeros(n, np.float32) if c is None else c.astype(np.float32) * np.float32(beta)
    try:
        c = np.broadcast_to(c, (1, n)).reshape(n) if c.ndim <= 2 and c.size in (1, n) else None
    except ValueError:
        c = None
    if c is None:
        raise UnsupportedError(f"{_label(node)}: bias must broadcast to ({n},) per output feature")
    wn, bn = names.fresh(f"{node.name or node.outputs[0]}.weight"), names.fresh(f"{node.name or node.outputs[0]}.bias")
    inits[wn] = np.ascontiguousarray(w * np.float32(alpha), np.float32)
    inits[bn] = np.ascontiguousarray(c, np.float32)
    return dataclasses.replace(node, inputs=(node.inputs[0], wn, bn), attrs={"transB": 1})


def _canonical_conv(node: Node, inits, names: FreshNames) -> Node:
    w = _const(node, 1, inits, "weight").astype(np.float32)
    b = _const(node, 2, inits, "bias")
    b = np.zeros(w.shape[0], np.float32) if b is None else b.astype(np.float32)
    base = node.name or node.outputs[0]
    wn, bn = names.fresh(f"{base}.weight"), names.fresh(f"{base}.bias")
    inits[wn], inits[bn] = w, b
    return dataclasses.replace(node, inputs=(node.inputs[0], wn, bn))


def _canonical_clip(node: Node, inits, names: FreshNames) -> Node:
    lo, hi = node.attr("min"), node.attr("max")
    if node.since_version >= 11 or (lo is None and hi is None):
        lo = _const(node, 1, inits, "min")
        hi = _const(node, 2, inits, "max")
    lo = -np.inf if lo is None else float(np.asarray(lo))
    hi = np.inf if hi is None else float(np.asarray(hi))
    base = node.name or node.outputs[0]
    ln, hn = names.fresh(f"{base}.min"), names.fresh(f"{base}.max")
    inits[ln], inits[hn] = np.float32(lo), np.float32(hi)
    return dataclasses.replace(node, inputs=(node.inputs[0], ln, hn), attrs={}, since_version=13)


def _fold_affine(node: Node, nodes: list[Node], inits, names: FreshNames, outputs: set[str]) -> bool:
    """Fold ``x * c`` or ``x + c`` (``c`` a constant per output channel or a scalar) into the Conv
    or Gemm that made ``x`` when nothing else reads ``x``; False (nothing changed) otherwise."""
    data = [i for i in node.inputs if i not in inits]
    if len(data) != 1 or len(node.inputs) != 2:
        return False
    x = data[0]
    c = inits[node.inputs[1] if node.inputs[0] == x else node.inputs[0]].astype(np.float64)
    prod = next((i for i, n in enumerate(nodes) if x in n.outputs), None)
    if prod is None or nodes[prod].op_type not in ("Conv", "Gemm") or x in outputs \
            or any(x in n.inputs for n in nodes):
        return False
    src = nodes[prod]
    w, b = inits[src.inputs[1]].astype(np.float64), inits[src.inputs[2]].astype(np.float64)
    n = w.shape[0]
    # per channel means: broadcasting to the layer's output, (N, n) for Gemm or (N, n, H, W) for
    # Conv, the constant varies along the channel axis only
    spatial = (1,) * (w.ndim - 2) if src.op_type == "Conv" else ()
    if c.ndim > 2 + len(spatial):
        return False
    try:
        v = np.broadcast_to(c, (1, n) + spatial).reshape(n)
    except ValueError:
        return False
    base = src.name or src.outputs[0]
    if node.op_type == "Mul":
        wn, bname = names.fresh(f"{base}.weight_scaled"), names.fresh(f"{base}.bias_scaled")
        inits[wn] = (w * v.reshape((-1,) + (1,) * (w.ndim - 1))).astype(np.float32)
        inits[bname] = (b * v).astype(np.float32)
    else:
        wn, bname = src.inputs[1], names.fresh(f"{base}.bias_shifted")
        inits[bname] = (b + v).astype(np.float32)
    nodes[prod] = dataclasses.replace(src, inputs=(src.inputs[0], wn, bname), outputs=(node.outputs[0],))
    return True


def _fold_bn(bn: Node, nodes: list[Node], inits, names: FreshNames, outputs: set[str]) -> None:
    """Fold ``bn`` into the Conv/Gemm that produced its input (last in ``nodes``' history)."""
    x = bn.inputs[0]
    prod = next((i for i, n in enumerate(nodes) if x in n.outputs), None)
    readers = [n for n in nodes if x in n.inputs]
    if prod is None or nodes[prod].op_type not in ("Conv", "Gemm") or readers or x in outputs:
        raise UnsupportedError(f"{_label(bn)}: can only fold a BatchNormalization whose input comes "
                               "from a Conv or Gemm read by nothing else")
    if bn.attr("training_mode", 0) or (len(bn.outputs) > 1 and any(bn.outputs[1:])):
        raise UnsupportedError(f"{_label(bn)}: training mode is not supported")
    scale, bias, mean, var = (_const(bn, i, inits, what).astype(np.float64)
                              for i, what in enumerate(("scale", "B", "mean", "var"), start=1))
    eps = float(bn.attr("epsilon", 1e-5))
    k = scale / np.sqrt(var + eps)
    src = nodes[prod]
    w, b = inits[src.inputs[1]].astype(np.float64), inits[src.inputs[2]].astype(np.float64)
    if w.shape[0] != k.size:
        raise UnsupportedError(f"{_label(bn)}: {k.size} channels do not match "
                               f"{src.name!r} with {w.shape[0]} outputs")
    base = src.name or src.outputs[0]
    wn, bname = names.fresh(f"{base}.weight_bnfold"), names.fresh(f"{base}.bias_bnfold")
    inits[wn] = (w * k.reshape((-1,) + (1,) * (w.ndim - 1))).astype(np.float32)
    inits[bname] = ((b - mean) * k + bias).astype(np.float32)
    nodes[prod] = dataclasses.replace(src, inputs=(src.inputs[0], wn, bname), outputs=(bn.outputs[0],))
