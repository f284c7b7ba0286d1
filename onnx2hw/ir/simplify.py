"""Graph simplification for the hardware path: ``simplify(graph) -> graph``, pure.

Exporters compute reshape targets at run time (``Shape -> Gather -> Unsqueeze -> Concat ->
Cast -> Reshape`` from the dynamic batch), move between channels-first and channels-last
layouts with Transpose pairs, and write ``Squeeze``/``Unsqueeze``/``Flatten`` where a plain
reshape is meant. None of that is arithmetic; this pass folds it away so that only the layers
and the views the importers understand remain:

1. **onnxslim** (``onnxslim.slim``) runs ONNX shape inference, folds constants and shape
   chains, cancels Transpose pairs and fuses MatMul + Add into Gemm. It is pure Python
   (numpy, sympy) and installs from PyPI on Python 3.11 as it is; onnxsim was the other
   candidate, but it is a compiled extension that needs a C++ build where no wheel matches.
   onnxslim evaluates constant sub-graphs with onnxruntime (a dependency of onnx2hw for that
   reason).
2. With all shapes known, every ``Squeeze``/``Unsqueeze``/``Flatten``/``Reshape`` that keeps
   the batch as its first axis becomes ``Reshape`` to its literal output shape; chains of
   reshapes merge and reshapes to the shape they already have disappear.

**Batch.** With a dynamic batch, ``Shape`` of the batch is not a constant. The pass simplifies
two copies with the batch fixed to 2 and to 3; they must come out identical except for the
batch entry (2 vs 3) of reshape targets, which becomes ``-1`` ("keep the batch"). Anything else
that depends on the batch makes the two differ, and the graph is then returned unchanged (the
importers name what they cannot take). The result computes what the original computes for any
batch.

Graphs with nodes of other domains (QONNX) or sub-graphs are returned unchanged, as are graphs
with none of the ops this pass is for (:data:`TRIGGER_OPS`). The golden executor keeps running
the original model; only the hardware path (op check, import, post-training quantization) sees
the simplified one.
"""
from __future__ import annotations

import contextlib
import io
import logging
import warnings

import numpy as np
import onnx
from onnx import helper, numpy_helper

from .errors import ModelError
from .graph import Graph
from .load import load
from .memo import per_graph

__all__ = ["simplify", "follow_names", "to_model", "TRIGGER_OPS"]

#: ops whose presence makes the pass run (shape computation, layout and view ops)
TRIGGER_OPS = frozenset({"Shape", "Gather", "Concat", "Cast", "Transpose", "Squeeze", "Unsqueeze", "Slice", "MatMul",
                         "ConstantOfShape", "Expand", "Range", "Size"})
_VIEW_OPS = frozenset({"Squeeze", "Unsqueeze", "Flatten", "Reshape"})
_BATCHES = (2, 3)


def _attr_value(v):
    if isinstance(v, Graph) or isinstance(v, (onnx.TypeProto, onnx.SparseTensorProto)):
        return None
    if isinstance(v, np.ndarray):
        return numpy_helper.from_array(v)
    if isinstance(v, tuple):
        items = [_attr_value(x) for x in v]
        return None if any(x is None for x in items) else list(items)
    return v


def to_model(graph: Graph) -> onnx.ModelProto | None:
    """``graph`` as a ``ModelProto`` (initializers as constants; value types of its inputs and
    outputs only; its FINN datatype annotations), or ``None`` when it holds what this writer
    does not (sub-graphs, sparse or type attributes, non-tensor inputs)."""
    nodes = []
    for n in graph.nodes:
        attrs = {}
        for k, v in n.attrs.items():
            a = _attr_value(v)
            if a is None:
                return None
            attrs[k] = a
        nodes.append(helper.make_node(n.op_type, list(n.inputs), list(n.outputs), name=n.name,
                                      domain=n.domain, **attrs))

    def vinfo(vi):
        if vi.kind != "tensor":
            return None
        shape = None if vi.shape is None else [d if d is not None else None for d in vi.shape]
        return helper.make_tensor_value_info(vi.name, vi.elem_type, shape)

    ins, outs = [vinfo(v) for v in graph.inputs], [vinfo(v) for v in graph.outputs]
    if any(v is None for v in ins + outs):
        return None
    inits = [numpy_helper.from_array(np.asarray(a), name) for name, a in graph.initializers.items()]
    g = helper.make_graph(nodes, graph.name or "model", ins, outs, inits)
    values = set(graph.initializers) | {v.name for v in graph.inputs + graph.outputs} | \
        {o for n in graph.nodes for o in n.outputs}
    for name, datatype in graph.datatypes.items():   # FINN datatypes of the tensors still there
        if name in values:
            ann = g.quantization_annotation.add(tensor_name=name)
            ann.quant_parameter_tensor_names.add(key="finn_datatype", value=datatype)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid(d, v) for d, v in graph.opsets.items()],
                              producer_name=graph.producer_name, producer_version=graph.producer_version)
    model.ir_version = graph.ir_version or model.ir_version
    if graph.metadata:
        helper.set_model_props(model, dict(graph.metadata))
    return model


def follow_names(before: Graph, after: Graph, names) -> tuple[str, ...]:
    """Node names of ``before`` (a user's ``--host``) as nodes of its simplification ``after``.

    A node the pass fused into another (a MatMul into the Gemm of MatMul + Add, an Add of a
    bias into its Conv) is found again through a tensor it wrote, or else through the tensor it
    read: the first node of ``after`` (in order) that writes one of its outputs, else the first
    that reads one of its dynamic inputs. Names that are in ``after``, or in neither graph, are
    returned as they are (the partition names what it does not find).
    """
    have = {n.name for n in after.nodes}
    nodes = {n.name: n for n in before.nodes}
    out = []
    for name in names:
        node = nodes.get(name)
        if name in have or node is None:
            out.append(name)
            continue
        wrote = set(node.outputs) - {""}
        read = {t for t in node.inputs if t and t not in before.initializers}
        hit = (next((n.name for n in after.nodes if wrote & set(n.outputs)), None)
               or next((n.name for n in after.nodes if read & set(n.inputs)), None))
        out.append(hit or name)
    return tuple(out)


@per_graph
def simplify(graph: Graph) -> Graph:
    """The hardware path's view of ``graph`` (see the module docstring); ``graph`` itself when
    there is nothing to simplify or the simplification would not hold for every batch."""
    if any(n.domain for n in graph.nodes) or not any(n.op_type in TRIGGER_OPS for n in graph.nodes):
        return graph
    if not graph.inputs or any(v.shape is None or not v.shape or v.kind != "tensor" for v in graph.inputs):
        return graph
    model = to_model(graph)
    if model is None:
        return graph
    dims = [v.shape[0] for v in graph.inputs]
    fixed = [d for d in dims if isinstance(d, int) and d > 0]
    if len(fixed) == len(dims):
        if len(set(fixed)) != 1:
            return graph
        result = _run(model, fixed[0])
    else:
        if fixed:
            return graph
        runs = [_run(model, b) for b in _BATCHES]
        result = None if any(r is None for r in runs) else _merge(*runs)
        if result is not None:
            _restore_batch(result, graph)
    if result is None:
        return graph
    try:
        return load(result)
    except ModelError:
        return graph


def _fix_batch(model: onnx.ModelProto, batch: int) -> onnx.ModelProto:
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for vi in list(m.graph.input) + list(m.graph.output):
        dims = vi.type.tensor_type.shape.dim
        if len(dims):
            dims[0].Clear()
            dims[0].dim_value = batch
    del m.graph.value_info[:]
    return m


def _slim(model: onnx.ModelProto) -> onnx.ModelProto:
    import onnxslim  # noqa: PLC0415 - third-party, heavy (sympy); not an onnx2hw module

    logging.getLogger("onnxslim").setLevel(logging.ERROR)
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        return onnxslim.slim(model)


def _run(model: onnx.ModelProto, batch: int) -> onnx.ModelProto | None:
    try:
        m = _slim(_fix_batch(model, batch))
        m = onnx.shape_inference.infer_shapes(m, strict_mode=True, data_prop=True)
    except Exception:  # noqa: BLE001 - a model the simplifier cannot take is left as it is
        return None
    _canonical_views(m, batch)
    if _bias_through_views(m) | _views_after_activations(m):
        try:
            m = onnx.shape_inference.infer_shapes(m, strict_mode=True, data_prop=True)
        except Exception:  # noqa: BLE001 - as above
            return None
        _canonical_views(m, batch)  # the reshape pairs that now meet merge
    del m.graph.value_info[:]
    return m


#: elementwise ops of one tensor operand that a reshape commutes with
_ELEMENTWISE = frozenset({"Relu", "Clip", "LeakyRelu", "Sigmoid", "Tanh", "HardSigmoid", "HardSwish", "Elu", "Selu",
                          "Softplus", "Softsign", "PRelu", "Mish"})


def _readers(nodes) -> dict[str, list]:
    out: dict[str, list] = {}
    for n in nodes:
        for i in n.input:
            if i:
                out.setdefault(i, []).append(n)
    return out


def _bias_through_views(model: onnx.ModelProto) -> bool:
    """``Conv -> Reshape -> Add(c)`` with ``c`` a constant that is one value per output channel of
    the Conv (Keras ``Conv1D``: tf2onnx squeezes the ``H = 1`` axis before the ``BiasAdd``)
    becomes ``Conv(bias + c) -> Reshape`` (in place; ``True`` when anything changed)."""
    g = model.graph
    shapes = _shapes(model)
    inits = {t.name: t for t in g.initializer}
    outputs = {o.name for o in g.output}
    producer = {o: n for n in g.node for o in n.output}
    readers = _readers(g.node)
    drop, changed = [], False
    for add in g.node:
        if add.op_type != "Add" or len(add.input) != 2:
            continue
        for k in (0, 1):
            view, c = producer.get(add.input[k]), inits.get(add.input[1 - k])
            conv = producer.get(view.input[0]) if view is not None and view.op_type == "Reshape" else None
            if conv is None or c is None or conv.op_type != "Conv" or len(conv.input) < 2 \
                    or conv.input[1] not in inits or (len(conv.input) > 2 and conv.input[2] not in inits):
                continue
            if len(readers.get(conv.output[0], [])) != 1 or len(readers.get(view.output[0], [])) != 1 \
                    or {conv.output[0], view.output[0]} & outputs:
                continue
            cs, vs, out = shapes.get(conv.output[0]), shapes.get(view.output[0]), shapes.get(add.output[0])
            cv = numpy_helper.to_array(c)
            w = numpy_helper.to_array(inits[conv.input[1]])
            if cs is None or vs is None or vs != out or cv.dtype != w.dtype or cv.ndim > len(vs) \
                    or (cv.ndim == len(vs) and cv.shape[0] != 1):
                continue
            try:
                per = np.broadcast_to(cv.reshape(cv.shape[1:] if cv.ndim == len(vs) else cv.shape), vs[1:])
            except ValueError:
                continue
            per = per.reshape(cs[1], -1)
            if not np.all(per == per[:, :1]):
                continue
            bias = per[:, 0]
            if len(conv.input) > 2 and conv.input[2]:
                bias = numpy_helper.to_array(inits[conv.input[2]]) + bias
            name, i = f"{conv.output[0]}_bias", 1
            while name in inits or name in producer:
                name, i = f"{conv.output[0]}_bias_{i}", i + 1
            t = numpy_helper.from_array(np.ascontiguousarray(bias.astype(w.dtype)), name)
            g.initializer.append(t)
            inits[name] = t
            del conv.input[2:]
            conv.input.append(name)
            view.output[0] = add.output[0]
            drop.append(add)
            changed = True
            break
    for n in drop:
        g.node.remove(n)
    return changed


def _views_after_activations(model: onnx.ModelProto) -> bool:
    """``Reshape -> act -> Reshape`` with an elementwise ``act`` becomes ``act -> Reshape -> Reshape``
    (which then merge): a view that an exporter puts around a bias and activation (Keras ``Conv1D``
    squeezes its ``H = 1`` image for them and expands it again for the next pool) (in place)."""
    g = model.graph
    outputs = {o.name for o in g.output}
    nodes = list(g.node)
    changed = False
    taken = {o for n in nodes for o in n.output} | {i.name for i in g.input} | {t.name for t in g.initializer}
    for k in range(len(nodes) - 1):
        view = nodes[k]
        if view.op_type != "Reshape" or view.output[0] in outputs:
            continue
        rs = _readers(nodes).get(view.output[0], [])
        if len(rs) != 1 or rs[0].op_type not in _ELEMENTWISE or rs[0].domain or rs[0].input[0] != view.output[0] \
                or len(rs[0].output) != 1 or rs[0].output[0] in outputs:
            continue
        act = rs[0]
        after = _readers(nodes).get(act.output[0], [])
        if not after or any(n.op_type != "Reshape" for n in after):
            continue
        name, i = f"{act.output[0]}_unviewed", 1
        while name in taken:
            name, i = f"{act.output[0]}_unviewed_{i}", i + 1
        taken.add(name)
        act.input[0], view.output[0], act.output[0], view.input[0] = view.input[0], act.output[0], name, name
        j = nodes.index(act)
        nodes[k], nodes[j] = act, view   # act runs where the view ran, the view after it
        changed = True
    if changed:
        del g.node[:]
        g.node.extend(nodes)
    return changed


def _shapes(model: onnx.ModelProto) -> dict[str, tuple[int, ...]]:
    out = {}
    g = model.graph
    for vi in list(g.input) + list(g.output) + list(g.value_info):
        t = vi.type.tensor_type
        if t.HasField("shape") and all(d.HasField("dim_value") for d in t.shape.dim):
            out[vi.name] = tuple(int(d.dim_value) for d in t.shape.dim)
    for init in g.initializer:
        out[init.name] = tuple(init.dims)
    return out


def _canonical_views(model: onnx.ModelProto, batch: int) -> None:
    """Squeeze/Unsqueeze/Flatten/Reshape that keep the batch -> Reshape to the literal shape;
    merge reshape chains; drop reshapes to the shape they already have (in place)."""
    g = model.graph
    shapes = _shapes(model)
    inits = {t.name: t for t in g.initializer}
    taken = set(inits) | {o for n in g.node for o in n.output} | {i.name for i in g.input}
    nodes = list(g.node)
    for k, n in enumerate(nodes):
        if n.op_type not in _VIEW_OPS or not n.input or n.input[0] not in shapes or n.output[0] not in shapes:
            continue
        src, dst = shapes[n.input[0]], shapes[n.output[0]]
        if not src or not dst or src[0] != batch or dst[0] != batch or int(np.prod(src)) != int(np.prod(dst)):
            continue
        name, i = f"{n.output[0]}_shape", 1
        while name in taken:
            name, i = f"{n.output[0]}_shape_{i}", i + 1
        taken.add(name)
        g.initializer.append(numpy_helper.from_array(np.asarray(dst, np.int64), name))
        nodes[k] = helper.make_node("Reshape", [n.input[0], name], [n.output[0]], name=n.name)
    outputs = {o.name for o in g.output}
    readers: dict[str, int] = {}
    for n in nodes:
        for i in n.input:
            readers[i] = readers.get(i, 0) + 1
    producer = {o: n for n in nodes for o in n.output}
    # a reshape of a reshape reads the first one's input
    for n in nodes:
        if n.op_type == "Reshape":
            p = producer.get(n.input[0])
            while p is not None and p.op_type == "Reshape" and p.input[0] in shapes and n.output[0] in shapes \
                    and shapes[n.output[0]][:1] == (batch,) and len(p.input) > 1:
                n.input[0] = p.input[0]
                p = producer.get(n.input[0])
    # reshapes to the shape their input already has
    alias: dict[str, str] = {}
    keep = []
    for n in nodes:
        n.input[:] = [alias.get(i, i) for i in n.input]
        if n.op_type == "Reshape" and shapes.get(n.input[0]) is not None and \
                shapes.get(n.input[0]) == shapes.get(n.output[0]) and n.output[0] not in outputs:
            alias[n.output[0]] = n.input[0]
            continue
        keep.append(n)
    keep = _live(keep, outputs)
    # a reshape to the same shape that writes a graph output: the producer writes it instead
    final = []
    producer = {o: n for n in keep for o in n.output}
    users: dict[str, int] = {}
    for n in keep:
        for i in n.input:
            users[i] = users.get(i, 0) + 1
    for n in keep:
        if n.op_type == "Reshape" and n.output[0] in outputs and shapes.get(n.input[0]) == shapes.get(n.output[0]):
            p = producer.get(n.input[0])
            if p is not None and users.get(n.input[0]) == 1 and n.input[0] not in outputs:
                p.output[list(p.output).index(n.input[0])] = n.output[0]
                continue
        final.append(n)
    used = {i for n in final for i in n.input}
    del g.node[:]
    g.node.extend(final)
    kept = [t for t in g.initializer if t.name in used]
    del g.initializer[:]
    g.initializer.extend(kept)


def _live(nodes: list, outputs: set[str]) -> list:
    """``nodes`` less those whose outputs nothing reads (reshapes merged into their readers)."""
    while True:
        used = {i for n in nodes for i in n.input} | outputs
        live = [n for n in nodes if any(o in used for o in n.output)]
        if len(live) == len(nodes):
            return live
        nodes = live


def _merge(a: onnx.ModelProto, b: onnx.ModelProto) -> onnx.ModelProto | None:
    """``a`` with the batch entry of its reshape targets made ``-1``, when ``a`` (batch 2) and ``b``
    (batch 3) differ in nothing else; else ``None``."""
    ga, gb = a.graph, b.graph
    if len(ga.node) != len(gb.node) or len(ga.initializer) != len(gb.initializer):
        return None
    for x, y in zip(ga.node, gb.node):
        if x.SerializeToString(deterministic=True) != y.SerializeToString(deterministic=True):
            return None
    ib = {t.name: t for t in gb.initializer}
    shape_inputs = {n.input[1]: n for n in ga.node if n.op_type == "Reshape" and len(n.input) > 1}
    other_uses = {i for n in ga.node for k, i in enumerate(n.input) if not (n.op_type == "Reshape" and k == 1)}
    for k, t in enumerate(ga.initializer):
        u = ib.get(t.name)
        if u is None:
            return None
        if t.SerializeToString(deterministic=True) == u.SerializeToString(deterministic=True):
            continue
        va, vb = numpy_helper.to_array(t), numpy_helper.to_array(u)
        if t.name not in shape_inputs or t.name in other_uses or va.ndim != 1 or va.shape != vb.shape \
                or va.dtype != np.int64 or va[0] != _BATCHES[0] or vb[0] != _BATCHES[1] \
                or not np.array_equal(va[1:], vb[1:]) or np.any(va[1:] < 1):
            return None
        va = va.copy()
        va[0] = -1
        ga.initializer[k].CopyFrom(numpy_helper.from_array(va, t.name))
    return a


def _restore_batch(model: onnx.ModelProto, graph: Graph) -> None:
    """The original (symbolic or unknown) batch dims of the inputs and outputs."""
    first = {v.name: (v.shape[0] if v.shape else None) for v in tuple(graph.inputs) + tuple(graph.outputs)}
    for vi in list(model.graph.input) + list(model.graph.output):
        dims = vi.type.tensor_type.shape.dim
        if not len(dims):
            continue
        d = first.get(vi.name)
        dims[0].Clear()
        if isinstance(d, str):
            dims[0].dim_param = d
        elif isinstance(d, int) and d > 0:
            dims[0].dim_value = d
