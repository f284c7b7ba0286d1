"""Folding: the product style (DSP or LUT) chosen per layer within a budget, the folding value
``(pe, simd[, mul])`` through compile_pipeline, and the folding file with its optional "mul"."""
import itertools
import json

import pytest

import _int_models as models
from onnx2hw.boards import get_board
from onnx2hw.dataflow import MULS, compile_pipeline, fold_entry
from onnx2hw.dataflow._stages import build_stage
from onnx2hw.dataflow.fold import Budget, auto_fold, load_folding, save_folding
from onnx2hw.ir.errors import ModelError
from onnx2hw.layers.types import IntType
from onnx2hw.report import make_report, render_html


def _mlp():
    """8-bit products, threshold activations (no DSP outside the products)."""
    return models.mlp(sizes=(64, 32, 16, 10), act="thresholds")


def _totals(p):
    return (sum(s.cost.lut for s in p.stages), sum(s.cost.dsp for s in p.stages),
            sum(s.cost.ebr for s in p.stages))


def _fits(total, budget):
    return total[0] <= budget.lut and total[1] <= budget.dsp and total[2] <= budget.ebr


def _any_mix_fits(g, target, budget):
    """Whether some choice of product styles fits ``budget`` with each layer at its fewest
    multipliers meeting ``target`` (every combination tried)."""
    specs = g.specs()
    per_layer = []
    for layer in g.layers:
        ins = [specs[n] for n in layer.inputs]
        ok = [(p * s, layer.cycles(ins, p, s), p, s) for p, s in layer.fold_options(ins)
              if layer.cycles(ins, p, s) <= target]
        if not ok:
            return False
        _, _, p, s = min(ok)
        per_layer.append([build_stage(layer.name, layer, ins, p, s, "ecp5", m) for m in MULS])
    for combo in itertools.product(*per_layer):
        if _fits((sum(s.cost.lut for s in combo), sum(s.cost.dsp for s in combo),
                  sum(s.cost.ebr for s in combo)), budget):
            return True
    return False


def test_few_dsps_many_luts_mixes_styles_at_the_fastest_fitting_ii():
    g = _mlp()
    budget = Budget(30000, 24, 200, "few DSPs")
    t = compile_pipeline(g, budget=budget).total     # the whole pipeline, FIFOs included, fits
    assert t.lut <= budget.lut and t.dsp <= budget.dsp and t.ebr <= budget.ebr
    p = compile_pipeline(g, folding=auto_fold(g, "ecp5", budget))   # the folder's choice for the stages
    styles = {s.mul for s in p.stages}
    assert styles == {"dsp", "lut"}, [(s.name, s.pe, s.simd, s.mul) for s in p.stages]
    assert _fits(_totals(p), budget)
    assert dict(p.folding) == {s.layer: (s.pe, s.simd, s.mul) for s in p.stages}
    # a LUT-product stage has no DSP in its multiply unit; a DSP one has one per product
    for s in p.stages:
        unit = s.blocks[0]
        assert unit.params.get("mul_style") == s.mul
        assert (unit.cost.dsp == 0) == (s.mul == "lut")
    # max throughput: at the next faster slowest-stage target no style mix fits
    specs = g.specs()
    faster = max((layer.cycles([specs[n] for n in layer.inputs], pe, sd)
                  for layer in g.layers for pe, sd in layer.fold_options([specs[n] for n in layer.inputs])
                  if layer.cycles([specs[n] for n in layer.inputs], pe, sd) < p.ii), default=None)
    assert faster is not None and not _any_mix_fits(g, faster, budget)
    # and LUT products pay: with DSPs only (no LUT room for products) the II is worse
    dsp_only = compile_pipeline(g, budget=Budget(_totals(p)[0] // 4, 24, 200))
    assert dsp_only.ii > p.ii


def test_wide_products_stay_in_dsps_while_they_fit():
    big = Budget(83640, 156, 208)
    p = compile_pipeline(_mlp(), budget=big, target_cycles=256)   # 11 multipliers in all
    assert {s.mul for s in p.stages} == {"dsp"}
    # at the widest folding the DSPs run out: a layer is in LUTs only if its DSPs did not fit
    p = compile_pipeline(_mlp(), budget=big)
    used = _totals(p)[1]
    lut = [s for s in p.stages if s.mul == "lut"]
    assert lut and all(used + s.multipliers > big.dsp for s in lut)


def test_no_dsps_puts_every_product_in_luts():
    p = compile_pipeline(_mlp(), budget=Budget(60000, 0, 200))
    assert {s.mul for s in p.stages} == {"lut"} and _totals(p)[1] == 0


def test_narrow_products_go_to_luts_even_with_dsps_free():
    g = models.mlp(sizes=(32, 16, 8), w_type=IntType(2, True), act="thresholds")
    p = compile_pipeline(g, budget=Budget(83640, 156, 208))
    assert {s.mul for s in p.stages} == {"lut"}


def test_without_budget_the_blocks_choose_by_width():
    fold = auto_fold(_mlp(), "ecp5", None, target_cycles=64)
    assert all(len(v) == 2 for v in fold.values())
    p = compile_pipeline(_mlp(), folding=fold)
    assert {s.mul for s in p.stages} == {"dsp"}   # 8x8: auto takes a DSP


def test_explicit_styles_are_built_and_checked():
    g = _mlp()
    p = compile_pipeline(g, folding={"fc0": (2, 8, "lut"), "fc1": (1, 4, "dsp"), "fc2": (1, 2)})
    assert dict(p.folding) == {"fc0": (2, 8, "lut"), "fc1": (1, 4, "dsp"), "fc2": (1, 2, "dsp")}
    assert p.stages[0].cost.dsp == 0 and p.stages[1].cost.dsp == 4
    with pytest.raises(ModelError, match="'fc0' has no 'xor' products"):
        compile_pipeline(g, folding={"fc0": (2, 8, "xor"), "fc1": (1, 4), "fc2": (1, 2)})
    with pytest.raises(ModelError, match=r"layer 'fc1': a folding is \(pe, simd\) or \(pe, simd, mul\)"):
        compile_pipeline(g, folding={"fc0": (2, 8), "fc1": (1,), "fc2": (1, 2)})
    # a layer with no choice of style (here: a max pool) rejects one
    cnn = models.cnn()
    fold = dict(compile_pipeline(cnn, budget=Budget(83640, 156, 208)).folding)
    assert len(fold["pool1"]) == 2 and len(fold["conv1"]) == 3
    fold["pool1"] = (*fold["pool1"], "lut")
    with pytest.raises(ModelError, match="'pool1' has no 'lut' products.*none"):
        compile_pipeline(cnn, folding=fold)


def test_folding_file_round_trip_with_styles(tmp_path):
    g = _mlp()
    p = compile_pipeline(g, budget=Budget(30000, 24, 200))
    path = tmp_path / "folding.json"
    save_folding(p.folding, path)
    raw = json.loads(path.read_text())
    assert {v["mul"] for v in raw.values()} == {"dsp", "lut"}
    assert set(raw["fc0"]) == {"pe", "simd", "mul"}
    assert load_folding(path) == dict(p.folding)
    again = compile_pipeline(g, folding=load_folding(path))
    assert again.describe() == p.describe()
    # an old file (no "mul") still loads: the blocks choose by width
    path.write_text(json.dumps({k: {"pe": v["pe"], "simd": v["simd"]} for k, v in raw.items()}))
    old = load_folding(path)
    assert all(len(v) == 2 for v in old.values())
    assert {s.mul for s in compile_pipeline(g, folding=old).stages} == {"dsp"}
    for bad, msg in (({"pe": 1, "simd": 1, "mul": "fast"}, 'mul must be "dsp" or "lut"'),
                     ({"pe": 1, "simd": 1, "muls": "lut"}, "must map to")):
        path.write_text(json.dumps({"fc0": bad}))
        with pytest.raises(ModelError, match=msg):
            load_folding(path)


def test_fold_entry():
    assert fold_entry((2, 3)) == (2, 3, None)
    assert fold_entry([2, 3, "lut"]) == (2, 3, "lut")
    with pytest.raises(ValueError, match="a folding is"):
        fold_entry((1, 2, 3, 4))


def test_describe_and_report_show_the_style():
    p = compile_pipeline(_mlp(), folding={"fc0": (2, 8, "lut"), "fc1": (1, 4, "dsp"), "fc2": (1, 2, "lut")})
    assert [s["mul"] for s in p.describe()["stages"]] == ["lut", "dsp", "lut"]
    assert p.describe()["folding"]["fc0"] == [2, 8, "lut"]
    r = make_report(model="mlp", board=get_board("ulx3s-85f"), pipeline=p, clock_mhz=100.0, fmax_mhz=None,
                    util={}, times={}, baud=3e6, link_bytes=64)
    assert [s["mul"] for s in r["stages"]] == ["lut", "dsp", "lut"]
    assert "PE 2 × SIMD 8, LUT products" in render_html(r)
    # a stage without products names no style
    cnn = compile_pipeline(models.cnn(), budget=Budget(83640, 156, 208))
    assert "mul" not in next(s for s in cnn.describe()["stages"] if s["op"] == "maxpool")
