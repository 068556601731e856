"""What a run is asked for (:class:`RunConfig`, built once from options by the glue) and what a
test asks to profile (:class:`Body`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tprof_engine.decide.timing.rule import Rule
from tprof_engine.store import baselines


@dataclass(frozen=True, slots=True, kw_only=True)
class RunConfig:
    """Everything a run needs to know; built once from options by the glue."""

    rounds: int = 20
    warmup: int = 3
    baseline_dir: Path = Path("baselines")
    trace_dir: Path | None = Path(".tprof/traces")
    save: bool = False
    reset: bool = False  # a save starts each test's window afresh from this run
    window: int = baselines.DEFAULT_WINDOW
    rule: Rule = field(default_factory=Rule)
    confirm: bool = True
    min_round_us: float = 1000.0
    record_shapes: bool = False
    require_baseline: bool = False
    probe: bool = True
    threads: int = 1  # intra-op threads while profiling; 0 keeps torch's setting
    save_trace: bool = False  # keep the saved run's trace next to its baseline
    all_traces: bool = True  # every test's trace (False: those whose ops moved, and saves')
    trace_runs: int = 3  # runs of each test whose traces stay (a failing run prunes none)
    census: bool = True  # take the work census of each test (one unprofiled pass, two rounds)
    stack: bool = False  # the census keeps the user's source line of each op's first call
    nvtx: bool = False  # NVTX ranges per test and round, for Nsight (CUDA builds only)
    counters: bool = False  # CPU instructions per measured round from a hardware counter
    profile_memory: bool = False  # allocations per op and the round's peak (docs/design.md §10)
    # On a busy machine: captures of the same rounds taken again, at most, while too few of
    # the rounds were undisturbed (docs/design.md §16, "A busy machine").
    busy_retries: int = 2


@dataclass(frozen=True, slots=True, kw_only=True)
class Body:
    """The callable a test profiles, with how each round calls it."""

    fn: Callable[..., Any]
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    setup: Callable[[], Any] | None = None
