"""What the work census costs next to the profiling pytest-tprof already does for a test.

Run from the repository root::

    .venv/bin/python benchmarks/census_cost.py [--repeat 5] [--layers 7] [--threads 1]

The workload is ``new_user_benchmark.py``'s: a training step (AdamW) of a 7-layer
TransformerEncoder with a classification head.  In one process, after 3 warm-up steps, each
repetition times side by side (their order rotating):

* ``plain step``: one call of the step, no tooling;
* ``census 1 round`` and ``census 2 rounds``: :func:`tprof_engine.work_capture.take_census`
  (2 rounds is its default: rows whose work differs between them are marked ``varies``);
* ``profiling``: :func:`tprof_engine.capture.capture` as pytest-tprof runs it for the test,
  20 measured rounds after 3 warm-up rounds, reduction and gzipped trace included.

The first census of a process also works out each op's schema facts once; it is timed on
its own before the repetitions.  Each timing starts after ``gc.collect()``: the profiling
leaves enough garbage that the next variant otherwise pays a full collection (0.1-0.2 s).
``--threads`` sets torch's intra-op threads for everything (1 is pytest-tprof's default;
0 leaves torch's own).  Prints a table of wall times (median, min, max) and the ratio
census / profiling; the target is <= 10 % for the census's default rounds, and the script
exits non-zero when the median misses it.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tprof_engine.capture.census import take_census
from tprof_engine.capture.facts import intra_op_threads
from tprof_engine.capture.session import capture

TARGET_RATIO = 0.10
ROUNDS = 20
WARMUP = 3
DEFAULT_CENSUS_ROUNDS = 2


def load_make_step(layers: int) -> Callable[[], Callable[[], float]]:
    """``make_step`` of new_user_benchmark.py's workload (kept there as source text)."""
    path = Path(__file__).with_name("new_user_benchmark.py")
    spec = importlib.util.spec_from_file_location("new_user_benchmark", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"can't load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    namespace: dict[str, Any] = {}
    exec(compile(module.WORKLOAD.format(layers=layers), str(path), "exec"), namespace)
    make_step: Callable[[], Callable[[], float]] = namespace["make_step"]
    return make_step


def timed(run: Callable[[], Any]) -> float:
    """Wall seconds of one call, started with no garbage left by the previous variant."""
    gc.collect()
    t0 = time.perf_counter()
    run()
    return time.perf_counter() - t0


def variants(step: Callable[[], float], trace: Path) -> dict[str, Callable[[], Any]]:
    return {
        "plain step": step,
        "census 1 round": lambda: take_census(step, rounds=1),
        "census 2 rounds": lambda: take_census(step, rounds=2),
        "profiling": lambda: capture(step, rounds=ROUNDS, warmup=WARMUP, trace_path=trace),
    }


def measure(step: Callable[[], float], repeat: int, trace: Path) -> dict[str, list[float]]:
    runs = variants(step, trace)
    names = list(runs)
    times: dict[str, list[float]] = {name: [] for name in names}
    for rep in range(repeat):
        order = names[rep % len(names) :] + names[: rep % len(names)]
        for name in order:
            times[name].append(timed(runs[name]))
        print(
            f"  run {rep + 1}: " + ", ".join(f"{n} {times[n][-1]:.3f} s" for n in names), flush=True
        )
    return times


def report(times: dict[str, list[float]], first_census_s: float) -> float:
    """Print the table; return the median ratio of the default census to the profiling."""
    profiling = statistics.median(times["profiling"])
    print(f"\n{'variant':<28} {'median s':>9} {'min':>7} {'max':>7} {'/ profiling':>12}")
    for name, values in times.items():
        med = statistics.median(values)
        print(
            f"{name:<28} {med:>9.3f} {min(values):>7.3f} {max(values):>7.3f} "
            f"{med / profiling:>11.1%}"
        )
    print(
        f"{'census 2 rounds, 1st in process':<28} {first_census_s:>9.3f} {'':>7} {'':>7} "
        f"{first_census_s / profiling:>11.1%}"
    )
    one = statistics.median(times["census 1 round"]) / profiling
    default = statistics.median(times[f"census {DEFAULT_CENSUS_ROUNDS} rounds"]) / profiling
    plain = statistics.median(times["plain step"])
    print(
        f"\ncensus per round / plain step: "
        f"{statistics.median(times['census 1 round']) / plain:.1f}x"
    )
    print(
        f"census / profiling: 1 round {one:.1%}, {DEFAULT_CENSUS_ROUNDS} rounds {default:.1%} "
        f"(target <= {TARGET_RATIO:.0%}): "
        f"{'met' if default <= TARGET_RATIO else 'NOT met'} with the default "
        f"{DEFAULT_CENSUS_ROUNDS} rounds, {'met' if one <= TARGET_RATIO else 'NOT met'} "
        f"with 1 round"
    )
    return default


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="repetitions (default: 5)")
    parser.add_argument("--layers", type=int, default=7, help="encoder layers (default: 7)")
    parser.add_argument(
        "--threads", type=int, default=1, help="intra-op threads, 0 = torch's own (default: 1)"
    )
    args = parser.parse_args(argv)

    step = load_make_step(args.layers)()
    with intra_op_threads(args.threads), tempfile.TemporaryDirectory() as tmp:
        for _ in range(WARMUP):
            step()
        first_census_s = timed(lambda: take_census(step, rounds=DEFAULT_CENSUS_ROUNDS))
        table = take_census(step)
        print(
            f"{sys.executable}: {args.layers}-layer encoder training step, "
            f"{args.repeat} repetitions; census: {len(table.rows)} rows, "
            f"{sum(r.calls for r in table.rows):,} op calls per round, "
            f"{sum(r.varies for r in table.rows)} varying"
        )
        times = measure(step, args.repeat, Path(tmp) / "census_cost.pt.trace.json.gz")
    default = report(times, first_census_s)
    return 0 if default <= TARGET_RATIO else 1


if __name__ == "__main__":
    sys.exit(main())
