"""Results computed once per graph object."""
from __future__ import annotations

import functools
import weakref

__all__ = ["per_graph"]


def per_graph(fn):
    """``fn(graph)`` computed once per graph object and kept while that graph lives
    (:class:`~onnx2hw.ir.Graph` is frozen but not hashable: objects are told apart by identity)."""
    cache: dict[int, tuple[weakref.ref, object]] = {}

    @functools.wraps(fn)
    def once(graph):
        hit = cache.get(id(graph))
        if hit is not None and hit[0]() is graph:
            return hit[1]
        out = fn(graph)
        key = id(graph)
        cache[key] = (weakref.ref(graph, lambda _r, key=key: cache.pop(key, None)), out)
        return out

    return once
