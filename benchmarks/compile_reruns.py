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
   per round), in three states: ``cold`` (compiled inside round 0 with an empty cache: what a
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
import gc
import json
import math
import os
import re
import statistics
import tempfile
import time
import timeit
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from harness.runs import run_pytest, sessions_held, short
from harness.workspace import prepare

SUITE = '''
"""A new user's compiled model tests, profiled with pytest-tprof's ``tprof`` fixture."""

import os

import pytest
import torch
from torch import nn

PLANT = os.environ.get("COMPILE_PLANT", "")


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


class MLPBlock(nn.Module):
    def __init__(self, dim=256, hidden=512):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x):
        h = self.act(self.fc1(x))
        if PLANT == "break":
            torch._dynamo.graph_break()
        return self.fc2(h)


def test_compiled_mlp(tprof):
    model = MLPBlock(hidden=1024 if PLANT == "wide" else 512).eval()
    compiled = torch.compile(model)
    x = torch.randn(64, 256)
    with torch.no_grad():
        out = tprof(compiled, x)
    assert out.shape == (64, 256)


class EncoderClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.TransformerEncoderLayer(
            d_model=64, nhead=4, dim_feedforward=256, batch_first=True
        )
        self.head = nn.Linear(64, 10)
        self.temperature = 1.0

    def forward(self, x):
        return self.head(self.encoder(x).mean(dim=1)) * self.temperature


def test_compiled_encoder_train(tprof):
    model = EncoderClassifier()
    compiled = torch.compile(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    x = torch.randn(16, 32, 64)
    y = torch.randint(0, 10, (16,))
    calls = [0]

    def step():
        calls[0] += 1
        if PLANT == "recompile" and calls[0] == 6:
            model.temperature = 0.5  # a guard fails: Dynamo recompiles in a measured round
        opt.zero_grad()
        loss = loss_fn(compiled(x), y)
        loss.backward()
        opt.step()
        return loss

    tprof(step)


def test_eager_control(tprof):
    model = nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(32, 128)
    y = torch.randint(0, 10, (32,))

    def step():
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    tprof(step)
'''

TESTS = ("test_compiled_mlp", "test_compiled_encoder_train", "test_eager_control")
PROFILE_ARGS = ("--tprof-rounds=12", "--tprof-warmup=2")
ROUNDS, WARMUP = 12, 2
FAILED = ("regressed", "error")
PLANT_ENV = "COMPILE_PLANT"
CACHE_ENV = {"TORCHINDUCTOR_FX_GRAPH_CACHE": "1", "TORCHINDUCTOR_AUTOGRAD_CACHE": "1"}

# Op names that are compile time (Dynamo / AOT / Inductor), never an op row.
COMPILE_MARKS = (
    "dynamo_timed",
    "compile_id",
    "bytecode_tracing",
    "backend_compile",
    "entire_frame_compile",
    "entire_backward_compile",
    "compile_attempt",
    "prims::",
)
COMPILE_EXACT = frozenset({"dynamo"})
RAW_GRAPH = re.compile(r"^## Call CompiledFxGraph (?!#\d+ ##$)")
RAW_REGION = re.compile(r"^Torch-Compiled Region: ")
GRAPH_OR_REGION = re.compile(r"^(## Call CompiledFxGraph #\d+ ##|Torch-Compiled Region #\d+)$")

Doc = dict[str, Any]  # a test's object in the JSON report


def compile_time_name(name: str) -> bool:
    return (
        name in COMPILE_EXACT
        or any(m in name for m in COMPILE_MARKS)
        or RAW_GRAPH.match(name) is not None
        or RAW_REGION.match(name) is not None
    )


# --------------------------------------------------------------------------- one test's result


@dataclass(frozen=True)
class Result:
    """One test's outcome in one pytest run, from the JSON report."""

    doc: Doc

    @property
    def verdict(self) -> str:
        return str(self.doc["verdict"])

    @property
    def reason(self) -> str:
        return str(self.doc["reason"])

    @property
    def notes(self) -> list[str]:
        return list(self.doc.get("notes", []))

    @property
    def work(self) -> Doc:
        return self.doc.get("work") or {}

    @property
    def work_verdict(self) -> str:
        return str(self.work.get("verdict", "-")) if self.work else "-"

    @property
    def ops(self) -> list[Doc]:
        return list(self.doc.get("ops", []))

    @property
    def failed(self) -> bool:
        return self.verdict in FAILED

    def layers(self) -> list[str]:
        """Every layer that failed the test, the deciding one first."""
        fams = self.doc.get("families", [])
        out = []
        if self.verdict == "error":
            out.append("error")
        if "compile:" in self.reason:
            out.append("compile")
        if self.work_verdict == "regressed":
            out.append("work")
        if any(f.get("structure_regressed") for f in fams):
            out.append("calls")
        if any(f.get("timing_regressed") or f.get("op_gate") for f in fams):
            out.append("timing")
        return out or ["?"]

    def regressed_ops(self) -> list[str]:
        return [o["op"] for o in self.ops if o.get("verdict") == "regressed"]

    def compile_rows(self) -> list[str]:
        return [o["op"] for o in self.ops if compile_time_name(str(o["op"]))]


def work_names_addmm_fc(work: Doc) -> bool:
    """A work reason names ``aten::addmm`` in a module ``fc1`` or ``fc2``."""
    return any(
        re.match(r"^aten::addmm in (\S+\.)?fc[12] \(", str(line)) is not None
        for line in work.get("reasons", [])
    )


def wide_layers(r: Result) -> list[str]:
    """The layers that named the wider MLP: graph (a compiled-graph / region op row
    regressed), work (a work reason names aten::addmm in fc1/fc2), addmm (that op row
    regressed)."""
    out = []
    regressed = r.regressed_ops()
    if any(GRAPH_OR_REGION.match(o) for o in regressed):
        out.append("graph")
    if r.work_verdict == "regressed" and work_names_addmm_fc(r.work):
        out.append("work")
    if "aten::addmm" in regressed:
        out.append("addmm")
    return out


def wide_caught(r: Result) -> bool:
    return r.verdict == "regressed" and bool({"graph", "work"} & set(wide_layers(r)))


def break_caught(r: Result) -> bool:
    return r.verdict == "regressed" and "a new graph break" in r.reason


def recompile_caught(r: Result) -> bool:
    return (
        r.verdict == "regressed"
        and "recompiled" in r.reason
        and "during the measured rounds" in r.reason
    )


@dataclass(frozen=True)
class Plant:
    name: str
    test: str
    expected: str  # what a catch must name, in words
    caught: Callable[[Result], bool]


PLANTS = {
    "wide": Plant("wide", "test_compiled_mlp", "graph/region row or addmm in fc1|2", wide_caught),
    "break": Plant("break", "test_compiled_mlp", '"a new graph break"', break_caught),
    "recompile": Plant(
        "recompile",
        "test_compiled_encoder_train",
        '"recompiled … measured rounds"',
        recompile_caught,
    ),
}


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
        tests = run_pytest(
            self.folder, f"{self.count:02d}-{label}", [*PROFILE_ARGS, *args], env=env,
            head=f"{PLANT_ENV}={plant!r} TORCHINDUCTOR_CACHE_DIR={cache_dir} ({cache})",
            tests=TESTS,
        )  # fmt: skip
        seconds = time.perf_counter() - t0
        results = {t["nodeid"].split("::")[-1]: Result(t) for t in tests}
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


# --------------------------------------------------------------------------- overhead


@dataclass
class Cost:
    label: str
    events: int
    compile_events: int
    reduce_us: float
    stable_us: float
    compile_time_us: float
    reduce_stable_us: float
    judge_us: float
    leaked: list[str]  # compile-time op rows when round 0 (the compile) counts as measured

    @property
    def in_reduce_us(self) -> float:
        """The compile handling inside ``reduce_events``."""
        return self.stable_us + self.compile_time_us

    @property
    def per_test_us(self) -> float:
        """A test's compile bookkeeping: one reduction's compile handling and its judgement's."""
        return self.in_reduce_us + self.judge_us


def medians_us(fns: dict[str, Callable[[], Any]], repeat: int) -> dict[str, float]:
    """Median µs per call of each function over ``repeat`` ``timeit`` repetitions (GC off
    while timing), each of enough calls to last about 50 ms, the functions interleaved
    repetition by repetition so that a busy spell of the machine hits them alike (one call of a
    sub-millisecond function after a collection reads several times slower than it runs)."""
    gc.collect()
    number = {
        k: max(1, math.ceil(0.05 / max(timeit.Timer(f).timeit(number=1), 1e-7)))
        for k, f in fns.items()
    }
    per_call: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeat):
        for k, f in fns.items():
            per_call[k].append(timeit.Timer(f).timeit(number=number[k]) / number[k] * 1e6)
    return {k: statistics.median(v) for k, v in per_call.items()}


def overhead(folder: Path, iterations: dict[str, int], repeat: int) -> list[Cost]:
    """Times the compile bookkeeping on real profiles of the suite's compiled bodies."""
    cache = folder / "overhead-cache"
    cache.mkdir(parents=True, exist_ok=True)
    os.environ.update({**CACHE_ENV, "TORCHINDUCTOR_CACHE_DIR": str(cache)})
    import torch
    from torch import nn

    from tprof_engine.capture import facts, kineto, session
    from tprof_engine.decide import compile_gate
    from tprof_engine.reduce import ops as red

    print(f"\noverhead: reduce_events and its compile handling, median of {repeat}", flush=True)
    torch.set_num_threads(1)  # as the plugin profiles (--tprof-threads 1)
    scope: dict[str, Any] = {"__name__": "compile_reruns_suite"}
    exec(compile(SUITE, "test_compiled_models.py", "exec"), scope)

    def mlp_body() -> Callable[[], Any]:
        torch.manual_seed(0)
        compiled: Any = torch.compile(scope["MLPBlock"]().eval())
        x = torch.randn(64, 256)

        def body() -> Any:
            with torch.no_grad():
                return compiled(x)

        return body

    def encoder_body() -> Callable[[], Any]:
        torch.manual_seed(0)
        model = scope["EncoderClassifier"]()
        compiled: Any = torch.compile(model)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        x = torch.randn(16, 32, 64)
        y = torch.randint(0, 10, (16,))

        def body() -> Any:
            opt.zero_grad()
            loss: Any = nn.functional.cross_entropy(compiled(x), y)
            loss.backward()
            opt.step()
            return loss

        return body

    def profile(body: Callable[[], Any], iters: int) -> Any:
        spec = session.RoundSpec(rounds=ROUNDS, warmup=WARMUP, iterations=iters)
        prof, wall_us, _, _ = session._profile_rounds(session.Call(fn=body), spec)
        return kineto.events_from_kineto(prof), wall_us

    costs = []
    bodies = (("mlp", "test_compiled_mlp", mlp_body), ("encoder", "test_compiled_encoder_train",
              encoder_body))  # fmt: skip
    for short_name, test, make in bodies:
        iters = iterations.get(test, 1)
        for state in ("cold", "warm", "steady"):
            torch._dynamo.reset()
            body = make()
            if state == "steady":
                for _ in range(3):
                    body()
            ev, wall_us = profile(body, iters)
            stable = red.with_stable_names(ev)
            cpu = red._cpu_events(stable)
            compiling, _ = red.compile_time(stable.names, cpu)
            table = red.drop_leading_rounds(red.reduce_events(ev, wall_us=wall_us), WARMUP)
            whole = red.reduce_events(ev, wall_us=wall_us)  # round 0, the compile, measured

            def judged(t: Any) -> None:
                compile_gate.compiled_graphs(t)
                compile_gate.compiled_graphs(t)
                facts.compile_log()
                facts.compile_log()

            us = medians_us(
                {
                    "reduce": partial(red.reduce_events, ev, wall_us=wall_us),
                    "stable": partial(red.with_stable_names, ev),
                    "compile": partial(red.compile_time, stable.names, cpu),
                    "reduce_stable": partial(red.reduce_events, stable, wall_us=wall_us),
                    "judge": partial(judged, table),
                },
                repeat,
            )
            cost = Cost(
                label=f"{short_name} {state}",
                events=len(ev),
                compile_events=int(compiling.sum()),
                reduce_us=us["reduce"],
                stable_us=us["stable"],
                compile_time_us=us["compile"],
                reduce_stable_us=us["reduce_stable"],
                judge_us=us["judge"],
                leaked=[n for n in whole.names if compile_time_name(n)],
            )
            costs.append(cost)
            print(
                f"  {cost.label:<15} {cost.events:>6} events ({cost.compile_events} compile "
                f"time)  reduce {cost.reduce_us:8.0f} µs  compile handling "
                f"{cost.in_reduce_us:6.0f} µs  leaked rows {cost.leaked or 'none'}",
                flush=True,
            )
    return costs


# --------------------------------------------------------------------------- the table


def pct(part: float, whole: float) -> str:
    return f"{100.0 * part / whole:.1f}%" if whole else "-"


def spread(values: Iterable[float]) -> str:
    v = list(values)
    if not v:
        return "-"
    return f"median {statistics.median(v):.0f} (min {min(v):.0f}, max {max(v):.0f})"


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
    print("\n" + "=" * 100)
    n = u.runs * len(TESTS)
    print(f"unchanged: {u.runs} runs x {len(TESTS)} tests = {n} test-runs; false failures "
          f"{u.false_failures()}/{n}")  # fmt: skip
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

    print(f"\n{'plant':<10} {'test':<28} {'caught when':<36} caught  caches      "
          "layers that named it            collateral")  # fmt: skip
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

    print(f"\ncompile-time op rows in reports: {len(report_rows)}")
    for line in sorted(set(report_rows)):
        print(f"  {line}")
    print(f"compile-time op names in baseline files: {len(baseline_rows)} {baseline_rows or ''}")

    leaked = [f"{c.label}: {n}" for c in costs for n in c.leaked]
    if costs:
        print(
            "\ncompile bookkeeping, µs per call (medians): stable = with_stable_names, _compile = "
            "_compile_time (both inside reduce_events; share = their part of it), judge = "
            "compiled_graphs + graph_breaks twice each (outside it), per test = the three; "
            "reduce(stable ev) = reduce_events on events already made stable (Δ vs reduce)\n"
            f"  {'profile':<15} {'events':>7} {'compile':>8} {'reduce':>8} {'stable':>7} "
            f"{'_compile':>8} {'share':>6} {'judge':>6} {'per test':>8} {'reduce(stable ev)':>18}"
        )
        for c in costs:
            print(
                f"  {c.label:<15} {c.events:>7} {c.compile_events:>8} {c.reduce_us:>8.0f} "
                f"{c.stable_us:>7.0f} {c.compile_time_us:>8.0f} "
                f"{pct(c.in_reduce_us, c.reduce_us):>6} {c.judge_us:>6.0f} {c.per_test_us:>8.0f} "
                f"{c.reduce_stable_us:>10.0f} ({c.reduce_us - c.reduce_stable_us:+.0f})"
            )
        print(
            "  compile in round 0 counted as measured (whole-profile reduction), compile-time "
            f"op rows: {len(leaked)} {leaked or ''}"
        )

    short_windows = {k: v for k, v in sessions.items() if v != want}
    if short_windows:
        print(f"\nnote: {want} saves left these baselines with other than {want} sessions "
              f"(a save restarted the window): {short_windows}")  # fmt: skip
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
    names = [p.strip() for p in text.split(",") if p.strip()]
    unknown = [p for p in names if p not in PLANTS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown plant(s) {unknown}; known: {list(PLANTS)}")
    return names


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--runs", type=int, default=8, help="unchanged runs, half warm (default 8)")
    ap.add_argument("--plant-runs", type=int, default=3, help="runs per plant (default 3)")
    ap.add_argument("--sessions", type=int, default=3, help="baseline sessions (default 3)")
    ap.add_argument("--plants", type=plant_list, default=list(PLANTS),
                    help="comma-separated plants (default wide,break,recompile)")  # fmt: skip
    ap.add_argument("--repeat", type=int, default=7,
                    help="timings per overhead measure (default 7; 0 skips the step)")  # fmt: skip
    ap.add_argument("--keep", type=Path, default=None, help="work in this folder and keep it")
    a = ap.parse_args()
    if a.keep is None:
        with tempfile.TemporaryDirectory(prefix="tprof-compile-reruns-") as tmp:
            return check(Path(tmp), a)
    if a.keep.exists() and any(a.keep.iterdir()):
        ap.error(f"--keep {a.keep}: the folder exists and is not empty")
    a.keep.mkdir(parents=True, exist_ok=True)
    return check(a.keep.resolve(), a)


if __name__ == "__main__":
    raise SystemExit(main())
