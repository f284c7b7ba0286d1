"""`onnx2hw synth`: bitstreams and reports for ECP5 and iCE40 boards, and early failures."""
import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from _paths import EXAMPLES
from onnx2hw.build import ROUTER2_ABOVE_LUT, nextpnr_options
from onnx2hw.cli import VERBS, main
from onnx2hw.quant.ptq import quantize


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    """A float MLP 16-8-4 quantized by our own PTQ (4-bit weights, 8-bit activations)."""
    rng = np.random.default_rng(0)
    w1, w2 = rng.normal(0, 0.5, (8, 16)).astype(np.float32), rng.normal(0, 0.5, (4, 8)).astype(np.float32)
    g = helper.make_graph(
        [helper.make_node("Gemm", ["x", "w1", "b1"], ["h"], name="fc1", transB=1),
         helper.make_node("Relu", ["h"], ["r"], name="relu1"),
         helper.make_node("Gemm", ["r", "w2", "b2"], ["y"], name="fc2", transB=1)],
        "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])],
        [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(np.zeros(8, np.float32), "b1"),
         numpy_helper.from_array(w2, "w2"), numpy_helper.from_array(np.zeros(4, np.float32), "b2")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    qdq = quantize(model, {"x": rng.uniform(0, 1, (64, 16)).astype(np.float32)}, weight_bits=4)
    path = tmp_path_factory.mktemp("tiny") / "tiny_w4a8.onnx"
    onnx.save(qdq, path)
    return str(path)


@pytest.mark.synth
@pytest.mark.slow
@pytest.mark.parametrize("board, bitfile, clock", [("ulx3s-85f", "bit", []), ("ulx3s-12f", "bit", ["--pnr-seed", "7"]),
                                                  ("icebreaker", "bin", [])])
def test_synth_builds_bitstream_and_report(tiny_model, tmp_path, capsys, board, bitfile, clock):
    out = tmp_path / "build"
    verify = ["--verify", "3", "--verify-netlist"] if board == "ulx3s-85f" else []
    rc = main(["synth", tiny_model, "--board", board, "-o", str(out), *clock, *verify])
    captured = capsys.readouterr()
    text = captured.out
    assert rc == 0, text
    if verify:
        assert "verified: bit-exact on 3/3 random inferences" in captured.err
        assert "verified the netlist: bit-exact on 3/3 random inferences" in " ".join(captured.err.split())
    assert (out / f"tiny_w4a8.{bitfile}").stat().st_size > 1000
    if bitfile == "bit":
        assert (out / "tiny_w4a8.svf").is_file()
    for f in ("tiny_w4a8.v", "folding.json", "accelerator.json", "report.html"):
        assert (out / f).is_file(), f
    r = json.loads((out / "report.json").read_text())
    assert r["board"] == board and r["clock"]["met"] and r["clock"]["fmax_mhz"] >= r["clock"]["target_mhz"]
    assert r.get("nextpnr_seed") == (7 if "--pnr-seed" in clock else None)
    for name, res in r["resources"].items():
        assert res["used"] is not None and 0 <= res["used"] <= res["available"], (name, res)
    assert r["resources"]["lut"]["used"] > 0 and r["throughput"]["ii_cycles"] > 0
    assert [s["name"] for s in r["stages"]] == ["fc1", "fc2"]
    assert set(r["times_s"]) >= {"compile", "total"}
    if verify:
        assert r["verify"]["rtl"]["exact"] == r["verify"]["netlist"]["exact"] == 3
    page = (out / "report.html").read_text()
    assert "<svg" in page and "fc1" in page and "Clock: met" in page
    assert "resources: LUT" in text and "inferences/s" in text
    # `sim --board B` simulates the very folding `synth --board B` built
    folding = json.loads((out / "folding.json").read_text())
    assert main(["sim", tiny_model, "--board", board, "--count", "2"]) == 0
    sim_text = capsys.readouterr().out
    assert "folding: " + ", ".join(f"{k} pe={v['pe']} simd={v['simd']}" + (f" mul={v['mul']}" if "mul" in v else "")
                                   for k, v in folding.items()) in sim_text
    assert f"estimated {r['throughput']['ii_cycles']}" in sim_text


def test_synth_too_large_for_icebreaker_fails_before_yosys(tmp_path, capsys):
    out = tmp_path / "b"
    assert main(["synth", str(EXAMPLES / "digits_cnn_int8.onnx"), "--board", "icebreaker", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: does not fit iCE40UP5K: needs ") and "'" in err
    assert not out.exists()


@pytest.mark.parametrize("argv, message", [
    (["--board", "ulx3s", "--baud", "4e6"], "above the 3e+06 baud"),
    (["--board", "orangecrab", "--clock-mhz", "1000"], "MHz"),
    (["--pnr-seed", "-1"], "--pnr-seed must be a whole number from 0 to 2147483647, not -1"),
    (["--pnr-tries", "0"], "--pnr-tries must be at least 1, not 0"),
])
def test_synth_bad_link_or_clock(capsys, argv, message):
    assert main(["synth", str(EXAMPLES / "digits_mlp_int8.onnx"), *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err, err


def test_big_designs_route_with_router2():
    """router1 stalls on congested 40k-LUT designs, whose placement also weighs timing more; small
    ones keep nextpnr's defaults."""
    assert nextpnr_options(3_000) == "--timing-allow-fail"
    assert nextpnr_options(ROUTER2_ABOVE_LUT + 1).split() == ["--timing-allow-fail", "--router", "router2",
                                                            "--placer-heap-timingweight", "40"]


@pytest.mark.parametrize("verb", VERBS)
def test_every_verb_prints_its_help(capsys, verb):
    """argparse %-formats help texts: a bare '%' in one (``15%``) broke ``synth --help``."""
    with pytest.raises(SystemExit) as e:
        main([verb, "--help"])
    assert e.value.code == 0 and capsys.readouterr().out.startswith(f"usage: onnx2hw {verb}")
