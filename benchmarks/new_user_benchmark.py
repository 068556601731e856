"""``pytest --tprof`` vs the same profiling written by hand, tried as a new user would.

Run from the repository root::

    .venv/bin/python benchmarks/new_user_benchmark.py [--repeat 5] [--layers 7]

Both sides profile the same workload, a training step (AdamW) of a 7-layer
TransformerEncoder with a classification head, whose 20 measured rounds hold about 143k
profiler events:

* ``tprof``: one test, ``tprof(step)``, run with ``--tprof`` against a baseline of three
  sessions recorded beforehand, as the README advises (so the timed run captures, reduces,
  takes the work census and compares; it writes its gzipped trace only when the verdict
  wants one: a test that passes keeps none, while the hand-written script always exports);
  ``--no-tprof-confirm`` so a noisy verdict doesn't re-measure and ``--tprof-min-round-us=0``
  so calibration doesn't change the event count.  tprof runs its first 2 warm-up rounds
  before the profiler starts and profiles the third (21 rounds in the session, the warm-up
  dropped from the table), and runs its ≈200 µs drift
  probe in every round.
* ``tprof 1st``: ``tprof`` against a baseline folder that holds nothing, as a suite's first
  run (the test reads "no baseline"; it takes the census but compares nothing).
* ``tprof-save``: the same test with ``--tprof-save`` (writes the baseline instead of comparing).
  Both run with ``--tprof-threads=0`` (torch's own intra-op threads, as the hand-written test),
  so the two sides do the same work; ``tprof 1-thr`` is ``tprof`` with tprof's default of one
  intra-op thread, for information (it changes the workload's speed, not the tooling's cost).
* ``by hand``: a plain pytest test (the plugin disabled with ``-p no:tprof``) doing what the
  torch docs show: 3 warm-up steps outside the
  profiler (the same warm-up as tprof, here unprofiled, which favours this side), then
  ``torch.profiler.profile`` over 20 rounds, each a ``ProfilerStep#N`` ``record_function``
  like tprof's, then ``prof.key_averages()`` and its ``.table()``, and
  ``export_chrome_trace`` to ``.json.gz``.

Each run is a whole ``python -m pytest`` process (interpreter, torch import, collection
included), timed wall-clock from spawn to exit; the variants alternate, their order rotating
each repetition.  Peak memory is the child's maximum resident set size from ``os.wait4``'s
rusage (``ru_maxrss``, per process, so one run's peak doesn't leak into another's).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

from harness.runs import PYTEST, QUIET
from harness.workspace import workspace

from tprof_engine.store.traces import table_from_trace

TARGET_TIME_RATIO = 0.35
SESSIONS = 3  # baseline sessions recorded before the timed runs, as the README advises
ROUNDS = 20
WARMUP = 3

WORKLOAD = '''
"""The benchmark's workload, shared by both test files."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn


def make_step(layers: int = {layers}) -> Callable[[], float]:
    """A training step of a small TransformerEncoder with a classification head (AdamW)."""
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(64, 4, 128, dropout=0.1, batch_first=True)
    model = nn.ModuleDict(
        {{
            "encoder": nn.TransformerEncoder(layer, layers, enable_nested_tensor=False),
            "head": nn.Linear(64, 10),
        }}
    )
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(8, 32, 64)
    y = torch.randint(0, 10, (8,))

    def step() -> float:
        opt.zero_grad()
        logits = model["head"](model["encoder"](x).mean(dim=1))
        loss = nn.functional.cross_entropy(logits, y)
        loss.backward()
        opt.step()
        return float(loss.detach())

    return step
'''

TPROF_TEST = """
from workload import make_step


def test_encoder_training_step(tprof):
    loss = tprof(make_step())
    assert loss > 0
"""

BY_HAND_TEST = f"""
import os
from pathlib import Path

from torch.profiler import ProfilerActivity, profile, record_function

from workload import make_step


def test_encoder_training_step_by_hand():
    step = make_step()
    for _ in range({WARMUP}):  # the same warm-up as tprof's
        step()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for r in range({ROUNDS}):
            with record_function(f"ProfilerStep#{{r}}"):
                loss = step()
    averages = prof.key_averages()
    table = averages.table(sort_by="self_cpu_time_total", row_limit=20)
    trace_dir = Path(os.environ["TPROF_BENCH_TRACE_DIR"])
    trace_dir.mkdir(parents=True, exist_ok=True)
    prof.export_chrome_trace(str(trace_dir / "by_hand.pt.trace.json.gz"))
    assert loss > 0
    assert "aten::addmm" in table
"""


def write_project(root: Path, layers: int) -> None:
    (root / "workload.py").write_text(WORKLOAD.format(layers=layers))
    (root / "test_with_tprof.py").write_text(textwrap.dedent(TPROF_TEST))
    (root / "test_by_hand.py").write_text(textwrap.dedent(BY_HAND_TEST))


def variants(root: Path) -> dict[str, list[str]]:
    tprof = [
        "test_with_tprof.py",
        f"--tprof-baseline-dir={root / 'baselines'}",
        f"--tprof-trace-dir={root / 'traces'}",
        "--no-tprof-confirm",
        "--tprof-min-round-us=0",
    ]
    same_threads = "--tprof-threads=0"  # torch's own intra-op threads, as the hand-written test
    return {
        "tprof": [*tprof, same_threads, "--tprof"],
        "tprof-save": [*tprof, same_threads, "--tprof-save"],
        "tprof 1-thr": [*tprof, "--tprof"],  # tprof's default: one intra-op thread
        # A suite's first run: no baseline to compare with (a folder never saved to).
        "tprof 1st": [*_first_run(tprof, root), same_threads, "--tprof"],
        "by hand": ["-p", "no:tprof", "test_by_hand.py"],  # a plain test: no plugin
    }


def _first_run(args: list[str], root: Path) -> list[str]:
    empty = f"--tprof-baseline-dir={root / 'never-saved'}"
    return [empty if a.startswith("--tprof-baseline-dir=") else a for a in args]


def run_pytest(root: Path, args: list[str], log: Path) -> dict[str, Any]:
    """One whole pytest process: wall seconds, peak RSS (MiB), CPU seconds, exit code."""
    argv = [*PYTEST, *QUIET, *args]
    env = {**os.environ, "TPROF_BENCH_TRACE_DIR": str(root / "traces")}
    with open(log, "wb") as out:
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, cwd=root, env=env, stdout=out, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)  # this child's own rusage
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
    lines = log.read_text(errors="replace").splitlines()
    outcome = [ln for ln in lines if re.search(r"\d+ (passed|failed|error)", ln)]
    verdicts = [ln.split("|")[0].strip() for ln in lines if "::test_encoder" in ln and "|" in ln]
    summary = " ".join([*(outcome[-1:] or lines[-1:]), *verdicts[-1:]])
    return {
        "wall_s": wall,
        "rss_mib": usage.ru_maxrss / 1024,  # KiB on Linux
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "rc": proc.returncode,
        "summary": summary.strip("= "),
    }


def measured_op_events(trace: Path) -> tuple[int, int]:
    """(op events, rounds) in a trace's measured rounds, tprof's warm-up dropped."""
    table = table_from_trace(trace)
    return int(table.calls.sum()), table.rounds


Results = dict[str, list[dict[str, Any]]]


def record(root: Path, runs: dict[str, list[str]]) -> bool:
    """The baseline sessions, untimed; whether each was recorded."""
    for i in range(SESSIONS):
        first = run_pytest(root, runs["tprof-save"], root / "setup.log")
        print(f"  baseline session {i + 1} recorded (untimed): {first['summary']}", flush=True)
        if first["rc"] != 0:
            print((root / "setup.log").read_text()[-3000:])
            return False
    return True


def traced_run(root: Path, runs: dict[str, list[str]]) -> tuple[tuple[int, int], float] | None:
    """One trace of tprof's session, to count its events (a passing test keeps none, and the
    next passing run removes this one): (op events, rounds) and its MB."""
    traced = run_pytest(root, [*runs["tprof"], "--tprof-collect=traces"], root / "trace.log")
    print(f"  a run keeping its trace (untimed): {traced['summary']}", flush=True)
    kept = sorted((root / "traces").glob("*with_tprof*.json.gz"))
    return (measured_op_events(kept[0]), kept[0].stat().st_size / 1e6) if kept else None


def timed_runs(root: Path, runs: dict[str, list[str]], repeat: int) -> Results:
    """Each variant ``repeat`` times, alternating, the order rotating."""
    results: Results = {name: [] for name in runs}
    names = list(runs)
    for rep in range(repeat):
        order = names[rep % len(names) :] + names[: rep % len(names)]
        for name in order:
            log = root / f"{name.replace(' ', '_')}-{rep}.log"
            res = run_pytest(root, runs[name], log)
            results[name].append(res)
            print(
                f"  run {rep + 1} {name:<11} {res['wall_s']:6.1f} s  "
                f"{res['rss_mib']:7.0f} MiB  rc={res['rc']}  {res['summary']}",
                flush=True,
            )
    return results


def med(rows: list[dict[str, Any]], key: str) -> float:
    return statistics.median(r[key] for r in rows)


def print_table(results: Results) -> None:
    """Wall time, peak RSS and CPU seconds per variant, each against the hand-written test."""
    hand = results["by hand"]
    print(
        f"\n{'variant':<12} {'wall s (median)':>15} {'min':>6} {'max':>6} {'ratio':>6} "
        f"{'peak RSS MiB':>12} {'ratio':>6} {'CPU s':>6} {'ratio':>6}"
    )
    for name, rows in results.items():
        walls = [r["wall_s"] for r in rows]
        print(
            f"{name:<12} {med(rows, 'wall_s'):>15.1f} {min(walls):>6.1f} {max(walls):>6.1f} "
            f"{med(rows, 'wall_s') / med(hand, 'wall_s'):>5.2f}x {med(rows, 'rss_mib'):>12.0f} "
            f"{med(rows, 'rss_mib') / med(hand, 'rss_mib'):>5.2f}x {med(rows, 'cpu_s'):>6.1f} "
            f"{med(rows, 'cpu_s') / med(hand, 'cpu_s'):>5.2f}x"
        )
    print(
        "CPU s = user + system seconds of the pytest process: steadier than wall time "
        "when the machine is shared"
    )
    paired = [t["wall_s"] / h["wall_s"] for t, h in zip(results["tprof"], hand, strict=True)]
    print(f"tprof / by hand, per repetition: {', '.join(f'{p:.2f}' for p in paired)}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="runs of each variant (default: 5)")
    parser.add_argument("--layers", type=int, default=7, help="encoder layers (default: 7)")
    args = parser.parse_args(argv)
    with workspace("tprof-new-user-") as root:
        write_project(root, args.layers)
        runs = variants(root)
        print(
            f"{sys.executable} -m pytest, in {root}; {args.repeat} runs of each variant, "
            f"alternating"
        )
        if not record(root, runs):
            return 1
        tprof_trace = traced_run(root, runs)
        results = timed_runs(root, runs, args.repeat)
        by_hand = root / "traces" / "by_hand.pt.trace.json.gz"
        counts = {
            "tprof": tprof_trace[0] if tprof_trace else (0, 0),
            "by hand": measured_op_events(by_hand),
        }
        sizes = {
            "tprof": tprof_trace[1] if tprof_trace else 0.0,
            "by hand": by_hand.stat().st_size / 1e6,
        }
    print_table(results)
    for name, (events, rounds) in counts.items():
        print(
            f"{name}: {events:,} op events in {rounds} measured rounds; "
            f"trace {sizes[name]:.1f} MB gzipped"
        )
    hand = results["by hand"]
    time_ratio = med(results["tprof"], "wall_s") / med(hand, "wall_s")
    rss_ok = med(results["tprof"], "rss_mib") < med(hand, "rss_mib")
    print(
        f"\nwall time ratio {time_ratio:.2f} (target <= {TARGET_TIME_RATIO}): "
        f"{'met' if time_ratio <= TARGET_TIME_RATIO else 'NOT met'}; "
        f"less peak memory: {'yes' if rss_ok else 'NO'}"
    )
    return 0 if time_ratio <= TARGET_TIME_RATIO and rss_ok else 1


if __name__ == "__main__":
    sys.exit(main())
