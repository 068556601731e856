"""The cost of the compile bookkeeping (``compile_reruns.py``'s step 4): ``reduce_events`` and its
compile handling, timed on real profiles of the suite's compiled bodies."""

from __future__ import annotations

import gc
import math
import os
import statistics
import timeit
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from compile_suite import CACHE_ENV, ROUNDS, SUITE, WARMUP, compile_time_name
from harness.tables import pct


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


def suite_scope() -> dict[str, Any]:
    """The suite's module run here, for its model classes."""
    scope: dict[str, Any] = {"__name__": "compile_reruns_suite"}
    exec(compile(SUITE, "test_compiled_models.py", "exec"), scope)
    return scope


def mlp_body(scope: dict[str, Any]) -> Callable[[], Any]:
    import torch

    torch.manual_seed(0)
    compiled: Any = torch.compile(scope["MLPBlock"]().eval())
    x = torch.randn(64, 256)

    def body() -> Any:
        with torch.no_grad():
            return compiled(x)

    return body


def encoder_body(scope: dict[str, Any]) -> Callable[[], Any]:
    import torch
    from torch import nn

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


BODIES = (
    ("mlp", "test_compiled_mlp", mlp_body),
    ("encoder", "test_compiled_encoder_train", encoder_body),
)


def profile(body: Callable[[], Any], iters: int) -> Any:
    """The rounds of ``body`` profiled as the plugin profiles them: the events, the wall µs."""
    from tprof_engine.capture import kineto, session
    from tprof_engine.model.costs import Stopwatch

    spec = session.RoundSpec(rounds=ROUNDS, warmup=WARMUP, iterations=iters)
    # every warm-up round profiled, so a compile inside round 0 is in the profile
    call = session.Call(fn=body)
    prof, wall_us, _, _ = session._profile_rounds(call, spec, Stopwatch(), WARMUP)
    return kineto.events_from_kineto(prof), wall_us


def judged(table: Any) -> None:
    """What the judgement of one compiled test adds: its graphs and the compile log, twice."""
    from tprof_engine.capture import facts
    from tprof_engine.decide.gates import compiled as compile_gate

    compile_gate.compiled_graphs(table)
    compile_gate.compiled_graphs(table)
    facts.compile_log()
    facts.compile_log()


def measure(label: str, ev: Any, wall_us: float, repeat: int) -> Cost:
    """The bookkeeping's times on one profile's events, and any compile-time row it leaks."""
    from tprof_engine.reduce import ops as red

    stable = red.with_stable_names(ev)
    cpu = red._cpu_events(stable)
    compiling, _ = red.compile_time(stable.names, cpu)
    table = red.drop_leading_rounds(red.reduce_events(ev, wall_us=wall_us), WARMUP)
    whole = red.reduce_events(ev, wall_us=wall_us)  # round 0, the compile, measured
    fns = {
        "reduce": partial(red.reduce_events, ev, wall_us=wall_us),
        "stable": partial(red.with_stable_names, ev),
        "compile": partial(red.compile_time, stable.names, cpu),
        "reduce_stable": partial(red.reduce_events, stable, wall_us=wall_us),
        "judge": partial(judged, table),
    }
    us = medians_us(fns, repeat)
    return Cost(
        label=label,
        events=len(ev),
        compile_events=int(compiling.sum()),
        reduce_us=us["reduce"],
        stable_us=us["stable"],
        compile_time_us=us["compile"],
        reduce_stable_us=us["reduce_stable"],
        judge_us=us["judge"],
        leaked=[n for n in whole.names if compile_time_name(n)],
    )


def overhead(folder: Path, iterations: dict[str, int], repeat: int) -> list[Cost]:
    """Times the compile bookkeeping on real profiles of the suite's compiled bodies."""
    cache = folder / "overhead-cache"
    cache.mkdir(parents=True, exist_ok=True)
    os.environ.update({**CACHE_ENV, "TORCHINDUCTOR_CACHE_DIR": str(cache)})
    import torch

    print(f"\noverhead: reduce_events and its compile handling, median of {repeat}", flush=True)
    torch.set_num_threads(1)  # as the plugin profiles (--tprof-threads 1)
    scope = suite_scope()
    costs = []
    for short_name, test, make in BODIES:
        for state in ("cold", "warm", "steady"):
            torch._dynamo.reset()
            body = make(scope)
            if state == "steady":
                for _ in range(3):
                    body()
            ev, wall_us = profile(body, iterations.get(test, 1))
            cost = measure(f"{short_name} {state}", ev, wall_us, repeat)
            costs.append(cost)
            print(
                f"  {cost.label:<15} {cost.events:>6} events ({cost.compile_events} compile "
                f"time)  reduce {cost.reduce_us:8.0f} µs  compile handling "
                f"{cost.in_reduce_us:6.0f} µs  leaked rows {cost.leaked or 'none'}",
                flush=True,
            )
    return costs


def cost_table(costs: list[Cost]) -> list[str]:
    """Prints the bookkeeping's times per profile; the compile-time rows any profile leaked."""
    leaked = [f"{c.label}: {n}" for c in costs for n in c.leaked]
    if not costs:
        return leaked
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
    return leaked
