"""The four MLPerf Tiny reference networks on a ULX3S-85F (issue #13).

Two parts. :func:`bench_mlperf` (fast, no place and route) is described below.
:func:`bench_mlperf_builds` runs ``onnx2hw synth MODEL --board ulx3s-85f --calib DATA
--target-fps max --clock-mhz CLOCK --verify 16`` for each network (the full flow: PTQ, folding for
the highest rate that fits, 16 random inferences simulated in Verilator and compared bit for bit
with the golden executor before place and route, Yosys, nextpnr), two builds at a time (one per
core here), and prints one table from the builds' report.json beside the published FPGA figures
and the roofline (multipliers instantiated x Fmax / MACs).


For each float model of benchmarks/mlperf_tiny/ (Keras through tf2onnx, with 64 calibration
inputs; see that folder's README.md): MACs (from the ONNX graph's shapes) and parameters (the
Keras count), then the flow step by step (load, op check, PTQ, integer import) and
``onnx2hw.compile(model, board="ulx3s-85f", calib=...)``; the stage where it stops and its
one-line error. For a compiled design: the initiation interval and estimated LUT/DSP/EBR of the
default folding (folded to keep up with the UART) and of the widest folding that fits the
board's budget, compute-bound inferences/s at 100 MHz (clock / II) and link-bound inferences/s;
and the golden integer executor against onnxruntime (graph optimizations disabled) on the QDQ
model that ``onnx2hw.quant.ptq.quantize`` writes, on 16 inputs. No place-and-route.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "benchmarks" / "mlperf_tiny"
BOARD = "ulx3s-85f"
CLOCK_HZ = 100e6  # issue #13's whole-design clock goal
SAMPLES = 16
BUILD_ROOT = ROOT / "build" / "bench" / "mlperf"

#: task -> published FPGA results (issue #13's table): (inferences/s, board, tool)
PUBLISHED = {
    "AD": [(53_365, "Pynq-Z2", "hls4ml"), (30_686, "Arty A7-100T", "hls4ml")],
    "KWS": [(3_088, "ZedBoard", "fpgaConvNet"), (57_268, "Pynq-Z2", "FINN, an MLP variant")],
    "IC": [(2_431, "ZedBoard", "fpgaConvNet int8"), (661, "?", "FINN CNV-W1A1"), (131, "?", "hls4ml")],
    "VWW": [(1_388, "ZC706", "fpgaConvNet")],
}
#: issue #13's acceptance for compute-bound inferences/s (VWW: builds)
GOALS = {"AD": 53_365, "KWS": 3_088, "IC": 1_000, "VWW": 0}


def onnx_macs(path: Path) -> int:
    """Multiply-accumulates of one inference: Conv, MatMul and Gemm, from inferred shapes (batch 1)."""
    import onnx

    model = onnx.load(path)
    for v in list(model.graph.input) + list(model.graph.output):
        d = v.type.tensor_type.shape.dim
        if d and not d[0].HasField("dim_value"):
            d[0].dim_value = 1
    del model.graph.value_info[:]
    model = onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
              for v in list(model.graph.value_info) + list(model.graph.output) + list(model.graph.input)}
    shapes.update({t.name: list(t.dims) for t in model.graph.initializer})
    macs = 0
    for n in model.graph.node:
        if n.op_type == "Conv":
            w = shapes[n.input[1]]
            macs += int(np.prod(shapes[n.output[0]])) * int(np.prod(w[1:]))
        elif n.op_type in ("MatMul", "Gemm"):
            a = shapes[n.input[0]]
            trans = any(at.name == "transA" and at.i for at in n.attribute)
            macs += int(np.prod(shapes[n.output[0]])) * (a[-2] if trans else a[-1])
    return macs


def _ort_outputs(model, x: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """onnxruntime (graph optimizations off: the QDQ graph as the spec defines it) on the QDQ model:
    (the model's output, the quantized core's output on its integer grid, i.e. the DequantizeLinear
    that feeds the float tail (Softmax) or the model's output, ``None`` if there is none)."""
    import onnx
    import onnxruntime as ort
    from onnx import numpy_helper

    model = onnx.ModelProto.FromString(model.SerializeToString())
    g = model.graph
    sm = [n for n in g.node if n.op_type == "Softmax"]
    core = sm[0].input[0] if sm else g.output[0].name
    dq = next((n for n in g.node if core in n.output and n.op_type == "DequantizeLinear"), None)
    if dq is not None and core != g.output[0].name:
        g.output.append(onnx.helper.make_tensor_value_info(core, onnx.TensorProto.FLOAT, None))
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    outs = sess.run(None, {sess.get_inputs()[0].name: x})
    if dq is None:
        return outs[0], None
    inits = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    scale = float(inits[dq.input[1]])
    zp = int(inits[dq.input[2]]) if len(dq.input) > 2 and dq.input[2] else 0
    return outs[0], np.round(outs[-1] / scale).astype(np.int64) + zp


def _agreement(golden: np.ndarray, ref: np.ndarray, classes: bool) -> str:
    golden, ref = golden.reshape(len(golden), -1), ref.reshape(len(ref), -1)
    exact = float(np.mean(golden == ref))
    text = f"{exact:.1%} elements equal, max |diff| {np.abs(golden.astype(np.float64) - ref).max():.3g}"
    if classes:
        text += f", top-1 {int(np.sum(golden.argmax(1) == ref.argmax(1)))}/{len(golden)}"
    return text


def _stage_line(stage) -> str:
    return f"{stage.name} ({stage.op}, pe {stage.pe}, simd {stage.simd}): {stage.cycles} cycles"


def _resources(pipeline, board) -> str:
    t, b = pipeline.total, board.budget
    return f"LUT {t.lut:,}/{b.lut:,}, DSP {t.dsp}/{b.dsp}, EBR {t.ebr}/{b.ebr}"


def bench_network(entry: dict) -> dict:
    import onnx2hw
    from onnx2hw.dataflow import compile_pipeline
    from onnx2hw.flow import check_ops, integer_graph_of
    from onnx2hw.ir import load
    from onnx2hw.ir.simplify import simplify
    from onnx2hw.quant.partition import split
    from onnx2hw.quant.ptq import quantize
    from onnx2hw.target import resolve_target

    path = MODELS / entry["file"]
    with np.load(MODELS / entry["data"]) as d:
        x = d["input"].astype(np.float32)
    with np.load(MODELS / entry["keras_outputs"]) as d:
        y_keras = d["output"]
    calib = {"input": x}
    classes = entry["output_shape"][-1] <= 16  # a Softmax head (AD reconstructs its 640 inputs)
    row = {"name": entry["name"], "task": entry["task"], "macs": onnx_macs(path), "params": entry["keras_params"],
           "stage": "load", "why": "", "times": {}}
    print(f"{entry['task']} {entry['name']}: {row['macs']:,} MACs, {row['params']:,} params "
          f"(Keras), input {entry['input_shape']}", flush=True)

    def step(stage, fn):
        row["stage"] = stage
        t0 = time.perf_counter()
        out = fn()
        row["times"][stage] = time.perf_counter() - t0
        return out

    try:
        graph = step("load", lambda: load(str(path)))
        step("op check", lambda: check_ops(split(simplify(graph)).core))
        qdq = step("quantize", lambda: quantize(graph, calib))
        step("import", lambda: integer_graph_of(load(qdq)))
        design = step("compile", lambda: onnx2hw.compile(str(path), board=BOARD, calib=calib))
        row["stage"] = "compiled"
    except Exception as exc:  # noqa: BLE001 - the point is to record where each network stops
        row["why"] = f"{type(exc).__name__}: {exc}"
        print(f"    stops at {row['stage']}: {row['why']}", flush=True)
        return row

    p = design.pipeline
    row.update(ii=p.ii, latency=p.latency, lut=p.total.lut, dsp=p.total.dsp, ebr=p.total.ebr,
               link_per_s=design.link_bound_per_s, multipliers=p.multipliers)
    print(f"    default folding (for the UART at {design.baud / 1e6:g} Mbaud, {design.clock_hz / 1e6:g} MHz): "
          f"II {p.ii:,} cycles, {_resources(p, design.board)}; link-bound {design.link_bound_per_s:,.0f} inf/s "
          f"({design.link_bytes} bytes per inference); compile {row['times']['compile']:.1f} s", flush=True)
    try:
        target = resolve_target(BOARD)
        t0 = time.perf_counter()
        wide = compile_pipeline(design.integer, family=design.board.family, budget=target.budget)
        row["times"]["widest"] = time.perf_counter() - t0
        slow = max(wide.stages, key=lambda s: s.cycles)
        row.update(ii_min=wide.ii, lut_max=wide.total.lut, dsp_max=wide.total.dsp, ebr_max=wide.total.ebr,
                   compute_per_s=CLOCK_HZ / wide.ii, slowest=_stage_line(slow))
        print(f"    widest folding within the budget ({target.budget.lut:,} LUT, {target.budget.dsp} DSP, "
              f"{target.budget.ebr} EBR): II {wide.ii:,} cycles, {_resources(wide, design.board)}, "
              f"{wide.multipliers} multipliers; compute-bound {CLOCK_HZ / wide.ii:,.0f} inf/s at 100 MHz; "
              f"slowest stage {_stage_line(slow)}", flush=True)
        for kind in ("lut", "dsp", "ebr"):
            top = sorted(wide.stages, key=lambda s: getattr(s.cost, kind), reverse=True)[:3]
            print(f"      most {kind.upper()}: " + ", ".join(f"{s.name} ({s.op}) {getattr(s.cost, kind):,}"
                                                           for s in top), flush=True)
    except Exception as exc:  # noqa: BLE001
        row["why_widest"] = f"{type(exc).__name__}: {exc}"
        print(f"    widest folding: {row['why_widest']}", flush=True)

    xs = x[:SAMPLES]
    outs = design.golden({"input": xs})
    golden = outs["output"] if "output" in outs else next(iter(outs.values()))
    ort_y, ort_int = _ort_outputs(qdq, xs)
    row["golden_vs_ort"] = _agreement(golden, ort_y, classes)
    if ort_int is not None:
        from onnx2hw.golden.integer import execute_integer

        gold_int = next(iter(execute_integer(design.integer, {design.integer.input_specs[0].name:
                                                              design.quantize({"input": xs})}).values()))
        diff = np.abs(gold_int.reshape(len(xs), -1).astype(np.int64) - ort_int.reshape(len(xs), -1))
        row["golden_vs_ort_int"] = (f"{np.mean(diff == 0):.2%} of {diff.size} core-output integers equal, "
                                    f"max {int(diff.max())} LSB, inputs differing "
                                    f"{np.nonzero(diff.any(axis=1))[0].tolist()}")
        row["golden_vs_ort"] += f"; on the integer grid before the float tail: {row['golden_vs_ort_int']}"
    row["golden_vs_keras"] = _agreement(golden, y_keras[:SAMPLES], classes)
    print(f"    golden vs onnxruntime (QDQ, ORT_DISABLE_ALL), {SAMPLES} inputs: {row['golden_vs_ort']}", flush=True)
    print(f"    golden vs Keras float: {row['golden_vs_keras']}", flush=True)
    return row


def bench_mlperf() -> list[dict]:
    manifest = json.loads((MODELS / "manifest.json").read_text())
    rows = [bench_network(e) for e in manifest["networks"]]
    print(f"\n{'task':5}{'network':16}{'MACs':>11}{'params':>9}  {'stage':10}{'II min':>9}{'LUT':>8}{'DSP':>5}"
          f"{'EBR':>5}{'inf/s@100MHz':>14}{'link inf/s':>12}")
    for r in rows:
        if "ii_min" in r:
            tail = (f"{r['ii_min']:>9,}{r['lut_max']:>8,}{r['dsp_max']:>5}{r['ebr_max']:>5}"
                    f"{r['compute_per_s']:>14,.0f}{r['link_per_s']:>12,.0f}")
        else:
            tail = f"  {r.get('why_widest') or r['why']}"[:110]
        print(f"{r['task']:5}{r['name']:16}{r['macs']:>11,}{r['params']:>9,}  {r['stage']:10}{tail}")
    return rows


def synth_network(entry: dict, clock_mhz: float, models: Path = MODELS,
                  build_root: Path = BUILD_ROOT) -> tuple[int, str, float, Path]:
    """``onnx2hw synth`` of one network of ``models`` (its ``file`` and calibration ``data``) for
    the most inferences per second at ``clock_mhz``, verified on ``SAMPLES`` inputs, in a child
    process (its own Ctrl-C and tool handling): exit status, last line of stderr, seconds, build
    folder."""
    import subprocess
    import sys

    out = build_root / entry["name"]
    argv = [sys.executable, "-m", "onnx2hw.cli", "synth", str(models / entry["file"]), "--board", BOARD,
            "--calib", str(models / entry["data"]), "--target-fps", "max", "--clock-mhz", f"{clock_mhz:g}",
            "--verify", str(SAMPLES), "-o", str(out)]
    t0 = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True)
    lines = proc.stderr.strip().splitlines()
    return proc.returncode, lines[-1] if lines else "", time.perf_counter() - t0, out


def bench_mlperf_builds(clock_mhz: float = CLOCK_HZ / 1e6, jobs: int = 2) -> list[dict]:
    """Build the four networks, ``jobs`` at a time, and print the issue's table (see the module
    docstring)."""
    from concurrent.futures import ThreadPoolExecutor

    manifest = json.loads((MODELS / "manifest.json").read_text())

    def build(e):
        print(f"building {e['task']} {e['name']} for {BOARD} at {clock_mhz:g} MHz ...", flush=True)
        rc, last, seconds, out = synth_network(e, clock_mhz)
        print(f"    {e['task']}: exit {rc} in {seconds:.0f} s{': ' + last if rc else ''}", flush=True)
        return _build_row(e, rc, last, seconds, out)

    with ThreadPoolExecutor(max_workers=jobs) as pool:   # each build is its own child process
        rows = list(pool.map(build, manifest["networks"]))
    _print_build_table(rows)
    return rows


def _build_row(e: dict, rc: int, last: str, seconds: float, out: Path) -> dict:
    row = {"task": e["task"], "name": e["name"], "macs": onnx_macs(MODELS / e["file"]),
           "params": e["keras_params"], "exit": rc, "message": last, "build_s": seconds}
    row.update(build_figures(out, rc))
    if "fmax" in row:
        row["roofline"] = row["multipliers"] * row["fmax"] * 1e6 / row["macs"]
    return row


def build_figures(out: Path, rc: int) -> dict:
    """What a build's report.json says of clock, throughput and resources (empty when the build
    stopped before place and route; exit 1 with a report is a build whose timing was missed);
    ``compute``: inferences/s at the slower of the estimated and the simulated II."""
    report = out / "report.json"
    if not report.exists() or rc not in (0, 1):
        return {}
    r = json.loads(report.read_text())
    c, res, t = r["clock"], r["resources"], r["throughput"]
    cb = t["compute_bound"]   # at the target clock when met, else at the achieved Fmax
    sim = cb.get("simulated") or {}
    return dict(met=c["met"], fmax=c["fmax_mhz"] or 0.0, clock=cb["clock_mhz"], ii=t["ii_cycles"],
                sim_ii=sim.get("cycles_per_inference"),
                latency_us=cb["estimated"]["latency_us"],
                compute=min(cb["estimated"]["inferences_per_s"], sim.get("inferences_per_s") or float("inf")),
                link=t["link_bound_per_s"], lut=res["lut"]["used"], dsp=res["dsp"]["used"],
                ebr=res["bram"]["used"], multipliers=r["arithmetic"]["multipliers"],
                bits=r["arithmetic"]["bits"], pnr_runs=len(r.get("place_and_route") or [None]),
                seed=r.get("nextpnr_seed"))


def _print_build_table(rows: list[dict]) -> None:
    head = (f"{'task':5}{'MACs':>11}{'params':>9}{'bits':>6}{'LUT':>8}{'DSP':>5}{'EBR':>5}{'Fmax':>7}{'clock':>7}"
            f"{'II cyc':>9}{'sim II':>9}{'inf/s':>9}{'lat us':>8}{'link/s':>8}{'roofl/s':>9}{'build':>7}{'P&R':>6}"
            "  published (board, tool)")
    print("\n" + head)
    for r in rows:
        pub = "; ".join(f"{n:,} ({b}, {t})" for n, b, t in PUBLISHED[r["task"]])
        if "ii" not in r:
            print(f"{r['task']:5}{r['macs']:>11,}{r['params']:>9,}  build failed (exit {r['exit']}): {r['message']}"[:160])
            continue
        met = "" if r["met"] else "!"
        print(f"{r['task']:5}{r['macs']:>11,}{r['params']:>9,}{r['bits']:>6}{r['lut']:>8,}{r['dsp']:>5}{r['ebr']:>5}"
              f"{r['fmax']:>6.1f}{met:1}{r['clock']:>7.0f}{r['ii']:>9,}{r['sim_ii'] or 0:>9,.0f}{r['compute']:>9,.0f}{r['latency_us']:>8.0f}"
              f"{r['link']:>8,.0f}{r.get('roofline', 0):>9,.0f}{r['build_s']:>6.0f}s{pnr_cell(r):>6}  {pub}")
        goal = GOALS[r["task"]]
        if goal and r["compute"] < goal:
            print(f"      below issue #13's goal of {goal:,} inferences/s")
    print("II cyc: the cost model's cycles per inference; sim II: measured in the Verilator simulation of 16 "
          "inferences that proved the design bit-exact (synth --verify); "
          "clock: the clock the design runs at (the target when met, else the achieved Fmax); inf/s: compute-bound "
          "at that clock (clock / the slower of II cyc and sim II); lat: latency at that clock; link/s: the UART's bound; roofl/s: multipliers x "
          "Fmax / MACs; '!' after Fmax: the 100 MHz target was not met; P&R: place-and-route runs:the kept "
          "run's placer seed (-: nextpnr's own)")


def pnr_cell(r: dict) -> str:
    return f"{r['pnr_runs']}:{'-' if r['seed'] is None else r['seed']}"
