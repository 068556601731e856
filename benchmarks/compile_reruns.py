"""Compile reruns: ``pytest --tprof`` on a new user's ``torch.compile``'d tests, warm and cold.

Writes a suite of its own into a temporary folder (nothing from ``examples/``): two compiled
tests and one uncompiled control, each profiled through the ``tprof`` fixture.  It records a
three-session baseline (``--tprof-save`` in three fresh pytest processes), then runs
``pytest --tprof`` on the folder, each run a fresh process:

1. unchanged, ``--runs`` times, alternating a WARM inductor cache (the folder's shared
   ``TORCHINDUCTOR_CACHE_DIR``, the one the saves used) and a COLD one (a new empty
   ``TORCHINDUCTOR_CACHE_DIR`` per run); every run sets ``TORCHINDUCTOR_FX_GRAPH_CACHE=1`` and
   ``TORCHINDUCTOR_AUTOGRAD_CACHE=1``.  A test verdict ``regressed`` or ``error`` is a false
   failure, counted by the first layer that failed it: ``error``, ``compile`` (the reason holds
   "compile:": a new graph break or a recompilation), ``work`` (the work verdict regressed),
   ``calls`` (a family's calls regressed) or ``timing`` (only times, after the plugin's
   re-measurements).  Each run line also says how many files the run added to its inductor
   cache (0 on a warm run means every compiled graph came from the cache);
2. with each plant, ``--plant-runs`` times (warm, cold, warm, ...).  Any other test failing in
   a planted run is a collateral failure;
3. on every test's report of every ``--tprof`` run, and on the op names the baseline files
   store, a check that no op row is a compile-time event: no name holding ``dynamo_timed``,
   ``compile_id``, ``bytecode_tracing``, ``backend_compile``, ``entire_frame_compile``,
   ``entire_backward_compile``, ``compile_attempt`` or ``prims::``, none named ``dynamo``, no
   ``## Call CompiledFxGraph <hash> ##`` or ``Torch-Compiled Region: F/C`` (only the ``#N``
   keys);
4. the cost of the compile bookkeeping of the reduction, in this process (after the pytest
   runs, with an inductor cache of its own): real profiles of the suite's two compiled bodies,
   made as ``tprof_engine.capture.capture`` makes them (``session._profile_rounds``: warm-up +
   measured rounds, ``ProfilerStep#N`` rounds with the drift probe, the baseline's iterations
   per round; every warm-up round profiled, where ``capture`` profiles its last), in three
   states: ``cold`` (compiled inside round 0 with an empty cache: what a
   cold run's warm-up holds), ``warm`` (``torch._dynamo.reset()`` first, compiled inside round 0
   from the cache: a warm run's warm-up) and ``steady`` (compiled before the profile, as in a
   first save after calibration).  On each it times, in µs per call (``timeit`` with the GC
   off, repetitions of about 50 ms each, the measures interleaved, the median of
   ``--repeat``): ``reduce_events(ev)``; ``with_stable_names(ev)`` and ``reduce._compile_time``
   (the compile handling, both inside ``reduce_events``: their share of it is printed);
   ``reduce_events`` on events already made stable (an alternative measure: it still
   pays the key search and ``_compile_time``, only the renaming is saved);
   ``compile_gate.compiled_graphs`` and ``capture.compile_log()`` twice each (what a test's
   judgement adds outside the reduction).  The overhead per test is the
   three together (one reduction; a re-measured test reduces again).  It also reduces each
   whole profile with round 0 counted as measured (a compilation inside the measured rounds)
   and checks its op rows as in (3).

The tests (plants switched by ``COMPILE_PLANT`` in the test file, so one file runs both ways):

- ``test_compiled_mlp``: an MLP block ``Linear(256, 512) → GELU → Linear(512, 256)``,
  ``torch.compile``'d, inference under ``torch.no_grad()`` on a (64, 256) batch.
  Plant ``wide``: the hidden width x2 (1024); caught when the test regresses and names the
  compiled code: ``## Call CompiledFxGraph #1 ##`` or ``Torch-Compiled Region #1`` among its
  regressed op rows (layer ``graph``), or a work reason naming ``aten::addmm`` in ``fc1`` or
  ``fc2`` (layer ``work``); the table also counts runs where the ``aten::addmm`` op row itself
  regressed (``addmm``: Inductor on CPU calls the extern ``addmm`` from its generated code).
  Plant ``break``: ``torch._dynamo.graph_break()`` between GELU and ``fc2``; caught when the
  reason holds "a new graph break" (the table also counts the note "graph break while
  compiling").
- ``test_compiled_encoder_train``: ``nn.TransformerEncoderLayer(d_model=64, nhead=4,
  dim_feedforward=256, batch_first=True)`` and a linear head (logits times a Python float
  ``temperature``, 1.0), the model ``torch.compile``'d, cross-entropy loss and an AdamW step
  (eager: the optimizer is not compiled).  Plant ``recompile`` (beside the other
  two; ``--plants`` drops it): the body sets ``temperature = 0.5`` on its 6th call, which is
  in the measured rounds when a baseline exists (no calibration; 2 warm-up rounds of one call),
  so Dynamo recompiles while the plugin measures; caught when the reason holds "recompiled"
  and "during the measured rounds".  It is the run where compile-time events fall in measured
  rounds, which (3) then checks.
- ``test_eager_control``: a plain (uncompiled) MLP training step with SGD; never planted.

Each pytest run is ``python -m pytest FOLDER -q -p no:cacheprovider`` with the folder as cwd
and rootdir (``pytest.ini`` ignores ``DeprecationWarning``: torch 2.13's Inductor touches the
deprecated ``torch.jit.script_method`` while compiling; ``conftest.py`` is empty),
``--tprof-rounds=12 --tprof-warmup=2`` and ``--tprof-baseline-dir``, ``--tprof-trace-dir`` and
``--tprof-json`` in the folder.  Prints every run's verdicts (``test=verdict/work verdict``),
then a table, and exits 1 on any false failure, missed plant, collateral failure or
compile-time op row.  ``--keep DIR`` works in DIR (new or empty) and keeps it: baselines,
traces, inductor caches, each run's JSON report (``reports/``) and pytest output (``logs/``).
The default run (3 saves, 8 unchanged runs = 24 test-runs, 3 plants x 3, the overhead step:
20 pytest runs, a cold one 31-42 s, a warm one 10-19 s) took 8 min on a shared 2-core
machine.  From the repository root::

    .venv/bin/python benchmarks/compile_reruns.py [--runs 8] [--plant-runs 3] [--sessions 3]
        [--plants wide,break,recompile] [--repeat 7] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from compile_cost import Cost, cost_table, overhead
from compile_suite import (
    CACHE_ENV,
    PLANT_ENV,
    PLANTS,
    PROFILE_ARGS,
    SUITE,
    TESTS,
    Plant,
    Result,
    compile_time_name,
    wide_layers,
)
from harness.runs import by_name, run_pytest, sessions_held, short
from harness.tables import csv, rule, spread
from harness.workspace import prepare, workspace

# --------------------------------------------------------------------------- running pytest


def files_in(folder: Path) -> int:
    return sum(1 for p in folder.rglob("*") if p.is_file()) if folder.exists() else 0


@dataclass
class Run:
    label: str
    cache: str  # "warm" or "cold"
    seconds: float
    new_cache_files: int
    results: dict[str, Result]


class Suite:
    """The folder (pytest's rootdir), its inductor caches and the pytest runs in it."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.count = 0
        self.cold = 0
        self.shared_cache = folder / "inductor-cache"
        self.runs: list[Run] = []
        ini = "[pytest]\nfilterwarnings =\n    ignore::DeprecationWarning\n"
        prepare(folder, "test_compiled_models.py", SUITE, ini, ("cold-caches",))

    def cache_dir(self, cache: str) -> Path:
        if cache == "warm":
            return self.shared_cache
        self.cold += 1
        return self.folder / "cold-caches" / f"{self.cold:02d}"

    def run(self, label: str, args: list[str], *, cache: str, plant: str = "") -> Run:
        """One pytest run in a fresh process; prints one line of verdicts."""
        self.count += 1
        cache_dir = self.cache_dir(cache)
        cache_dir.mkdir(parents=True, exist_ok=True)
        before = files_in(cache_dir)
        env = {
            **os.environ,
            **CACHE_ENV,
            "TORCHINDUCTOR_CACHE_DIR": str(cache_dir),
            PLANT_ENV: plant,
        }
        t0 = time.perf_counter()
        head = f"{PLANT_ENV}={plant!r} TORCHINDUCTOR_CACHE_DIR={cache_dir} ({cache})"
        tag = f"{self.count:02d}-{label}"
        tests = run_pytest(
            self.folder, tag, [*PROFILE_ARGS, *args], env=env, head=head, tests=TESTS
        )
        seconds = time.perf_counter() - t0
        results = {name: Result(t) for name, t in by_name(tests).items()}
        new_files = files_in(cache_dir) - before
        run = Run(label, cache, seconds, new_files, results)
        self.runs.append(run)
        cells = [f"{n[5:]}={r.verdict}/{r.work_verdict}" for n, r in results.items()]
        print(
            f"  {label:<13} {cache:<4} {seconds:5.1f} s  cache +{new_files:<3} " + "  ".join(cells),
            flush=True,
        )
        return run


# --------------------------------------------------------------------------- the steps


def record(suite: Suite, sessions: int) -> dict[str, int]:
    """``--tprof-save`` ``sessions`` times (warm cache: the first save fills it)."""
    print(f"baseline: --tprof-save x {sessions} (verdict/work verdict per test)", flush=True)
    for i in range(sessions):
        suite.run(f"save{i + 1}", ["--tprof-save"], cache="warm")
    held = sessions_held(suite.folder / "baselines")
    print(f"  sessions per baseline file: {held}", flush=True)
    return held


def baseline_info(folder: Path) -> tuple[list[str], dict[str, int]]:
    """Compile-time op names stored in the baseline files, and each test's iterations."""
    bad: list[str] = []
    iterations: dict[str, int] = {}
    for path in sorted((folder / "baselines").rglob("*.json")):
        doc = json.loads(path.read_text())
        name = doc["nodeid"].split("::")[-1]
        iterations[name] = int(doc.get("protocol", {}).get("iterations", 1))
        for s in doc["sessions"]:
            ops = s.get("ops", {})
            bad += [f"{name}: {op}" for op in ops if compile_time_name(str(op))]
    return sorted(set(bad)), iterations


@dataclass
class Unchanged:
    runs: int = 0
    layers: dict[str, Counter[str]] = field(
        default_factory=lambda: {"warm": Counter(), "cold": Counter()}
    )
    verdicts: dict[str, Counter[str]] = field(default_factory=dict)
    seconds: dict[str, list[float]] = field(default_factory=lambda: {"warm": [], "cold": []})
    new_files: dict[str, list[int]] = field(default_factory=lambda: {"warm": [], "cold": []})
    failures: list[str] = field(default_factory=list)

    def false_failures(self, cache: str | None = None) -> int:
        keys = [cache] if cache else list(self.layers)
        return sum(sum(self.layers[k].values()) for k in keys)


def unchanged(suite: Suite, runs: int) -> Unchanged:
    print(f"\nunchanged: {runs} runs, warm and cold cache alternating", flush=True)
    out = Unchanged(runs=runs, verdicts={n: Counter() for n in TESTS})
    for i in range(runs):
        cache = "warm" if i % 2 == 0 else "cold"
        run = suite.run(f"unchanged{i + 1}", ["--tprof"], cache=cache)
        out.seconds[cache].append(run.seconds)
        out.new_files[cache].append(run.new_cache_files)
        for name, r in run.results.items():
            out.verdicts[name][r.verdict] += 1
            if r.failed:
                layers = r.layers()
                out.layers[cache][layers[0]] += 1
                line = f"{run.label} ({cache}) {name} [{', '.join(layers)}]: {short(r.reason)}"
                out.failures.append(line)
                print(f"    FALSE FAILURE {line}", flush=True)
    return out


@dataclass
class PlantRow:
    plant: Plant
    runs: int = 0
    caught: int = 0
    caches: list[str] = field(default_factory=list)
    layers: Counter[str] = field(default_factory=Counter)  # what named it
    collateral: list[str] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def planted(suite: Suite, runs: int, names: list[str]) -> list[PlantRow]:
    print(f"\nplants: {runs} runs each (warm, cold, warm, ...)", flush=True)
    rows = []
    for name in names:
        p = PLANTS[name]
        row = PlantRow(plant=p, runs=runs)
        for i in range(runs):
            cache = "warm" if i % 2 == 0 else "cold"
            run = suite.run(f"{p.name}{i + 1}", ["--tprof"], cache=cache, plant=p.name)
            r = run.results[p.test]
            row.caches.append(cache)
            row.caught += p.caught(r)
            row.layers.update(wide_layers(r) if p.name == "wide" else r.layers())
            if any("graph break while compiling" in n for n in r.notes):
                row.layers["note"] += 1
            row.reasons.append(r.reason)
            row.notes.append(" / ".join(n for n in r.notes if "CUDA was not" not in n))
            if not p.caught(r):
                print(f"    MISSED {p.name}: {r.verdict}: {short(r.reason)}", flush=True)
            for n, o in run.results.items():
                if n != p.test and o.failed:
                    row.collateral.append(n)
                    print(
                        f"    COLLATERAL {p.name}: {n} [{', '.join(o.layers())}]: "
                        f"{short(o.reason)}",
                        flush=True,
                    )
        rows.append(row)
    return rows


def compile_rows_in_reports(suite: Suite) -> list[str]:
    """Every compile-time op row in any --tprof run's report: 'run test: op'."""
    out = []
    for run in suite.runs:
        for name, r in run.results.items():
            out += [f"{run.label} ({run.cache}) {name}: {op}" for op in r.compile_rows()]
    return out


# --------------------------------------------------------------------------- the table


def unchanged_table(sessions: dict[str, int], u: Unchanged) -> None:
    n = u.runs * len(TESTS)
    print(
        f"unchanged: {u.runs} runs x {len(TESTS)} tests = {n} test-runs; false failures "
        f"{u.false_failures()}/{n}"
    )
    for cache in ("warm", "cold"):
        lay = u.layers[cache]
        k = len(u.seconds[cache])
        print(
            f"  {cache} cache: {k} runs, false failures {u.false_failures(cache)}/{k * len(TESTS)}"
            f" (compile {lay['compile']}, work {lay['work']}, calls {lay['calls']}, timing "
            f"{lay['timing']}, error {lay['error']}); pytest s {spread(u.seconds[cache])}; "
            f"new cache files {u.new_files[cache]}"
        )
    for name, counts in u.verdicts.items():
        print(f"  {name:<28} {dict(counts)}  [baseline: {sessions.get(name, 0)} sessions]")
    for line in u.failures:
        print(f"  false failure: {line}")


def plant_table(rows: list[PlantRow]) -> None:
    print(
        f"\n{'plant':<10} {'test':<28} {'caught when':<36} caught  caches      "
        "layers that named it            collateral"
    )
    for r in rows:
        p = r.plant
        caches = ",".join(c[0] for c in r.caches)
        layers = ", ".join(f"{k} {v}" for k, v in sorted(r.layers.items()))
        print(
            f"{p.name:<10} {p.test:<28} {p.expected:<36} {r.caught:>2}/{r.runs:<3}  {caches:<10}  "
            f"{layers:<30}  {len(r.collateral)} {r.collateral or ''}"
        )
    print("\nfirst reason and notes per plant (then any reason that differs):")
    for r in rows:
        seen: list[str] = []
        for i, reason in enumerate(r.reasons):
            if reason in seen:
                continue
            seen.append(reason)
            print(f"  {r.plant.name} run {i + 1} ({r.caches[i]}): {reason}")
            if r.notes[i]:
                print(f"    notes: {r.notes[i]}")


def table(
    sessions: dict[str, int],
    want: int,
    u: Unchanged,
    rows: list[PlantRow],
    report_rows: list[str],
    baseline_rows: list[str],
    costs: list[Cost],
) -> int:
    """Prints the summary; the number of failures of the target."""
    print("\n" + rule())
    unchanged_table(sessions, u)
    plant_table(rows)
    print(f"\ncompile-time op rows in reports: {len(report_rows)}")
    for line in sorted(set(report_rows)):
        print(f"  {line}")
    print(f"compile-time op names in baseline files: {len(baseline_rows)} {baseline_rows or ''}")
    leaked = cost_table(costs)
    short_windows = {k: v for k, v in sessions.items() if v != want}
    if short_windows:
        print(
            f"\nnote: {want} saves left these baselines with other than {want} sessions "
            f"(a save restarted the window): {short_windows}"
        )
    missed = sum(r.runs - r.caught for r in rows)
    coll = sum(len(r.collateral) for r in rows)
    compile_rows = len(report_rows) + len(baseline_rows) + len(leaked)
    print(
        f"\nfalse failures {u.false_failures()}, missed plants {missed}, collateral failures "
        f"{coll}, compile-time op rows {compile_rows} (reports {len(report_rows)}, baselines "
        f"{len(baseline_rows)}, whole-profile reductions {len(leaked)})"
    )
    return u.false_failures() + missed + coll + compile_rows


def check(folder: Path, a: argparse.Namespace) -> int:
    t0 = time.time()
    suite = Suite(folder)
    print(f"folder {folder}", flush=True)
    sessions = record(suite, a.sessions)
    baseline_rows, iterations = baseline_info(folder)
    print(f"  iterations per round: {iterations}", flush=True)
    suite.runs.clear()  # saved reports hold no op rows; the baseline files are checked instead
    u = unchanged(suite, a.runs)
    rows = planted(suite, a.plant_runs, a.plants)
    report_rows = compile_rows_in_reports(suite)
    costs = overhead(folder, iterations, a.repeat) if a.repeat > 0 else []
    bad = table(sessions, a.sessions, u, rows, report_rows, baseline_rows, costs)
    print(f"{suite.count} pytest runs, {time.time() - t0:.0f} s")
    print(
        "target (no false failure, missed plant, collateral failure or compile-time op row):",
        "MISSED" if bad else "met",
    )
    return 1 if bad else 0


def plant_list(text: str) -> list[str]:
    return csv(text, tuple(PLANTS), "plant")


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--runs", type=int, default=8, help="unchanged runs, half warm (default 8)")
    ap.add_argument("--plant-runs", type=int, default=3, help="runs per plant (default 3)")
    ap.add_argument("--sessions", type=int, default=3, help="baseline sessions (default 3)")
    plants_help = "comma-separated plants (default wide,break,recompile)"
    ap.add_argument("--plants", type=plant_list, default=list(PLANTS), help=plants_help)
    repeat_help = "timings per overhead measure (default 7; 0 skips the step)"
    ap.add_argument("--repeat", type=int, default=7, help=repeat_help)
    ap.add_argument("--keep", type=Path, default=None, help="work in this folder and keep it")
    a = ap.parse_args()
    if a.keep is not None and a.keep.exists() and any(a.keep.iterdir()):
        ap.error(f"--keep {a.keep}: the folder exists and is not empty")
    with workspace("tprof-compile-reruns-", a.keep) as folder:
        return check(folder, a)


if __name__ == "__main__":
    raise SystemExit(main())
