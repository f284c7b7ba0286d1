"""RTL block benchmark: nextpnr-ecp5 Fmax on LFE5U-85F and simulated throughput.

Blocks take part by defining a module-level ``bench_config()`` in their ``onnx2hw.rtl``
module, returning ``[(name, component_factory, feeds, expect), ...]`` where ``feeds`` /
``expect`` are as for :func:`onnx2hw.sim.pysim.run_stream`. Run: ``python -m bench.rtl [filter]``.
"""
from __future__ import annotations

import importlib
import pkgutil
import sys
import time
import warnings

__all__ = ["bench_rtl", "discover"]


def discover(name_filter: str = "") -> list[tuple]:
    """Every ``bench_config()`` entry of the public modules of ``onnx2hw.rtl``."""
    import onnx2hw.rtl as rtl
    entries = []
    for info in sorted(pkgutil.iter_modules(rtl.__path__), key=lambda i: i.name):
        if info.name.startswith("_"):
            continue
        try:
            module = importlib.import_module(f"onnx2hw.rtl.{info.name}")
            config = getattr(module, "bench_config", None)
            found = config() if callable(config) else []
        except Exception as e:  # one broken module must not hide the other blocks
            print(f"  onnx2hw.rtl.{info.name}: bench_config failed: {e!r}", file=sys.stderr)
            continue
        entries += [e for e in found if name_filter.lower() in e[0].lower()]
    return entries


def bench_rtl(name_filter: str = "", *, fmax: bool = True, out=None) -> list[dict]:
    """Print, per block configuration: Fmax (MHz) on LFE5U-85F CABGA381 (nextpnr-ecp5, out
    of context), Yosys cell counts, and output transfers per cycle with no backpressure.
    Returns the rows."""
    from onnx2hw.rtl.synth_check import BlockSynthError, nextpnr_fmax, yosys_stat
    from onnx2hw.sim.pysim import run_stream

    out = out or sys.stdout
    rows = []
    print(f"{'block':40s} {'Fmax MHz':>9s} {'xfer/cyc':>9s} {'LUT':>6s} {'FF':>6s} {'DSP':>4s} "
          f"{'EBR':>4s} {'sec':>5s}", file=out, flush=True)
    with warnings.catch_warnings():   # configs build components only to read their ports
        warnings.filterwarnings("ignore", message=".*created but never used")
        entries = discover(name_filter)
    for name, factory, feeds, expect in entries:
        t0 = time.monotonic()
        _, cycles = run_stream(factory(), feeds, expect)
        rate = max(expect.values()) / cycles if cycles else float("nan")
        st = yosys_stat(factory(), "ecp5")
        try:
            f = nextpnr_fmax(factory()) if fmax else float("nan")
        except BlockSynthError as e:
            f = float("nan")
            print(f"  {name}: nextpnr failed: {str(e).splitlines()[0]}", file=out)
        row = dict(name=name, fmax_mhz=f, transfers_per_cycle=rate, lut=st["lut"], ff=st["ff"],
                   dsp=st["dsp"], ebr=st["ebr"], seconds=time.monotonic() - t0)
        rows.append(row)
        print(f"{name:40s} {f:9.1f} {rate:9.3f} {row['lut']:6d} {row['ff']:6d} {row['dsp']:4d} "
              f"{row['ebr']:4d} {row['seconds']:5.0f}", file=out, flush=True)
    return rows


if __name__ == "__main__":
    bench_rtl(sys.argv[1] if len(sys.argv) > 1 else "")
