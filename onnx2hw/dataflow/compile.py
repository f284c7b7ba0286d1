"""``compile_pipeline(IntegerGraph, ...) -> Pipeline``: one streaming stage per layer."""
from __future__ import annotations

import math

import numpy as np
from amaranth.hdl import Shape

from ..ir.errors import ModelError, UnsupportedError
from ..ir.names import Sanitizer
from ..layers import IntegerGraph, elem_shape
from ..protocol import common_type
from ..rtl.cost import Cost
from ..rtl.fork import Fork
from ..rtl.segments import SegmentJoin, SegmentSplit
from ._stages import build_stage
from .fold import Budget, Folding, auto_fold, fold_entry
from .pipeline import INPUT, OUTPUT, Block, Link, Pipeline, Stage

__all__ = ["compile_pipeline", "check_supported", "common_shape", "SPLIT_OP", "JOIN_OP"]

#: FIFO depth of an ordinary link (decouples neighbouring stages' stalls)
LINK_FIFO = 2
#: the op name of the stages that copy a tensor read by several layers (one per extra reader)
FORK_OP = Fork.__name__.lower()
#: the op names of the stages that split the pipeline's input stream into the model's inputs and
#: join its outputs into the output stream (only in a pipeline with several inputs / outputs)
SPLIT_OP, JOIN_OP = "split_inputs", "join_outputs"


def check_supported(ig: IntegerGraph) -> None:
    """Raise one ``UnsupportedError`` listing every layer the hardware cannot build."""
    specs = ig.specs()
    problems = []
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
    is consumed later can never stall the other (deadlock-free for any stage latencies). Several
    model inputs (outputs) share the pipeline's one input (output) stream, one after the other:
    a split (join) stage deals them out (sends them out), and the links that wait for another
    tensor's turn hold their whole tensor (see :func:`_fifo_depth`). The
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
    a.add_join()
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
        for port, t in enumerate(s.name for s in ig.output_specs):
            self.consumers.setdefault(t, []).append((None, port))
        #: the stage joining several outputs into the output stream (:meth:`add_join`), or None
        self.join: Stage | None = None
        #: (tensor, stage) of the links that hold their whole tensor because their consumer
        #: takes it while the stream of another tensor waits (see the segment blocks)
        self.whole: set[tuple[str, str]] = set()

    def elements(self, tensor: str) -> int:
        return int(np.prod(self.specs[tensor].shape))

    def add_input(self, fold: Folding) -> None:
        """The pipeline input, at the lanes of the first layer that reads it; with several model
        inputs, a split stage deals the input stream out to them (:meth:`add_split`)."""
        lanes = []
        for spec in self.ig.input_specs:
            first = next((layer for layer in self.ig.layers if spec.name in layer.inputs), None)
            if first is None:
                what = "its input" if len(self.ig.input_specs) == 1 else f"its input {spec.name!r}"
                raise UnsupportedError(f"the model computes nothing from {what} that hardware could build")
            lanes.append(fold_entry(fold[first.name])[1])
        if len(lanes) > 1:
            self.add_split(math.gcd(*lanes))
            return
        in_spec = self.ig.input_specs[0]
        shape = elem_shape(in_spec.dtype)
        self.producer[in_spec.name] = (INPUT, 0, lanes[0], shape.width, shape.signed)
        self.routes[in_spec.name] = self.add_forks(in_spec.name)

    def add_split(self, lanes: int) -> None:
        """The stage that splits the input stream (the model's inputs one after the other, in
        graph-input order, each flattened NHWC, elements of a common type) into one stream per
        input, ``lanes`` (the gcd of their first readers' lanes) per transfer; a link after it
        converts each to its reader's lanes."""
        specs = self.ig.input_specs
        shapes = [elem_shape(s.dtype) for s in specs]
        common = common_shape(shapes)
        counts = tuple(self.elements(s.name) // lanes for s in specs)
        params = dict(in_shape=common, lanes=lanes, out_shapes=tuple(shapes), counts=counts)
        st = self._boundary_stage(SPLIT_OP, SegmentSplit, params, ",".join(s.name for s in specs), counts,
                                  lanes, common, inputs=1)
        self.stages.append(st)
        self.links.append(Link(st.inputs[0], INPUT, st.name, 0, 0, lanes, lanes, common.width, common.signed,
                               sum(counts) * lanes, LINK_FIFO))
        for port, (spec, shape) in enumerate(zip(specs, shapes)):
            self.producer[spec.name] = (st.name, port, lanes, shape.width, shape.signed)
            if port < len(specs) - 1:
                self.whole.add((spec.name, st.name))
            self.routes[spec.name] = self.add_forks(spec.name)

    def add_join(self) -> None:
        """With several model outputs, the stage that joins them into the output stream (one
        after the other, in graph-output order, at the gcd of their producers' lanes, elements
        of a common type); its links are made by :meth:`connect`."""
        specs = self.ig.output_specs
        if len(specs) == 1:
            return
        lanes = math.gcd(*(self.producer[s.name][2] for s in specs))
        shapes = [Shape(self.producer[s.name][3], self.producer[s.name][4]) for s in specs]
        common = common_shape(shapes)
        counts = tuple(self.elements(s.name) // lanes for s in specs)
        params = dict(in_shapes=tuple(shapes), lanes=lanes, out_shape=common, counts=counts)
        self.join = self._boundary_stage(JOIN_OP, SegmentJoin, params, ",".join(s.name for s in specs), counts,
                                         lanes, common, inputs=len(specs))
        self.stages.append(self.join)
        for spec in specs[1:]:
            self.whole.add((spec.name, self.join.name))

    def _boundary_stage(self, op: str, block, params: dict, tensor: str, counts, lanes: int, common: Shape,
                        inputs: int) -> Stage:
        """The split or join stage: one segment ``block`` of ``params``, ``sum(counts)``
        transfers of ``lanes`` a round; its stream (``tensor``: the names it carries) of
        element shape ``common``."""
        cost = block.estimate(**params, family=self.family)
        return Stage(name=self.names(op), layer="", op=op, inputs=(tensor,) * inputs, output=tensor, pe=lanes,
                     simd=lanes, in_lanes=(lanes,) * inputs, out_lanes=lanes, out_bits=common.width,
                     out_signed=common.signed, blocks=(Block(block, params, cost),), cycles=sum(counts),
                     latency=cost.latency, cost=cost)

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
        forks = 0   # each fork its own key for the name sanitizer (one key, one name)
        while len(sources) < len(self.consumers.get(tensor, [])):
            s_name, s_port = sources.pop(0)
            key = f"{FORK_OP}_{tensor}" + (f"#{forks}" if forks else "")
            forks += 1
            fk = _fork_stage(self.names(key), tensor, lanes, bits, sg, n, self.family)
            self.stages.append(fk)
            self.links.append(Link(tensor, s_name, fk.name, 0, s_port, lanes, lanes, bits, sg, n, LINK_FIFO))
            sources += [(fk.name, 0), (fk.name, 1)]
        return sources

    def connect(self) -> None:
        """A link from one route of every tensor to each of its consumers (a model output: the
        pipeline's output, or its port of the join stage), and from the join stage to the
        pipeline's output."""
        forked = {t for t, r in self.routes.items() if len(r) > 1}
        ii = max(st.cycles for st in self.stages)
        for tensor, cons in self.consumers.items():
            _, _, lanes, bits, sg = self.producer[tensor]
            n = self.elements(tensor)
            for (dst, port), (src, sport) in zip(cons, self.routes[tensor]):
                dst_stage = self.join if dst is None else self.layer_stage[dst.name]
                dst_name = OUTPUT if dst_stage is None else dst_stage.name
                dst_lanes = lanes if dst_stage is None else dst_stage.in_lanes[port]
                whole = tensor in forked or (tensor, src) in self.whole or (tensor, dst_name) in self.whole
                held = self.tensors_held(tensor, dst_stage, port, ii) if whole else 1
                depth = _fifo_depth(n, dst_lanes, whole, dst_stage, held)
                self.links.append(Link(tensor, src, dst_name, port, sport, lanes, dst_lanes, bits, sg, n, depth))
        if self.join is not None:
            j = self.join
            n = sum(self.elements(s.name) for s in self.ig.output_specs)
            self.links.append(Link(j.output, j.name, OUTPUT, 0, 0, j.out_lanes, j.out_lanes, j.out_bits,
                                   j.out_signed, n, LINK_FIFO))


    def tensors_held(self, tensor: str, dst: Stage | None, port: int, ii: int) -> int:
        """Inferences of ``tensor`` a fork's branch into ``dst``'s ``port`` holds: enough to
        cover how much later ``dst`` takes its other inputs computed from ``tensor`` (a gate
        pooled from the same image, a residual's main branch holding such a gate), so the
        producer streams on meanwhile; at least one (:meth:`arrivals`)."""
        if dst is None:
            return 1
        times = self.arrivals(tensor, ii)
        waits = [times[t][0] + (times[t][1] if dst.blocks[0].waits_for(port) == q else 0)
                 for q, t in enumerate(dst.inputs) if q != port and t in times]
        return max([1] + [-(-int(w) // ii) for w in waits])

    def arrivals(self, tensor: str, ii: int) -> dict[str, tuple[float, float]]:
        """Every tensor computed from ``tensor`` -> (cycles from the first element of
        ``tensor`` to its own first element, cycles over which its elements arrive), in steady
        state (``tensor`` arrives over the initiation interval ``ii``) from the stages'
        estimates: a stage's first output comes ``fill`` of its input's arrival plus its
        latency after its input's first element; a stage that reads its whole input first
        spreads its output over its cycles, any other over its input's arrival; a block that
        reads one input whole before another (``waits_for``) starts that one after it."""
        times = {tensor: (0.0, float(ii))}
        for st in self.stages:
            ins = [(q, times[t]) for q, t in enumerate(st.inputs) if t in times]
            if not ins or st.output in times:
                continue
            block = st.blocks[0]
            starts = [s + (times[st.inputs[w]][1] if (w := block.waits_for(q)) is not None and st.inputs[w] in times
                           else 0.0) for q, (s, _) in ins]
            first, span = max(starts), ins[0][1][1]
            start = first + st.fill * span + st.latency
            times[st.output] = (start, float(st.cycles) if st.fill >= 1 else span)
        return times


def common_shape(shapes) -> Shape:
    """The element shape of a stream carrying tensors of ``shapes`` one after the other
    (:func:`onnx2hw.protocol.common_type`)."""
    return Shape(*common_type((s.width, s.signed) for s in shapes))


def _fifo_depth(elements: int, dst_lanes: int, whole: bool, dst_stage: Stage | None, held: int = 1) -> int:
    """Transfers the FIFO of a link holds: a fork's branch holds its whole tensor (the FIFO sits
    after the width converter: words of ``dst_lanes``), so the branch consumed later never stalls
    the other; so do a model input's link out of the split stage, but the last input's, and a
    model output's link into the join stage, but the first output's (see
    :class:`~onnx2hw.rtl.segments.SegmentSplit`, :class:`~onnx2hw.rtl.segments.SegmentJoin`);
    so does the link into a stage whose first block reads its input in one burst; any other
    link decouples its neighbours' stalls. A fork's branch holds ``held`` whole tensors
    (:meth:`_Assembly.tensors_held`)."""
    if whole:
        return held * -(-elements // dst_lanes) + LINK_FIFO
    if dst_stage is not None and dst_stage.blocks[0].input_burst:
        return elements // dst_lanes + LINK_FIFO
    return LINK_FIFO
