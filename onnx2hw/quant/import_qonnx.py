"""QONNX models (``Quant``, ``BipolarQuant``, ``Trunc`` as Brevitas exports them) ->
:class:`~onnx2hw.layers.IntegerGraph`.

How each quantizer becomes exact integer thresholds or requantization is described in
:mod:`onnx2hw.layers.qonnx`; the other op handlers are the registry's
(:func:`onnx2hw.layers.handlers`).

**Model inputs a layer reads unquantized** (:func:`float_reads`: the input reaches the layer
through views -- Reshape, Flatten, Transpose, Squeeze, Unsqueeze, Identity -- and scalings by a
scalar constant -- Mul, Div, Add, Sub -- only, with no ``Quant``, ``BipolarQuant`` or
``MultiThreshold`` on the way) come in two conventions. Each is given an input quantizer in
front of that layer (a ``Quant`` / ``BipolarQuant`` node, which the importer then reads like any
quantizer of a model input: it runs on the host):

* FINN's datatype annotation (the graph's ``quantization_annotation``, key ``finn_datatype``,
  as QONNX's ``ModelWrapper.set_tensor_datatype`` writes it) says the input holds integers,
  stored as float32. It is honoured when the layer reads the values as they are (views only):
  ``BIPOLAR`` (+-1; read as 2-bit signed codes by a layer that pads it with zeros),
  ``BINARY`` (0, 1), ``TERNARY`` (-1, 0, 1: 2-bit signed narrow range),
  ``INTn`` (n = 2..16) and ``UINTn`` (n = 1..16), all with scale 1 and zero point 0; on the
  values the type allows, that quantizer is the identity, so the model computes what it
  computed. ``FLOAT32``/``FLOAT16`` mark a float input (as no annotation does); any other type
  (``FIXED<w,i>``, ``SCALEDINT<n>``, ``INT32``, ...) on such an input is refused. Annotations of
  other tensors (layer outputs, inputs that go through a quantizer) are not read: the graph's
  own quantizers say what those hold.
* Otherwise (QKeras, Brevitas with ``input_quant=None``) the input is float:
  :func:`quantize_float_inputs` puts an 8-bit quantizer there whose scale is chosen from
  calibration data as the post-training quantizer chooses activation scales
  (:func:`onnx2hw.quant.ptq.act_qparams` on the calibrated range of the tensor the layer reads);
  without calibration data :func:`import_qonnx` refuses the model, saying so.
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Mapping

import numpy as np

from ..golden import run_node
from ..ir.errors import ModelError, UnsupportedError
from ..ir.graph import Graph, Node
from ..ir.load import QONNX_DOMAIN
from ..ir.names import FreshNames
from ..layers import IntegerGraph, handlers
from ..layers.builder import Builder
from ..layers.qonnx import DOMAINS
from .calib import collect_ranges
from .ptq import act_qparams

__all__ = ["import_qonnx", "HANDLERS", "FloatRead", "InputGrid", "float_reads", "datatype_grid",
           "with_input_quantizers", "quantize_float_inputs", "needs_calibration", "INPUT_BITS"]

HANDLERS = handlers("qonnx")

#: bit width of the input quantizer chosen from calibration data
INPUT_BITS = 8
#: default-domain ops that pass a model input on unchanged (data operand first)
_VIEWS = frozenset({"Reshape", "Flatten", "Transpose", "Squeeze", "Unsqueeze", "Identity"})
#: default-domain ops that scale a model input by a scalar constant (folded into its quantizer)
_SCALINGS = frozenset({"Mul", "Div", "Add", "Sub"})
#: QONNX/FINN ops that quantize what they read
_QUANTIZERS = frozenset({"Quant", "BipolarQuant", "MultiThreshold"})
#: FINN datatypes of a float tensor
_FLOAT_TYPES = frozenset({"FLOAT32", "FLOAT16"})


@dataclass(frozen=True)
class FloatRead:
    """Layer ``node`` reads model input ``input`` unquantized, as tensor ``tensor`` (the input
    itself or a view of it; ``scaled``: through a scaling by a constant too)."""

    input: str
    tensor: str
    node: Node
    scaled: bool

    def refusal(self) -> str:
        """The one-line refusal of this read when no calibration data gives it a quantizer."""
        return (f"the model's input {self.input!r} feeds layer {self.node.name!r} unquantized; pass --calib "
                f"CALIB.npz to quantize it (or add an input quantizer to the model)")


@dataclass(frozen=True)
class InputGrid:
    """An input quantizer: ``bits``-bit codes of ``scale`` (zero point 0); ``bipolar``: +-1."""

    scale: float
    bits: int
    signed: bool
    narrow: bool = False
    bipolar: bool = False


def _step(graph: Graph, node: Node, tensor: str) -> str:
    """What ``node`` does with the float ``tensor``: ``"quantize"``, ``"view"``, ``"scale"`` or
    ``"layer"`` (anything else: it reads the float values)."""
    data_first = node.inputs[:1] == (tensor,) and tensor not in node.inputs[1:]
    if node.domain in DOMAINS and node.op_type in _QUANTIZERS and data_first:
        return "quantize"
    if node.domain == "" and node.op_type in _VIEWS and data_first:
        return "view"
    if node.domain == "" and node.op_type in _SCALINGS and len(node.inputs) == 2 and node.inputs.count(tensor) == 1:
        other = node.inputs[1] if node.inputs[0] == tensor else node.inputs[0]
        if other in graph.initializers and np.size(graph.initializers[other]) == 1:
            return "scale"
    return "layer"


def float_reads(graph: Graph) -> tuple[FloatRead, ...]:
    """Every layer that reads a model input unquantized (see the module docstring), in node order."""
    readers: dict[str, list[Node]] = {}
    for n in graph.nodes:
        for i in dict.fromkeys(n.inputs):
            if i:
                readers.setdefault(i, []).append(n)
    found: dict[tuple[str, str], FloatRead] = {}
    for x in graph.input_names:
        todo, seen = [(x, False)], set()
        while todo:
            tensor, scaled = todo.pop()
            if tensor in seen:
                continue
            seen.add(tensor)
            for n in readers.get(tensor, ()):
                step = _step(graph, n, tensor)
                if step in ("view", "scale"):
                    todo.append((n.outputs[0], scaled or step == "scale"))
                elif step == "layer":
                    found.setdefault((tensor, id(n)), FloatRead(x, tensor, n, scaled))
    order = {id(n): i for i, n in enumerate(graph.nodes)}
    return tuple(sorted(found.values(), key=lambda r: order[id(r.node)]))


def datatype_grid(graph: Graph, read: FloatRead) -> InputGrid | None:
    """The input quantizer that the FINN datatype annotation of ``read``'s input gives, or
    ``None`` for a float input (no annotation, ``FLOAT32``/``FLOAT16``, or values scaled before
    the layer). An annotated type onnx2hw cannot read there raises :class:`UnsupportedError`."""
    if _reads_float(graph, read):
        return None
    name = graph.datatypes[read.input]
    special = {"BIPOLAR": InputGrid(1.0, 1, True, bipolar=True), "BINARY": InputGrid(1.0, 1, False),
               "TERNARY": InputGrid(1.0, 2, True, narrow=True)}
    if name == "BIPOLAR" and _pads(read.node):
        return special["TERNARY"]   # +-1 as 2-bit codes, so that the layer's zero padding is a code too
    if name in special:
        return special[name]
    m = re.fullmatch(r"(U?)INT([0-9]+)", name)
    if m:
        bits, signed = int(m.group(2)), not m.group(1)
        if (2 if signed else 1) <= bits <= 16:
            return InputGrid(1.0, bits, signed)
    raise UnsupportedError(f"model input {read.input!r} is annotated {name} (FINN datatype) and feeds layer "
                           f"{read.node.name!r} directly; onnx2hw reads an annotated input as BIPOLAR, BINARY, "
                           f"TERNARY, INTn (n = 2..16) or UINTn (n = 1..16)")


def _pads(node: Node) -> bool:
    """``node`` is a window op that pads its input with zeros."""
    return node.op_type in ("Conv", "AveragePool") and (any(node.attr("pads", ()) or ())
                                                          or node.attr("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET", b"VALID", "VALID"))


def with_input_quantizers(graph: Graph, grids: Mapping[str, InputGrid]) -> Graph:
    """``graph`` with a QONNX quantizer of ``grids[t]`` on each float tensor ``t`` that a layer
    reads (:func:`float_reads`): a ``Quant`` (ROUND, zero point 0) or, for a bipolar grid, a
    ``BipolarQuant``, placed before the first layer that reads ``t``, which with every other
    layer reading ``t`` then reads the quantized tensor."""
    reads = [r for r in float_reads(graph) if r.tensor in grids]
    if not reads:
        return graph
    fresh = FreshNames(graph)
    node_names = {n.name for n in graph.nodes}
    version = graph.opsets.get(QONNX_DOMAIN, 1)
    inits, info = dict(graph.initializers), dict(graph.value_info)
    renamed: dict[int, dict[str, str]] = {}   # id(layer) -> {float tensor: quantized tensor}
    before: dict[int, Node] = {}              # id(layer) -> the quantizer put before it
    for tensor in dict.fromkeys(r.tensor for r in reads):
        g = grids[tensor]
        out = fresh.fresh(f"{tensor}_quantized")
        name = _fresh_node(node_names, f"{tensor}_input_quant")
        scale = fresh.fresh(f"{tensor}_input_scale")
        inits[scale] = np.float32(g.scale)
        if g.bipolar:
            quant = Node(name, "BipolarQuant", QONNX_DOMAIN, (tensor, scale), (out,), since_version=version)
        else:
            zero, bits = fresh.fresh(f"{tensor}_input_zero_point"), fresh.fresh(f"{tensor}_input_bit_width")
            inits[zero], inits[bits] = np.float32(0.0), np.float32(g.bits)
            quant = Node(name, "Quant", QONNX_DOMAIN, (tensor, scale, zero, bits), (out,),
                         {"signed": int(g.signed), "narrow": int(g.narrow), "rounding_mode": "ROUND"},
                         since_version=version)
        mine = [r for r in reads if r.tensor == tensor]
        before[id(mine[0].node)] = quant
        for r in mine:
            renamed.setdefault(id(r.node), {})[tensor] = out
        if tensor in info:
            info[out] = dataclasses.replace(info[tensor], name=out)
    nodes = []
    for n in graph.nodes:
        if id(n) in before:
            nodes.append(before[id(n)])
        if id(n) in renamed:
            n = dataclasses.replace(n, inputs=tuple(renamed[id(n)].get(i, i) for i in n.inputs))
        nodes.append(n)
    return dataclasses.replace(graph, nodes=tuple(nodes), initializers=inits, value_info=info,
                               opsets={**graph.opsets, QONNX_DOMAIN: version})


def _fresh_node(used: set[str], base: str) -> str:
    name, i = base, 1
    while name in used:
        name, i = f"{base}_{i}", i + 1
    used.add(name)
    return name


def quantize_float_inputs(graph: Graph, feeds: Mapping[str, np.ndarray], *, method: str = "minmax",
                          progress: bool = False) -> Graph:
    """``graph`` with an :data:`INPUT_BITS`-bit input quantizer before each layer that reads a
    float model input (one without a FINN datatype annotation that :func:`datatype_grid`
    honours), its scale chosen by :func:`onnx2hw.quant.ptq.act_qparams` from the range of the
    tensor the layer reads over the calibration ``feeds`` (float32 arrays by input name, batch
    first, as :func:`onnx2hw.quant.calib.check_feeds` returns them). Unchanged when no layer
    reads a float input."""
    reads = _float_input_reads(graph)
    if not reads:
        return graph
    tensors = list(dict.fromkeys(r.tensor for r in reads))
    ranges = collect_ranges(graph, feeds, tensors, method, progress)
    grids = {}
    for t in tensors:
        p = act_qparams(*ranges[t], INPUT_BITS, t)
        grids[t] = InputGrid(float(p.scale), p.bits, p.signed)
    return with_input_quantizers(graph, grids)


def _reads_float(graph: Graph, read: FloatRead) -> bool:
    """``read`` takes float values: its input has no FINN datatype other than a float type, or
    was scaled on the way (an integer datatype is honoured or refused by :func:`datatype_grid`)."""
    return read.scaled or graph.datatypes.get(read.input) in (None, *_FLOAT_TYPES)


def _float_input_reads(graph: Graph) -> list[FloatRead]:
    return [r for r in float_reads(graph) if _reads_float(graph, r)]


def needs_calibration(graph: Graph) -> bool:
    """A layer of ``graph`` reads a float model input (what :func:`quantize_float_inputs` quantizes)."""
    return bool(_float_input_reads(graph))


def _honour_datatypes(graph: Graph) -> Graph:
    """``graph`` with the input quantizers its FINN datatype annotations give; a layer that still
    reads a float model input is refused (:meth:`FloatRead.refusal`)."""
    grids: dict[str, InputGrid] = {}
    for read in float_reads(graph):
        grid = datatype_grid(graph, read)
        if grid is None:
            raise ModelError(read.refusal())
        grids[read.tensor] = grid
    return with_input_quantizers(graph, grids)


def import_qonnx(graph: Graph) -> IntegerGraph:
    """Exact integer graph of a QONNX model (``graph`` from :func:`onnx2hw.ir.load`); model inputs
    that layers read unquantized are taken as the module docstring says."""
    return Builder(_honour_datatypes(graph), HANDLERS, "qonnx", run_node).run()
