"""Our reduction vs ``prof.key_averages()`` on the same >= 100k-event CPU profile.

Run from the repository root::

    .venv/bin/python benchmarks/reduce_benchmark.py [--rounds 100] [--repeat 3]

The workload is a TransformerEncoderLayer training step (AdamW), ``--rounds`` times under one
``torch.profiler`` session, each round a ``ProfilerStep#N`` annotation as ``capture()`` makes
them (about 1,030 events a round).  Every repetition builds a fresh profile, because
``key_averages()`` caches the ``FunctionEvent`` list on the profile object; on it, in order:

1. ours: ``events_from_kineto(prof)`` + ``reduce_events(...)`` (what ``capture()`` runs);
2. ``prof.key_averages()``, its first call on the profile: ``prof.events()``' Python
   post-processing (FunctionEvents and their tree) plus the aggregation;
3. ``prof.key_averages()`` again: the aggregation alone, on the cached events;
4. ours again, now with the profile's FunctionEvents alive (more objects for the GC to walk);
5. the fallback ``table_from_function_events`` on the cached events: its full cost on a fresh
   profile is (2) - (3) + (5), printed as such;
6. ``export_chrome_trace`` to ``.json.gz``.

Peak memory is measured in separate child processes, one per path and method, each building
its own profile: the process's peak RSS while the path runs (Linux ``VmHWM`` after resetting
it through ``/proc/self/clear_refs``, minus ``VmRSS`` just before), and tracemalloc's peak of
the Python heap (numpy included, C++ allocations not) in another child, since tracemalloc
slows the path down.  Timings are wall-clock seconds; the machine may be shared, so compare
the medians and read the per-repetition rows.
"""

from __future__ import annotations

import argparse
import gc
import gzip
import json
import re
import shutil
import statistics
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from harness.workspace import workspace
from torch import nn
from torch.profiler import ProfilerActivity, profile, record_function

from tprof_engine.capture.kineto import events_from_kineto, table_from_function_events
from tprof_engine.model.records import OpTable
from tprof_engine.reduce import ops as reduce_module
from tprof_engine.reduce.ops import ROUND_PREFIX, reduce_events

TARGET_EVENTS = 100_000
TARGET_RATIO = 20.0
PATHS = ("ours", "key_averages", "fallback")


def encoder_step() -> Callable[[], None]:
    """One training step of a small TransformerEncoderLayer with AdamW (about 1,030 events)."""
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(64, 4, 128, dropout=0.1, batch_first=True)
    opt = torch.optim.AdamW(layer.parameters(), lr=1e-3)
    x = torch.randn(8, 16, 64)

    def step() -> None:
        opt.zero_grad()
        layer(x).pow(2).mean().backward()
        opt.step()

    return step


def build_profile(rounds: int) -> tuple[profile, float]:
    """A fresh profile of ``rounds`` encoder steps (3 unprofiled warm-up steps first)."""
    step = encoder_step()
    for _ in range(3):
        step()
    t0 = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for r in range(rounds):
            with record_function(f"{ROUND_PREFIX}{r}"):
                step()
    return prof, time.perf_counter() - t0


def ours(prof: profile) -> OpTable:
    return reduce_events(events_from_kineto(prof))


def fallback(prof: profile) -> OpTable:
    rounds = len(
        [e for e in prof.profiler.kineto_results.events() if e.name().startswith(ROUND_PREFIX)]
    )
    return table_from_function_events(prof, wall_us=np.zeros(rounds))


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def count_mismatches(table: OpTable, averages: Any) -> tuple[list[str], float]:
    """Ops whose calls differ from key_averages' counts, and the largest self CPU deviation."""
    theirs = {a.key: a for a in averages if not a.key.startswith("ProfilerStep")}
    totals = table.session_totals()
    problems = [
        f"missing in ours: {k} ({theirs[k].count} calls)" for k in theirs if k not in totals
    ]
    problems += [f"missing in key_averages: {k}" for k in totals if k not in theirs]
    worst = 0.0
    for name, t in totals.items():
        avg = theirs.get(name)
        if avg is None:
            continue
        if int(t["calls"]) != int(avg.count):
            problems.append(f"{name}: ours {int(t['calls'])} calls, key_averages {avg.count}")
        if avg.self_cpu_time_total >= 100.0:
            dev = abs(t["self_cpu_us"] - avg.self_cpu_time_total) / avg.self_cpu_time_total
            worst = max(worst, dev)
    return problems, worst


def stage_times(prof: profile) -> dict[str, float]:
    """Where our path spends its time, stage by stage."""
    raw, t_raw = timed(lambda: prof.profiler.kineto_results.events())
    del raw
    ev, t_arrays = timed(lambda: events_from_kineto(prof))
    walk = reduce_module.nesting
    spent: list[float] = []

    def timed_nesting(*args: Any) -> Any:
        out, t = timed(lambda: walk(*args))
        spent.append(t)
        return out

    reduce_module.nesting = timed_nesting  # reduce_events looks it up at call time
    try:
        _, t_reduce = timed(lambda: reduce_events(ev))
    finally:
        reduce_module.nesting = walk
    return {
        "kineto events() (the C++ event list)": t_raw,
        "attribute reads (events_from_kineto - events())": t_arrays - t_raw,
        "reduce_events": t_reduce,
        "  of which nesting() stack walk": sum(spent),
        "  of which the rest (numpy)": t_reduce - sum(spent),
    }


def gzip_split(trace: Path, work: Path) -> dict[str, float]:
    """How much of torch's ``.json.gz`` export is its gzip step, and what level 6 would cost.

    A profile can be saved only once, so the plain JSON is recovered from the written trace
    (untimed), then compressed again: as torch does (``writelines``, level 9) and in 1 MiB
    chunks at level 6.
    """
    plain = work / "plain.json"
    with gzip.open(trace, "rb") as src, open(plain, "wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
    out: dict[str, float] = {"json_mb": plain.stat().st_size / 1e6}
    t0 = time.perf_counter()
    with open(plain, "rb") as src, gzip.open(work / "l9.gz", "wb") as dst:
        dst.writelines(src)
    out["gzip9_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    with open(plain, "rb") as src, gzip.open(work / "l6.gz", "wb", compresslevel=6) as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
    out["gzip6_s"] = time.perf_counter() - t0
    out["gzip6_mb"] = (work / "l6.gz").stat().st_size / 1e6
    for name in ("plain.json", "l9.gz", "l6.gz"):
        (work / name).unlink()
    return out


def run_repetition(rounds: int, trace_dir: Path, rep: int) -> dict[str, Any]:
    prof, capture_s = build_profile(rounds)
    gc.collect()
    n_events = len(prof.profiler.kineto_results.events())
    table, t_ours = timed(lambda: ours(prof))
    stages = stage_times(prof)
    averages, t_ka = timed(lambda: prof.key_averages())
    _, t_ka_cached = timed(lambda: prof.key_averages())
    _, t_ours_loaded = timed(lambda: ours(prof))
    fb_table, t_fb_cached = timed(lambda: fallback(prof))
    trace = trace_dir / f"rep{rep}.pt.trace.json.gz"
    _, t_export = timed(lambda: prof.export_chrome_trace(str(trace)))
    gzip_times = gzip_split(trace, trace_dir)
    problems, worst = count_mismatches(table, averages)
    fb_problems, _ = count_mismatches(fb_table, averages)
    return {
        "events": n_events,
        "capture_s": capture_s,
        "ours_s": t_ours,
        "key_averages_s": t_ka,
        "key_averages_cached_s": t_ka_cached,
        "ours_with_function_events_alive_s": t_ours_loaded,
        "fallback_cached_s": t_fb_cached,
        "fallback_s": t_ka - t_ka_cached + t_fb_cached,
        "export_s": t_export,
        "trace_mb": trace.stat().st_size / 1e6,
        **gzip_times,
        "ops": len(table.names),
        "mismatches": problems,
        "fallback_mismatches": fb_problems,
        "worst_self_cpu_dev": worst,
        "stages": stages,
    }


def _proc_status() -> dict[str, int]:
    text = Path("/proc/self/status").read_text()
    return {k: int(re.search(rf"{k}:\s+(\d+)", text).group(1)) for k in ("VmRSS", "VmHWM")}  # type: ignore[union-attr]


def memory_child(path: str, method: str, rounds: int) -> dict[str, Any]:
    """Peak memory of one path on a fresh profile, in this (child) process."""
    prof, _ = build_profile(rounds)
    run = {"ours": ours, "key_averages": lambda p: p.key_averages(), "fallback": fallback}[path]
    gc.collect()
    if method == "tracemalloc":
        tracemalloc.start()
        result = run(prof)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        del result
        return {"peak_mib": peak / 2**20}
    try:
        Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS
    except OSError as exc:
        return {"error": f"cannot reset the peak RSS: {exc}"}
    before = _proc_status()["VmRSS"]
    result = run(prof)
    after = _proc_status()
    del result
    return {"peak_mib": (after["VmHWM"] - before) / 1024, "rss_before_mib": before / 1024}


def measure_memory(rounds: int) -> dict[tuple[str, str], dict[str, Any]]:
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for method in ("rss", "tracemalloc"):
        for path in PATHS:
            cmd = [sys.executable, __file__, "--rounds", str(rounds), "--child", path, method]
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
            lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
            if proc.returncode != 0 or not lines:
                out[(path, method)] = {"error": proc.stderr.strip()[-300:]}
            else:
                out[(path, method)] = json.loads(lines[-1])
    return out


def median(rows: list[dict[str, Any]], key: str) -> float:
    return statistics.median(r[key] for r in rows)


TIMES = (
    "events",
    "ours_s",
    "key_averages_s",
    "key_averages_cached_s",
    "ours_with_function_events_alive_s",
    "fallback_s",
    "export_s",
    "trace_mb",
    "capture_s",
)


def time_line(label: str, r: dict[str, Any], ratio: float) -> str:
    """One line of the times table: a repetition's, or the medians'."""
    return (
        f"{label:>4} {r['events']:>8,} {r['ours_s']:>7.3f} {r['key_averages_s']:>9.3f} "
        f"{ratio:>5.1f}x {r['key_averages_cached_s']:>9.3f} "
        f"{r['ours_with_function_events_alive_s']:>6.3f} {r['fallback_s']:>8.3f} "
        f"{r['export_s']:>7.3f} {r['trace_mb']:>8.1f} {r['capture_s']:>7.2f}"
    )


def print_times(rows: list[dict[str, Any]]) -> float:
    """The table of times per repetition, their medians and what each column is; the median
    ratio key_averages / ours."""
    print(
        f"\n{'rep':>4} {'events':>8} {'ours s':>7} {'key_avg s':>9} {'ratio':>6} "
        f"{'ka cached':>9} {'ours*':>6} {'fallback':>8} {'export':>7} {'trace MB':>8} "
        f"{'capture':>7}"
    )
    for i, r in enumerate(rows):
        print(time_line(str(i + 1), r, r["key_averages_s"] / r["ours_s"]))
    ratio = statistics.median(r["key_averages_s"] / r["ours_s"] for r in rows)
    medians: dict[str, Any] = {k: median(rows, k) for k in TIMES}
    medians["events"] = int(medians["events"])
    print(time_line("med", medians, ratio))
    print(
        "ours = events_from_kineto + reduce_events on a fresh profile; key_avg = first "
        "key_averages() (includes prof.events()); ka cached = its second call; ours* = ours "
        "again with the FunctionEvents alive; fallback = table_from_function_events, "
        "= key_avg - ka cached + its time on cached events; export = export_chrome_trace "
        "to .json.gz; capture = the profiled run itself"
    )
    return ratio


def print_export(rows: list[dict[str, Any]]) -> None:
    """The trace export split into torch's gzip step and the rest; our path stage by stage."""
    print(
        f"\ntrace export to .json.gz (median): {median(rows, 'export_s'):.3f} s for "
        f"{median(rows, 'json_mb'):.0f} MB of JSON -> {median(rows, 'trace_mb'):.1f} MB; of that, "
        f"torch's gzip step (writelines, level 9) {median(rows, 'gzip9_s'):.3f} s; "
        f"level 6 in 1 MiB chunks would take {median(rows, 'gzip6_s'):.3f} s "
        f"({median(rows, 'gzip6_mb'):.1f} MB)"
    )
    print("\nour path, stage by stage (median seconds):")
    for stage in rows[0]["stages"]:
        print(f"  {stage:<50} {statistics.median(r['stages'][stage] for r in rows):.3f}")


def print_targets(rows: list[dict[str, Any]], ratio: float) -> bool:
    """The event count, the ratio and the counts against key_averages; whether all are met."""
    events_ok = all(r["events"] >= TARGET_EVENTS for r in rows)
    met = "met" if ratio >= TARGET_RATIO else "NOT met"
    print(
        f"\nevents >= {TARGET_EVENTS:,}: {'yes' if events_ok else 'NO'}; "
        f"median ratio {ratio:.1f}x (target >= {TARGET_RATIO:.0f}x): {met}"
    )
    mismatches = rows[0]["mismatches"] + [f"fallback: {m}" for m in rows[0]["fallback_mismatches"]]
    equal = "all equal" if not mismatches else f"{len(mismatches)} mismatches"
    print(
        f"counts vs key_averages over {rows[0]['ops']} ops: {equal}; "
        f"largest self CPU deviation (ops >= 100 us) "
        f"{max(r['worst_self_cpu_dev'] for r in rows):.2e}"
    )
    for m in mismatches:
        print(f"  {m}")
    return events_ok and not mismatches


def print_memory(rounds: int) -> None:
    print("\npeak memory of each path on a fresh profile (separate child processes):")
    mem = measure_memory(rounds)
    print(f"  {'path':<14} {'peak RSS above start MiB':>25} {'tracemalloc peak MiB':>21}")
    for path in PATHS:
        cells = []
        for method in ("rss", "tracemalloc"):
            m = mem[(path, method)]
            cells.append(f"{m['peak_mib']:.1f}" if "peak_mib" in m else "n/a")
        print(f"  {path:<14} {cells[0]:>25} {cells[1]:>21}")
    for key, m in mem.items():
        if "error" in m:
            print(f"  {key}: {m['error']}")


def repetitions(rounds: int, repeat: int) -> list[dict[str, Any]]:
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads; encoder training step "
        f"x {rounds} rounds per profile, {repeat} fresh profiles"
    )
    rows = []
    with workspace("tprof-reduce-bench-") as tmp:
        for rep in range(repeat):
            rows.append(run_repetition(rounds, tmp, rep))
            r = rows[-1]
            print(
                f"  repetition {rep + 1}: {r['events']:,} events, ours {r['ours_s']:.3f} s, "
                f"key_averages {r['key_averages_s']:.3f} s",
                flush=True,
            )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=100, help="profiled rounds (default: 100)")
    parser.add_argument("--repeat", type=int, default=3, help="fresh profiles (default: 3)")
    parser.add_argument("--no-memory", action="store_true", help="skip the memory children")
    parser.add_argument("--child", nargs=2, metavar=("PATH", "METHOD"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(memory_child(args.child[0], args.child[1], args.rounds)))
        return 0
    rows = repetitions(args.rounds, args.repeat)
    ratio = print_times(rows)
    print_export(rows)
    ok = print_targets(rows, ratio)
    if not args.no_memory:
        print_memory(args.rounds)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
