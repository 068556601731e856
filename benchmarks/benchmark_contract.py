"""What ``--tprof`` costs pytest-benchmark's own figures.

Run from the repository root::

    .venv/bin/python benchmarks/benchmark_contract.py [--repeat 2]

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
plain run.  Exits non-zero when pytest-benchmark's median
under ``--tprof`` is more than 1.25x the plain one for a test whose rounds are mostly
unprofiled (the relu and mm tests).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

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
TARGET = 1.25


def run_once(folder: Path, tprof: bool) -> dict[str, dict[str, object]]:
    out = folder / ("tprof.json" if tprof else "plain.json")
    extra = ["--tprof", f"--tprof-baseline-dir={folder / 'b'}"] if tprof else []
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
         "--benchmark-max-time=0.5", "--benchmark-save-data", f"--benchmark-json={out}",
         *extra, "test_bench.py"],
        cwd=folder, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(done.stdout[-3000:] + done.stderr[-2000:])
    return {b["name"]: b for b in json.loads(out.read_text())["benchmarks"]}


def per_call_us(bench: dict[str, object]) -> tuple[float, float, float, int, int]:
    """Mean and median per call, the median of the first PROFILED rounds, rounds, iterations."""
    stats = bench["stats"]
    assert isinstance(stats, dict)
    data = [d * 1e6 for d in stats["data"]]
    head = statistics.median(data[:PROFILED])
    return stats["mean"] * 1e6, stats["median"] * 1e6, head, stats["rounds"], stats["iterations"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    rows: dict[str, list[tuple[tuple[float, ...], tuple[float, ...]]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "test_bench.py").write_text(TESTS)
        for _ in range(args.repeat):
            plain, profiled = run_once(folder, False), run_once(folder, True)
            for name in plain:
                rows.setdefault(name, []).append(
                    (per_call_us(plain[name]), per_call_us(profiled[name]))
                )
    head = (
        f"{'test':<18} {'rounds×iter plain/tprof':>24} {'mean µs':>17} {'median µs':>17} "
        f"{'median ×':>9} {'first 23 rounds µs':>20} {'×':>6}"
    )
    print(head)
    print("-" * len(head))
    worst = 0.0
    for name, reps in rows.items():
        for p, t in reps:
            ratio, head_ratio = t[1] / p[1], t[2] / p[2]
            if name in MOSTLY_UNPROFILED:
                worst = max(worst, ratio)
            shape = f"{p[3]}×{p[4]} / {t[3]}×{t[4]}"
            print(
                f"{name:<18} {shape:>24} {p[0]:>8.2f}/{t[0]:<8.2f} {p[1]:>8.2f}/{t[1]:<8.2f} "
                f"{ratio:>9.2f} {p[2]:>9.2f}/{t[2]:<10.2f} {head_ratio:>6.2f}"
            )
    print(f"worst median ratio where most rounds are unprofiled: {worst:.2f} (target ≤ {TARGET})")
    return 0 if worst <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
