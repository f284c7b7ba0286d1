"""Rules on constants: weights given as graph inputs, constant sub-computations, and view ops
whose target shape is computed at run time.

- :func:`static_inputs`: an initializer that is also a graph input (IR 3 files, and exporters
  run with ``keep_initializers_as_inputs``) is a constant on the hardware path: its stored value
  is what the hardware holds. The golden executor still runs the original model, where a feed
  may override it.
- :func:`fold_constants`: every default-domain node that reads only constants, or only the
  static shape of a value (``Shape``, ``Size``), is evaluated by the golden executor and becomes
  an initializer, whatever its op (``Shape -> Gather -> Unsqueeze -> Concat``, ``Pow`` of
  constants, ``Cast``, ``ConstantOfShape``...). Quantizers and nodes of other domains stay: they
  are how a model writes its quantization, which the importers read.
- :func:`literal_views`: ``Reshape``, ``Squeeze`` and ``Unsqueeze`` that keep the
  batch first become ``Reshape`` to a literal shape (the batch as ``-1`` when it is dynamic),
  so the shape computation that fed them is left unread and goes; such a Reshape between a
  layer and its activation moves below the activation (elementwise ops commute with views).
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ..ir.graph import Graph, Node
from .edit import DEFAULT, Edit
from .trace import Trace, trace

__all__ = ["static_inputs", "fold_constants", "literal_views"]

#: default-domain ops that are not folded even with constant inputs: the quantizers (importers
#: read them) and the ops with random outputs
KEEP = frozenset({"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "RandomNormal",
                  "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial", "Bernoulli"})
#: ops whose output depends on their input's shape only
SHAPE_OPS = frozenset({"Shape", "Size"})
#: a folded constant larger than this stays computed (no initializer of that size is written)
_MAX_FOLDED = 1 << 22
#: views made literal Reshapes (``Flatten`` is one form every importer reads as it is)
_VIEWS = frozenset({"Reshape", "Squeeze", "Unsqueeze"})


def static_inputs(graph: Graph) -> Graph:
    if not graph.overridable:
        return graph
    # IR 3 files list every initializer as an input; IR 4 is the first where they need not be
    return dataclasses.replace(graph, inputs=tuple(v for v in graph.inputs if v.name not in graph.overridable),
                               overridable=frozenset(), ir_version=max(graph.ir_version, 4))


def _foldable(node: Node, const: set[str], t: Trace) -> bool:
    if node.domain != DEFAULT or node.op_type in KEEP or not node.outputs:
        return False
    data = [i for i in node.inputs if i]
    if node.op_type in SHAPE_OPS:
        ok = t.shape(data[0]) is not None and None not in t.shape(data[0])
    else:
        ok = all(i in const for i in data)
    return ok and all(o and t.same(o) and np.size(t.value(o)) <= _MAX_FOLDED for o in node.outputs)


def fold_constants(graph: Graph) -> Graph:
    t = trace(graph)
    if t is None:
        return graph
    e = Edit(graph)
    const = set(graph.initializers)
    folded = []
    for node in graph.nodes:
        if _foldable(node, const, t) and not set(node.outputs) & e.outputs:
            const.update(node.outputs)
            folded.append(node)
    if not folded:
        return graph
    for node in folded:
        e.nodes.remove(node)
        for o in node.outputs:
            e.inits[o] = np.asarray(t.value(o))
    return e.graph()


def literal_views(graph: Graph) -> Graph:
    t = trace(graph)
    if t is None:
        return graph
    e = Edit(graph)
    changed = False
    for node in graph.nodes:
        if node.domain != DEFAULT or node.op_type not in _VIEWS or not node.inputs:
            continue
        x, y = node.inputs[0], node.outputs[0]
        shape = t.shape(y)
        if shape is None or not t.batch_first(x) or not t.batch_first(y) or None in shape[1:]:
            continue
        target = (-1 if shape[0] is None else shape[0],) + shape[1:]
        if node.op_type == "Reshape" and e.is_const(node.inputs[1]) and \
                tuple(np.asarray(e.inits[node.inputs[1]]).tolist()) == target:
            continue
        e.replace(node, dataclasses.replace(node, op_type="Reshape", domain=DEFAULT, attrs={},
                                            inputs=(x, e.const(f"{y}_shape", np.asarray(target, np.int64)))))
        changed = True
    while _view_below_activation(e):
        changed = True
    changed |= _merge_views(e, t)
    if not changed:
        return graph
    e.prune()
    return e.graph()


#: elementwise ops of one tensor (other operands scalar constants) that a reshape commutes with
_ACTIVATIONS = frozenset({"Relu", "Clip", "LeakyRelu", "Sigmoid", "Tanh", "HardSigmoid", "HardSwish", "Elu", "Selu",
                          "Softplus", "Softsign", "Gelu", "Mish"})
_LAYERS = frozenset({"Conv", "Gemm", "MatMul", "ConvTranspose"})


def _after_layer(e: Edit, name: str) -> bool:
    """``name`` is made by a layer, possibly through ``Add``/``Mul`` by constants (its bias, its scale)."""
    while (p := e.producer(name)) is not None and p.domain == DEFAULT:
        if p.op_type in _LAYERS:
            return True
        if p.op_type not in ("Add", "Mul") or sum(not e.is_const(i) for i in p.inputs) != 1:
            return False
        name = next(i for i in p.inputs if not e.is_const(i))
    return False


def _view_below_activation(e: Edit) -> bool:
    """One literal Reshape between a layer and its activation (or between an activation and
    another Reshape) moved below the activation, which then follows the layer directly."""
    for v in e.nodes:
        if v.op_type != "Reshape" or v.domain != DEFAULT or not e.is_const(v.inputs[1]):
            continue
        a = e.sole_reader(v.outputs[0])
        if a is None or a.domain != DEFAULT or a.op_type not in _ACTIVATIONS or a.inputs[0] != v.outputs[0] \
                or len(a.outputs) != 1 or a.outputs[0] in e.outputs \
                or not all(e.is_const(i) and np.size(e.inits[i]) == 1 for i in a.inputs[1:] if i):
            continue
        after = e.readers(a.outputs[0])
        if not (_after_layer(e, v.inputs[0]) or (after and all(r.op_type == "Reshape" for r in after))):
            continue
        mid = e.fresh(f"{a.outputs[0]}_unviewed")
        k = e.nodes.index(v)
        e.nodes.remove(a)
        e.nodes[k:k + 1] = [dataclasses.replace(a, inputs=(v.inputs[0],) + a.inputs[1:], outputs=(mid,)),
                            dataclasses.replace(v, inputs=(mid,) + v.inputs[1:], outputs=a.outputs)]
        return True
    return False


def _merge_views(e: Edit, t: Trace) -> bool:
    """A literal Reshape of a Reshape reads the first one's input; a Reshape to the shape its
    input has already goes (its readers read that input)."""
    changed = False
    for node in list(e.nodes):
        if node.op_type != "Reshape" or node.domain != DEFAULT or not e.is_const(node.inputs[1]):
            continue
        p = e.producer(node.inputs[0])
        if p is not None and p.op_type == "Reshape" and p.domain == DEFAULT and e.sole_reader(p.outputs[0]) is node:
            node = e.rename_input(node, node.inputs[0], p.inputs[0])
            changed = True
        x, y = node.inputs[0], node.outputs[0]
        if t.shape(x) is not None and t.shape(x) == t.shape(y) and y not in e.outputs:
            for r in e.readers(y):
                e.rename_input(r, y, x)
            e.nodes.remove(node)
            changed = True
    return changed
