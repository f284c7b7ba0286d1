"""Design-space exploration and verification regressions on Dask distributed (``onnx2hw explore``).

* :mod:`.space` -- the space a ``space.toml`` names (foldings, bits, clocks, nextpnr seeds);
* :mod:`.points` -- its points: foldings from the cost model's Pareto front, PTQ bit widths,
  pruning of what cannot fit, each point's content key;
* :mod:`.engine` -- the Dask client on a local or an existing cluster, results as they arrive;
* :mod:`.tasks` / :mod:`onnx2hw.explore_worker` -- what a worker runs: one child process per task, with a time
  limit and a stop event;
* :mod:`.sweep` -- the cached, parallel build of the points; :mod:`.table` and :mod:`.page` --
  the Pareto table (CSV, JSON) and the report page with its SVG plots;
* :mod:`.verify` -- ``--verify``: simulation regressions split across the workers and merged.
"""
from .engine import Engine, Task
from .points import Point, Pruned, cache_key, enumerate_points
from .space import Space, load_space, parse_space
from .sweep import run_sweep
from .verify import run_verify, verify_tasks

__all__ = ["Engine", "Task", "Point", "Pruned", "cache_key", "enumerate_points", "Space", "load_space", "parse_space",
           "run_sweep", "run_verify", "verify_tasks"]
