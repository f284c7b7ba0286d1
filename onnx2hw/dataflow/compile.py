"""``compile_pipeline(IntegerGraph, ...) -> Pipeline``: one streaming stage per layer."""
from __future__ import annotations

import numpy as np
from amaranth.hdl import Shape

from ..ir.errors import ModelError, UnsupportedError
from ..ir.names import Sanitizer
from ..layers import IntegerGraph, elem_shape
from ..rtl.cost import Cost
from ..rtl.fork import Fork
from ._stages import build_stage
from .fold import Budget, Folding, auto_fold, fold_entry
from .pipeline import INPUT, OUTPUT, Block, Link, Pipeline, Stage

__all__ = ["compile_pipeline", "check_supported"]

#: FIFO depth of an ordinary link (decouples neighbouring stages' stalls)
LINK_FIFO = 2
#: the op name of the stages that copy a tensor read by several layers (one per extra reader)
FORK_OP = Fork.__name__.lower()


def check_supported(ig: IntegerGraph) -> None:
    """Raise one ``UnsupportedError`` listing every layer the hardware cannot build."""
    specs = ig.specs()
    problems = []
    if len(ig.inputs) != 1 or len(ig.outputs) != 1:
        problems.append(f"the model has {len(ig.inputs)} inputs and {len(ig.outputs)} outputs; "
                        "the hardware path supports exactly one of each")
    for layer in ig.layers:
        why = layer.hardware_problem([specs[n] for n in layer.inputs])
        if why:
            problems.append(f"{layer.name!r}: {why}")
    if problems:
        raise UnsupportedError("unsupported by the hardware path: " + "; ".join(problems))


def _fork_stage(name: str, tensor: str, lanes: int, bits: int, signed_: bool, elements: int, family: str) -> Stage:
    shape = Shape(bits, signed_)
    params = dict(elem_shape=shape, lanes=lanes)
    cost = Fork.estimate(**params, family=family)
    cycles = elements // lanes
    cost = Cost(cycles, cost.latency, cost.lut, cost.ff, cost.dsp, cost.ebr)
    return Stage(name=name, layer="", op=FORK_OP, inputs=(tensor,), output=tensor, pe=lanes, simd=lanes,
                 in_lanes=(lanes,), out_lanes=lanes, out_bits=bits, out_signed=signed_,
                 blocks=(Block(Fork, params, cost),), cycles=cycles, latency=cost.latency, cost=cost)


def compile_pipeline(ig: IntegerGraph, *, family: str = "ecp5", budget: Budget | None = None,
                     folding: Folding | None = None, target_cycles: int | None = None) -> Pipeline:
    """Map every layer to a stage, fold, and size the FIFOs.

    ``folding`` (layer name -> (pe, simd) or (pe, simd, mul), ``mul`` "dsp" or "lut") overrides
    the automatic choice for the layers it names. Residual branches: a tensor read by two layers
    goes through a Fork; the FIFO on each fork output holds the whole tensor, so the branch that
    is consumed later can never stall the other (deadlock-free for any stage latencies). The
    automatic folding fits ``budget`` with the links' FIFOs: when they do not fit beside the
    stages it is chosen again for the budget less the FIFOs.
    """
    ig.validate()
    check_supported(ig)
    specs = ig.specs()
    known = {layer.name for layer in ig.layers}
    for name in folding or {}:
        if name not in known:
            raise ModelError(f"folding names layer {name!r}, which the model does not have")
    auto = folding is None or bool(known - set(folding))

    def choose(avail):
        fold = auto_fold(ig, family, avail, target_cycles) if auto else {}
        fold.update(folding or {})
        return fold

    fold = choose(budget)
    if folding is not None:
        for layer in ig.layers:
            ins = [specs[n] for n in layer.inputs]
            try:
                p, s, mul = fold_entry(fold[layer.name])
            except ValueError as exc:
                raise ModelError(f"layer {layer.name!r}: {exc}") from None
            if (p, s) not in layer.fold_options(ins):
                raise ModelError(f"folding {fold[layer.name]!r} is not legal for layer {layer.name!r} "
                                 f"(pe must divide the outputs, simd the inputs)")
            if mul is not None and mul not in layer.mul_options(ins):
                raise ModelError(f"folding {fold[layer.name]!r}: layer {layer.name!r} has no {mul!r} products "
                                 f"(its choices: {', '.join(layer.mul_options(ins)) or 'none'})")
    pipeline = _assemble(ig, fold, family)
    for _ in range(3 if auto and budget is not None else 0):   # (the FIFOs change little with the folding)
        t = pipeline.total
        if t.lut <= budget.lut and t.dsp <= budget.dsp and t.ebr <= budget.ebr:
            break
        pipeline = _assemble(ig, choose(budget.minus(pipeline.link_cost)), family)
    return pipeline


def _assemble(ig: IntegerGraph, fold: Folding, family: str) -> Pipeline:
    """The pipeline of ``ig`` at the checked folding ``fold``: stages, forks, links and FIFOs."""
    a = _Assembly(ig, family)
    a.add_input(fold)
    for layer in ig.layers:
        a.add_layer(layer, fold_entry(fold[layer.name]))
    a.connect()
    for link in a.links:
        if link.elements % link.src_lanes or link.elements % link.dst_lanes:
            raise ModelError(f"tensor {link.tensor!r}: {link.elements} elements do not divide into lanes "
                             f"{link.src_lanes}/{link.dst_lanes}")
    # the folding built: each layer's (pe, simd) and, where it has one, the product style used
    return Pipeline(graph=ig, stages=tuple(a.stages), links=tuple(a.links), family=family,
                    folding={name: (st.pe, st.simd, st.mul) if st.mul else (st.pe, st.simd)
                             for name, st in a.layer_stage.items()})


class _Assembly:
    """A pipeline being assembled: stages in graph order (each tensor's forks right after its
    producer), then one link per consumer of every tensor."""

    def __init__(self, ig: IntegerGraph, family: str):
        self.ig, self.family = ig, family
        self.specs = ig.specs()
        self.names = Sanitizer(reserved=(INPUT, OUTPUT))  # stage names never shadow the pseudo stages
        self.stages: list[Stage] = []
        self.links: list[Link] = []
        self.layer_stage: dict[str, Stage] = {}
        #: tensor -> (stage, port, lanes, bits, signed)
        self.producer: dict[str, tuple[str, int, int, int, bool]] = {}
        #: tensor -> the (stage, port) each of its consumers reads, in consumer order
        self.routes: dict[str, list] = {}
        # tensor -> [(consuming layer, or None for the pipeline output; port)]: by object, not
        # by name, so a layer may be called "output"
        self.consumers: dict[str, list] = {}
        for layer in ig.layers:
            for port, t in enumerate(layer.inputs):
                self.consumers.setdefault(t, []).append((layer, port))
        for t in (s.name for s in ig.output_specs):
            self.consumers.setdefault(t, []).append((None, 0))

    def elements(self, tensor: str) -> int:
        return int(np.prod(self.specs[tensor].shape))

    def add_input(self, fold: Folding) -> None:
        """The pipeline input, at the lanes of the first layer that reads it."""
        in_spec = self.ig.input_specs[0]
        first = next((layer for layer in self.ig.layers if in_spec.name in layer.inputs), None)
        if first is None:
            raise UnsupportedError("the model computes nothing from its input that hardware could build")
        shape = elem_shape(in_spec.dtype)
        self.producer[in_spec.name] = (INPUT, 0, fold_entry(fold[first.name])[1], shape.width, shape.signed)
        self.routes[in_spec.name] = self.add_forks(in_spec.name)

    def add_layer(self, layer, folding) -> None:
        """The layer's stage at ``folding`` (pe, simd, mul), then the forks of its output."""
        p, s, mul = folding
        st = build_stage(self.names(layer.name), layer, [self.specs[n] for n in layer.inputs], p, s,
                         self.family, mul)
        self.stages.append(st)
        self.layer_stage[layer.name] = st
        self.producer[layer.output.name] = (st.name, 0, st.out_lanes, st.out_bits, st.out_signed)
        self.routes[layer.output.name] = self.add_forks(layer.output.name)

    def add_forks(self, tensor: str) -> list:
        """Insert a chain of 2-way Forks so each consumer of ``tensor`` gets its own stream;
        returns the (stage, port) of every stream."""
        src, port, lanes, bits, sg = self.producer[tensor]
        n = self.elements(tensor)
        sources = [(src, port)]
        while len(sources) < len(self.consumers.get(tensor, [])):
            s_name, s_port = sources.pop(0)
            fk = _fork_stage(self.names(f"{FORK_OP}_{tensor}"), tensor, lanes, bits, sg, n, self.family)
            self.stages.append(fk)
            self.links.append(Link(tensor, s_name, fk.name, 0, s_port, lanes, lanes, bits, sg, n, LINK_FIFO))
            sources += [(fk.name, 0), (fk.name, 1)]
        return sources

    def connect(self) -> None:
        """A link from one route of every tensor to each of its consumers."""
        forked = {t for t, r in self.routes.items() if len(r) > 1}
        for tensor, cons in self.consumers.items():
            _, _, lanes, bits, sg = self.producer[tensor]
            n = self.elements(tensor)
            for (dst, port), (src, sport) in zip(cons, self.routes[tensor]):
                dst_stage = None if dst is None else self.layer_stage[dst.name]
                dst_name = OUTPUT if dst_stage is None else dst_stage.name
                dst_lanes = lanes if dst_stage is None else dst_stage.in_lanes[port]
                depth = _fifo_depth(n, dst_lanes, tensor in forked, dst_stage)
                self.links.append(Link(tensor, src, dst_name, port, sport, lanes, dst_lanes, bits, sg, n, depth))


def _fifo_depth(elements: int, dst_lanes: int, forked: bool, dst_stage: Stage | None) -> int:
    """Transfers the FIFO of a link holds: a fork's branch holds its whole tensor (the FIFO sits
    after the width converter: words of ``dst_lanes``), so the branch consumed later never stalls
    the other; so does the link into a stage whose first block reads its input in one burst;
    any other link decouples its neighbours' stalls."""
    if forked:
        return -(-elements // dst_lanes) + LINK_FIFO
    if dst_stage is not None and dst_stage.blocks[0].input_burst:
        return elements // dst_lanes + LINK_FIFO
    return LINK_FIFO
