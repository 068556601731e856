"""What the benchmark scripts share, so each script holds only what it measures.

- :mod:`harness.workspace`: the folder a script works in (temporary, or one it keeps), a suite
  written into it, a git repository made of it;
- :mod:`harness.runs`: one ``pytest`` or ``tprof`` run in a fresh process, its JSON report read
  back with its wall time, and which checkout the runs import;
- :mod:`harness.loads`: other processes keeping the cores busy while a block runs (a spin loop,
  a memory-bandwidth hog or a torch training job per core);
- :mod:`harness.tables`: medians, percentages and spreads as the tables print them, and list
  options.

The scripts run as ``python benchmarks/SCRIPT.py``, so ``benchmarks/`` is first on their path
and they import this package as ``harness``.
"""

__all__ = ["loads", "runs", "tables", "workspace"]
