"""The host/hardware partition: ``split(graph) -> Split(core, tail)``.

The hardware runs the largest quantized core of a model; the **host tail** is what follows the
core's last quantized (or accumulator) tensor and is better done in float on the host, exactly
as the golden executor defines it: Softmax / LogSoftmax / ArgMax / TopK heads, a Sigmoid or
Tanh head, a final float affine (scale, bias, Brevitas' TensorNorm, BatchNormalization), the
QuantizeLinear/DequantizeLinear after such a head, and reshapes at the output.

Rule. Walking back from the graph outputs, a node belongs to the tail when its op can run on the
host (:data:`HEAD_OPS`, :data:`EDGE_OPS`, or an elementwise op with one non-constant operand)
and every reader of its outputs is in the tail. Edge ops (reshapes, quantizers) at the start of
the tail then go back to the hardware, so that a graph ending ``Conv -> Q -> DQ`` keeps its
requantizer in hardware and a tail is left only when it holds real host work. Each tensor of the
core the tail reads (a **cut**: one per model output whose head runs on the host) becomes an
output of the hardware, beside the model outputs the hardware computes itself. A tail that would
read a model input keeps the model whole (no tail), and the op check names what the hardware
cannot run.

``host`` (``--host NODE``) moves named nodes, and everything computed from them, to the host.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
from onnx import TensorProto
from onnx import helper
from onnx.helper import np_dtype_to_tensor_dtype

from ..golden import execute, unsupported_nodes
from ..ir.errors import ModelError, UnsupportedError
from ..ir.graph import Graph, Node, ValueInfo
from ..layers.qonnx import DOMAINS as QONNX_DOMAINS

__all__ = ["Split", "split", "HEAD_OPS", "EDGE_OPS"]

MS = "com.microsoft"
#: float functions of a classifier's or regressor's head: on the host when they end the model
HEAD_OPS = frozenset({("", "Softmax"), ("", "LogSoftmax"), ("", "Hardmax"), ("", "ArgMax"), ("", "ArgMin"),
                      ("", "TopK"), ("", "Sigmoid"), ("", "Tanh"), (MS, "QLinearSoftmax"), (MS, "QLinearSigmoid")})
#: layout and quantizer ops: on the host only after other host work
EDGE_OPS = frozenset({("", op) for op in ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Transpose",
                                          "Cast", "Dropout", "QuantizeLinear", "DequantizeLinear")}
                     | {(d, op) for d in QONNX_DOMAINS for op in ("Quant", "BipolarQuant", "Trunc")})
#: elementwise float ops: on the host when all but one operand are constants
AFFINE_OPS = frozenset({("", op) for op in ("Mul", "Add", "Sub", "Div", "BatchNormalization")})
_QUANTIZERS = {"QuantizeLinear", "Quant", "BipolarQuant", "MultiThreshold"}
#: input index of the output zero point of quantized ops (whose output type it gives)
_OUTPUT_ZP = {("", "QuantizeLinear"): 2, ("", "QLinearConv"): 7, ("", "QLinearMatMul"): 7, (MS, "QGemm"): 8,
              (MS, "QLinearAdd"): 7, (MS, "QLinearMul"): 7, (MS, "QLinearAveragePool"): 4,
              (MS, "QLinearGlobalAveragePool"): 4, (MS, "QLinearConcat"): 1, (MS, "QLinearSigmoid"): 4,
              (MS, "QLinearLeakyRelu"): 4, (MS, "QLinearSoftmax"): 4}


@dataclass(frozen=True)
class Split:
    """``core``: the model up to the cuts (its outputs: the cut tensors, then the model outputs
    it computes itself); ``tail``: the host's graph from the cuts to the other model outputs,
    or ``None`` when the hardware computes them all."""

    core: Graph
    tail: Graph | None

    @property
    def cuts(self) -> tuple[str, ...]:
        """The tensors the hardware hands over to the host (none without a tail)."""
        return () if self.tail is None else self.tail.input_names

    @property
    def cut(self) -> str | None:
        """The first tensor the hardware hands over to the host, or ``None`` without a tail."""
        return self.cuts[0] if self.cuts else None


def _constants(graph: Graph) -> set[str]:
    """Initializers and what nodes compute from them alone (e.g. TensorNorm's ``sqrt(var + eps)``)."""
    const = set(graph.initializers)
    for n in graph.nodes:
        if (n.inputs or n.op_type == "Constant") and all(not i or i in const for i in n.inputs):
            const.update(o for o in n.outputs if o)
    return const


def _host_capable(node: Node, const: set[str]) -> bool:
    key = (node.domain, node.op_type)
    if key in HEAD_OPS or key in EDGE_OPS:
        return True
    data = [i for i in node.inputs if i and i not in const]
    if key in AFFINE_OPS:
        return len(data) == 1
    # a constant computation that only the tail reads
    return not data and (bool(node.inputs) or node.op_type == "Constant")


def _readers(graph: Graph) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for i, n in enumerate(graph.nodes):
        for name in n.inputs:
            if name:
                out.setdefault(name, []).append(i)
    return out


def _descendants(graph: Graph, start: set[int], readers) -> set[int]:
    todo, seen = list(start), set(start)
    while todo:
        for o in graph.nodes[todo.pop()].outputs:
            for r in readers.get(o, ()):
                if r not in seen:
                    seen.add(r)
                    todo.append(r)
    return seen


def _entries(graph: Graph, tail: set[int], const: set[str]) -> set[str]:
    """The tensors the tail reads from the core (constants are not core tensors)."""
    made = {o for i in tail for o in graph.nodes[i].outputs if o}
    return {name for i in tail for name in graph.nodes[i].inputs if name and name not in made and name not in const}


def _auto_tail(graph: Graph, readers, const: set[str]) -> set[int]:
    outputs = set(graph.output_names)
    tail: set[int] = set()
    #: tail nodes whose value is quantized again before any head op: an affine op before them
    #: (a layer's bias or scale) belongs to the layer, in hardware
    requantized: set[int] = set()
    for i in range(len(graph.nodes) - 1, -1, -1):
        node = graph.nodes[i]
        if not _host_capable(node, const):
            continue
        outs = [o for o in node.outputs if o]
        if not (outs and all(all(r in tail for r in readers.get(o, ())) and (readers.get(o) or o in outputs)
                             for o in outs)):
            continue
        after = [graph.nodes[r] for o in outs for r in readers.get(o, ())]
        requant = any(n.op_type in _QUANTIZERS or (id(n) in requantized and (n.domain, n.op_type) not in HEAD_OPS)
                      for n in after)
        if (node.domain, node.op_type) in AFFINE_OPS and requant:
            continue
        tail.add(i)
        if requant:
            requantized.add(id(node))
    # edge ops at the start of the tail go back to the hardware
    changed = True
    while changed and tail:
        changed = False
        made = {o for i in tail for o in graph.nodes[i].outputs if o}
        for i in sorted(tail):
            node = graph.nodes[i]
            first = all(not n or n not in made for n in node.inputs)
            computed = any(n and n not in const for n in node.inputs)   # a quantizer of a constant stays
            if first and computed and (node.domain, node.op_type) in EDGE_OPS:
                tail.discard(i)
                changed = True
                break
    if tail and not any((graph.nodes[i].domain, graph.nodes[i].op_type) not in EDGE_OPS for i in tail):
        return set()
    return tail


def split(graph: Graph, host=()) -> Split:
    """Partition ``graph`` (see the module docstring); ``host`` names nodes forced onto the host.

    Raises :class:`ModelError` for an unknown node name, and :class:`UnsupportedError` when the
    forced tail starts at a model input or holds an op the golden executor cannot run.
    """
    readers = _readers(graph)
    by_name = {n.name: i for i, n in enumerate(graph.nodes)}
    unknown = [h for h in host if h not in by_name]
    if unknown:
        raise ModelError(f"--host names no node of the model: {', '.join(map(repr, unknown))}")
    const = _constants(graph)
    tail = _auto_tail(graph, readers, const)
    forced = bool(host)
    if forced:
        tail |= _descendants(graph, {by_name[h] for h in host}, readers)
    if not tail:
        return Split(graph, None)
    entries = _entries(graph, tail, const)
    at_input = sorted(entries & set(graph.input_names))
    if not entries or at_input:
        if forced and at_input:
            raise UnsupportedError(f"--host {', '.join(host)} leaves nothing for the hardware: the host part "
                                   f"starts at the model input {at_input[0]!r}")
        if forced:
            raise UnsupportedError(f"--host {', '.join(host)}: the host part reads nothing the hardware computes")
        return Split(graph, None)
    cuts = _first_read(graph, tail, entries)
    vis = tuple(_cut_info(graph, cut) for cut in cuts)
    core_nodes = tuple(n for i, n in enumerate(graph.nodes) if i not in tail)
    tail_nodes = tuple(n for i, n in enumerate(graph.nodes) if i in tail)
    core_outs = {o for n in core_nodes for o in n.outputs if o} | set(graph.input_names)
    kept_outputs = tuple(v for v in graph.outputs if v.name in core_outs and v.name not in cuts)
    core = _subgraph(graph, core_nodes, graph.inputs, vis + kept_outputs, graph.name)
    tail_outputs = tuple(v for v in graph.outputs if v not in kept_outputs)
    host_graph = _subgraph(graph, tail_nodes, vis, tail_outputs, f"{graph.name or 'model'}_host")
    missing = unsupported_nodes(host_graph)
    if missing:
        raise UnsupportedError(f"the host part of the model holds ops the golden executor cannot run: "
                               f"{', '.join(missing)}")
    return Split(core, host_graph)


def _first_read(graph: Graph, tail: set[int], entries: set[str]) -> tuple[str, ...]:
    """The cut tensors in the order the tail's nodes (in graph order) first read them."""
    order = [name for i in sorted(tail) for name in graph.nodes[i].inputs if name in entries]
    return tuple(dict.fromkeys(order))


def _cut_info(graph: Graph, cut: str) -> ValueInfo:
    """The cut tensor's type: from shape inference, else from the node that makes it (ops of
    custom domains such as com.microsoft's QGemm have no shape inference)."""
    vi = graph.value_info.get(cut)
    if vi is not None and vi.kind == "tensor" and vi.elem_type and vi.shape is not None:
        return vi
    node = graph.producer_of()[cut]
    zp = _OUTPUT_ZP.get((node.domain, node.op_type))
    if node.op_type == "DequantizeLinear" and not node.domain:
        elem = TensorProto.FLOAT
    elif zp is not None and len(node.inputs) > zp and node.inputs[zp] in graph.initializers:
        elem = np_dtype_to_tensor_dtype(np.asarray(graph.initializers[node.inputs[zp]]).dtype)
    else:
        known = [graph.value_info[i].elem_type for i in node.inputs if i in graph.value_info]
        elem = known[0] if known else 0
    if not elem:
        raise ModelError(f"tensor {cut!r} (where the hardware hands over to the host) has no known type "
                         f"(shape inference could not find it)")
    return ValueInfo(cut, "tensor", elem, _run_shape(graph, cut))


def _run_shape(graph: Graph, cut: str) -> tuple:
    """The cut's shape found by running the model once on zeros (batch: the inputs' own)."""
    batch = graph.inputs[0].shape[0] if graph.inputs and graph.inputs[0].shape else None
    n = batch if isinstance(batch, int) and batch > 0 else 1
    feeds = {}
    for vi in graph.inputs:
        if vi.shape is None or any(not isinstance(d, int) for d in vi.shape[1:]):
            raise ModelError(f"model input {vi.name!r} has no fixed shape {vi.shape!r}")
        feeds[vi.name] = np.zeros((n, *vi.shape[1:]), helper.tensor_dtype_to_np_dtype(vi.elem_type))
    shape = np.shape(execute(graph, feeds, outputs=[cut])[cut])
    return (batch if batch is not None else "batch", *shape[1:])


def _subgraph(graph: Graph, nodes, inputs, outputs, name: str) -> Graph:
    used = {i for n in nodes for i in n.inputs if i}
    inits = {k: v for k, v in graph.initializers.items() if k in used}
    names = used | {o for n in nodes for o in n.outputs} | {v.name for v in (*inputs, *outputs)}
    return dataclasses.replace(
        graph, name=name, nodes=tuple(nodes), inputs=tuple(inputs), outputs=tuple(outputs), initializers=inits,
        overridable=frozenset(graph.overridable & set(inits)),
        value_info={k: v for k, v in graph.value_info.items() if k in names},
        sparse_initializers=frozenset(graph.sparse_initializers & set(inits)))
