"""What ``--tprof`` costs pytest-benchmark's own figures.

Run from the repository root::

    .venv/bin/python benchmarks/benchmark_contract.py [--repeat 3]

It writes three pytest-benchmark tests (a 16-element ``relu``, which pytest-benchmark
calibrates to many iterations per round; a 128x128 ``mm``; an MLP forward under
``pedantic(rounds=40)``) and runs them with ``pytest --benchmark-json --benchmark-save-data``,
without and with ``--tprof`` (3 warm-up + 20 rounds, tprof's defaults), alternating, in one
invocation.  Both runs use one intra-op thread, as ``--tprof`` does by default, so only
the profiler differs (with torch's own threads on a busy 2-core machine the plain ``mm``
read ~48 ms against ~50 us: thread-pool stalls, design.md section 5).  Under ``--tprof``
the first 23 rounds pytest-benchmark keeps run under the profiler and the rest unprofiled,
so the table gives pytest-benchmark's mean and median per call both ways, and, from its
per-round data, the median of the profiled rounds alone against the same rounds of the
plain run, and per test the median of those ratios over the repetitions.

The timing ratios are reported, not judged: at 1-50 us per call two plain runs minutes
apart differ by more than the profiler's share of the rounds could move a median (design.md
section 12).  What it checks is what keeps pytest-benchmark's median honest on any machine:
under ``--tprof`` at most 23 of its rounds were profiled (``extra_info["tprof"]``), and for
the relu and mm tests fewer than half of them, so their median is an unprofiled round.
Exits non-zero when that fails.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from harness.runs import PYTEST, QUIET, run
from harness.workspace import workspace

TESTS = """
import torch

torch.set_num_threads(1)  # what --tprof-threads=1 (the default) sets: only the profiler differs
torch.manual_seed(0)
small = torch.randn(16)
a = torch.randn(128, 128)
mlp = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 256))
x = torch.randn(32, 256)

def test_relu16(benchmark):
    benchmark(torch.relu, small)

def test_mm128(benchmark):
    benchmark(torch.mm, a, a)

@torch.no_grad()
def forward():
    return mlp(x)

def test_mlp_pedantic(benchmark):
    benchmark.pedantic(forward, rounds=40, warmup_rounds=2)
"""
PROFILED = 23  # tprof's default warm-up + rounds
MOSTLY_UNPROFILED = ("test_relu16", "test_mm128")


def run_once(folder: Path, tprof: bool) -> dict[str, dict[str, object]]:
    out = folder / ("tprof.json" if tprof else "plain.json")
    extra = ["--tprof", f"--tprof-baseline-dir={folder / 'b'}"] if tprof else []
    bench = ["--benchmark-max-time=0.5", "--benchmark-save-data", f"--benchmark-json={out}"]
    cmd = [*PYTEST, *QUIET, "-p", "no:randomly", *bench, *extra, "test_bench.py"]
    done = run(cmd, folder, report=out, ok=(0,), what="pytest-benchmark's run")
    return {b["name"]: b for b in (done.report or {})["benchmarks"]}


def per_call_us(bench: dict[str, object]) -> tuple[float, float, float, int, int]:
    """Mean and median per call, the median of the first PROFILED rounds, rounds, iterations."""
    stats = bench["stats"]
    assert isinstance(stats, dict)
    data = [d * 1e6 for d in stats["data"]]
    head = statistics.median(data[:PROFILED])
    return stats["mean"] * 1e6, stats["median"] * 1e6, head, stats["rounds"], stats["iterations"]


def profiled_problem(name: str, bench: dict[str, object]) -> str | None:
    """Why pytest-benchmark's figures for ``bench`` could carry the profiler, if they could."""
    stats, extra = bench["stats"], bench.get("extra_info")
    assert isinstance(stats, dict)
    info = extra.get("tprof") if isinstance(extra, dict) else None
    if not isinstance(info, dict) or not isinstance(info.get("profiled_rounds"), int):
        return f"{name}: no extra_info['tprof']['profiled_rounds'] under --tprof"
    profiled, rounds = info["profiled_rounds"], stats["rounds"]
    if profiled > PROFILED:
        return f"{name}: {profiled} rounds profiled (at most {PROFILED})"
    if name in MOSTLY_UNPROFILED and 2 * profiled >= rounds:
        return f"{name}: {profiled} of {rounds} rounds profiled: the median may be a profiled one"
    return None


Rows = dict[str, list[tuple[tuple[float, ...], tuple[float, ...]]]]


def measure(repeat: int) -> tuple[Rows, list[str]]:
    """Each benchmark's figures without and with ``--tprof``, alternating, ``repeat`` times;
    and why any profiled run's figures could carry the profiler."""
    rows: Rows = {}
    problems: list[str] = []
    with workspace("tprof-benchmark-contract-") as folder:
        (folder / "test_bench.py").write_text(TESTS)
        for _ in range(repeat):
            plain, profiled = run_once(folder, False), run_once(folder, True)
            problems += filter(None, (profiled_problem(n, b) for n, b in profiled.items()))
            for name in plain:
                rows.setdefault(name, []).append(
                    (per_call_us(plain[name]), per_call_us(profiled[name]))
                )
    return rows, problems


def print_rows(rows: Rows) -> None:
    head = (
        f"{'test':<18} {'rounds×iter plain/tprof':>24} {'mean µs':>17} {'median µs':>17} "
        f"{'median ×':>9} {'first 23 rounds µs':>20} {'×':>6}"
    )
    print(head)
    print("-" * len(head))
    for name, reps in rows.items():
        for p, t in reps:
            shape = f"{p[3]}×{p[4]} / {t[3]}×{t[4]}"
            print(
                f"{name:<18} {shape:>24} {p[0]:>8.2f}/{t[0]:<8.2f} {p[1]:>8.2f}/{t[1]:<8.2f} "
                f"{t[1] / p[1]:>9.2f} {p[2]:>9.2f}/{t[2]:<10.2f} {t[2] / p[2]:>6.2f}"
            )
    print()
    for name, reps in rows.items():
        ratio = statistics.median(t[1] / p[1] for p, t in reps)
        head_ratio = statistics.median(t[2] / p[2] for p, t in reps)
        print(
            f"{name:<18} median over {len(reps)} repetitions: median ×{ratio:.2f}, "
            f"first {PROFILED} rounds ×{head_ratio:.2f}"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    rows, problems = measure(args.repeat)
    print_rows(rows)
    for problem in problems:
        print(f"FAILED {problem}")
    if not problems:
        print(f"ok: at most {PROFILED} rounds profiled; relu and mm medians from unprofiled rounds")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
