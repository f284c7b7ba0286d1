"""`make bench`: every benchmark of the project in one run, printed as a readable report.

Usage: python -m bench [NAME ...]   (names: golden, quant, rtl, dsp, dataflow, boards, simbuild, simspeed, corpus, mlperf, mlperf-builds, cnn-builds, formal; default all)
       python -m bench mvu-cost      (refits the MVU's cost constants; run only when named)
"""
from __future__ import annotations

import importlib
import sys
import time

#: name -> (module, function); each function prints its own table
BENCHES = {
    "golden": ("bench.golden", "bench_golden"),
    "quant": ("bench.quant", "bench_quant"),
    "rtl": ("bench.rtl", "bench_rtl"),
    "dsp": ("bench.dsp", "bench_dsp"),
    "dataflow": ("bench.dataflow", "bench_dataflow"),
    "boards": ("bench.boards", "bench_boards"),
    "simbuild": ("bench.simbuild", "bench_simbuild"),
    "simspeed": ("bench.simspeed", "bench_simspeed"),
    "corpus": ("bench.corpus", "bench_corpus"),
    "mlperf": ("bench.mlperf", "bench_mlperf"),
    "mlperf-builds": ("bench.mlperf", "bench_mlperf_builds"),
    "cnn-builds": ("bench.cnn_blocks", "bench_cnn_builds"),
    "formal": ("bench.formal", "bench_formal"),
}
#: name -> (module, function): refits of cost-model constants, run only when named
REFITS = {
    "mvu-cost": ("bench.mvu_cost", "bench_mvu_cost"),
}


def main(argv: list[str]) -> int:
    names = argv or list(BENCHES)
    known = {**BENCHES, **REFITS}
    unknown = [n for n in names if n not in known]
    if unknown:
        print(f"error: unknown benchmark {unknown[0]!r} (choose from {', '.join(known)})", file=sys.stderr)
        return 2
    for name in names:
        module, func = known[name]
        print(f"\n=== {name} ===", flush=True)
        t0 = time.perf_counter()
        getattr(importlib.import_module(module), func)()
        print(f"({name}: {time.perf_counter() - t0:.1f} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
