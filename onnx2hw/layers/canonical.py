"""What a pattern's ``canonical`` function works with: the float graph being brought into the
form the post-training quantizer writes.

:func:`onnx2hw.quant.ptq.quantize` first walks the float model's nodes in order and hands each
to its pattern's ``canonical(node, rewrite)`` (:class:`~onnx2hw.layers.base.Pattern`), which
returns the node to keep (as it is or rewritten) or ``None`` (the node goes). :class:`Rewrite`
holds what such a function reads and changes: the constants, fresh names, the canonical nodes so
far, and the one rule shared by the ops that fold into the linear layer before them
(:meth:`Rewrite.linear_before`, :meth:`Rewrite.fold`): a per-channel affine map
``y -> (y - centre) * scale + shift`` of a linear layer's output becomes its weights and bias.
"""
from __future__ import annotations

import dataclasses
import numpy as np

from ..ir.errors import UnsupportedError
from ..ir.graph import Graph, Node
from ..ir.names import FreshNames
from .base import Linear

__all__ = ["Rewrite", "LinearLayer", "channel_vector"]


def channel_vector(c: np.ndarray, channels: int, spatial: int) -> np.ndarray | None:
    """``c`` as one value per channel (shape ``(channels,)``) when, broadcast against a layer's
    output ``(N, channels, *spatial dims)``, it varies along the channel axis only and adds no
    axis; ``None`` otherwise."""
    c = np.asarray(c)
    if c.ndim > 2 + spatial:
        return None
    try:
        return np.broadcast_to(c, (1, channels) + (1,) * spatial).reshape(channels)
    except ValueError:
        return None


@dataclasses.dataclass(frozen=True)
class LinearLayer:
    """A canonical linear layer already among :attr:`Rewrite.nodes` (weights and bias in float64)."""

    index: int
    node: Node
    form: Linear
    weight: np.ndarray
    bias: np.ndarray

    @property
    def channels(self) -> int:
        return self.weight.shape[self.form.axis]

    @property
    def spatial(self) -> int:
        """Spatial axes of its output (after batch and channels)."""
        return self.weight.ndim - 2


class Rewrite:
    """The float graph under rewrite: ``inits`` (name -> constant), ``nodes`` (the canonical
    nodes so far, in order). ``linear_of(node)`` is the node's :class:`Linear` form or ``None``."""

    def __init__(self, graph: Graph, linear_of):
        self.inits: dict[str, np.ndarray] = {k: np.asarray(v) for k, v in graph.initializers.items()}
        self.nodes: list[Node] = []
        self._outputs = frozenset(graph.output_names)
        self._names = FreshNames(graph)
        self._alias: dict[str, str] = {}
        self._linear_of = linear_of
        #: the graph's nodes after the one being rewritten (their inputs as written)
        self.rest: tuple[Node, ...] = ()

    def is_output(self, name: str) -> bool:
        return name in self._outputs

    def fresh(self, base: str) -> str:
        """A value name no other value has."""
        return self._names.fresh(base)

    def add(self, base: str, value) -> str:
        """A new constant under a fresh name (returned)."""
        name = self.fresh(base)
        self.inits[name] = value
        return name

    def const(self, node: Node, index: int, what: str) -> np.ndarray | None:
        """The node's input ``index`` (``None`` when omitted); it must be a constant."""
        name = node.inputs[index] if len(node.inputs) > index else ""
        if not name:
            return None
        if name not in self.inits:
            raise UnsupportedError(f"node {node.name!r} ({node.op_type}): {what} {name!r} must be a constant "
                                   "initializer")
        return self.inits[name]

    def alias(self, name: str, source: str) -> None:
        """Readers of ``name`` read ``source`` instead (the node making ``name`` goes)."""
        self._alias[name] = source

    def source(self, name: str) -> str:
        """What ``name`` stands for after the aliases so far."""
        while name in self._alias:
            name = self._alias[name]
        return name

    def linear_before(self, x: str) -> LinearLayer | None:
        """The linear layer with a bias that made ``x``, when a map of ``x`` may fold into it:
        ``x`` is no graph output and no other node reads it (no canonical node so far, and none
        of the nodes still to come, :attr:`rest`); ``None`` otherwise."""
        index = next((i for i, n in enumerate(self.nodes) if x in n.outputs), None)
        if index is None or x in self._outputs or any(x in n.inputs for n in self.nodes) \
                or any(self.source(i) == x for n in self.rest for i in n.inputs if i):
            return None
        node = self.nodes[index]
        form = self._linear_of(node)
        if form is None or form.bias is None:
            return None
        w = self.inits[node.inputs[form.weight]].astype(np.float64)
        b = self.inits[node.inputs[form.bias]].astype(np.float64)
        return LinearLayer(index, node, form, w, b)

    def fold(self, layer: LinearLayer, output: str, tag: str, *, centre=None, scale=None, shift=None) -> None:
        """Replace ``layer`` by one computing ``(y - centre) * scale + shift`` of its output ``y``
        (per-channel float64 vectors, each optional) into ``output``; new constants are named
        ``<layer>.weight_<tag>`` (when ``scale`` changes the weights) and ``<layer>.bias_<tag>``."""
        src, form = layer.node, layer.form
        base = src.name or src.outputs[0]
        w_name = src.inputs[form.weight]
        if scale is not None:
            shape = [1] * layer.weight.ndim
            shape[form.axis] = -1
            w_name = self.add(f"{base}.weight_{tag}", (layer.weight * scale.reshape(shape)).astype(np.float32))
        b = layer.bias
        if centre is not None:
            b = b - centre
        if scale is not None:
            b = b * scale
        if shift is not None:
            b = b + shift
        b_name = self.add(f"{base}.bias_{tag}", b.astype(np.float32))
        inputs = list(src.inputs)
        inputs[form.weight], inputs[form.bias] = w_name, b_name
        self.nodes[layer.index] = dataclasses.replace(src, inputs=tuple(inputs), outputs=(output,))

    def fold_constant(self, node: Node, how: str) -> bool:
        """Fold ``node``, ``x`` times (``how="scale"``) or plus (``"shift"``) a constant that is
        scalar or per channel, into the linear layer that made ``x`` (:meth:`linear_before`);
        False (nothing changed) when it cannot."""
        data = [i for i in node.inputs if i not in self.inits]
        if len(data) != 1 or len(node.inputs) != 2:
            return False
        x = data[0]
        c = self.inits[node.inputs[1] if node.inputs[0] == x else node.inputs[0]].astype(np.float64)
        layer = self.linear_before(x)
        v = None if layer is None else channel_vector(c, layer.channels, layer.spatial)
        if v is None:
            return False
        tag = {"scale": "scaled", "shift": "shifted"}[how]
        self.fold(layer, node.outputs[0], tag, **{how: v})
        return True

    def finish(self, graph: Graph) -> Graph:
        """``graph`` with the canonical nodes and the constants they read."""
        used = {i for n in self.nodes for i in n.inputs if i}
        inits = {k: v for k, v in self.inits.items() if k in used}
        return dataclasses.replace(graph, nodes=tuple(self.nodes), initializers=inits,
                                   overridable=frozenset(graph.overridable & set(inits)))
