"""Golden executor speed: ``onnx2hw.golden.execute`` against onnx's
``ReferenceEvaluator`` and onnxruntime (1 thread and default threads) on a small
float conv net and an MLP at batch 256. Target: >= 10x faster than the reference
evaluator and within 3x of onnxruntime.

NumPy's BLAS (OpenBLAS) spins its worker threads; on a loaded machine a
multi-threaded BLAS can be many times slower than one thread. The golden executor
and the reference evaluator are therefore timed with BLAS limited to one thread
(``threadpoolctl``, installed with scikit-learn) and, for comparison, with BLAS's
default thread count.
"""
from __future__ import annotations

import contextlib
import statistics
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from onnx2hw.golden import execute
from onnx2hw.ir import load

__all__ = ["bench_golden", "conv_net", "mlp"]

BATCH = 256


def _model(nodes, inits, in_shape, out_shape):
    g = helper.make_graph(nodes, "bench",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, in_shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)],
                          [numpy_helper.from_array(a, n) for n, a in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def _w(rng, *shape):
    fan_in = int(np.prod(shape[1:]))
    return (rng.standard_normal(shape) / np.sqrt(fan_in)).astype(np.float32)


def conv_net(batch: int = BATCH, seed: int = 0) -> onnx.ModelProto:
    """1x28x28 -> conv3x3 8 -> relu -> maxpool 2 -> conv3x3 16 -> relu -> global avgpool -> gemm 10."""
    rng = np.random.default_rng(seed)
    inits = {"w1": _w(rng, 8, 1, 3, 3), "b1": _w(rng, 8, 1), "w2": _w(rng, 16, 8, 3, 3), "b2": _w(rng, 16, 1),
             "w3": _w(rng, 10, 16), "b3": _w(rng, 10, 1)}
    inits = {k: (v.reshape(-1) if k.startswith("b") else v) for k, v in inits.items()}
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("GlobalAveragePool", ["r2"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", "w3", "b3"], ["y"], transB=1),
    ]
    return _model(nodes, inits, [batch, 1, 28, 28], [batch, 10])


def mlp(batch: int = BATCH, seed: int = 0) -> onnx.ModelProto:
    """784 -> 256 -> relu -> 128 -> relu -> 10 (Gemm with transB, as exporters write it)."""
    rng = np.random.default_rng(seed)
    sizes = [784, 256, 128, 10]
    nodes, inits, prev = [], {}, "x"
    for i, (a, b) in enumerate(zip(sizes, sizes[1:])):
        inits[f"w{i}"], inits[f"b{i}"] = _w(rng, b, a), _w(rng, b, 1).reshape(-1)
        out = "y" if i == len(sizes) - 2 else f"h{i}"
        nodes.append(helper.make_node("Gemm", [prev, f"w{i}", f"b{i}"], [out if out == "y" else out + "_"], transB=1))
        if out != "y":
            nodes.append(helper.make_node("Relu", [out + "_"], [out]))
        prev = out
    return _model(nodes, inits, [batch, 784], [batch, 10])


def _times(fn, runs: int) -> tuple[float, float, float]:
    """(median wall, minimum wall, median CPU) time of ``runs`` calls after one warm-up.

    The CPU time of this process is the fairer figure for single-threaded runs on a
    shared machine, where wall time also counts time spent waiting for a core."""
    fn()
    wall, cpu = [], []
    for _ in range(runs):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return statistics.median(wall), min(wall), statistics.median(cpu)


def _ort(model, threads: int):
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def _blas_one_thread():
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # without threadpoolctl: whatever OPENBLAS_NUM_THREADS says
        return contextlib.nullcontext()
    return threadpool_limits(limits=1, user_api="blas")


def bench_one(name: str, model: onnx.ModelProto, x: np.ndarray, runs: int = 15, ref_runs: int = 3) -> dict:
    graph = load(model)
    feeds = {"x": x}
    ref = ReferenceEvaluator(model)
    ort1, ortn = _ort(model, 1), _ort(model, 0)
    got = execute(graph, feeds)["y"]
    want = ort1.run(None, feeds)[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    t = {}
    with _blas_one_thread():
        t["golden"] = _times(lambda: execute(graph, feeds), runs)
        t["reference"] = _times(lambda: ref.run(None, feeds), ref_runs)
    t["golden_blas_default"] = _times(lambda: execute(graph, feeds), runs)
    t["ort_1thread"] = _times(lambda: ort1.run(None, feeds), runs)
    t["ort_default"] = _times(lambda: ortn.run(None, feeds), runs)
    r = {"model": name}
    for i, stat in enumerate(("median", "min", "cpu")):
        r[stat] = {k: v[i] for k, v in t.items()}
        r[stat]["speedup_vs_reference"] = t["reference"][i] / t["golden"][i]
        r[stat]["slowdown_vs_ort_1thread"] = t["golden"][i] / t["ort_1thread"][i]
        r[stat]["slowdown_vs_ort_default"] = t["golden"][i] / t["ort_default"][i]
    for stat in ("median", "min", "cpu"):
        v = r[stat]
        print(f"{name:8s} {stat:6s} golden {v['golden'] * 1e3:7.2f} ms "
              f"(BLAS default threads {v['golden_blas_default'] * 1e3:7.2f}) | "
              f"reference {v['reference'] * 1e3:8.2f} ms (golden {v['speedup_vs_reference']:5.1f}x faster) | "
              f"ORT 1 thread {v['ort_1thread'] * 1e3:6.2f} ms (golden {v['slowdown_vs_ort_1thread']:4.2f}x slower) | "
              f"ORT default {v['ort_default'] * 1e3:6.2f} ms ({v['slowdown_vs_ort_default']:4.2f}x)", flush=True)
    return r


def bench_golden(batch: int = BATCH) -> list[dict]:
    """Time both models, print one line each and return the figures."""
    rng = np.random.default_rng(1)
    print(f"batch {batch}; 15 runs (reference evaluator: 3): median wall, minimum wall and median CPU "
          "time; golden and reference with 1 BLAS thread")
    return [
        bench_one("conv net", conv_net(batch), rng.standard_normal((batch, 1, 28, 28)).astype(np.float32)),
        bench_one("MLP", mlp(batch), rng.standard_normal((batch, 784)).astype(np.float32)),
    ]


if __name__ == "__main__":
    bench_golden()
