"""Dataflow compiler: stages, folding against a budget, FIFOs on residual branches, early errors."""
import json

import numpy as np
import pytest

import _int_models as models
from onnx2hw.dataflow.compile import compile_pipeline
from onnx2hw.dataflow.fold import Budget, load_folding, save_folding
from onnx2hw.dataflow.pipeline import INPUT, OUTPUT
from onnx2hw.ir.errors import ModelError, UnsupportedError
from onnx2hw.arith import acc_bits
from onnx2hw.layers import Conv, accumulator_bounds

BIG = Budget(83640, 156, 208, "LFE5U-85F")


def _expected_cycles(layer, ins, pe, simd):
    """Cycles per inference computed from the layer shapes alone."""
    if layer.__class__.__name__ == "Dense":
        n, k = layer.weights.shape
        return (k // simd) * (n // pe)
    cout, kh, kw, cin = layer.weights.shape
    oh, ow, _ = layer.output.shape
    return oh * ow * (kh * kw * cin // simd) * (cout // pe)


def test_mlp_stages_and_ii():
    g = models.mlp()
    p = compile_pipeline(g, budget=Budget(4000, 8, 10, "small"))
    assert [s.layer for s in p.stages] == ["fc0", "fc1", "fc2"]
    specs = g.specs()
    for layer, stage in zip(g.layers, p.stages):
        assert stage.cycles == _expected_cycles(layer, [specs[layer.inputs[0]]], stage.pe, stage.simd)
        assert layer.weights.shape[0] % stage.pe == 0 and layer.weights.shape[1] % stage.simd == 0
        assert [b.kind for b in stage.blocks] == ["MatrixVectorUnit", "Requantize"]
    assert p.ii == max(s.cycles for s in p.stages)
    assert p.total.dsp <= 8 and p.total.lut <= 4000
    # the input link feeds the first stage at its SIMD; the output leaves at the last PE
    assert p.input_link.src == INPUT and p.input_link.dst_lanes == p.stages[0].simd
    assert p.output_link.dst == OUTPUT and p.output_link.src_lanes == p.stages[-1].pe


def test_larger_budget_is_faster_and_balanced():
    g = models.mlp()
    small = compile_pipeline(g, budget=Budget(4000, 8, 10))
    large = compile_pipeline(g, budget=BIG)
    assert large.ii < small.ii
    assert large.total.dsp <= BIG.dsp


def test_target_cycles_uses_least_parallelism():
    g = models.mlp()
    p = compile_pipeline(g, target_cycles=48, budget=BIG)
    assert p.ii <= 48
    for s in p.stages:  # no smaller parallelism would meet the target
        layer = next(l for l in g.layers if l.name == s.layer)
        n, k = layer.weights.shape
        smaller = [(pe, sd) for pe in range(1, n + 1) for sd in range(1, k + 1)
                   if n % pe == 0 and k % sd == 0 and pe * sd < s.pe * s.simd]
        assert all((k // sd) * (n // pe) > 48 for pe, sd in smaller)


def test_does_not_fit_names_resource_and_layer():
    with pytest.raises(ModelError, match=r"does not fit tiny: needs \d+ DSP but 1 are available.*'fc0'"):
        compile_pipeline(models.mlp(sizes=(64, 64, 10)), budget=Budget(100000, 1, 100, "tiny"))
    with pytest.raises(ModelError, match="no folding reaches 0 cycles"):
        compile_pipeline(models.mlp(), target_cycles=0, budget=BIG)


def test_explicit_folding_and_file_roundtrip(tmp_path):
    g = models.mlp()
    p = compile_pipeline(g, folding={"fc0": (4, 6), "fc1": (2, 8), "fc2": (3, 4)})
    assert dict(p.folding) == {"fc0": (4, 6, "dsp"), "fc1": (2, 8, "dsp"), "fc2": (3, 4, "dsp")}  # mul: by width
    path = tmp_path / "fold.json"
    save_folding(p.folding, path)
    assert load_folding(path) == dict(p.folding)
    assert json.loads(path.read_text())["fc0"] == {"pe": 4, "simd": 6, "mul": "dsp"}
    with pytest.raises(ModelError, match="not legal for layer 'fc0'"):
        compile_pipeline(g, folding={"fc0": (5, 6), "fc1": (1, 1), "fc2": (1, 1)})
    with pytest.raises(ModelError, match="'nope'"):
        compile_pipeline(g, folding={"nope": (1, 1)})
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ModelError, match="not a folding file"):
        load_folding(tmp_path / "bad.json")


def test_cnn_stage_kinds():
    g = models.cnn()
    p = compile_pipeline(g, budget=BIG)
    kinds = [[b.kind for b in s.blocks] for s in p.stages]
    assert kinds == [["SlidingWindow", "MatrixVectorUnit", "Requantize"], ["MaxPoolUnit"],
                     ["SlidingWindow", "MatrixVectorUnit", "Requantize"], ["GlobalAvgPoolUnit", "Cast", "Requantize"],
                     ["MatrixVectorUnit", "Requantize"]]
    specs = g.specs()
    conv1 = p.stages[0]
    assert conv1.cycles >= _expected_cycles(g.layers[0], [specs["img"]], conv1.pe, conv1.simd)
    assert g.layers[0].weights.shape[3] % conv1.simd == 0  # SIMD folds input channels
    assert p.macs == sum(s.macs for s in p.stages) > 0


def test_residual_fork_fifo_holds_the_tensor():
    g = models.residual()
    p = compile_pipeline(g, budget=BIG)
    forks = [s for s in p.stages if s.op == "fork"]
    assert len(forks) == 1 and forks[0].inputs == ("conv1_out",)
    out_links = [l for l in p.links if l.src == forks[0].name]
    assert sorted(l.src_port for l in out_links) == [0, 1]
    for link in out_links:  # deadlock-free: each branch can buffer the whole tensor (in dst lanes)
        assert link.fifo_depth * link.dst_lanes >= 4 * 4 * 4


def test_unsupported_layers_listed_at_once():
    g = models.cnn()
    wide = []
    for layer in g.layers:
        if isinstance(layer, Conv):   # a bias that needs a 52-bit accumulator (the hardware has 48)
            bias = layer.bias + (1 << 50)
            lo, hi = accumulator_bounds(layer.weights, bias, layer.in_type.lo, layer.in_type.hi)
            layer = Conv(**{**layer.__dict__, "bias": bias, "acc_bits": acc_bits(int(min(lo)), int(max(hi)))})
        wide.append(layer)
    bad = type(g)(**{**g.__dict__, "layers": tuple(wide)})
    with pytest.raises(UnsupportedError) as info:
        compile_pipeline(bad)
    assert "'conv1'" in str(info.value) and "'conv2'" in str(info.value)


def _se_design():
    import onnx2hw
    from _paths import ROOT
    return onnx2hw.compile(str(ROOT / "corpus" / "ort_blk_se_sigmoid_qdq.onnx"), board="ulx3s-85f", target_fps="max")


def test_gated_branch_holds_the_tensors_that_arrive_while_its_gate_is_pooled():
    """An SE block: the feature map forks to a global pool (-> dense layers -> the gate) and to the
    product, which reads an image only after its whole gate. The feature branch holds the
    images that arrive meanwhile (here 2 or more); a residual's branches with no such wait hold
    one tensor each."""
    p = _se_design().pipeline
    mul = next(s for s in p.stages if s.blocks[0].kind == "ProductUnit")
    link = next(l for l in p.links if l.dst == mul.name and l.dst_port == 0)
    assert link.fifo_depth * link.dst_lanes >= 2 * link.elements
    res = compile_pipeline(models.residual(), budget=BIG)
    for l in (l for l in res.links if l.src.startswith("fork")):
        assert l.fifo_depth * l.dst_lanes < 2 * l.elements


@pytest.mark.sim
def test_gated_branch_keeps_the_estimated_initiation_interval():
    """Simulated without backpressure, the SE net streams at its estimated II (within 5 %)."""
    d = _se_design()
    r = d.simulate_raw(d.random_inputs(6, 0), seed=0, timing=True)
    assert r.ok and r.ii <= 1.05 * d.pipeline.ii, (r.ii, d.pipeline.ii)
