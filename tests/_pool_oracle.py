"""onnxruntime around exact average pools: the oracle of a QDQ model whose average pools are
quantized on their input's own grid.

Such a pool's output is ``round(sum / count)`` of integer codes, exactly a tie ``k + 1/2`` for
some windows of an even count; onnxruntime computes it in float32 (each dequantized value and
the sum rounded), which moves some ties off by a rounding error and so rounds them either way.
Here each such pool is computed from the spec in int64 NumPy (:func:`exact_pool`: the window sum
of ``codes - zero point`` over the positions inside the image, divided by the count ONNX defines,
rounded half to even as QuantizeLinear does, plus the zero point, saturated), and everything else
by onnxruntime with optimizations off (:func:`~_oracle.spec_session`): the model is cut at each
pool, the part before it run for the pool's input codes, the part after it fed with the exact
pool outputs. :func:`exact_pool_oracle` also counts the ties and where onnxruntime's own pool
output differs from the exact one.
"""
from __future__ import annotations

import itertools

import numpy as np
import onnx
from onnx import helper, numpy_helper

from _oracle import spec_session

__all__ = ["on_grid_pools", "exact_pool", "exact_pool_oracle"]


def on_grid_pools(model: onnx.ModelProto) -> list[tuple]:
    """``(pool, dequantize, quantize)`` nodes, in graph order, of each AveragePool or
    GlobalAveragePool that reads a DequantizeLinear and is read by one QuantizeLinear of the same
    scale and zero point."""
    g = model.graph
    init = {i.name: numpy_helper.to_array(i) for i in g.initializer}
    producer = {o: n for n in g.node for o in n.output}
    readers = {}
    for n in g.node:
        for i in n.input:
            readers.setdefault(i, []).append(n)
    out = []
    for n in g.node:
        if n.op_type not in ("AveragePool", "GlobalAveragePool"):
            continue
        dq, qs = producer.get(n.input[0]), readers.get(n.output[0], [])
        if dq is None or dq.op_type != "DequantizeLinear" or len(qs) != 1 or qs[0].op_type != "QuantizeLinear":
            continue
        same = all(np.array_equal(init.get(a), init.get(b)) and a in init
                   for a, b in zip(dq.input[1:3], qs[0].input[1:3]))
        if same and len(dq.input) == len(qs[0].input) == 3:
            out.append((n, dq, qs[0]))
    return out


def _attr(node, name, default):
    a = next((a for a in node.attribute if a.name == name), None)
    return default if a is None else helper.get_attribute_value(a)


def window_sums(codes: np.ndarray, zero_point: np.ndarray, node, out_spatial) -> tuple[np.ndarray, np.ndarray]:
    """``(sum, count)`` per output of the pool ``node`` on integer ``codes`` (N, C, *spatial) of
    ``zero_point``, to the output size ``out_spatial`` (onnxruntime's): the sum of ``codes - zero
    point`` over the window's positions inside the image (padding adds a real zero), the count of
    those positions (``count_include_pad=0``) or of those inside the padded image (``1``); int64."""
    x = codes.astype(np.int64) - np.int64(zero_point)
    size = x.shape[2:]
    rank = len(size)
    if node.op_type == "GlobalAveragePool":
        kernel, strides, pads, include = size, (1,) * rank, (0,) * (2 * rank), 0
    else:
        if _attr(node, "auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET"):
            raise NotImplementedError(f"{node.name}: auto_pad")
        kernel = tuple(_attr(node, "kernel_shape", None))
        strides = tuple(_attr(node, "strides", (1,) * rank))
        pads = tuple(_attr(node, "pads", (0,) * (2 * rank)))
        include = int(_attr(node, "count_include_pad", 0))
    total = np.empty(x.shape[:2] + tuple(out_spatial), np.int64)
    count = np.empty(tuple(out_spatial), np.int64)
    for o in itertools.product(*(range(n) for n in out_spatial)):
        begin = [o[a] * strides[a] - pads[a] for a in range(rank)]
        inside = tuple(slice(max(b, 0), min(b + kernel[a], size[a])) for a, b in enumerate(begin))
        padded = [min(b + kernel[a], size[a] + pads[rank + a]) - max(b, -pads[a]) for a, b in enumerate(begin)]
        count[o] = int(np.prod(padded if include else [s.stop - s.start for s in inside]))
        total[(slice(None), slice(None)) + o] = x[(slice(None), slice(None)) + inside].sum(axis=tuple(range(2, 2 + rank)))
    return total, np.broadcast_to(count, total.shape)


def exact_pool(codes: np.ndarray, zero_point: np.ndarray, node, out_spatial) -> np.ndarray:
    """The pool's output codes: ``sum / count`` (:func:`window_sums`) rounded half to even (as
    QuantizeLinear rounds), plus the zero point, saturated to the codes' type."""
    total, count = window_sums(codes, zero_point, node, out_spatial)
    q, r = np.floor_divide(total, count), np.mod(total, count)
    y = q + ((2 * r > count) | ((2 * r == count) & (q % 2 == 1)))
    info = np.iinfo(codes.dtype)
    return np.clip(y + np.int64(zero_point), info.min, info.max).astype(codes.dtype)


def _cut(model: onnx.ModelProto, fed: dict[str, np.ndarray], outputs: list[str]) -> onnx.ModelProto:
    """``model`` with the tensors ``fed`` graph inputs (their producers gone) and ``outputs`` as
    its outputs (integer codes of the types their values have)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    keep = [n for n in g.node if not set(n.output) & set(fed)]
    del g.node[:]
    g.node.extend(keep)
    g.input.extend(helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), None)
                   for k, v in fed.items())
    types = {o.name: o.type.tensor_type.elem_type for o in model.graph.output}
    del g.output[:]
    g.output.extend(helper.make_tensor_value_info(k, types.get(k, onnx.TensorProto.UNDEFINED), None)
                    for k in outputs)
    return m


def _code_type(model: onnx.ModelProto, q) -> int:
    zp = next(i for i in model.graph.initializer if i.name == q.input[2])
    return zp.data_type


def exact_pool_oracle(model: onnx.ModelProto, feeds: dict) -> tuple[list[np.ndarray], dict]:
    """The model's outputs with each on-grid pool exact (module docstring), and per pool output
    ``(ties, onnxruntime differs, of which ties off by one)``: the exact ties ``k + 1/2`` among its
    windows, the elements where onnxruntime's own float32 pool output differs from the exact one,
    and how many of those are ties it rounded to the odd neighbour."""
    fed, stats = {}, {}
    for pool, dq, q in on_grid_pools(model):
        sub = _cut(model, fed, [dq.input[0], q.output[0]])
        for o in sub.graph.output:
            o.type.tensor_type.elem_type = _code_type(model, q)
        codes, theirs = spec_session(sub).run(None, {**feeds, **fed})
        zp = numpy_helper.to_array(next(i for i in model.graph.initializer if i.name == q.input[2]))
        exact = exact_pool(codes, zp, pool, theirs.shape[2:])
        total, count = window_sums(codes, zp, pool, theirs.shape[2:])
        tie = 2 * np.mod(total, count) == count
        differ = exact != theirs
        off_by_one = np.abs(exact.astype(np.int64) - theirs.astype(np.int64)) == 1
        stats[q.output[0]] = (int(tie.sum()), int(differ.sum()), int(np.count_nonzero(differ & tie & off_by_one)))
        fed[q.output[0]] = exact
    final = _cut(model, fed, [o.name for o in model.graph.output])
    return spec_session(final).run(None, {**feeds, **fed}), stats
