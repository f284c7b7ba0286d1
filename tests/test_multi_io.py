"""Models with several inputs or outputs, end to end: float models (tests/_multi_io_models.py)
quantized by ``onnx2hw.compile(..., calib=...)``; the golden executor against onnxruntime with
optimizations off on the QDQ model onnx2hw's quantizer writes (the oracle); the simulated
accelerator, ``onnx2hw sim --output`` and ``onnx2hw run --port sim`` bit-exact against the golden;
a bitstream of a two-output and of a two-input model, run through the simulated board."""
from __future__ import annotations

import json

import numpy as np
import onnx
import pytest

import onnx2hw
from _multi_io_models import calib_for, late_input, two_heads, two_inputs
from _oracle import lsb_apart, run_spec
from _sim_fixtures import require_simulator
from onnx2hw import protocol as P
from onnx2hw.build_info import build_info, read_build_info, selftest_record, write_build_info
from onnx2hw.cli import main
from onnx2hw.dataflow.compile import JOIN_OP, SPLIT_OP
from onnx2hw.driver import Accelerator
from onnx2hw.quant.ptq import quantize

pytestmark = pytest.mark.filterwarnings("ignore::amaranth.hdl._ir.UnusedElaboratable")

#: name -> (model factory, inputs calibrated non-negative: quantized unsigned)
CASES = {
    "two_heads": (two_heads, ()),
    "two_heads_softmax": (lambda: two_heads(softmax=True), ()),
    "two_inputs_add": (two_inputs, ()),
    "two_inputs_concat": (lambda: two_inputs("Concat"), ()),
    "late_input": (late_input, ("b",)),
}


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    """name -> (model, its file, calibration file, design compiled from them, test inputs, their file)."""
    cache = {}
    root = tmp_path_factory.mktemp("multi_io")

    def get(name):
        if name not in cache:
            make, positive = CASES[name]
            model = make()
            path, calib_path, x_path = root / f"{name}.onnx", root / f"{name}_calib.npz", root / f"{name}_x.npz"
            onnx.save(model, path)
            calib, x = calib_for(model, 64, 1, positive), calib_for(model, 6, 2, positive)
            np.savez(calib_path, **calib)
            np.savez(x_path, **x)
            design = onnx2hw.compile(str(path), calib=str(calib_path))
            cache[name] = (model, path, calib_path, design, x, x_path)
        return cache[name]
    return get


def _same(got: dict, want: dict) -> None:
    assert list(got) == list(want) or sorted(got) == sorted(want)
    for k in want:
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)


@pytest.mark.parametrize("name", CASES)
def test_golden_equals_onnxruntime_on_the_quantized_model(case, name):
    """Every model output, each dequantized by its own scale (and the Softmax of one head on the
    host), as onnxruntime computes the QDQ model; the quantizer keeps every output, in order."""
    model, _, _, design, _, _ = case(name)
    _, positive = CASES[name]
    qdq = quantize(model, calib_for(model, 64, 1, positive))
    names = [o.name for o in qdq.graph.output]
    assert names == [o.name for o in model.graph.output]
    x = calib_for(model, 200, 3, positive)
    want = dict(zip(names, run_spec(qdq, x)))
    got = design.golden(x)
    assert sorted(got) == sorted(names)
    scales = {d.name: d.scale for d in design.integer.outputs}
    for k in names:
        if k in scales:
            lsb = lsb_apart(got[k], want[k], scales[k])
            # float32 sums in onnxruntime may break a rounding tie the other way: at most one step
            assert lsb.max() <= 1 and np.mean(lsb == 0) >= 0.99, (k, lsb.max(), np.mean(lsb == 0))
        else:       # the host's Softmax in float32, after the same dequantized logits
            np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-6, err_msg=k)


def test_two_outputs_stream_one_after_the_other(case):
    """The hardware's outputs, in graph-output order, on one stream of their common type: the
    logits (int8) and the box (uint8, after its Relu) need signed 9-bit elements (2 bytes)."""
    _, _, _, design, _, _ = case("two_heads")
    ig, p = design.integer, design.pipeline
    assert [s.name for s in ig.output_specs] == ["logits", "box"]
    assert [(str(s.dtype), s.shape) for s in ig.output_specs] == [("int8", (10,)), ("uint8", (2,))]
    link = design.link
    assert [(o.name, o.shape, o.bits, o.signed) for o in link.outputs] == [("logits", (10,), 8, True),
                                                                          ("box", (2,), 8, False)]
    assert (link.out_bits, link.out_signed, link.out_elems, link.out_bytes) == (9, True, 12, 24)
    assert P.link_format(p.describe()) == link        # what accelerator.json describes
    join = next(s for s in p.stages if s.op == JOIN_OP)
    into = {l.dst_port: l for l in p.links if l.dst == join.name}
    # the second output waits while the first is sent: its link holds all of it
    assert into[1].fifo_depth * into[1].dst_lanes >= into[1].elements
    assert p.output_link.src == join.name and p.output_link.elements == 12


@pytest.mark.parametrize("name", ["two_inputs_add", "late_input"])
def test_two_inputs_stream_one_after_the_other(case, name):
    """The inputs, in graph-input order, on one stream: the first is held whole by its link
    while the second arrives (the layer that joins them needs both at once)."""
    model, _, _, design, _, _ = case(name)
    ig, p, link = design.integer, design.pipeline, design.link
    assert [s.name for s in ig.input_specs] == [vi.name for vi in model.graph.input]
    assert [(i.name, i.shape) for i in link.inputs] == [(s.name, s.shape) for s in ig.input_specs]
    signed = [s.dtype.signed for s in ig.input_specs]
    # signed a and signed b share int8; with unsigned b, int9 holds both (2 bytes an element)
    assert (link.in_bits, link.in_signed) == ((8, True) if all(signed) else (9, True))
    assert link.in_bytes == link.in_elems * (1 if all(signed) else 2)
    split = next(s for s in p.stages if s.op == SPLIT_OP)
    first = next(l for l in p.links if l.src == split.name and l.src_port == 0)
    assert first.fifo_depth * first.dst_lanes >= first.elements
    assert p.input_link.dst == split.name and p.input_link.elements == link.in_elems
    assert P.link_format(p.describe()) == link


def test_link_coding_round_trips_named_tensors():
    """Several tensors on one stream of their common type: encoded in order, each value coded
    in that type; outputs decoded back per tensor (bipolar codes 0/1 as -1/+1)."""
    parts = [P.LinkPart("a", (2,), 8, False), P.LinkPart("b", (3,), 4, True), P.LinkPart("c", (1,), 1, False)]
    fmt = P.LinkFormat.of_parts(parts, parts, in_lanes=1, out_lanes=1)
    assert (fmt.in_bits, fmt.in_signed, fmt.in_shape, fmt.in_elem_bytes) == (9, True, (6,), 2)
    a, b, c = np.array([[255, 0]]), np.array([[-8, 7, -1]]), np.array([[-1]])
    payload = fmt.encode_tensors([a, b, c], [False, False, True])
    # int9 little-endian two's complement: 255, 0, -8, 7, -1, then the bipolar -1 as code 0
    assert payload == bytes([255, 0, 0, 0, 0xF8, 0xFF, 7, 0, 0xFF, 0xFF, 0, 0])
    back = fmt.decode_tensors(payload, 1, [False, False, True])
    for got, want in zip(back, (a, b, c)):
        np.testing.assert_array_equal(got, want)
    with pytest.raises(ValueError, match="input 'b' value 8 does not fit int4"):
        fmt.encode_tensors([a, np.array([[8, 0, 0]]), c], [False, False, True])
    with pytest.raises(ValueError, match="2 input tensors given; the accelerator takes 3"):
        fmt.encode_tensors([a, b])


@pytest.mark.sim
@pytest.mark.parametrize("name", CASES)
def test_simulated_hardware_is_bit_exact(case, name):
    require_simulator()
    _, _, _, design, x, _ = case(name)
    got = design.simulate(x)              # raises MismatchError unless every element is exact
    _same(got, design.golden(x))


@pytest.mark.sim
@pytest.mark.parametrize("name, folding, lanes", [
    ("two_inputs_add", {"ga": (4, 4), "gb": (4, 2)}, ("input", 2)),   # inputs read at 4 and 2 lanes: the stream at 2
    ("two_inputs_add", {"ga": (4, 3), "gb": (4, 2)}, ("input", 1)),   # at 3 and 2: the stream at 1
    ("two_heads", {"cls": (5, 8), "reg": (2, 4)}, ("output", 1)),     # outputs made at 5 and 2 lanes: at 1
])
def test_lane_conversion_between_the_stream_and_the_layers(case, name, folding, lanes):
    """The stream runs at the gcd of the lanes of the layers it feeds (or that feed it); width
    converters on the links make up the rest."""
    require_simulator()
    _, path, calib, _, x, _ = case(name)
    design = onnx2hw.compile(str(path), calib=str(calib), folding=folding)
    p = design.pipeline
    side, want = lanes
    assert (p.input_link.dst_lanes if side == "input" else p.output_link.src_lanes) == want
    _same(design.simulate(x), design.golden(x))


@pytest.mark.sim
def test_cli_sim_writes_every_output_by_name(case, tmp_path, capsys):
    require_simulator()
    model, path, calib, design, x, x_path = case("two_heads_softmax")
    out = tmp_path / "y.npz"
    assert main(["sim", str(path), "--calib", str(calib), "--inputs", str(x_path), "-o", str(out)]) == 0
    assert f"bit-exact: {len(x['x'])}/{len(x['x'])} inferences" in capsys.readouterr().out
    with np.load(out) as f:
        _same({k: f[k] for k in f.files}, design.golden(x))
        assert sorted(f.files) == ["box", "logits"]


@pytest.fixture(scope="module")
def sim_build(case, tmp_path_factory):
    """name -> a build description (no bitstream) of the case's design, for ``run --port sim``."""
    cache = {}

    def get(name):
        if name not in cache:
            _, path, calib, design, _, _ = case(name)
            d = tmp_path_factory.mktemp(name)
            write_build_info(d, design.pipeline, design.board, design.clock_hz, design.baud, model=path, calib=calib)
            cache[name] = d
        return cache[name]
    return get


def _baud(build_dir) -> str:
    return str(read_build_info(build_dir)["clock_hz"] / 4)      # 4 clock cycles a bit in the simulated UART


@pytest.mark.sim
@pytest.mark.parametrize("name", ["two_heads", "two_heads_softmax", "late_input"])
def test_cli_run_port_sim_returns_every_output_by_name(case, sim_build, tmp_path, capsys, name):
    _, _, _, design, x, x_path = case(name)
    d = sim_build(name)
    info = read_build_info(d)
    assert ("inputs" in info["quant"]) == (len(x) > 1)
    assert ("outputs" in info["quant"]) == (len(design.integer.outputs) > 1)
    out = tmp_path / "y.npz"
    assert main(["run", str(d), "--port", "sim", "--baud", _baud(d), "--inputs", str(x_path), "-o", str(out)]) == 0
    assert f"{len(next(iter(x.values())))} inferences" in capsys.readouterr().out
    with np.load(out) as f:
        _same({k: f[k] for k in f.files}, design.golden(x))


@pytest.mark.sim
def test_cli_run_raw_takes_and_returns_the_hardware_tensors(case, sim_build, tmp_path):
    _, _, _, design, x, _ = case("late_input")
    d = sim_build("late_input")
    xi = design.quantize(x)                  # by the hardware's tensor names
    assert sorted(xi) == ["a", "b"]
    np.savez(tmp_path / "xi.npz", **xi)
    out = tmp_path / "yi.npz"
    assert main(["run", str(d), "--port", "sim", "--baud", _baud(d), "--raw", "--inputs", str(tmp_path / "xi.npz"),
                 "-o", str(out)]) == 0
    report = design.simulate_raw(xi, timing=False)
    assert report.ok
    with np.load(out) as f:
        assert f.files == ["y"]
        np.testing.assert_array_equal(f["y"], report.golden)


def test_run_refuses_inputs_missing_one_of_the_model_inputs(case, sim_build, tmp_path, capsys):
    _, _, _, _, x, _ = case("two_inputs_add")
    d = sim_build("two_inputs_add")
    np.savez(tmp_path / "x.npz", a=x["a"])
    assert main(["run", str(d), "--port", "sim", "--inputs", str(tmp_path / "x.npz")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "missing input(s) 'b'" in err


@pytest.mark.sim
def test_selftest_checks_several_outputs_on_the_board(case):
    """The self-test memory holds both inputs one after the other; the board's CRC-32 over a
    pass of both outputs (their common type) is that of the golden outputs."""
    _, _, _, design, x, _ = case("two_heads")
    p = design.pipeline
    xi = design.quantize({k: v[:3] for k, v in x.items()})
    rec = selftest_record(p, xi, source="test inputs")
    info = build_info(p, design.board, design.clock_hz, design.baud, selftest=rec)
    golden = design.simulate_raw(xi, timing=False).golden
    assert rec.outputs == design.link.encode_output_tensors([golden["logits"], golden["box"]])
    with Accelerator.open(info, "sim", baud=design.clock_hz / 4, pipeline=p) as acc:
        r = acc.selftest(2)
        y = acc.run(xi, raw=True)
    assert r.ok, r.problems
    assert (r.counts.inferences, r.counts.failed_passes) == (6, 0)
    _same(y, golden)


@pytest.mark.synth
@pytest.mark.slow
@pytest.mark.sim
@pytest.mark.parametrize("name", ["two_heads", "late_input"])
def test_bitstream_runs_bit_exact_through_the_simulated_board(case, tmp_path, capsys, name):
    """A two-output model and a two-input one (mixed signedness: a 9-bit stream) to a bitstream;
    its build directory runs through ``run --port sim`` bit-exact; the report lists every input
    and output."""
    require_simulator()
    _, path, calib, design, x, x_path = case(name)
    out = tmp_path / "build"
    assert main(["synth", str(path), "--calib", str(calib), "-o", str(out)]) == 0
    info = read_build_info(out)
    assert (out / info["build"]["bitstream"]).stat().st_size > 0
    report = json.loads((out / "report.json").read_text())
    ig = design.integer
    assert report["io"] == {
        "inputs": [{"name": q.name, "tensor": s.name, "shape": list(s.shape), "type": str(s.dtype)}
                   for q, s in zip(ig.inputs, ig.input_specs)],
        "outputs": [{"name": o.name, "tensor": s.name, "shape": list(s.shape), "type": str(s.dtype)}
                    for o, s in zip(ig.outputs, ig.output_specs)]}
    html = (out / "report.html").read_text()
    assert all(e["tensor"] in html for side in report["io"].values() for e in side)
    capsys.readouterr()
    y = tmp_path / "y.npz"
    assert main(["run", str(out), "--port", "sim", "--baud", _baud(out), "--inputs", str(x_path), "-o", str(y)]) == 0
    with np.load(y) as f:
        _same({k: f[k] for k in f.files}, design.golden(x))
